# ShopSimRL tools image (CPU): W&B sync, history export, analysis reports. No torch.
# Build with `make images` (args from docker/versions.env).
ARG PYTHON_IMAGE=python
ARG PYTHON_IMAGE_TAG=3.11-slim
ARG PYTHON_IMAGE_DIGEST=sha256:unpinned-run-make-pin-images
FROM ${PYTHON_IMAGE}:${PYTHON_IMAGE_TAG}@${PYTHON_IMAGE_DIGEST}

ARG PYTHON_IMAGE
ARG PYTHON_IMAGE_TAG
ARG PYTHON_IMAGE_DIGEST
LABEL org.opencontainers.image.title="shopsimrl-tools" \
      org.shopsimrl.base.image="${PYTHON_IMAGE}:${PYTHON_IMAGE_TAG}" \
      org.shopsimrl.base.digest="${PYTHON_IMAGE_DIGEST}"

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

WORKDIR /opt/shopsimrl
COPY docker/requirements-tools.lock docker/requirements-tools.lock
RUN pip install --no-deps -r docker/requirements-tools.lock

COPY pyproject.toml README.md ./
COPY shopsimrl shopsimrl
COPY scripts scripts
COPY configs configs
# The production pins and what this image was built from, for `shopsimrl preflight` inside it.
COPY docker/versions.env docker/versions.env
RUN pip install --no-deps /opt/shopsimrl \
    && shopsimrl --help > /dev/null \
    && printf '{"image": "tools", "base": "%s", "digest": "%s"}\n' \
       "${PYTHON_IMAGE}:${PYTHON_IMAGE_TAG}" "${PYTHON_IMAGE_DIGEST}" > /opt/shopsimrl/IMAGE.json

RUN useradd --create-home --uid 1000 shopsimrl
USER 1000:1000
WORKDIR /workspace
ENV WANDB_DIR=/workspace/wandb \
    WANDB_DATA_DIR=/workspace/wandb/data \
    WANDB_CACHE_DIR=/workspace/wandb/cache \
    SHOPSIMRL_IN_CONTAINER=1
# No ENTRYPOINT: every service names its whole command (compose.yaml: ["shopsimrl", "wandb", ...]),
# as in the train image.
CMD ["shopsimrl", "--help"]
