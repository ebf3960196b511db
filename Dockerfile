# attnbench in a container. One Dockerfile, two images; the attnbench layers are the same in both.
#
# GPU image (the default): the official PyTorch CUDA *devel* image (nvcc, for FlashAttention 2 and FlashInfer's
# JIT) with every kernel library a Hopper/Blackwell user benchmarks: FlashAttention 2 (compiled here), xformers,
# FlashAttention 4 (CuTe DSL), the cuDNN frontend, FlashInfer and SageAttention, and NVML for the GPU's state.
#   docker build -t attnbench .
#   docker run --gpus all --user "$(id -u):$(id -g)" -v "$PWD/reports:/work/reports" \
#       -v "attnbench-cache-$(id -u):/cache" attnbench run long
# For another GPU generation: --build-arg FLASH_ATTN_CUDA_ARCHS="100" (Blackwell).
#
# CPU image: a Debian-like base with python3, python3-venv, and (for flex: torch.compile builds its CPU kernels)
# g++ and python3-dev. GPU_KERNELS=no skips the CUDA-only steps, and since such a base has no torch, the CPU build
# TORCH_CPU_VERSION is installed from TORCH_CPU_FIND_LINKS.
#   docker build --build-arg TORCH_IMAGE=<base> --build-arg GPU_KERNELS=no -t attnbench:cpu .
# scripts/docker-check.sh builds exactly that on a bootstrapped Debian bookworm and runs it, in CI. docs/docker.md
# says what was built and run where.
#
# How the CUDA-only steps are skipped: the builder here (docker.io 20.10, no BuildKit) is the classic one,
# which builds every stage of a multi-stage file whether the final stage uses it or not. So they are not
# separate stages picked by name: each is a RUN that does nothing but say so when GPU_KERNELS=no, which
# works the same under the classic builder and BuildKit.
#
# Every version is pinned here; tests/test_packaging.py holds each pin against pyproject.toml's extras.
# xformers 0.0.35's PyPI wheel is built for torch 2.10 with CUDA 12.8, so the base image matches it.
ARG TORCH_IMAGE=pytorch/pytorch:2.10.0-cuda12.8-cudnn9-devel
ARG GPU_KERNELS=yes
ARG TORCH_CPU_VERSION=2.13.0+cpu
ARG TORCH_CPU_FIND_LINKS=https://download.pytorch.org/whl/cpu/torch/
ARG FLASH_ATTN_VERSION=2.8.3
ARG XFORMERS_VERSION=0.0.35
ARG FLASH_ATTN_4_VERSION=4.0.0b36
ARG CUTLASS_DSL_VERSION=4.8.1
ARG CUDNN_FRONTEND_VERSION=1.32.0
ARG FLASHINFER_VERSION=0.7.2.post1
ARG SAGEATTENTION_VERSION=1.0.6
# FlashInfer needs cuda-python; its newest (13.x) needs a CUDA 13 driver, so the CUDA 12.8 base keeps 12.9.
ARG CUDA_PYTHON_VERSION=12.9.10
ARG NVIDIA_ML_PY_VERSION=13.615.71
ARG FLASH_ATTN_CUDA_ARCHS="80;90"

# ---- builder: compile FlashAttention 2 against the image's torch, into a wheel (nothing when GPU_KERNELS=no) ----
FROM ${TORCH_IMAGE} AS flash-builder
ARG GPU_KERNELS
ARG FLASH_ATTN_VERSION
ARG FLASH_ATTN_CUDA_ARCHS
# nvcc is memory hungry: 4 parallel jobs fit in ~32 GB of RAM
ARG MAX_JOBS=4
ENV FLASH_ATTN_CUDA_ARCHS=${FLASH_ATTN_CUDA_ARCHS} \
    MAX_JOBS=${MAX_JOBS} \
    FLASH_ATTENTION_FORCE_BUILD=TRUE
