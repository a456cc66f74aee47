# `make demo` runs the main job, `make test` the tests; both set up .venv by themselves.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
IMAGE ?= harness-sandbox:latest
BASE_IMAGE ?= harness-base:bookworm-langs3

.PHONY: setup image test test-newest lint bench demo clean

$(BIN)/harness: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(BIN)/harness

# The bubblewrap sandboxes' Python environment (the sandbox image's pytest), made once from the index.
setup: $(BIN)/harness
	$(BIN)/harness env build --quiet >/dev/null

# The sandbox image, built on an offline base made by debootstrap when no registry is reachable (again when
# an image lacks a toolchain a language plug-in runs: cargo, go, mvn, node). It needs
# nothing of .venv, so `make -j2` builds it while pip installs. Where podman is installed, its storage gets
# a copy of Docker's build (again whenever the two differ), or, with no Docker daemon, podman builds it.
image:
	@if docker info >/dev/null 2>&1; then \
	  docker run --rm --network none --entrypoint sh $(IMAGE) -c 'cargo --version && go version && mvn -v && node --version && [ -d /usr/share/nodejs/typescript ] && [ -z "$$(ls -A /tmp)" ]' >/dev/null 2>&1 || { \
	    bash .ci/build-base-image.sh $(BASE_IMAGE) && \
	    docker build -q --build-arg BASE_IMAGE=$(BASE_IMAGE) -t $(IMAGE) . ; }; \
	elif command -v podman >/dev/null 2>&1; then \
	  podman run --rm --network none --entrypoint sh $(IMAGE) -c 'cargo --version && go version && mvn -v && node --version && [ -d /usr/share/nodejs/typescript ] && [ -z "$$(ls -A /tmp)" ]' >/dev/null 2>&1 || { \
	    ENGINE=podman bash .ci/build-base-image.sh $(BASE_IMAGE) && \
	    podman build -q --network none --pull=never --build-arg BASE_IMAGE=$(BASE_IMAGE) -t $(IMAGE) . ; }; \
	else echo "no Docker daemon: the docker backend's tests will skip (fail under CI=true)"; fi
	@if command -v podman >/dev/null 2>&1 && docker image inspect $(IMAGE) >/dev/null 2>&1; then \
	  built=$$(docker image inspect --format '{{.Id}}' $(IMAGE)); \
	  [ "sha256:$$(podman image inspect --format '{{.Id}}' $(IMAGE) 2>/dev/null)" = "$$built" ] || \
	    docker save $(IMAGE) | podman load -q; fi

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The tests on WORKERS pytest-xdist processes, a file whole on one (the longest first: tests/conftest.py),
# then the `serial` ones alone; both parts run even when the first fails.
# Each part's JUnit report goes to test-artifacts/ci/ (.ci/slowest.py reads them: where the time went).
# Four workers on 2 cores: the parallel part took 2,813 s on 4 against 3,227 s on 2, one after the other on
# one host (docs/benchmarks.md).
WORKERS ?= 4
REPORTS := test-artifacts/ci
test: setup image lint
	$(BIN)/pytest -q --durations=60 -n $(WORKERS) --dist loadfile --no-loadscope-reorder -m "not serial" \
	  --junitxml=$(REPORTS)/parallel.xml; parallel=$$?; \
	  $(BIN)/pytest -q --durations=5 -m serial --junitxml=$(REPORTS)/serial.xml; serial=$$?; \
	  [ $$parallel -eq 0 ] && [ $$serial -eq 0 ]

# Every benchmark runs even when an earlier one misses a target; the target fails if any does.
bench: setup image
	$(BIN)/pip install -q -e '.[dev,bench]'
	$(BIN)/python benchmarks/sandbox.py; sandbox=$$?; $(BIN)/python benchmarks/reset.py; reset=$$?; \
	  $(BIN)/python benchmarks/remote_sandbox.py; remote=$$?; $(BIN)/python benchmarks/languages.py; \
	  $(BIN)/python benchmarks/scratch_rebuild.py; \
	  $(BIN)/python benchmarks/learner.py; learner=$$?; \
	  $(BIN)/python benchmarks/rollout_throughput.py; rollouts=$$?; \
	  $(BIN)/python benchmarks/canary_distinguisher.py; \
	  $(BIN)/python benchmarks/synth.py && [ $$sandbox -eq 0 ] && [ $$reset -eq 0 ] && [ $$learner -eq 0 ] && \
	  [ $$rollouts -eq 0 ] && [ $$remote -eq 0 ]

# The newest Python the dependencies support (3.13, else 3.12): the tests that need no torch, on a venv of
# its own (.ci/newest_deps.py says why torch is left out). Under CI=true a missing interpreter fails.
# (pyenv's shims answer for every installed version but run only those made global: its folders are tried too)
NEWEST ?= $(shell for v in 3.13 3.12; do for p in python$$v $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$$v*/bin/python$$v; do \
  $$p -c '' >/dev/null 2>&1 && { echo $$p; exit; }; done; done)
NEWEST_VENV := .venv-newest
NEWEST_TESTS := tests/test_docs.py tests/tasks/test_expectations.py tests/tasks/test_computed.py \
  tests/tasks/test_suite.py tests/envs/test_judge.py tests/envs/test_reward.py tests/envs/test_suspicion.py \
  tests/envs/test_grade_runner.py tests/harness/rollouts/test_store.py tests/harness/test_cli_tasks.py
test-newest: setup
	@if [ -z "$(NEWEST)" ]; then echo "no python3.13 or python3.12 on PATH"; [ "$$CI" != true ]; exit $$?; fi
	test -x $(NEWEST_VENV)/bin/python || $(NEWEST) -m venv $(NEWEST_VENV)
	$(NEWEST_VENV)/bin/pip install -q --upgrade pip
	$(NEWEST_VENV)/bin/pip install -q $$($(NEWEST_VENV)/bin/python .ci/newest_deps.py)
	$(NEWEST_VENV)/bin/pip install -q --no-deps -e . >$(NEWEST_VENV)/install.log 2>&1 || \
	  { tail -40 $(NEWEST_VENV)/install.log; exit 1; }  # setuptools' pages of warnings on the suites' data folders
	$(NEWEST_VENV)/bin/python --version
	$(NEWEST_VENV)/bin/pytest -q -p no:cacheprovider -n $(WORKERS) --dist loadfile \
	  -k "not the_builtin_suite_validates" $(NEWEST_TESTS)  # the whole suite's validation: `make test`'s

demo: setup image
	$(BIN)/harness demo --out runs/demo-$$(date +%Y%m%d-%H%M%S)

clean:
	rm -rf $(VENV) $(NEWEST_VENV) .mypy_cache .ruff_cache .pytest_cache
