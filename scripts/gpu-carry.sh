#!/usr/bin/env bash
# Stage, ON THE DEVICE MACHINE, one carry batch of the site scripts/gpu-wheels.sh packed (.whl/batchN: one part of
# site.tar.xz and the manifest):
#   scripts/gpu-carry.sh N
# Each batch's part is kept in $GPU_CARRY_STAGE (default /tmp/attnbench-wheels), outside the checkout, which the next
# call replaces; a warm machine keeps /tmp for about 30 s after a call, so the batches go back to back. Once every part
# is there they are joined, the archive must have the sha256 the manifest names, and it is unpacked into
# $GPU_CHECK_SITE (default /tmp/attnbench-site), replacing what was there; scripts/gpu-check.sh adds that folder as a
# site directory (site.addsitedir), so the .pth files in it are read. Until then it says which parts are still
# missing, and exits 0.
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
  echo "gpu-carry: $stage holds another set's parts; starting over with this one" >&2
  rm -rf "$stage" && mkdir -p "$stage"
fi
cp "$batch"/* "$stage"/
echo "gpu-carry: batch $n staged ($(du -sm "$batch" | cut -f1) MiB)"

IFS=$'\t' read -r archive sha size parts < <(grep -v '^#' "$stage/manifest.tsv" | head -n 1)
have=$(find "$stage" -maxdepth 1 -name "$archive.part*" | wc -l)
if [ "$have" -lt "$parts" ]; then
  echo "gpu-carry: waiting for the next batch; $have of $parts parts of $archive here"
  exit 0
fi
cat "$stage/$archive".part* > "$stage/$archive"  # part00, part01, ...: the glob sorts them
got=$(sha256sum "$stage/$archive" | cut -d' ' -f1)
if [ "$got" != "$sha" ] || [ "$(stat -c %s "$stage/$archive")" != "$size" ]; then
  echo "gpu-carry: $archive does not match the manifest (sha256 $got, expected $sha)" >&2
  rm -f "$stage/$archive"
  exit 1
fi
rm -rf "$site" && mkdir -p "$site"
"$PY" - "$stage/$archive" "$site" <<'PY'
import sys
import tarfile

with tarfile.open(sys.argv[1]) as tar:
    tar.extractall(sys.argv[2], filter="data")
PY
rm -f "$stage/$archive"  # the parts stay: a second unpack needs no second carry
echo "gpu-carry: unpacked $archive ($(du -sm "$site" | cut -f1) MiB, $(find "$site" -maxdepth 1 -name '*.dist-info' | wc -l) distributions) into $site (scripts/gpu-check.sh adds it with site.addsitedir)"
