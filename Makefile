# One entry point per job. Every target installs what it needs first, so a
# fresh clone needs only python3 (3.11+), node and npm on the PATH.
SHELL := /bin/bash
UV_VERSION := 0.13.8
UV := $(shell command -v uv 2>/dev/null || echo python3 -m uv)
PYTEST_ARGS ?=

.PHONY: setup test demo lint faults bench synth clean

setup: .venv/.synced node_modules/.installed

.venv/.synced: pyproject.toml uv.lock
	@$(UV) --version >/dev/null 2>&1 || python3 -m pip install -q "uv==$(UV_VERSION)"
	$(UV) sync --frozen --all-extras
	@touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

test: setup
	$(UV) run --frozen pytest -n 2 $(PYTEST_ARGS)

demo: setup
	$(UV) run --frozen ddbtx demo

lint: setup
	$(UV) run --frozen ruff check .
	$(UV) run --frozen ruff format --check .
	$(UV) run --frozen mypy

faults: setup
	$(UV) run --frozen python -m tests.faults.run $(FAULT_ARGS)

bench: setup
	$(UV) run --frozen python -m benchmarks.requests

synth: setup
	$(UV) run --frozen python app.py

clean:
	rm -rf .venv node_modules cdk.out .pytest_cache .mypy_cache .ruff_cache

# Real DynamoDB in your account (needs credentials; prints the plan, runs with --yes):
#   make test-aws AWS_ARGS=--yes     or     DDBTX_AWS_TESTS=1 make test-aws
.PHONY: test-aws
test-aws: setup
	$(UV) run --frozen python -m tests.aws.run $(AWS_ARGS)
