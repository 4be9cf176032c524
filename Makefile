# The two commands of the README:  `make demo`  and  `make test`.  Both do all set-up on a fresh machine.
# `make test` = `make check` (lint, types, import contracts, unit tests; about 70 s)
#             + `make e2e`  (integration and end-to-end: real gRPC, sidecar processes, the Kubernetes
#                            emulator, kubectl, Prometheus, torchrun).
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST := $(PY) -m pytest

# CPU torch wherever the set-up runs: on Linux a plain `pip install torch` pulls the CUDA build (GBs of
# nvidia-* packages), so PyTorch's CPU wheel index is added as an extra index (its `+cpu` build is then
# the newest candidate) when it answers. Where only the default index is reachable, torch comes from it
# (some machines hold the CPU build there). Override: TORCH_INDEX= (default index only) or another
# index; TORCH_SPEC picks the version. numpy beside it: torch warns in every worker's log without it.
TORCH_SPEC  ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# The chart's image. It is not published: build it (`make image`) and push it to a registry of yours.
VERSION   := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE     ?= ghcr.io/podmortem/podmortem
TAG       ?= $(VERSION)
CONTAINER ?= docker
# `make chart` renders charts/podmortem locally: with `helm template` where helm is on PATH, else with
# the real Helm engine of the dev extra (scripts/render_chart.py). CHART_ARGS: more --set/-f arguments.
CHART_ARGS ?=

.PHONY: setup demo test check lint unit e2e properties proto bench wheel image push chart clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@extra=; \
	if [ -n "$(TORCH_INDEX)" ] && $(PY) -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=10)' "$(TORCH_INDEX)" 2>/dev/null; then \
	  extra="--extra-index-url $(TORCH_INDEX)"; echo "torch: $(TORCH_SPEC), CPU build from $(TORCH_INDEX)"; \
	else \
	  echo "torch: $(TORCH_SPEC) from the default index ($(if $(TORCH_INDEX),$(TORCH_INDEX) does not answer,TORCH_INDEX is empty))"; \
	fi; \
	$(PY) -m pip install -q $$extra '$(TORCH_SPEC)' numpy
	@$(PY) -c 'import torch; cuda = torch.version.cuda; print(f"torch {torch.__version__}" + (f": a CUDA {cuda} build (set TORCH_INDEX to a CPU index for the CPU one)" if cuda else ", CPU build"))' 2>/dev/null || true
	$(PY) -m pip install -q -e '.[dev]'
	# A real Prometheus checks our metrics in the tests (Debian package; not started as a service).
	command -v prometheus >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq prometheus >/dev/null; }
	# A real headless Chromium opens the incident page in the tests (Debian package; driven over DevTools).
	command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }
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

# The property tests with fresh random draws and ten times their budget (tests/support/properties.py);
# `make test` draws the same examples every run, so that no red run depends on the draw.
properties: $(STAMP)
	HYPOTHESIS_PROFILE=wide $(PYTEST) tests/unit

proto: $(STAMP)
	$(PY) scripts/gen_protos.py

# The accuracy benchmark on the development corpus in tests/corpus-torchrun/ ($PODMORTEM_CORPUS overrides);
# README, "Benchmarks", lists the others.
bench: $(STAMP)
	$(PY) -m bench.accuracy

# The wheel the image installs (dist/podmortem-$(VERSION)-py3-none-any.whl).
wheel: $(STAMP)
	rm -rf dist
	$(PY) -m build --wheel

# One image for the aggregator, the webhook and the sidecar: IMAGE and TAG name it; CONTAINER=podman works too.
image: wheel
	$(CONTAINER) build -t $(IMAGE):$(TAG) .

push: image
	$(CONTAINER) push $(IMAGE):$(TAG)

chart: $(STAMP)
	@if command -v helm >/dev/null; then \
	  helm template podmortem charts/podmortem -n podmortem --set image.repository=$(IMAGE) --set image.tag=$(TAG) $(CHART_ARGS); \
	else \
	  $(PY) scripts/render_chart.py -n podmortem --set image.repository=$(IMAGE) --set image.tag=$(TAG) $(CHART_ARGS); \
	fi

clean:
	rm -rf $(VENV) build dist *.egg-info
