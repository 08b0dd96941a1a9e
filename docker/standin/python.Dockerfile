# A stand-in for python:3.11-slim-bookworm (the client image's base), made with no registry: Debian 12's own
# CPython 3.11 on the imported debootstrap rootfs, `python` and `pip` as the official image names them.
# Built by docker/standin/build.sh with the same context as the server stand-in.
ARG ROOTFS_IMAGE=triton-ort/bookworm:minbase
FROM ${ROOTFS_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
# The official image's Python is its own build in /usr/local and not "externally managed" (PEP 668).
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-pip python-is-python3 ca-certificates \
 && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED \
 && rm -rf /var/lib/apt/lists/*
# This machine's TLS trust (its package registries are reached through it).
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
CMD ["python3"]
