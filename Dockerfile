# The image clusterman runs in, one pod per pool (deploy/kubernetes), and the image signal versions
# are built on: `clusterman signal publish` run in it makes venvs whose copied interpreter expects
# this image's Python at this path (docs/deployment.md). The codename prefix names the image's OS.
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

# Stage 1: the wheel, from the sources only (the checkout's clusterman/data links resolve here too).
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY config ./config
COPY supervisord ./supervisord
COPY clusterman_signals ./clusterman_signals
COPY clusterman ./clusterman
RUN python -m pip wheel --no-deps --disable-pip-version-check --wheel-dir /dist .

# Stage 2: the runtime, with the pinned production closure only (constraints.txt).
FROM ${PYTHON_IMAGE}
# git: `clusterman signal publish` exports a tag with git archive.
RUN apt-get update \
    && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*
COPY constraints.txt /opt/clusterman-build/constraints.txt
COPY deploy/install-clusterman /opt/clusterman-build/deploy/install-clusterman
COPY --from=wheel /dist /opt/clusterman-build/dist
# The same script itests/test_wheel_install.py runs on the host.
RUN /opt/clusterman-build/deploy/install-clusterman /opt/clusterman /opt/clusterman-build/dist/clusterman-*.whl kubernetes \
    && rm -rf /opt/clusterman-build
RUN groupadd --system --gid 10001 clusterman \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/clusterman --create-home clusterman
ENV PATH=/opt/clusterman/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    CMAN_SIGNALS_DIR=/var/lib/clusterman/signals
USER 10001:10001
WORKDIR /var/lib/clusterman
ENTRYPOINT ["python", "-m", "clusterman.batch.autoscaler_bootstrap"]
