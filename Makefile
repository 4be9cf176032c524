# The two commands of the README:  `make demo`  and  `make test`.  Both do all set-up on a fresh machine.
# `make test` = `make check` (lint, types, import contracts, unit tests; about a minute)
#             + `make e2e`  (integration and end-to-end: real gRPC, sidecar processes, the Kubernetes
#                            emulator, kubectl, Prometheus, torchrun).
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST := $(PY) -m pytest

.PHONY: setup demo test check lint unit e2e proto bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# CPU torch from the machine's local file (any other spec pulls GBs of CUDA packages).
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	# A real Prometheus checks our metrics in the tests (Debian package; not started as a service).
	command -v prometheus >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq prometheus >/dev/null; }
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/podmortem demo

test: check e2e

check: lint unit

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy podmortem tests bench scripts
	$(VENV)/bin/lint-imports

unit: $(STAMP)
	$(PYTEST) tests/unit

e2e: $(STAMP)
	$(PYTEST) tests/integration tests/e2e

proto: $(STAMP)
	$(PY) scripts/gen_protos.py

# The accuracy benchmark on the development corpus in tests/corpus-torchrun/ ($PODMORTEM_CORPUS overrides);
# README, "Benchmarks", lists the others.
bench: $(STAMP)
	$(PY) -m bench.accuracy

clean:
	rm -rf $(VENV) build *.egg-info
