# STAND-IN for python:3.11-slim, built by scripts/engine.sh from a Debian root file system
# (debootstrap, imported into the loopback registry). Only for machines without an image registry.
ARG ROOTFS_IMAGE
FROM ${ROOTFS_IMAGE}

LABEL org.opencontainers.image.title="shopsimrl-standin-python" \
      org.shopsimrl.standin="python:3.11-slim stand-in from Debian packages"

# This machine's CA bundle: package traffic is intercepted by a CA only the host's bundle knows.
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
# Debian's python refuses `pip install` into the system (PEP 668): a venv first on PATH gives
# `python` and `pip` as the official image has them.
RUN python3.11 -m venv /usr/local/python
ENV PATH=/usr/local/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \
    LANG=C.UTF-8
CMD ["python3"]
