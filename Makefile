# The two commands a user needs: `make up` and `make test`. Everything else is a part of them.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
CLUSTER := PYTHON=$(abspath $(PY)) cluster/cluster.sh
export PATH := /var/lib/openblox/bin:$(abspath $(VENV))/bin:$(PATH)
PYTEST := $(PY) -m pytest -p no:cacheprovider
# The embedded-cluster suite, one command line for `make cluster-tests` and `make test`.
CLUSTER_PYTEST := $(PYTEST) tests/cluster -q --durations=25

.PHONY: help up down clean test lint unit cluster-tests conformance bench install venv operator-image kind-up kind-test kind-down fuzz

help:
	@echo "make up           start the embedded cluster (or use KUBECONFIG), install the operator, print 42"
	@echo "make test         lint, unit tests, end-to-end tests and conformance on the embedded and kind clusters"
	@echo "make down         stop the embedded cluster (its objects and the caches kept)"
	@echo "make clean        stop it and delete every object it held (caches kept)"
	@echo "make bench        benchmarks; results under docs/benchmarks/"
	@echo "make conformance  the adversarial conformance suite against the cluster"
	@echo "make kind-up      a three-node kind cluster built here, openblox installed, print 42"
	@echo "make kind-test    the tests on that kind cluster (creates it the first time)"
	@echo "make fuzz         the larger fuzz run; figures in docs/fuzzing.md"

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev,operator,bench]'
	touch $@

venv: $(VENV)/.installed

# Debian packages and the source builds (Kubernetes, etcd, kube-router, gVisor): cached.
install: venv
	$(CLUSTER) install

up: install
	$(PY) cluster/embedded.py up

down:
	$(CLUSTER) down

# The one way to wipe the embedded cluster's state; it says what it deletes.
clean:
	$(CLUSTER) reset

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

unit: venv
	$(PYTEST) tests/unit -q
	cd node-agent && go vet ./... && go test ./...

cluster-tests: install
	$(CLUSTER_PYTEST)

conformance: install
	$(PYTEST) --pyargs openblox.conformance -q

# The embedded suite, then the kind part. The kind part's own builds run niced in the
# background during the embedded suite, so a new machine's `.ci/run` stays inside its
# 70-minute budget (docs/kind.md, "make test and the 70-minute budget"); the kind cluster
# is created only after the embedded suite, and deleted at the end, pass or fail.
test: lint unit install
	PYTHON=$(abspath $(PY)) cluster/kind/prebuild.sh start
	$(CLUSTER_PYTEST) || { cluster/kind/prebuild.sh stop; exit 1; }
	cluster/kind/prebuild.sh wait
	$(PYTEST) tests/kind -q --durations=15 || { cluster/kind/kind.sh down; exit 1; }
	cluster/kind/kind.sh down

# The three-node kind cluster (docs/kind.md): node images built here, nothing pulled.
kind-up: install
	PYTHON=$(abspath $(PY)) cluster/kind/kind.sh install

kind-test: install
	$(PYTEST) tests/kind -q --durations=15

kind-down:
	cluster/kind/kind.sh down

bench: install
	$(PY) -m bench $(BENCH_ARGS)

# Seeded; takes the cluster lock for its cluster part only.
fuzz: install
	$(PY) -m tests.fuzz $(FUZZ_ARGS)
