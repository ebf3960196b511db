#!/usr/bin/env bash
# Fetch, HERE (with network), everything the lent H200 lacks for scripts/gpu-check.sh: the attention libraries
# (pinned in scripts/gpu_wheels.py), attnbench's own dependencies and its `test` extra (pyproject.toml), less what the
# machine has, with every requirement they bring; check them against that machine, install them here into a site for
# it, and cut that site's archive into carry batches:
#   scripts/gpu-wheels.sh    -> .whl/download/*.whl, .whl/site/, .whl/site.tar.xz, .whl/batch1 ... .whl/batchN
# Then, on the device machine, one call per batch, back to back (a warm machine keeps /tmp for ~30 s):
#   run(carry=[".whl/batch1"], command="scripts/gpu-carry.sh 1")
#   ...
#   run(carry=[".whl/batchN"], command="scripts/gpu-carry.sh N && scripts/gpu-check.sh")
# (the last lines of the output print the exact sequence). docs/development.md says why a site and not wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${WHEELS:-.whl}
PY=${PYTHON:-python3}

rm -rf "$OUT/download" "$OUT"/batch* "$OUT/manifest.tsv" "$OUT/site" "$OUT/site.tar.xz"
mkdir -p "$OUT/download"
fetch() {
  "$PY" -m pip download -q --no-deps --disable-pip-version-check --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$OUT/download" "$@"
}
mapfile -t wanted < <("$PY" scripts/gpu_wheels.py want)
fetch "${wanted[@]}"
# what they require and nothing meets yet, until nothing is left
for _ in 1 2 3 4 5 6; do
  mapfile -t more < <("$PY" scripts/gpu_wheels.py needs "$OUT" | grep . || true)
  [ ${#more[@]} -eq 0 ] && break
  echo "gpu-wheels: also fetching what they require: ${more[*]}"
  fetch "${more[@]}"
done

# What travels with every call besides a batch: the tracked and the untracked-not-ignored files.
tree_bytes=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | du -cb --files0-from=- \
  | tail -1 | cut -f1)
"$PY" scripts/gpu_wheels.py cut "$OUT" "$tree_bytes" "${BATCH_MIB:-}"
