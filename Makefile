# One entry point per job. Every target installs what it needs first, so a fresh
# clone needs only python3 (3.11+, with its venv module), node (22+; dynalite alone runs on 20) and npm.
#
# What gets installed, and where (all inside this directory, all gitignored):
#   .tools/        a private venv holding uv $(UV_VERSION); the system python3 is never
#                  changed (no `pip install` into it, no --break-system-packages)
#   .venv/         the locked Python environment (uv.lock), made by that uv
#   node_modules/  dynalite (the second emulator) and the AWS CDK CLI 2.x (package-lock.json)
SHELL := /bin/bash
PYTHON ?= python3
UV_VERSION := 0.13.8
TOOLS := .tools
UV := $(TOOLS)/bin/uv
RUN := $(UV) run --frozen
CDK := $(RUN) node_modules/.bin/cdk
PYTEST_ARGS ?=
CDK_ARGS ?=

.PHONY: setup test faults fault-figures isolation explore demo wheel-demo lint bench synth diff deploy bootstrap destroy clean

setup: .venv/.synced node_modules/.installed

# The stamp names the version, so changing UV_VERSION reinstalls uv.
$(TOOLS)/.uv-$(UV_VERSION):
	@rm -rf $(TOOLS)
	@$(PYTHON) -m venv $(TOOLS) || { rm -rf $(TOOLS); echo "make: '$(PYTHON) -m venv' failed; install Python's venv module (Debian/Ubuntu: sudo apt install python3-venv) and run make again" >&2; exit 1; }
	$(TOOLS)/bin/python -m pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"
	@touch $@

.venv/.synced: pyproject.toml uv.lock $(TOOLS)/.uv-$(UV_VERSION)
	$(UV) sync --frozen --all-extras
	@touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

test: setup
	$(RUN) pytest -n 2 $(PYTEST_ARGS)

# The slow tests (stress runs, the other half of each fault-at-every-call product, the
# differential fuzzer at 6,000 examples), which `make test` leaves out (the 15 slowest named),
# then the fault harness's figures table (`make fault-figures`). CI runs only the figures:
# the slow tests take 20 minutes here and twice that on CI's machine.
faults: setup
	$(RUN) pytest -n 2 -m slow --durations=15 $(PYTEST_ARGS)
	$(MAKE) --no-print-directory fault-figures

fault-figures: setup
	$(RUN) python -m tests.faults.run --skip listappend $(FAULT_ARGS)

# Isolation proven by histories (docs/isolation.md): list-append histories with every read
# API, every ending and crashes, checked for G0, G1a/b/c, G-single and G2 against the claims
# table; both emulators at once (one process each). Prints the figures; non-zero on any anomaly.
# dynalite runs three times moto's histories in about the same time, so that the run covers
# 1,000 writer commits without taking longer.
ISOLATION_HISTORIES_MOTO ?= 6
ISOLATION_HISTORIES_DYNALITE ?= 18
# ISOLATION_HISTORIES_MOTO=0 leaves moto out (CI: its histories run in-process, several
# minutes each on CI's machine; `make test` checks a small one on each emulator).
isolation: setup
	mot=0; if [ "$(ISOLATION_HISTORIES_MOTO)" != 0 ]; then $(RUN) python -m tests.faults.run --only listappend --backend moto --histories $(ISOLATION_HISTORIES_MOTO) $(ISOLATION_ARGS) & moto=$$!; fi; \
	$(RUN) python -m tests.faults.run --only listappend --backend dynalite --histories $(ISOLATION_HISTORIES_DYNALITE) $(ISOLATION_ARGS); dyn=$$?; \
	if [ -n "$${moto:-}" ]; then wait $$moto; mot=$$?; fi; exit $$(( dyn || mot ))

# Seeded interleavings of 2-4 coordinators, a sweeper and a recover on one transaction,
# with a fault, on both emulators at once (one process each); on dynalite, first every
# schedule of the `pairs` configuration within 2 preemptions (systematic mode; 10 minutes,
# so CI sets EXPLORE_SYSTEMATIC= to leave it to `make test`'s smaller bound). The seed is
# the commit's, so each commit explores new schedules and any finding replays from its
# printed line.
EXPLORE_SCHEDULES ?= 4000
EXPLORE_SCHEDULES_DYNALITE ?= 1000
EXPLORE_SYSTEMATIC ?= --exhaustive --config pairs --preemptions 2
EXPLORE_SEED ?= $(shell printf '%d' 0x$$(git rev-parse --short=7 HEAD 2>/dev/null || echo 1))
explore: setup
	$(RUN) python -m tests.explore --backend moto --schedules $(EXPLORE_SCHEDULES) --seed $(EXPLORE_SEED) $(EXPLORE_ARGS) & moto=$$!; \
	sys=0; if [ -n "$(EXPLORE_SYSTEMATIC)" ]; then $(RUN) python -m tests.explore --backend dynalite $(EXPLORE_SYSTEMATIC) $(EXPLORE_ARGS); sys=$$?; fi; \
	$(RUN) python -m tests.explore --backend dynalite --schedules $(EXPLORE_SCHEDULES_DYNALITE) --seed $(EXPLORE_SEED) $(EXPLORE_ARGS); dyn=$$?; \
	wait $$moto; mot=$$?; exit $$(( sys || dyn || mot ))

