# attnbench in a container. One Dockerfile; the base and the kernel set are build arguments.
#
# GPU image (the default): Debian bookworm, PyPI's torch 2.10.0 (its CUDA 12.8 build, the one xformers 0.0.35's
# wheel was built for: its xformers/cpp_lib.json says torch 2.10.0+cu128) and every kernel library of
# pyproject.toml's `gpu` extra, all from wheels: xformers, FlashAttention 4 (flash-attn-4 with the CUTLASS DSL),
# the cuDNN frontend, FlashInfer (with cuda-python), SageAttention, and NVML for the GPU's state. The CUDA
# driver comes from the host at `docker run --gpus all`.
#   docker build -t attnbench .
#   docker run --gpus all --user "$(id -u):$(id -g)" -v "$PWD/reports:/work/reports" \
#       -v "attnbench-cache-$(id -u):/cache" attnbench run long
# FlashAttention 2 has no wheel for this torch: it compiles from source (hours on few cores), only when asked,
# on a base that carries the CUDA toolkit (nvcc), e.g.
#   docker build --build-arg BASE=nvidia/cuda:12.8.1-devel-ubuntu24.04 --build-arg FLASH_ATTN_2=yes -t attnbench .
#
# CPU image: the PyTorch backends and the CPU runtimes, with PyTorch's CPU build of torch.
#   docker build --build-arg KERNELS=cpu -t attnbench:cpu .
#
# BASE is any Debian or Ubuntu image; what it lacks of python3, venv, g++ and Python's headers (torch.compile
# builds flex's CPU kernels with them) is installed with apt-get. scripts/docker-check.sh builds both images
# in CI on a bootstrapped Debian bookworm that already has them (no registry can be reached there), and runs
# them; docs/docker.md says what was built and run where.
#
# Every version is pinned here; tests/test_packaging.py holds each pin against pyproject.toml's extras.
ARG BASE=debian:bookworm
FROM ${BASE}

# ---- the kernel set: gpu (the default) or cpu; FlashAttention 2 only when asked -------------------------------
ARG KERNELS=gpu
ARG FLASH_ATTN_2=no
RUN case "${KERNELS}" in gpu|cpu) ;; *) echo "KERNELS must be gpu or cpu, not '${KERNELS}'" >&2; exit 2 ;; esac \
 && case "${FLASH_ATTN_2}" in yes|no) ;; *) echo "FLASH_ATTN_2 must be yes or no, not '${FLASH_ATTN_2}'" >&2; exit 2 ;; esac \
 && if [ "${FLASH_ATTN_2}" = yes ] && [ "${KERNELS}" != gpu ]; then echo "FLASH_ATTN_2=yes needs KERNELS=gpu" >&2; exit 2; fi

