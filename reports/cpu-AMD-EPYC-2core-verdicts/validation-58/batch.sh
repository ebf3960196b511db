#!/bin/bash
# issue 58's validation batch, serial, on an idle machine, from commit 235c021
set -x
V=/work/m58/val
PY=/tmp/fresh/.venv/bin/python
cd /tmp/fresh
date -u +"%F %T b2b-1 start"
$PY benchmarks/interval_coverage.py run $V/b2b-1 --runs 6
date -u +"%F %T side-by-side start"
for i in 1 2 3; do
  rm -rf /tmp/sbs-new /tmp/sbs-old
  ( cd /tmp/fresh && /usr/bin/time -f "new $i %e s" .venv/bin/attnbench run quick --out /tmp/sbs-new >/dev/null 2>>$V/side-by-side.txt )
  ( cd /work/wt-1130 && /usr/bin/time -f "2026-11-30 (70eb045) $i %e s" env PYTHONPATH=/work/wt-1130 /tmp/fresh/.venv/bin/python -m attnbench run quick --out /tmp/sbs-old >/dev/null 2>>$V/side-by-side.txt )
done
date -u +"%F %T bench start"
rm -rf /tmp/fresh2 && git clone -q /work/main /tmp/fresh2 && cd /tmp/fresh2 && git log --oneline -1
( time make setup ) > $V/bench-setup.log 2>&1
rm -rf /tmp/torchinductor_root /root/.cache/attnbench
( time make bench ARGS="--out $V/bench" ) > $V/bench.log 2>&1
cd /tmp/fresh
date -u +"%F %T b2b-2 start"
$PY benchmarks/interval_coverage.py run $V/b2b-2 --runs 6
date -u +"%F %T spread start"
$PY benchmarks/interval_coverage.py run $V/spread --runs 7 --every 150
date -u +"%F %T done"
