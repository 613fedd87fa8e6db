# STAND-IN for the slime base image (slimerl/slime), built by scripts/engine.sh: CPU torch, ray,
# transformers and slime's source at the pinned commit in /root/slime, as the real image has it.
# It lets docker/train.Dockerfile build unchanged and runs the services that need no GPU; it has
# no CUDA, Megatron or SGLang, and not the real image's package set.
ARG PYTHON_BASE
FROM ${PYTHON_BASE}

ARG TORCH_WHEEL
ARG RAY_VERSION
ARG TRANSFORMERS_VERSION
LABEL org.opencontainers.image.title="shopsimrl-standin-slime" \
      org.shopsimrl.standin="slimerl/slime stand-in: CPU torch, no CUDA/Megatron/SGLang"

COPY ${TORCH_WHEEL} /tmp/wheels/
RUN pip install --no-cache-dir "/tmp/wheels/${TORCH_WHEEL}" "ray[default]==${RAY_VERSION}" \
        "transformers==${TRANSFORMERS_VERSION}" \
    && rm -rf /tmp/wheels
# A shallow git checkout of slime at the pinned commit: the train Dockerfile's commit check passes
# without a fetch.
COPY slime /root/slime
RUN pip install --no-cache-dir --no-deps -e /root/slime
WORKDIR /root
