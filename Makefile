# One command each:  make run   (set up and start the app)    make test   (set up and run the test suite)
#                    make image (the Docker image)             make image-test (build it, run it, test it as used)
VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTHON ?= python3
APT    := $(if $(filter 0,$(shell id -u)),,sudo) apt-get

.PHONY: run test setup setup-test system-packages test-packages image image-test
run: setup
	$(PY) app.py

# The suite in two parts: everything but the browser walks, test files side by side on TEST_WORKERS processes
# (pytest-xdist; a file's tests stay together, in order, on one of them), then the browser walks one at a time (each
# drives a page and its server, which compete for the cores a compile needs).
TEST_WORKERS ?= 2
test: setup-test
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not browser"
	$(PY) -m pytest -q -m browser

setup: $(VENV)/.app-installed system-packages
setup-test: $(VENV)/.test-installed system-packages test-packages

$(VENV)/.app-installed: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	touch $@

$(VENV)/.test-installed: requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $(VENV)/.app-installed $@

# System packages, Debian or Ubuntu. The app's: bubblewrap sandboxes each job; g++ is the host compiler nvcc drives
# (nvcc itself, and the CUDA headers, come from pip wheels: no CUDA toolkit is needed). The Dockerfile gets them
# through `make setup`, so the image, the README and CI install them with this one recipe. The tests' own: chromium,
# the browser the page's end-to-end test drives. Only packages not installed yet are asked for.
APP_PACKAGES  := bubblewrap g++ libseccomp2
TEST_PACKAGES := chromium
missing = $(shell for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done)
system-packages:
	@$(if $(call missing,$(APP_PACKAGES)),$(APT) update -qq && DEBIAN_FRONTEND=noninteractive \
	 $(APT) install -y -qq --no-install-recommends $(call missing,$(APP_PACKAGES)),true)

test-packages:
	@$(if $(call missing,$(TEST_PACKAGES)),$(APT) update -qq && DEBIAN_FRONTEND=noninteractive \
	 $(APT) install -y -qq $(call missing,$(TEST_PACKAGES)),true)

# The image, with Docker where its daemon answers, else with podman (installed from Debian's packages), from a
# Debian made by debootstrap where the base image cannot be pulled: deploy/image.sh. TORCH=cpu builds with the CPU
# build of torch (a compile-only server).
IMAGE ?= tilelang-playground
TORCH ?= cuda
image:
	PYTHON=$(if $(wildcard $(PY)),$(PY),$(PYTHON)) deploy/image.sh build $(IMAGE) $(TORCH)

# tests/test_docker.py builds the image (CPU torch: no GPU is needed), runs it as a class would, and tests it through
# its page and its API, the browser test included.
image-test: setup-test
	PLAYGROUND_IMAGE_TEST=1 $(PY) -m pytest -q -m image tests/test_docker.py
