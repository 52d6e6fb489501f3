# The two entry points (see README): `make test` and `make demo`.
# Heavy builds are cached outside the repo in ~/.cache/kvant (override with KVANT_CACHE).
SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -euo pipefail -c

VENV_CMD := bash hack/venv.sh

.PHONY: test demo demo-down tools venv lint unit integration crds clean-cache

tools:
	@start=$$SECONDS; bash hack/toolchain.sh; echo "[make] binaries step took $$((SECONDS-start))s"

venv:
	@start=$$SECONDS; $(VENV_CMD) >/dev/null; echo "[make] venv step took $$((SECONDS-start))s"

lint: venv
	@VENV=$$($(VENV_CMD)); cd "$(CURDIR)"
	$$VENV/bin/ruff check .
	$$VENV/bin/ruff format --check .
	$$VENV/bin/mypy

# The whole suite: lint, unit, integration (real apiserver) and e2e (local cluster).
# Two lanes at once, the host-only unit tests beside the cluster tests (hack/test_suite.py); the
# failures of both are listed again last (hack/failures.py), after the interpreter's own exit output.
test: tools venv lint
	@VENV=$$($(VENV_CMD)); cd "$(CURDIR)"; $$VENV/bin/python -m hack.test_suite "$$VENV" $(PYTEST_ARGS)

unit: venv
	@VENV=$$($(VENV_CMD)); $$VENV/bin/python -m pytest -p no:cacheprovider -m "not cluster" tests/unit $(PYTEST_ARGS)

integration: tools venv
	@VENV=$$($(VENV_CMD)); $$VENV/bin/python -m pytest -p no:cacheprovider -m cluster tests/integration $(PYTEST_ARGS)

# Brings up the local cluster and leaves it running.
demo: tools venv
	@VENV=$$($(VENV_CMD)); bash hack/demo.sh "$$VENV"

demo-down: venv
	@VENV=$$($(VENV_CMD)); $$VENV/bin/kvant dev down

clean-cache:
	rm -rf "$${KVANT_CACHE:-$$HOME/.cache/kvant}"
