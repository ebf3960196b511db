#!/usr/bin/env bash
# Fetch, HERE (with network), every wheel the lent H200 needs for scripts/gpu-check.sh to find all of attnbench's
# libraries, check them against that machine, and cut them into carry batches:
#   scripts/gpu-wheels.sh            -> .whl/download/*.whl, .whl/batch1 ... .whl/batchN, .whl/manifest.tsv
# Then, on the device machine, one call per batch, back to back (a warm machine keeps /tmp for ~30 s):
#   run(carry=[".whl/batch1"], command="scripts/gpu-carry.sh 1")
#   ...
#   run(carry=[".whl/batchN"], command="scripts/gpu-carry.sh N && scripts/gpu-check.sh")
# (the last line of this script prints the exact sequence).
#
# The machine: Python 3.12, torch 2.11.0+cu130 (with cuda-bindings 13, nvidia-cudnn-cu13 9.19, triton 3.6), no
# network, and the packages of its image (/work/.library/device/KINDS.md: numpy, einops, ninja, click, requests,
# tqdm, tabulate, packaging, protobuf, nvidia-ml-py, pyyaml, pandas, matplotlib, pytest, ...; no pydantic).
# What a call carries travels with the working tree, 64 MiB in all: a batch gets what the tree leaves of it
# (BATCH_MIB, default 64 MiB - the tree - 2 MiB, at most 60), and a wheel larger than that is cut with `split -b`
# into parts that travel in different batches and are joined (and their sha256 checked) on the machine.
#
# Each wheel's Requires-Python must admit 3.12, and each Requires-Dist (markers evaluated for CPython 3.12 on
# x86-64 Linux, no extras) must be met by the set itself, by torch 2.11.0's own requirements, or by the image;
# what is deliberately not carried is listed in NOT_CARRIED with the reason. pip installs with --no-deps there.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${WHEELS:-.whl}
PY=${PYTHON:-python3}

# The set. FlashAttention 4 and its CuTe DSL (cutlass-dsl 4.8.1: the meta package, its -libs-core and -libs-base,
# and -libs-cu13 for CUDA 13: the meta package's own default is -libs-cu12), quack, TVM FFI, torch-c-dlpack-ext;
# FlashInfer (JIT-compiled with nvcc there); cuDNN's frontend (cp312: it has a C++ extension); SageAttention;
# pydantic for attnbench itself (with typing-extensions: pydantic 2.14 needs >= 4.16, newer than torch asks for).
PINS=(
  flash-attn-4==4.0.0b36
  nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1
  nvidia-cutlass-dsl-libs-cu13==4.8.1
  quack-kernels==0.6.5 apache-tvm-ffi==0.1.15.post2 torch-c-dlpack-ext==0.1.5
  flashinfer-python==0.7.2.post1
  nvidia-cudnn-frontend==1.32.0
  sageattention==1.0.6
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0
)

rm -rf "$OUT/download" "$OUT"/batch* "$OUT/manifest.tsv"
mkdir -p "$OUT/download"
platforms=()
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014; do
  platforms+=(--platform "${tag}_x86_64")
done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
  "${platforms[@]}" -d "$OUT/download" "${PINS[@]}"

# What travels with every call besides a batch: the tracked and the untracked-not-ignored files.
tree_bytes=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | du -cb --files0-from=- \
  | tail -1 | cut -f1)
"$PY" scripts/gpu_wheels.py "$OUT" "$tree_bytes" "${BATCH_MIB:-}"