# ---- Python: the base's, with venv, g++ and Python.h (apt-get installs what is missing) ------------------------
# Not pinned: the base's release decides these packages' versions (and the bootstrapped base has them all).
# hadolint ignore=DL3008
RUN if command -v g++ >/dev/null && python3 -c "import ensurepip, sysconfig, os, sys; \
        sys.exit(not os.path.exists(os.path.join(sysconfig.get_path('include'), 'Python.h')))" 2>/dev/null; then \
      echo "the base has python3 $(python3 -c 'import platform; print(platform.python_version())'), venv, g++ and Python.h"; \
    else \
      apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
          python3 python3-venv python3-dev g++ ca-certificates && rm -rf /var/lib/apt/lists/*; \
    fi
# One virtual environment: pip installs into it without touching the system Python (PEP 668).
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:${PATH} \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv

# ---- torch: PyPI's (CUDA 12.8) for the GPU image, PyTorch's CPU build for the CPU one ---------------------------
# keep-torch.txt then holds every later pip install to that torch, so no dependency can swap it for another build
# (its installed version: PyPI's is 2.10.0, though torch.__version__ says 2.10.0+cu128).
ARG TORCH_CUDA_VERSION=2.10.0
ARG TORCH_CPU_VERSION=2.13.0+cpu
ARG TORCH_CPU_FIND_LINKS=https://download.pytorch.org/whl/cpu/torch/
RUN if [ "${KERNELS}" = gpu ]; then pip install "torch==${TORCH_CUDA_VERSION}"; \
    else pip install --find-links "${TORCH_CPU_FIND_LINKS}" "torch==${TORCH_CPU_VERSION}"; fi \
 && python -c "import importlib.metadata as m; print('torch==' + m.version('torch'))" > /opt/venv/keep-torch.txt \
 && cat /opt/venv/keep-torch.txt

# ---- FlashAttention 2: compiled against that torch, only with FLASH_ATTN_2=yes (needs nvcc in the base) --------
ARG FLASH_ATTN_VERSION=2.8.3
ARG FLASH_ATTN_CUDA_ARCHS="80;90"
# nvcc is memory hungry: 4 parallel jobs fit in ~32 GB of RAM
ARG MAX_JOBS=4
RUN if [ "${FLASH_ATTN_2}" = no ]; then echo "FLASH_ATTN_2=no: FlashAttention 2 is not compiled"; exit 0; fi \
 && { command -v nvcc >/dev/null || { echo "FLASH_ATTN_2=yes needs nvcc: BASE must carry the CUDA toolkit" >&2; exit 2; }; } \
 && pip install -c /opt/venv/keep-torch.txt ninja==1.11.1.4 packaging==25.0 wheel==0.45.1 setuptools psutil \
 && FLASH_ATTN_CUDA_ARCHS="${FLASH_ATTN_CUDA_ARCHS}" MAX_JOBS="${MAX_JOBS}" FLASH_ATTENTION_FORCE_BUILD=TRUE \
    pip install -c /opt/venv/keep-torch.txt --no-build-isolation --no-deps "flash-attn==${FLASH_ATTN_VERSION}"

# ---- the GPU kernel libraries, all wheels (after FlashAttention 2: flash-attn 2.8 bundles an older prototype
# under flash_attn/cute, where flash-attn-4 installs, and the one installed last owns those files) --------------
ARG XFORMERS_VERSION=0.0.35
ARG FLASH_ATTN_4_VERSION=4.0.0b36
ARG CUTLASS_DSL_VERSION=4.8.1
ARG CUDNN_FRONTEND_VERSION=1.32.0
ARG FLASHINFER_VERSION=0.7.2.post1
ARG SAGEATTENTION_VERSION=1.0.6
# FlashInfer needs cuda-python, whose major is the CUDA it binds; torch 2.10.0 pins cuda-bindings==12.9.4,
# and cuda-python 12.9.4 is the release that requires exactly that.
ARG CUDA_PYTHON_VERSION=12.9.4
ARG NVIDIA_ML_PY_VERSION=13.615.71
# Without FlashAttention 2, flash-attn-4 goes into a directory of its own, /opt/flash-attn-4, not the venv: it installs
# flash_attn/cute with no flash_attn/__init__.py, and xformers 0.0.35's ops/fmha/flash.py takes any findable
# `flash_attn` for FlashAttention 2 (`if importlib.util.find_spec("flash_attn"): import flash_attn.flash_attn_interface`),
# so `import xformers.ops` would fail. Its dependencies stay in the venv (installed with it there, then it alone is
# moved). attnbench imports xformers.ops, which then takes PyTorch's own FlashAttention 2, before it appends
# ATTNBENCH_FLASH_ATTN_4_PATH to sys.path (attnbench/backends/layout.py). With FLASH_ATTN_2=yes, `flash_attn` is
# FlashAttention 2's own package, and flash-attn-4 installs into it, in the venv.
ENV ATTNBENCH_FLASH_ATTN_4_PATH=/opt/flash-attn-4 \
    ATTNBENCH_IMAGE_FLASH_ATTN_2=${FLASH_ATTN_2}
RUN if [ "${KERNELS}" = cpu ]; then \
      echo "KERNELS=cpu: no FlashAttention, xformers, FlashInfer, cuDNN frontend or SageAttention"; \
    else \
      pip install -c /opt/venv/keep-torch.txt "xformers==${XFORMERS_VERSION}" \
          "flash-attn-4==${FLASH_ATTN_4_VERSION}" "nvidia-cutlass-dsl==${CUTLASS_DSL_VERSION}" \
          "nvidia-cudnn-frontend==${CUDNN_FRONTEND_VERSION}" "flashinfer-python==${FLASHINFER_VERSION}" \
          "cuda-python==${CUDA_PYTHON_VERSION}" "sageattention==${SAGEATTENTION_VERSION}" \
      && if [ "${FLASH_ATTN_2}" = no ]; then \
           pip uninstall -y flash-attn-4 \
           && { find /opt/venv/lib/python3*/site-packages/flash_attn -depth -type d -empty -delete 2>/dev/null || true; } \
           && pip install --no-deps --target /opt/flash-attn-4 "flash-attn-4==${FLASH_ATTN_4_VERSION}" \
           && python -c "import importlib.util, sys; spec = importlib.util.find_spec('flash_attn'); \
sys.exit(spec and f'flash_attn is still findable in the venv: {list(spec.submodule_search_locations)}')"; \
         fi; \
    fi

# Any uid may run the image (docker run --user "$(id -u):$(id -g)", so that reports on a bind mount belong to
# whoever ran it): HOME and every cache live under /cache, world-writable, which a named volume can keep warm.
# attnbench's --cache-dir defaults to $XDG_CACHE_HOME/attnbench (torch.compile's inductor cache goes under it);
# Triton and FlashInfer's JIT (flashinfer/jit/env.py: $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer) likewise.
# USER names the user for getpass.getuser(), which otherwise fails for a uid the image's passwd does not know.
ENV HOME=/cache/home \
    XDG_CACHE_HOME=/cache \
    TRITON_CACHE_DIR=/cache/triton \
    FLASHINFER_WORKSPACE_BASE=/cache/flashinfer \
    MPLCONFIGDIR=/cache/matplotlib \
    USER=attnbench
