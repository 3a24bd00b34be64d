# One command each:  make run   (set up and start the app)    make test   (set up and run the test suite)
VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTHON ?= python3
APT    := $(if $(filter 0,$(shell id -u)),,sudo) apt-get

.PHONY: run test setup setup-test system-packages
run: setup
	$(PY) app.py

test: setup-test
	$(PY) -m pytest -q

setup: $(VENV)/.app-installed system-packages
setup-test: $(VENV)/.test-installed system-packages

$(VENV)/.app-installed: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	touch $@

$(VENV)/.test-installed: requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $(VENV)/.app-installed $@

# Debian packages: bubblewrap sandboxes each job; chromium is the browser the page's end-to-end test drives.
system-packages:
	@missing=""; command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	 command -v chromium >/dev/null || missing="$$missing chromium"; \
	 if [ -n "$$missing" ]; then $(APT) update -qq && DEBIAN_FRONTEND=noninteractive $(APT) install -y -qq $$missing; fi
