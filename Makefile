# vkpy's commands. `make run` and `make test` are the two a new user needs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CLUSTER_DIR ?= .cluster
STAMP := $(VENV)/.installed

.PHONY: help venv controlplane system-deps images test-tools cluster cluster-down run demo test test-unit lint bench bench-nodes-5000 bench-soak conformance clean

help:
	@echo "make run          local control plane (or KUBECONFIG) + a virtual node (WORKERS=N: + N regular nodes)"
	@echo "make demo         hybrid node pools: a burst overflowing onto the virtual node, live"
	@echo "make test         the whole test suite against a real control plane"
	@echo "make lint         ruff, mypy --strict, import-linter"
	@echo "make system-deps  Debian packages for images and the OCI runtime (skopeo, umoci, runc, ...; root)"
	@echo "make images       build the dev cluster's images now (busybox, pause, agnhost, nginx, vkpy; cached)"
	@echo "make bench        benchmarks, figures into docs/benchmarks.md"
	@echo "make bench-nodes-5000  5,000 nodes beside kwok's, 10,000 pods (long; a quiet machine)"
	@echo "make bench-soak   one node, 100 pods/s churn and random faults for an hour"
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

# The Debian packages that images and the OCI runtime need (docs/images.md): skopeo
# (registry protocol), umoci (unpacking), runc (the OCI runtime); the tests' registry
# (docker-registry), image content (busybox-static) and registry passwords
# (apache2-utils: htpasswd), the runtime default seccomp profile (containers-common's
# seccomp.json, the one CRI-O and podman use); the dev cluster's images (docs/devcluster-images.md):
# mmdebstrap (nginx's and vkpy's Debian roots), gcc, make and libc6-dev (the static pause
# program, and busybox built from upstream's source; its tarball is unpacked by Python,
# no bzip2 needed; without them the busybox image is Debian's busybox-static, with a warning).
# Installs only what is missing; without root it says what to install and fails.
SYSTEM_DEPS := skopeo:skopeo umoci:umoci runc:runc docker-registry:docker-registry \
	busybox-static:/bin/busybox apache2-utils:htpasswd \
	golang-github-containers-common:/usr/share/containers/seccomp.json \
	mmdebstrap:mmdebstrap gcc:gcc make:make libc6-dev:/usr/include/stdio.h
system-deps:
	@missing=""; for dep in $(SYSTEM_DEPS); do \
		pkg=$${dep%%:*}; prog=$${dep#*:}; \
		if [ "$$pkg" = busybox-static ]; then \
			if command -v dpkg-query >/dev/null; then \
				dpkg-query -W -f='$${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' \
					|| missing="$$missing $$pkg"; \
			else [ -x /bin/busybox ] || missing="$$missing $$pkg"; fi; \
		elif [ "$${prog#/}" != "$$prog" ]; then [ -e "$$prog" ] || missing="$$missing $$pkg"; \
		else command -v $$prog >/dev/null 2>&1 || missing="$$missing $$pkg"; fi; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
		echo "make system-deps: missing Debian packages:$$missing" >&2; \
		echo "  install them as root: apt-get install -y --no-install-recommends$$missing" >&2; \
		exit 1; \
	fi; \
	echo "make system-deps: installing$$missing"; \
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing >/dev/null \
		|| { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing >/dev/null; }

# The dev cluster's images (vkpy/devcluster/images), built ahead of `make run`: the first
# build takes about two minutes (nginx and vkpy: mmdebstrap, as root), later ones nothing.
images: venv system-deps
	@$(PY) -m vkpy.devcluster.images

# The Go tools the test suite runs and the dev cluster's images, built before pytest
# starts so that a cold build never counts against a test timeout.
test-tools: controlplane system-deps images
	@controlplane/build.sh helm >/dev/null
	@controlplane/build.sh agnhost >/dev/null
	@controlplane/build.sh descheduler >/dev/null
	@controlplane/build.sh e2e >/dev/null

cluster: venv controlplane system-deps
	$(PY) -m vkpy.devcluster up --dir $(CLUSTER_DIR)

cluster-down: venv
	$(PY) -m vkpy.devcluster down --dir $(CLUSTER_DIR)

run: venv controlplane system-deps
	@$(PY) -m vkpy.devcluster run --dir $(CLUSTER_DIR) --workers $${WORKERS:-0}

demo: venv controlplane
	$(PY) -m pip install --quiet -e '.[demo]'
	$(PY) -m vkpy.devcluster demo hybrid --dir $(CLUSTER_DIR)

test: venv test-tools
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

test-unit: venv system-deps
	$(PY) -m pytest -q -p no:cacheprovider tests/unit $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check vkpy tests bench conformance
	$(VENV)/bin/ruff format --check vkpy tests bench conformance
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

bench: venv controlplane
	$(PY) bench/peers.py --pods $${PEER_PODS:-300} --vk-pods $${VK_PODS:-60} --rounds $${ROUNDS:-3} --plots docs/plots
	$(PY) bench/fresh.py --pods $${FRESH_PODS:-1000} --rounds $${ROUNDS:-3}
	$(PY) bench/nodes.py --nodes $${NODES:-1000}
	$(PY) bench/pods.py --pods $${PODS:-1000}
	$(PY) bench/kubelet_api.py
	$(PY) bench/exec.py
	$(PY) bench/restart.py --pods $${RESTART_PODS:-2000} --rounds 1

# Long benchmarks, not in `make bench` (issue 30; docs/benchmarks.md, docs/scale.md):
# 5,000 nodes from one vkpy beside kwok's 5,000 on one control plane, 10,000 pods on
# them, Leases watched for 5 minutes; one node under churn and faults for an hour.
bench-nodes-5000: venv controlplane
	$(PY) bench/nodes.py --nodes $${NODES:-5000} --pods-per-node 2 --window 300 --timeout 1200

bench-soak: venv controlplane
	$(PY) bench/soak.py --minutes $${SOAK_MINUTES:-60} --rate $${SOAK_RATE:-100}

# Not part of `make test`: builds e2e.test and runs a few hundred specs (about an hour).
conformance: venv controlplane
	$(PY) conformance/run.py --procs $${PROCS:-4} $(CONFORMANCE_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