RUN mkdir -p /cache/home /work/reports \
 && chmod 1777 /cache /cache/home /work/reports

# ---- attnbench: its dependencies first (from pyproject.toml alone, so a change to the code reuses that layer) --
WORKDIR /opt/attnbench
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
x = p['optional-dependencies']; print('\\n'.join(p['dependencies'] + [r for e in ('nvml', 'jax', 'onnxruntime', \
'openvino') for r in x[e]]))" > /tmp/requirements.txt
RUN pip install -c /opt/venv/keep-torch.txt -r /tmp/requirements.txt "nvidia-ml-py==${NVIDIA_ML_PY_VERSION}" \
 && rm /tmp/requirements.txt
COPY README.md ./
COPY attnbench ./attnbench
RUN pip install -c /opt/venv/keep-torch.txt ".[nvml,runtimes]" "nvidia-ml-py==${NVIDIA_ML_PY_VERSION}" \
 && ln -s /opt/attnbench/attnbench/suites /work/suites

# ---- FlashInfer's kernels built ahead for FLASHINFER_AOT's archs (empty: none; docs/docker.md) ------------------
# nvcc needs no GPU. CUDA 12's nvcc wheels carry ptxas alone; CUDA 13.0's carry nvcc, cicc (nvidia-nvvm) and the
# crt headers, so they build here, into /opt/cuda-aot, dropped after. A CUDA_HOME of links: lib64/libcudart.a is
# the static runtime (the modules need no libcudart.so.13 at run time, but a driver for CUDA 13.0: R580 or later),
# lib64/stubs/libcuda.so an empty stub for FlashInfer's -lcuda. The modules are those the suites' FlashInfer
# cases load on each arch (scripts/flashinfer_aot.py), one library for all archs, installed into FlashInfer's AOT
# folder (flashinfer/data/aot), which it loads without nvcc or ninja; the build's own cache (not /cache, which any
# uid must be able to write) and the compiler go.
ARG FLASHINFER_AOT=""
ARG FLASHINFER_AOT_SUITES="gpu-check"
ARG FLASHINFER_AOT_JOBS=2
# only the modules whose name holds this (a CI build's shortcut: "batch_decode" builds the decode modules alone)
ARG FLASHINFER_AOT_ONLY=""
ARG CUDA_AOT_VERSION=13.0.88
ARG CUDA_AOT_RUNTIME_VERSION=13.0.96
COPY scripts/flashinfer_aot.py /opt/attnbench/scripts/flashinfer_aot.py
RUN if [ -z "${FLASHINFER_AOT}" ] || [ "${KERNELS}" != gpu ]; then echo "no FlashInfer kernels built ahead"; else \
      pip install --no-deps --target /opt/cuda-aot "nvidia-cuda-nvcc==${CUDA_AOT_VERSION}" \
          "nvidia-nvvm==${CUDA_AOT_VERSION}" "nvidia-cuda-crt==${CUDA_AOT_VERSION}" \
          "nvidia-cuda-runtime==${CUDA_AOT_RUNTIME_VERSION}" \
      && cu=/opt/cuda-aot/nvidia/cu13 && home=/opt/cuda-aot/home && mkdir -p "$home/lib64/stubs" \
      && for d in bin nvvm include; do ln -s "$cu/$d" "$home/$d"; done \
      && ln -s "$cu/lib/libcudart_static.a" "$home/lib64/libcudart.a" \
      && echo 'void attnbench_cuda_stub(void) {}' > "$home/stub.c" \
      && g++ -x c -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$home/lib64/stubs/libcuda.so" "$home/stub.c" \
      && for arch in ${FLASHINFER_AOT}; do set -- "$@" --arch "$arch"; done \
      && if [ -n "${FLASHINFER_AOT_ONLY}" ]; then set -- "$@" --only "${FLASHINFER_AOT_ONLY}"; fi \
      && began=$(date +%s) && CUDA_HOME="$home" MAX_JOBS="${FLASHINFER_AOT_JOBS}" FLASHINFER_WORKSPACE_BASE="$home/ws" \
             python /opt/attnbench/scripts/flashinfer_aot.py "$@" ${FLASHINFER_AOT_SUITES} \
      && echo "FlashInfer's kernels for ${FLASHINFER_AOT} built in $(( $(date +%s) - began )) s" \
      && rm -rf /opt/cuda-aot; \
    fi
USER 1000:1000
WORKDIR /work
VOLUME ["/work/reports"]
ENTRYPOINT ["attnbench"]
CMD ["run", "long"]
