# make demo : create .venv, install tfcluster with TensorFlow, run the digits example on a
#             simulated 3-task cluster (chief + 2 workers) with a worker killed mid-run; the
#             restart starts from warm spares (TensorFlow already imported).
# make docs : build the documentation site (docs/, mkdocs.yml) into site/.
# make test : create .venv, install dev dependencies (and openssh-server, iproute2, Slurm,
#             munge, docker.io and debootstrap if missing), run the whole suite.
# Both are idempotent and quiet when there is nothing to do.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PIP    := $(BIN)/python -m pip --disable-pip-version-check -q

.PHONY: demo test lint docs sysdeps venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing tfcluster and its dependencies into $(VENV) (TensorFlow CPU: about a minute)"
	@$(PIP) install -e '.[tf,dev]' 2>&1 | grep -v -e 'is ignored' -e '^$$' || true
	@$(BIN)/python -c "import launcher, worker, tensorflow, pytest" 2>/dev/null \
		|| { echo "installation failed; run: $(PIP) install -e '.[tf,dev]'"; exit 1; }
	@# tf_keras (Keras fit: its tests and examples) requires the package "tensorflow", the full build
	@# beside tensorflow-cpu: installed on its own, for the TensorFlow that is there (pyproject.toml)
	@$(PIP) install --no-deps "tf_keras==$$($(BIN)/python -m worker.examples.needs).*" 2>&1 \
		| grep -v -e 'is ignored' -e '^$$' || true
	@# as pip does for an installed package (Python would not cache it under PYTHONDONTWRITEBYTECODE)
	@$(BIN)/python -m compileall -q launcher worker >/dev/null
	@touch $@

sysdeps:
	@missing=""; \
	test -x /usr/sbin/sshd || missing="$$missing openssh-server"; \
	command -v ip >/dev/null 2>&1 || missing="$$missing iproute2"; \
	command -v dockerd >/dev/null 2>&1 || missing="$$missing docker.io"; \
	command -v debootstrap >/dev/null 2>&1 || missing="$$missing debootstrap"; \
	for p in slurmctld slurmd munged srun; do command -v $$p >/dev/null 2>&1 || \
		{ missing="$$missing slurmctld slurmd slurm-client munge"; break; }; done; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing (needed by the SSH, multi-host, Slurm and Docker tests)"; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@mkdir -p /run/sshd 2>/dev/null || true

demo: $(STAMP)
	@rm -rf runs/demo
	@echo "demo: digits on chief + 2 workers, worker:1 killed at step 600 (measured on 2 cores: 53 s of" \
		"training once TensorFlow is installed; 3 min 10 s with the install step, pip cache warm)"
	@$(BIN)/tfcluster drill cluster_specs/local-chief-2workers.yaml \
		--task worker:1 --at-step 600 --fault kill \
		--checkpoint-dir runs/demo/checkpoints --run-dir runs/demo/run

test: $(STAMP) sysdeps
	@$(BIN)/python -m pytest -q -n 3 --dist loadgroup --durations=15

lint: $(STAMP)
	@$(BIN)/ruff check launcher worker tests benchmarks
	@$(BIN)/mypy

docs: $(STAMP)
	@NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir site
	@echo "the documentation is in site/index.html (its reference generated from the code)"

clean:
	rm -rf $(VENV) runs site .pytest_cache .mypy_cache .ruff_cache
