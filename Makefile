# The two commands of the README:  `make demo`  and  `make test`.  Both do all set-up on a fresh machine.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo test lint proto bench clean

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

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy podmortem  # sidecar/ and aggregator/ are checked through the podmortem/ symlinks
	$(PY) -m pytest

proto: $(STAMP)
	$(PY) scripts/gen_protos.py

bench: $(STAMP)
	$(PY) bench/accuracy.py ../shared/corpus

clean:
	rm -rf $(VENV) build *.egg-info