# The demo runs on moto, in-process: it needs neither npm nor the dev environment, only
# ddbtx with its demo extra, at the versions uv.lock pins, in a venv of its own.
DEMO_VENV := $(TOOLS)/demo-venv
$(DEMO_VENV)/.installed: pyproject.toml uv.lock $(TOOLS)/.uv-$(UV_VERSION)
	rm -rf $(DEMO_VENV)
	$(UV) venv --quiet --python $(PYTHON) $(DEMO_VENV)
	$(UV) export --quiet --frozen --extra demo --no-default-groups --no-emit-project --no-hashes -o $(DEMO_VENV)/requirements.txt
	$(UV) pip install --quiet --python $(DEMO_VENV)/bin/python -r $(DEMO_VENV)/requirements.txt
	$(UV) pip install --quiet --python $(DEMO_VENV)/bin/python --no-deps -e .
	@touch $@

demo: $(DEMO_VENV)/.installed
	$(DEMO_VENV)/bin/ddbtx demo

# What `pip install '.[demo]'` (from a checkout) gives a user: the wheel, in a fresh venv, runs the demo.
wheel-demo: setup
	rm -rf dist $(TOOLS)/wheel-venv
	$(UV) build --wheel --out-dir dist
	$(UV) venv --quiet --python $(PYTHON) $(TOOLS)/wheel-venv
	$(UV) pip install --quiet --python $(TOOLS)/wheel-venv/bin/python "$$(ls dist/ddbtx-*.whl)[demo]"
	cd /tmp && $(CURDIR)/$(TOOLS)/wheel-venv/bin/ddbtx demo --workers 2 --transfers 3

lint: setup
	$(RUN) ruff check .
	$(RUN) ruff format --check .
	$(RUN) mypy
	@# Each handler alone: both are modules named `handler`, which one mypy run refuses.
	for handler in functions/*/handler.py; do $(RUN) mypy "$$handler" || exit 1; done
	@# The core's layers and no import cycle ([tool.importlinter] in pyproject.toml), then
	@# no module reaching into another's private names (tests/lint/private_names.py).
	PYTHONPATH=shared/python $(RUN) lint-imports --no-cache
	$(RUN) python -m tests.lint.private_names

bench: setup
	$(RUN) python -m benchmarks.requests

# The CDK CLI pinned in package.json, run inside the project environment (cdk.json
# runs `python3 app.py`, which needs aws_cdk from .venv). Options: CDK_ARGS="-c k=v".
synth: setup
	$(CDK) synth --quiet --no-notices $(CDK_ARGS)
	@node -e 'const m = require("./cdk.out/manifest.json"); for (const [name, a] of Object.entries(m.artifacts)) if (a.type === "aws:cloudformation:stack") console.log(`template: cdk.out/$${a.properties.templateFile} (stack $${name})`)'

# Template checks by tools that are not ours, on what `make synth` wrote: cfn-lint
# (.cfnlintrc.yaml) and checkov (.checkov.yaml). Each has a pinned venv of its own under
# .tools/ (checkov's dependencies clash with the locked environment). Any finding fails;
# a suppression carries its reason in the template (checkov, infra/checks.py) or in the
# config file. Run `make synth` first (CI does).
CFN_LINT_VERSION := 1.58.0
CHECKOV_VERSION := 3.3.30
CFN_LINT := $(TOOLS)/cfn-lint-$(CFN_LINT_VERSION)/bin/cfn-lint
CHECKOV := $(TOOLS)/checkov-$(CHECKOV_VERSION)/bin/checkov

$(CFN_LINT): $(TOOLS)/.uv-$(UV_VERSION)
	rm -rf $(TOOLS)/cfn-lint-$(CFN_LINT_VERSION)
	$(UV) venv --quiet --python $(PYTHON) $(TOOLS)/cfn-lint-$(CFN_LINT_VERSION)
	$(UV) pip install --quiet --python $(TOOLS)/cfn-lint-$(CFN_LINT_VERSION)/bin/python "cfn-lint==$(CFN_LINT_VERSION)"

$(CHECKOV): $(TOOLS)/.uv-$(UV_VERSION)
	rm -rf $(TOOLS)/checkov-$(CHECKOV_VERSION)
	$(UV) venv --quiet --python $(PYTHON) $(TOOLS)/checkov-$(CHECKOV_VERSION)
	$(UV) pip install --quiet --python $(TOOLS)/checkov-$(CHECKOV_VERSION)/bin/python "checkov==$(CHECKOV_VERSION)"

.PHONY: check-template
check-template: $(CFN_LINT) $(CHECKOV)
	@# Synthesizes first when there is no template yet (CI's order, synth then this, keeps one synth).
	@ls cdk.out/*.template.json >/dev/null 2>&1 || $(MAKE) --no-print-directory synth
	$(CFN_LINT) --config-file .cfnlintrc.yaml -- cdk.out/*.template.json
	for template in cdk.out/*.template.json; do $(CHECKOV) --config-file .checkov.yaml -f "$$template" || exit 1; done

diff deploy bootstrap destroy: setup
	$(CDK) $@ $(CDK_ARGS)

clean:
	rm -rf .venv .tools node_modules cdk.out dist docs/_build .pytest_cache .mypy_cache .ruff_cache .hypothesis tests/.hypothesis

# Real DynamoDB in your account (needs credentials; prints the plan, runs with --yes):
#   make test-aws AWS_ARGS=--yes     or     DDBTX_AWS_TESTS=1 make test-aws
.PHONY: test-aws
test-aws: setup
	$(RUN) python -m tests.aws.run $(AWS_ARGS)

# The documentation site (docs/): Sphinx, MyST and furo from the locked environment.
# -W --keep-going: every warning is an error, and all of them are listed at once.
.PHONY: docs
docs: .venv/.synced
	rm -rf docs/_build
	$(RUN) sphinx-build -W --keep-going -q -b html docs docs/_build/html
