# TileLang Playground for a class: one container on one GPU server, 30 students in their browsers.
#
#   docker build -t tilelang-playground .
#   docker run --init --gpus all -p 7860:7860 --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
#              -e PLAYGROUND_PASSWORD=... tilelang-playground
#
# --init reaps the sandboxes' exited processes; the two --security-opt let bubblewrap make its namespaces (Docker's
# default seccomp and AppArmor profiles forbid that: without them jobs still run, unsandboxed, and /health says so).
#
# CUDA devel base: nvcc and the CUDA headers TileLang compiles against, matching the H200 hosts' CUDA 13.0 driver.
# The app's install steps are not written here: the image runs `make setup`, the same recipe a developer and CI run
# (README, .ci/run); tests/test_docker.py fails if the two drift apart.
FROM nvidia/cuda:13.0.1-devel-ubuntu24.04

# Only what `make setup` itself needs to run: make, and a Python that can make a virtualenv.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends make python3 python3-venv python3-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
# The recipe and the pins first, so that a code change does not reinstall torch.
COPY Makefile requirements.txt ./
RUN make setup PYTHON=python3 \
 && rm -rf /root/.cache/pip /var/lib/apt/lists/*

# The code, owned by root and read-only to the app: neither the server nor a job can change it.
COPY . .
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin playground

# Non-root: jobs then run in bubblewrap's user namespace (where the host allows it; health() says which).
USER playground
ENV GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860 \
    PYTHONUNBUFFERED=1 \
    PLAYGROUND_CACHE_DIR=/home/playground/.cache/tilelang-playground
EXPOSE 7860

# The start period covers importing gradio, probing the sandbox and pre-starting the first workers.
HEALTHCHECK --interval=30s --timeout=10s --start-period=180s --retries=3 \
    CMD [".venv/bin/python", "-c", "import urllib.request; urllib.request.urlopen('http://localhost:7860/health', timeout=8)"]

# What `make run` runs, without re-checking the installs (the image is read-only to this user).
CMD [".venv/bin/python", "app.py"]
