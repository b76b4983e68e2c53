# vkpy's commands. `make run` and `make test` are the two a new user needs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CLUSTER_DIR ?= .cluster
STAMP := $(VENV)/.installed

.PHONY: help venv controlplane test-tools cluster cluster-down run demo test test-unit lint bench conformance clean

help:
	@echo "make run          local control plane (or KUBECONFIG) + a virtual node (WORKERS=N: + N regular nodes)"
	@echo "make demo         hybrid node pools: a burst overflowing onto the virtual node, live"
	@echo "make test         the whole test suite against a real control plane"
	@echo "make lint         ruff, mypy --strict, import-linter"
	@echo "make bench        benchmarks, figures into docs/benchmarks.md"
	@echo "make conformance  Kubernetes' node conformance specs on a vkpy node (root, ~1 h), into docs/conformance.md"
	@echo "make cluster      start the local control plane in $(CLUSTER_DIR)"
	@echo "make cluster-down stop it"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

controlplane:
	@controlplane/build.sh >/dev/null
	@controlplane/build.sh metrics-server >/dev/null

# The Go tools the test suite runs, built before pytest starts so that a cold build
# never counts against a test timeout.
test-tools: controlplane
	@controlplane/build.sh helm >/dev/null
	@controlplane/build.sh agnhost >/dev/null
	@controlplane/build.sh descheduler >/dev/null
	@controlplane/build.sh e2e >/dev/null

cluster: venv controlplane
	$(PY) -m vkpy.devcluster up --dir $(CLUSTER_DIR)

cluster-down: venv
	$(PY) -m vkpy.devcluster down --dir $(CLUSTER_DIR)

run: venv controlplane
	@$(PY) -m vkpy.devcluster run --dir $(CLUSTER_DIR) --workers $${WORKERS:-0}

demo: venv controlplane
	$(PY) -m pip install --quiet -e '.[demo]'
	$(PY) -m vkpy.devcluster demo hybrid --dir $(CLUSTER_DIR)

test: venv test-tools
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

test-unit: venv
	$(PY) -m pytest -q -p no:cacheprovider tests/unit $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check vkpy tests bench conformance
	$(VENV)/bin/ruff format --check vkpy tests bench conformance
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

bench: venv controlplane
	$(PY) bench/peers.py --pods $${PEER_PODS:-300} --vk-pods $${VK_PODS:-60} --rounds $${ROUNDS:-3} --plots docs/plots
	$(PY) bench/nodes.py --nodes $${NODES:-1000}
	$(PY) bench/pods.py --pods $${PODS:-1000}
	$(PY) bench/kubelet_api.py
	$(PY) bench/exec.py
	$(PY) bench/restart.py --pods $${RESTART_PODS:-2000} --rounds 1

# Not part of `make test`: builds e2e.test and runs a few hundred specs (about an hour).
conformance: venv controlplane
	$(PY) conformance/run.py --procs $${PROCS:-4} $(CONFORMANCE_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
