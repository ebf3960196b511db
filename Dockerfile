# attnbench on a CUDA GPU with every kernel library: PyTorch (SDPA, FlexAttention), FlashAttention 2
# and xformers, and NVML (nvidia-ml-py) for the GPU's state. Every version is pinned here, in build arguments; rebuild for another GPU generation
# with e.g. --build-arg FLASH_ATTN_CUDA_ARCHS="100" (Blackwell).
#   docker build -t attnbench .
#   docker run --gpus all -v "$PWD/reports:/work/reports" attnbench run suites/long.yaml
# xformers 0.0.35's PyPI wheel is built for torch 2.10 with CUDA 12.8, so the base image matches it.
ARG TORCH_IMAGE=pytorch/pytorch:2.10.0-cuda12.8-cudnn9-devel
ARG FLASH_ATTN_VERSION=2.8.3
ARG XFORMERS_VERSION=0.0.35
ARG NVIDIA_ML_PY_VERSION=13.615.71
ARG FLASH_ATTN_CUDA_ARCHS="80;90"

# ---- builder: compile FlashAttention 2 against the image's torch, into a wheel ----------------
FROM ${TORCH_IMAGE} AS flash-builder
ARG FLASH_ATTN_VERSION
ARG FLASH_ATTN_CUDA_ARCHS
# nvcc is memory hungry: 4 parallel jobs fit in ~32 GB of RAM
ARG MAX_JOBS=4
ENV FLASH_ATTN_CUDA_ARCHS=${FLASH_ATTN_CUDA_ARCHS} \
    MAX_JOBS=${MAX_JOBS} \
    FLASH_ATTENTION_FORCE_BUILD=TRUE
RUN pip install --no-cache-dir ninja==1.11.1.4 packaging==25.0 wheel==0.45.1 \
 && pip wheel --no-cache-dir --no-build-isolation --no-deps --wheel-dir /wheels "flash-attn==${FLASH_ATTN_VERSION}"

# ---- runtime: the same image, the built wheel, xformers and attnbench; no build cache -------------
FROM ${TORCH_IMAGE}
ARG FLASH_ATTN_VERSION
ARG XFORMERS_VERSION
ARG NVIDIA_ML_PY_VERSION
COPY --from=flash-builder /wheels /tmp/wheels
WORKDIR /opt/attnbench
COPY pyproject.toml README.md ./
COPY attnbench ./attnbench
# The constraint keeps pip from replacing the image's torch (and its CUDA build) with another.
RUN python -c "import torch; print('torch==' + torch.__version__)" > /tmp/keep-torch.txt \
 && pip install --no-cache-dir -c /tmp/keep-torch.txt /tmp/wheels/flash_attn-*.whl \
      "xformers==${XFORMERS_VERSION}" "nvidia-ml-py==${NVIDIA_ML_PY_VERSION}" ".[flash,xformers,nvml]" \
 && rm -rf /tmp/wheels /tmp/keep-torch.txt \
 && useradd --create-home --uid 1000 bench \
 && mkdir -p /work/reports \
 && ln -s /opt/attnbench/attnbench/suites /work/suites \
 && chown -R bench /work
USER 1000:1000
WORKDIR /work
VOLUME ["/work/reports"]
ENTRYPOINT ["attnbench"]
CMD ["run", "suites/long.yaml"]
