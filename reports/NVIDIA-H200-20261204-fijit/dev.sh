#!/bin/bash
# FlashInfer's JIT compiled ahead on the H200: gpu-check's FlashInfer cases cold (empty cache) and warm (same cache),
# then one case whose module cannot build within a 20 s --compile-timeout. Run from the checkout's root with this
# branch's attnbench/, suites/ and pyproject.toml in .whl/fijit/proj and, in .whl/fijit/fisite.tar.xz, flashinfer-python
# 0.7.2.post1, apache-tvm-ffi, torch-c-dlpack-ext, nvidia-cudnn-frontend and pydantic as installed for the machine.
set -u
root=$PWD; F=$root/.whl/fijit; R=/tmp/r; mkdir -p $R /tmp/fisite
t0=$SECONDS
step() { local lim=$1 name=$2; shift 2; local s=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-s))s (at $((SECONDS-t0))s)" | tee -a $R/steps.txt; tail -n 6 $R/$name.log | cut -c1-400; tar czf $OUT/fi.tgz -C $R . 2>/dev/null; }
step 90 untar tar xJf $F/fisite.tar.xz -C /tmp/fisite
export PYTHONPATH=$F/proj:/tmp/fisite PYTHONUNBUFFERED=1
{ which nvcc ninja; nvcc --version | tail -2; nproc; free -g | head -2; python3 -c "import torch, flashinfer; print(torch.__version__, flashinfer.__version__)"; } > $R/machine.txt 2>&1; cat $R/machine.txt
cd $F/proj
step 320 cold python3 -m attnbench run suites/gpu-check.yaml --device cuda --backend flashinfer --out $R/cold --timeout 70 --cache-dir /tmp/fic --compile-timeout 300 --no-report
step 100 warm python3 -m attnbench run suites/gpu-check.yaml --device cuda --backend flashinfer --out $R/warm --timeout 70 --cache-dir /tmp/fic --compile-timeout 300 --no-report
step 80 budget python3 -m attnbench run $F/fi1.yaml --out $R/budget --timeout 70 --cache-dir /tmp/fic2 --compile-timeout 20 --no-report
{ echo "left running after the budget step:"; ps -eo pid,etimes,args | grep -E "nvcc|cicc|ptxas|ninja" | grep -v grep; } > $R/leftover.txt 2>&1; cat $R/leftover.txt
find /tmp/fic /tmp/fic2 -name "*.so" -printf "%TT %s %p\n" > $R/modules.txt 2>&1
ls -la --time-style=full-iso /tmp/fic/flashinfer/.cache/flashinfer/*/*/cached_ops/ > $R/cached_ops.txt 2>&1
cp /tmp/fic/flashinfer/.cache/flashinfer/*/*/flashinfer_jit.log $R/ 2>/dev/null
tar czf $OUT/fi.tgz -C $R . ; ls -la $OUT
echo "total $((SECONDS-t0))s"
