# One command to set up and run the main job, one to set up and run the tests.
# Each creates .venv on first use. On a machine without an NVIDIA driver, torch is installed first
# from TORCH_CPU_SPEC (a CPU build where the machine has one on hand), so the install does not pull
# a multi-GB CUDA build; with a GPU, torch comes as the package index serves it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_CPU_SPEC ?= torch==2.13.0
SUITE ?= suites/long.yaml
ARGS ?=

.PHONY: setup bench test quick clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@if ! command -v nvidia-smi >/dev/null 2>&1 && ! $(BIN)/python -c "import torch" 2>/dev/null; then \
		echo "no NVIDIA driver found: installing a CPU build of torch ($(TORCH_CPU_SPEC))"; \
		$(BIN)/pip install --quiet $(TORCH_CPU_SPEC); \
	fi
	$(BIN)/pip install --quiet -e '.[test]'
	@touch $@

bench: setup
	$(BIN)/attnbench run $(SUITE) $(ARGS)

quick: setup
	$(BIN)/attnbench run suites/quick.yaml $(ARGS)

# The tests, the Dockerfile lint, and the built wheel installed and run in a fresh environment.
test: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider
	$(BIN)/hadolint Dockerfile
	TORCH_CPU_SPEC="$(TORCH_CPU_SPEC)" scripts/check-package.sh $(BIN)/python

clean:
	rm -rf $(VENV) build dist *.egg-info
