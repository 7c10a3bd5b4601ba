# Quickstart: `make demo` and `make test`. Both create or refresh .venv first.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.autoplace-installed
TORCH_PIN := torch==2.13.0
# Debian packages the tests use (scotch: the Scotch static mapper tools; chromium: the HTML report, rendered headless).
APT_PACKAGES := scotch chromium

.PHONY: demo test test-slow bench venv system-deps clean

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile setup.py src/autoplace/sim/_csim.c
	@$(MAKE) --no-print-directory system-deps
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_PIN)"
	$(PY) -m pip install -q -e ".[test,torch,onnx,plot,ray,accelerate]" "$(TORCH_PIN)"
	@touch $(STAMP)

system-deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

demo: $(STAMP)
	$(VENV)/bin/autoplace compare inception-v3 --cluster k80x4

# the default suite (fast; ruff first); the fault, Ray and end-to-end tests are `make test-slow`; CI runs both
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -n 2 -m "not slow" tests

test-slow: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadscope -m slow tests

bench: $(STAMP)
	$(PY) benchmarks/simulator.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info
