# One command each:  make run   (set up and start the app)    make test   (set up and run the test suite)
VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTHON ?= python3
APT    := $(if $(filter 0,$(shell id -u)),,sudo) apt-get

.PHONY: run test setup setup-test system-packages test-packages
run: setup
	$(PY) app.py

test: setup-test
	$(PY) -m pytest -q

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

# System packages, Debian or Ubuntu. The app's: bubblewrap sandboxes each job (the Dockerfile gets it through
# `make setup`, so the image, the README and CI install it with this one recipe). The tests' own: chromium, the
# browser the page's end-to-end test drives.
APP_PACKAGES  := bubblewrap
TEST_PACKAGES := chromium
system-packages:
	@command -v bwrap >/dev/null || { $(APT) update -qq && \
	 DEBIAN_FRONTEND=noninteractive $(APT) install -y -qq --no-install-recommends $(APP_PACKAGES); }

test-packages:
	@command -v chromium >/dev/null || { $(APT) update -qq && \
	 DEBIAN_FRONTEND=noninteractive $(APT) install -y -qq $(TEST_PACKAGES); }