RUN mkdir /wheels \
 && case "${GPU_KERNELS}" in yes|no) ;; *) echo "GPU_KERNELS must be yes or no, not '${GPU_KERNELS}'" >&2; exit 2 ;; esac \
 && if [ "${GPU_KERNELS}" = no ]; then echo "GPU_KERNELS=no: FlashAttention 2 is not compiled"; exit 0; fi \
 && pip install --no-cache-dir ninja==1.11.1.4 packaging==25.0 wheel==0.45.1 \
 && pip wheel --no-cache-dir --no-build-isolation --no-deps --wheel-dir /wheels "flash-attn==${FLASH_ATTN_VERSION}"

# ---- runtime ---------------------------------------------------------------------------------------------------
FROM ${TORCH_IMAGE}
ARG GPU_KERNELS
# One virtual environment on either base. It sees the base's own packages (the CUDA image's torch), and pip
# installs into it without touching the system Python (Debian's refuses to be changed by pip: PEP 668).
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:${PATH} \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv --system-site-packages /opt/venv

# torch: the CUDA image carries its own; a base without one gets the CPU build. keep-torch.txt then holds every
# later pip install to that torch, so no dependency can swap it for another build (PyPI's is CUDA, several GB).
ARG TORCH_CPU_VERSION
ARG TORCH_CPU_FIND_LINKS
RUN if python -c "import torch" 2>/dev/null; then echo "keeping the base image's torch"; \
    else pip install --find-links "${TORCH_CPU_FIND_LINKS}" "torch==${TORCH_CPU_VERSION}"; fi \
 && python -c "import torch; print('torch==' + torch.__version__)" > /opt/venv/keep-torch.txt

# The kernel libraries (CUDA only). FlashAttention 2 goes in before FlashAttention 4: both install files under
# flash_attn/cute (2.8 bundles a 0.1.0 prototype there), and the one installed last owns them.
ARG XFORMERS_VERSION
ARG FLASH_ATTN_4_VERSION
ARG CUTLASS_DSL_VERSION
ARG CUDNN_FRONTEND_VERSION
ARG FLASHINFER_VERSION
ARG SAGEATTENTION_VERSION
ARG CUDA_PYTHON_VERSION
ARG NVIDIA_ML_PY_VERSION
COPY --from=flash-builder /wheels /tmp/wheels
RUN case "${GPU_KERNELS}" in yes|no) ;; *) echo "GPU_KERNELS must be yes or no, not '${GPU_KERNELS}'" >&2; exit 2 ;; esac \
 && if [ "${GPU_KERNELS}" = no ]; then \
      echo "GPU_KERNELS=no: no FlashAttention, xformers, FlashInfer, cuDNN frontend or SageAttention"; \
    else \
      pip install -c /opt/venv/keep-torch.txt /tmp/wheels/flash_attn-*.whl "xformers==${XFORMERS_VERSION}" \
      && pip install -c /opt/venv/keep-torch.txt "flash-attn-4==${FLASH_ATTN_4_VERSION}" \
           "nvidia-cutlass-dsl==${CUTLASS_DSL_VERSION}" "nvidia-cudnn-frontend==${CUDNN_FRONTEND_VERSION}" \
           "flashinfer-python==${FLASHINFER_VERSION}" "cuda-python==${CUDA_PYTHON_VERSION}" \
           "sageattention==${SAGEATTENTION_VERSION}" "nvidia-ml-py==${NVIDIA_ML_PY_VERSION}"; \
    fi \
 && rm -rf /tmp/wheels

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

WORKDIR /opt/attnbench
COPY pyproject.toml README.md ./
COPY attnbench ./attnbench
RUN pip install -c /opt/venv/keep-torch.txt ".[nvml,runtimes]" "nvidia-ml-py==${NVIDIA_ML_PY_VERSION}" \
 && ln -s /opt/attnbench/attnbench/suites /work/suites
USER 1000:1000
WORKDIR /work
VOLUME ["/work/reports"]
ENTRYPOINT ["attnbench"]
CMD ["run", "long"]
