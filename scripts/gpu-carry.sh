#!/usr/bin/env bash
# Install, ON THE DEVICE MACHINE, one carry batch of the wheels scripts/gpu-wheels.sh cut (.whl/batchN):
#   scripts/gpu-carry.sh N
# Each batch's files are kept in $GPU_CARRY_STAGE (default /tmp/attnbench-wheels), outside the checkout, which the
# next call replaces; a warm machine keeps /tmp for about 30 s after a call, so the batches go back to back. The
# parts of a wheel cut with `split` are joined once all of them are there, and the joined wheel must have the
# sha256 the manifest names. When the manifest's every wheel is there, all of them are installed by ONE
#   pip install --no-index --no-deps --target $GPU_CHECK_SITE
# (default /tmp/attnbench-site, which scripts/gpu-check.sh puts on PYTHONPATH): one call, because pip --target
# moves each top-level folder into place whole, and cutlass-dsl's -libs-base and -libs-cu13 share theirs.
# Until then it says which wheels are still missing, and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:?usage: scripts/gpu-carry.sh BATCH_NUMBER}
batch=${WHEELS:-.whl}/batch$n
stage=${GPU_CARRY_STAGE:-/tmp/attnbench-wheels}
site=${GPU_CHECK_SITE:-/tmp/attnbench-site}
PY=${PYTHON:-python3}
[ -f "$batch/manifest.tsv" ] || { echo "gpu-carry: no $batch/manifest.tsv (carry .whl/batch$n)" >&2; exit 1; }
mkdir -p "$stage"
if [ -f "$stage/manifest.tsv" ] && ! cmp -s "$stage/manifest.tsv" "$batch/manifest.tsv"; then
  echo "gpu-carry: $stage holds another set's batches; starting over with this one" >&2
  rm -rf "$stage" && mkdir -p "$stage"
fi
cp "$batch"/* "$stage"/
echo "gpu-carry: batch $n staged ($(du -sm "$batch" | cut -f1) MiB)"

missing=()
wheels=()
while IFS=$'\t' read -r wheel sha size parts; do
  [ "${wheel:0:1}" = "#" ] && continue
  if [ "$parts" -gt 0 ] && [ ! -f "$stage/$wheel" ]; then
    have=$(find "$stage" -maxdepth 1 -name "$wheel.part*" | wc -l)
    if [ "$have" -lt "$parts" ]; then
      missing+=("$wheel ($have of $parts parts)")
      continue
    fi
    cat "$stage/$wheel".part* > "$stage/$wheel.joining"  # part00, part01, ...: the glob sorts them
    mv "$stage/$wheel.joining" "$stage/$wheel"
    rm -f "$stage/$wheel".part*
  fi
  if [ ! -f "$stage/$wheel" ]; then
    missing+=("$wheel")
    continue
  fi
  got=$(sha256sum "$stage/$wheel" | cut -d' ' -f1)
  if [ "$got" != "$sha" ] || [ "$(stat -c %s "$stage/$wheel")" != "$size" ]; then
    echo "gpu-carry: $wheel does not match the manifest (sha256 $got, expected $sha)" >&2
    exit 1
  fi
  wheels+=("$stage/$wheel")
done < "$stage/manifest.tsv"

if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu-carry: waiting for the next batch; still missing: ${missing[*]}"
  exit 0
fi
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "${wheels[@]}"
echo "gpu-carry: installed ${#wheels[@]} wheels into $site (scripts/gpu-check.sh puts it on PYTHONPATH)"
