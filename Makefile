# make demo : create .venv, install tfcluster with TensorFlow, run the digits example on a
#             simulated 3-task cluster (chief + 2 workers) with a worker killed mid-run.
# make test : create .venv, install dev dependencies (and openssh-server if missing), run the suite.
# Both are idempotent and quiet when there is nothing to do.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PIP    := $(BIN)/python -m pip --disable-pip-version-check -q

.PHONY: demo test lint sshd venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing tfcluster and its dependencies into $(VENV) (TensorFlow CPU: about a minute)"
	@$(PIP) install -e '.[tf,dev]' 2>&1 | grep -v -e 'is ignored' -e '^$$' || true
	@$(BIN)/python -c "import launcher, worker, tensorflow, pytest" 2>/dev/null \
		|| { echo "installation failed; run: $(PIP) install -e '.[tf,dev]'"; exit 1; }
	@touch $@

sshd:
	@command -v sshd >/dev/null 2>&1 || test -x /usr/sbin/sshd || { \
		echo "installing openssh-server (needed by the SSH tests)"; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null; }

demo: $(STAMP)
	@rm -rf runs/demo
	@$(BIN)/tfcluster drill cluster_specs/local-chief-2workers.yaml \
		--task worker:1 --at-step 150 --fault kill \
		--checkpoint-dir runs/demo/checkpoints --run-dir runs/demo/run

test: $(STAMP) sshd
	@$(BIN)/python -m pytest -q

lint: $(STAMP)
	@$(BIN)/ruff check launcher worker tests benchmarks
	@$(BIN)/mypy

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
