# The image clusterman runs in, one pod per pool (deploy/kubernetes), and the image signal versions
# are built on: `clusterman signal publish` run in the `publisher` variant (below) makes venvs whose
# copied interpreter expects this image's Python at this path (docs/deployment.md). The codename
# prefix names the image's OS.
#   docker build -t clusterman .                                       the autoscaler
#   docker build --build-arg EXTRAS=kubernetes,simulator -t clusterman:sim .   + clusterman simulate --plot
#   docker build --target publisher -t clusterman-publisher .          + git, for signal publish
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

# Stage 1: the wheel, from the sources only (the checkout's clusterman/data links resolve here too).
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY config ./config
COPY supervisord ./supervisord
COPY clusterman_signals ./clusterman_signals
COPY clusterman ./clusterman
RUN python -m pip wheel --no-deps --disable-pip-version-check --no-cache-dir --wheel-dir /dist .

# Stage 2: the runtime, with the pinned closure only (constraints.txt; constraints-dev.txt pins the
# simulator extra's matplotlib). tini (Debian's) is PID 1: it forwards SIGTERM to the bootstrap
# and reaps any orphan the tree leaves, which Python as PID 1 would do neither of.
FROM ${PYTHON_IMAGE} AS runtime
ARG EXTRAS=kubernetes
# No version pin (DL3008): Debian stable's tini gets only security fixes; a pin breaks when one lands.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/*
COPY constraints.txt constraints-dev.txt /opt/clusterman-build/
COPY deploy/install-clusterman /opt/clusterman-build/deploy/install-clusterman
COPY --from=wheel /dist /opt/clusterman-build/dist
# The same script itests/test_wheel_install.py runs on the host.
RUN CLUSTERMAN_CONSTRAINTS="/opt/clusterman-build/constraints.txt /opt/clusterman-build/constraints-dev.txt" \
    /opt/clusterman-build/deploy/install-clusterman /opt/clusterman /opt/clusterman-build/dist/clusterman-*.whl "$EXTRAS" \
    && rm -rf /opt/clusterman-build
RUN groupadd --system --gid 10001 clusterman \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/clusterman --create-home clusterman
ENV PATH=/opt/clusterman/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    CMAN_SIGNALS_DIR=/var/lib/clusterman/signals
USER 10001:10001
WORKDIR /var/lib/clusterman
# A liveness check for plain Docker; Kubernetes ignores it and asks /healthz itself (deploy/kubernetes).
HEALTHCHECK --interval=30s --timeout=5s --start-period=420s \
    CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:7780/healthz', timeout=4)"]
ENTRYPOINT ["tini", "--", "python", "-m", "clusterman.batch.autoscaler_bootstrap"]

# The variant that publishes signal versions: the runtime (same Python, same path) plus git, which
# `clusterman signal publish` exports a tag with. Never the image the autoscaler runs in.
FROM runtime AS publisher
USER 0:0
# No version pin (DL3008), as above.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*
USER 10001:10001

# The default target: the autoscaler's image.
FROM runtime
