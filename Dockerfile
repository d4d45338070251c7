# syntax=docker/dockerfile:1
#
# Two images from one file:
#   docker build -t statestore .                          the service (default target: runtime)
#   docker build --target spark -t statestore-spark .     the Spark job (`statestore demo`), with a JRE
#
# Both install the package into a virtualenv in a builder stage and copy only that virtualenv into a
# slim runtime, which runs as an unprivileged user with a fixed UID (10001) so that Kubernetes
# `runAsUser` and volume ownership (`fsGroup`) can rely on it. The writable directories belong to
# group 0 as well, so the images also run under any UID a platform assigns (OpenShift's restricted
# profile runs a random UID in group 0).
#
# Third-party dependencies are installed at the versions pinned in deploy/constraints.txt
# (regenerate it with `make constraints` when pyproject.toml's dependencies change). Label a
# release build with its version and commit:
#   docker build --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" -t statestore .

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG VERSION=0.1.0
ARG REVISION=unknown

# ---------------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/statestore
COPY pyproject.toml README.md ./
COPY deploy/constraints.txt ./deploy/constraints.txt
COPY store ./store
COPY service ./service
COPY clients ./clients
COPY wire ./wire
# Build a wheel once; both virtualenvs install from it (all third-party dependencies ship wheels),
# at the pinned versions.
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
    && /opt/statestore/bin/pip install --constraint deploy/constraints.txt \
       "$(ls /wheels/statestore-*.whl)[server]"

# ---------------------------------------------------------------------------------------------------
FROM builder AS spark-builder
RUN python -m venv /opt/statestore-spark \
    && /opt/statestore-spark/bin/pip install --constraint deploy/constraints.txt \
       "$(ls /wheels/statestore-*.whl)[server,spark]"

# ---------------------------------------------------------------------------------------------------
# What both images share: the base image and the OCI labels.
FROM ${PYTHON_IMAGE} AS labelled
ARG VERSION
ARG REVISION
LABEL org.opencontainers.image.title="statestore" \
      org.opencontainers.image.description="A shared, read-only state store served from a Kafka changelog" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/statestore/statestore" \
      org.opencontainers.image.url="https://github.com/statestore/statestore" \
      org.opencontainers.image.documentation="https://github.com/statestore/statestore/blob/main/docs/deployment.md" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="statestore"

# ---------------------------------------------------------------------------------------------------
# The Spark job image: `statestore demo --step seed|join` against a running broker and service.
FROM labelled AS spark
LABEL org.opencontainers.image.title="statestore-spark"
# Spark needs a Java runtime; the man-page directory must exist for the JRE's post-install step.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 statestore \
    && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /home/statestore \
       --shell /usr/sbin/nologin statestore \
    && chgrp 0 /home/statestore && chmod g=u /home/statestore
COPY --from=spark-builder /opt/statestore-spark /opt/statestore-spark
ENV PATH=/opt/statestore-spark/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/statestore
WORKDIR /home/statestore
USER 10001:10001
ENTRYPOINT ["statestore"]
CMD ["demo", "--step", "join", "--bootstrap-servers", "kafka:9092", "--service-url", "http://statestore:8080"]

# ---------------------------------------------------------------------------------------------------
# The service image (default target).
FROM labelled AS runtime
RUN groupadd --system --gid 10001 statestore \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /var/lib/statestore \
       --shell /usr/sbin/nologin statestore \
    && mkdir -p /etc/statestore /var/lib/statestore \
    && chown 10001:0 /var/lib/statestore && chmod g=u /var/lib/statestore
COPY --from=builder /opt/statestore /opt/statestore
ENV PATH=/opt/statestore/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /var/lib/statestore
# The state dir holds the RocksDB stores and their offsets: keep it on a volume so a restarted
# container resumes from its offsets instead of restoring every topic from the beginning.
VOLUME ["/var/lib/statestore"]
EXPOSE 8080
USER 10001:10001
# Liveness only: /readyz stays 503 during a long restore, which is not a reason to restart.
# No curl in the slim image, so the check is a few lines of the image's own Python.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('STATESTORE_HTTP__PORT', '8080'); sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4).status == 200 else 1)"]
ENTRYPOINT ["statestore"]
CMD ["serve", "--config", "/etc/statestore/statestore.yaml"]
