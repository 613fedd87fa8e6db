# ShopSimRL train image: the pinned slime image (Ray, Megatron, SGLang, torch) plus ShopSimRL.
# Build with `make images` (args from docker/versions.env). No secret is ever baked in: W&B
# credentials come from the environment or `wandb login` at run time.
ARG SLIME_IMAGE=slimerl/slime
ARG SLIME_IMAGE_TAG=nightly-dev-20260804a
ARG SLIME_IMAGE_DIGEST=sha256:unpinned-run-make-pin-images
FROM ${SLIME_IMAGE}:${SLIME_IMAGE_TAG}@${SLIME_IMAGE_DIGEST}

ARG SLIME_IMAGE
ARG SLIME_IMAGE_TAG
ARG SLIME_IMAGE_DIGEST
ARG SLIME_COMMIT=a6272da0d4f3d0a08520c99a2f3b4f6c887960dc
LABEL org.opencontainers.image.title="shopsimrl-train" \
      org.shopsimrl.base.image="${SLIME_IMAGE}:${SLIME_IMAGE_TAG}" \
      org.shopsimrl.base.digest="${SLIME_IMAGE_DIGEST}" \
      org.shopsimrl.slime.commit="${SLIME_COMMIT}"

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# slime images carry whatever `main` was at build time: check out the release our hooks target and
# record the commit the image really has (preflight compares it with docker/versions.env).
RUN if [ "$(git -C /root/slime rev-parse HEAD)" != "${SLIME_COMMIT}" ]; then \
      git -C /root/slime fetch --quiet origin "${SLIME_COMMIT}" \
      && git -C /root/slime checkout --quiet "${SLIME_COMMIT}" \
      && pip install --no-cache-dir --no-deps -e /root/slime; \
    fi \
    && mkdir -p /opt/shopsimrl \
    && git -C /root/slime rev-parse HEAD > /opt/shopsimrl/SLIME_COMMIT

WORKDIR /opt/shopsimrl
COPY docker/requirements-train.txt docker/requirements-train.txt
# The image's own packages are the constraints, so torch & co. stay exactly as shipped; the build
# fails loudly if one of our ranges would need another version.
RUN python3 -c 'import torch; print(torch.__version__)' > /tmp/torch-before.txt \
    && pip freeze | grep -E '^[A-Za-z0-9_.-]+==' | grep -viE '^wandb==' > /tmp/image-constraints.txt \
    && pip install --no-cache-dir -c /tmp/image-constraints.txt -r docker/requirements-train.txt \
    && python3 -c 'import torch; print(torch.__version__)' | diff /tmp/torch-before.txt - \
    && rm /tmp/torch-before.txt /tmp/image-constraints.txt

COPY pyproject.toml README.md ./
COPY shopsimrl shopsimrl
COPY scripts scripts
COPY configs configs
# The production pins and what this image was built from, for `shopsimrl preflight` inside it.
COPY docker/versions.env docker/versions.env
RUN pip install --no-cache-dir --no-deps /opt/shopsimrl \
    && pip freeze > /opt/shopsimrl/pip-freeze.txt \
    && shopsimrl --help > /dev/null \
    && printf '{"image": "train", "base": "%s", "digest": "%s"}\n' \
       "${SLIME_IMAGE}:${SLIME_IMAGE_TAG}" "${SLIME_IMAGE_DIGEST}" > /opt/shopsimrl/IMAGE.json

# /workspace holds the bind mounts (runs/, checkpoints/, wandb/, configs/); W&B never writes to the
# container layer.
WORKDIR /workspace
ENV WANDB_DIR=/workspace/wandb \
    WANDB_DATA_DIR=/workspace/wandb/data \
    WANDB_CACHE_DIR=/workspace/wandb/cache \
    SHOPSIMRL_IN_CONTAINER=1 \
    PYTHONUNBUFFERED=1
CMD ["shopsimrl", "--help"]
