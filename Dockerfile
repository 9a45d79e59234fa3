# megarl on GPU clusters: CUDA PyTorch + SGLang + megatron-core + mbridge + Ray (with its job server), with Transformer Engine and
# flash-attn as accelerators. Versions come from setup.py (extras gpu and accel); the base image's torch
# must equal the gpu extra's pin (tests/test_dockerfile.py checks it).
#
#   docker build -t megarl .
#   docker run --gpus all --shm-size 16g -it megarl megarl check-model --hf /models/Qwen2.5-0.5B-Instruct
# On a cluster, the launchers are in /opt/megarl/launch (torchrun.sh, ray_submit.sh, slurm/*.sbatch).
ARG BASE_IMAGE=pytorch/pytorch:2.11.0-cuda13.0-cudnn9-devel
FROM ${BASE_IMAGE}

ARG TORCH_VERSION=2.11.0
ENV PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    CUDA_DEVICE_MAX_CONNECTIONS=1

RUN python -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '${TORCH_VERSION}')" \
    || (echo "base image torch != ${TORCH_VERSION} (setup.py's gpu extra)" && exit 1)

# The code reward runs model-written programs under bubblewrap (docs/agents.md).
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/megarl
COPY setup.py README.md ./
COPY megarl ./megarl
COPY parallel ./parallel
COPY recipes ./recipes
COPY launch ./launch
# The accelerators compile against the image's torch and CUDA, so no build isolation.
RUN pip install ".[gpu,loggers]" \
    && pip install --no-build-isolation ".[accel]"

CMD ["megarl"]
