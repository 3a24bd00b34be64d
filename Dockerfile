# TileLang Playground for a class: one container on one GPU server, 30 students in their browsers.
#
#   make image                      # docker build (or podman/buildah where there is no Docker), torch's CUDA build
#   docker run -d --init --gpus all -p 7860:7860 -v playground-data:/data \
#       --security-opt seccomp=deploy/seccomp-bwrap.json --security-opt systempaths=unconfined \
#       -e PLAYGROUND_PASSWORD=... tilelang-playground
#
# The README's "For a class: Docker" and deploy/README.md say what each flag is for. `make image-test` builds the
# image with the CPU build of torch and tests it as a student would meet it (tests/test_docker.py).
#
# No CUDA base image: nvcc, ptxas and the CUDA headers TileLang compiles against come from NVIDIA's pip wheels
# (requirements.txt), so any plain Debian or Ubuntu image with Python 3.10+ will do, and a machine without a
# registry can use a base it made itself (deploy/image.sh makes one with debootstrap). The GPU host needs only its
# driver and the NVIDIA Container Toolkit.
ARG BASE=debian:bookworm
FROM ${BASE}

# Only what `make setup` itself needs to run: make, and a Python that can make a virtualenv. Everything else (the
# sandbox, the compiler nvcc drives, every pip package) comes through `make setup`, the recipe a developer and CI run.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        make python3 python3-venv python3-dev ca-certificates \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
# The recipe and the pins first, so that a code change does not reinstall torch.
COPY Makefile requirements.txt ./
# TORCH=cuda: PyPI's torch, the CUDA build, for a GPU host. TORCH=cpu: the CPU build (a compile-only server, or a
# test of the image), from a wheel in deploy/from-host/ (`make image TORCH=cpu` puts it there) or else from
# PyTorch's CPU index. deploy/from-host/ may also hold the host's CA bundle, which pip then trusts (a build behind
# a TLS-inspecting proxy); both are gone when this step ends.
ARG TORCH=cuda
COPY deploy/from-host/ /tmp/from-host/
RUN if [ -f /tmp/from-host/ca-certificates.crt ]; then export PIP_CERT=/tmp/from-host/ca-certificates.crt; fi \
 && if [ "$TORCH" = cpu ]; then \
        echo "torch==$(sed -n 's/^torch==\([0-9.]*\).*/\1/p' requirements.txt)+cpu" > /tmp/torch-cpu.txt \
     && export PIP_CONSTRAINT=/tmp/torch-cpu.txt \
     && { ls /tmp/from-host/torch-*+cpu-*.whl >/dev/null 2>&1 \
          || export PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu; }; \
    fi \
 && PIP_FIND_LINKS=/tmp/from-host PIP_NO_CACHE_DIR=1 make setup PYTHON=python3 \
 && rm -rf /tmp/from-host /tmp/torch-cpu.txt /var/lib/apt/lists/*

# The code the server runs, owned by root and read-only to the app: neither the server nor a job can change it.
# Named one by one, so that what the build borrowed (deploy/from-host/) stays out; tests/test_docker.py runs the
# image, so a folder the server needs and this leaves out shows there.
COPY app.py ./
COPY playground/ playground/
COPY kernels/ kernels/
COPY exercises/ exercises/
COPY bench/ bench/
# The shipped kernels compiled once, here, as the page first asks for each (for sm_90a, the build has no GPU), into a
# folder the server reads as its compile cache's seed (PLAYGROUND_COMPILE_CACHE_SEED): the first student's first
# compile is answered from it, on a new volume and a bind-mounted host folder alike. Only the catalogue's own files
# run here, no user code, so these jobs go without the sandbox, which a build cannot make.
RUN PLAYGROUND_DATA=/tmp/warm PLAYGROUND_CACHE_DIR=/tmp/warm/cache PLAYGROUND_SANDBOX=none PLAYGROUND_JOB_UIDS=0 \
        .venv/bin/python app.py --prewarm \
 && mv /tmp/warm/compile-cache /app/compile-cache-seed && chmod -R a+rX,go-w /app/compile-cache-seed \
 && rm -rf /tmp/warm
# uid 1000: the first user of most hosts, so files the app writes into a bind-mounted data folder are that user's.
# /data: what the app keeps (PLAYGROUND_DATA); a volume, so it outlives the container.
RUN useradd --create-home --uid 1000 --shell /usr/sbin/nologin playground \
 && mkdir -p /data && chown playground:playground /data

# Non-root: jobs then run in bubblewrap's user namespace (where the engine's security options allow it; /health says
# which).
USER playground
ENV GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860 \
    PYTHONUNBUFFERED=1 \
    PLAYGROUND_DATA=/data \
    PLAYGROUND_COMPILE_CACHE_SEED=/app/compile-cache-seed \
    PLAYGROUND_CACHE_DIR=/home/playground/.cache/tilelang-playground
VOLUME /data
EXPOSE 7860

# The start period covers importing gradio, probing the sandbox and pre-starting the first workers. The port is the
# one the server listens on (GRADIO_SERVER_PORT), so a run that moves it stays healthy.
HEALTHCHECK --interval=30s --timeout=10s --start-period=180s --retries=3 \
    CMD [".venv/bin/python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('GRADIO_SERVER_PORT', '7860'), timeout=8)"]

# What `make run` runs, without re-checking the installs (the image is read-only to this user).
CMD [".venv/bin/python", "app.py"]
