# Quick start: `make demo` and `make test`. Both set up .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
# One place for versions: constraints.txt (torch's too).
TORCH_VERSION ?= $(shell sed -n 's/^torch==//p' constraints.txt)
# Extra pip arguments for torch, e.g. TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
TORCH_PIP_ARGS ?=

# GitHub's published OpenAPI description (npm @octokit/openapi), which the tests' local GitHub
# validates every request against; fetched once, integrity-checked.
OPENAPI := .cache/github-openapi/api.github.com.json

.PHONY: setup demo test test-fast lint clean

setup: $(VENV)/.installed

# torch goes in first and pinned: a bare `torch` requirement would pull a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check torch==$(TORCH_VERSION) $(TORCH_PIP_ARGS)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $@

demo: setup
	@rc=0; $(VENV)/bin/perfcheck review --base examples/demo/base --head examples/demo/head \
		--out perfcheck-out/demo || rc=$$?; \
	if [ $$rc -eq 1 ]; then echo "(exit 1: the demo's head has regressions, as intended)" >&2; \
	elif [ $$rc -ne 0 ]; then exit $$rc; fi

$(OPENAPI): tests/fakegithub/fetch_spec.py
	python3 tests/fakegithub/fetch_spec.py $(dir $(OPENAPI))
	touch $@

# The suite runs spread over the cores (pytest-xdist), each worker keeping to a core of its own
# (tests/conftest.py), so that the tests that read time share their core with no neighbour test.
# Both lanes: the fast one and the end-to-end one (tests marked e2e: real reviews, real processes).
TEST_WORKERS ?= auto
test: setup $(OPENAPI)
	@start=$$(date +%s); rc=0; \
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS) || rc=$$?; \
	echo "make test: $$(( $$(date +%s) - start )) s wall time" >&2; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; exit $$rc

# The inner loop's lane: every test that starts no process (tests/conftest.py fails one that starts
# python, perfcheck, torchrun or a script without the e2e mark), about half a minute on 2 cores.
test-fast: setup $(OPENAPI)
	@start=$$(date +%s); rc=0; \
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal -m "not e2e" $(PYTEST_ARGS) || rc=$$?; \
	echo "make test-fast: $$(( $$(date +%s) - start )) s wall time" >&2; exit $$rc

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.github-actions action.yml
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.github-workflows examples/workflows/*.yml
	$(VENV)/bin/actionlint -config-file .github/actionlint.yaml examples/workflows/*.yml
	$(VENV)/bin/hadolint Dockerfile

clean:
	rm -rf $(VENV) perfcheck-out .pytest_cache .ruff_cache .cache
