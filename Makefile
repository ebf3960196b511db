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
# pip compiles every installed module to bytecode one file at a time; `setup` compiles site-packages on every core
# afterwards, so that attnbench run outside make finds the bytecode even where PYTHONDONTWRITEBYTECODE is set. The few
# files that are not valid Python 3.11 (torch ships samples of newer syntax) are left as pip leaves them.
PIP_INSTALL := $(BIN)/pip install --quiet --no-compile
# $(call compile_site,FOLDER): the bytecode of site-packages' FOLDER (all of site-packages when empty), on every core
compile_site = $(BIN)/python -m compileall -qq -j 0 "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/$(1)" || true
# make's own commands write the bytecode of each module they import, whatever the environment says: no process
# compiles attnbench's sources or rewrites the test modules' asserts again where an earlier one did. The test install
# compiles torch alone ahead, on every core (every test process imports it, and the first ones start together, each
# compiling the same modules); the rest of site-packages, about 60% of it unread by a test session, is compiled as
# imported.
unexport PYTHONDONTWRITEBYTECODE
# The tests' temporary files (their runs, Inductor's caches and compiled kernels, the wheel's environment) live in
# memory where /dev/shm has 4 GiB free, so the tests do not wait for a disk (docs/development.md has the figures);
# elsewhere they go where TMPDIR says.
TEST_TMPDIR := $(shell $(PYTHON) -c "import os; s = os.statvfs('/dev/shm'); print('/dev/shm' if s.f_bavail * s.f_frsize >= 4 << 30 else '')" 2>/dev/null)
ifneq ($(TEST_TMPDIR),)
test check fuzz mutation: export TMPDIR := $(TEST_TMPDIR)
endif

.PHONY: setup bench test check quick clean mutation fuzz

setup: $(VENV)/.installed

# `setup` installs what a run needs (attnbench and its dependencies); `test` installs attnbench with the test extra
# (pytest and its plugins, ruff, mkdocs, and the libraries whose real refusals the tests exercise, e.g. xformers)
# in one pip call, so a newcomer's `make bench` installs none of them and a fresh clone's `make test` builds the
# editable install and resolves the dependencies once.
define new_venv
	$(PYTHON) -m venv $(VENV)
	@if ! command -v nvidia-smi >/dev/null 2>&1 && ! $(BIN)/python -c "import torch" 2>/dev/null; then \
		echo "no NVIDIA driver found: installing a CPU build of torch ($(TORCH_CPU_SPEC))"; \
		$(PIP_INSTALL) $(TORCH_CPU_SPEC); \
	fi
endef

$(VENV)/.installed: pyproject.toml
	$(new_venv)
	$(PIP_INSTALL) -e .
	$(call compile_site,)
	@touch $@

$(VENV)/.installed-test: pyproject.toml
	$(new_venv)
	$(PIP_INSTALL) -e '.[test]'
	$(call compile_site,torch)
	@touch $@ $(VENV)/.installed

bench: setup
	$(BIN)/attnbench run $(SUITE) $(ARGS)

quick: setup
	$(BIN)/attnbench run suites/quick.yaml $(ARGS)

# The lint, the tests (the built wheel installed and run in a fresh environment among them, tests/test_packaging.py),
# the Dockerfile lint and the manual (docs/) built strictly so a broken link or anchor fails. The tests run on every
# core (pytest-xdist, one worker per core; tests that must share a worker name an xdist_group), then the few marked
# `serial` alone, because they compare real timings that a second busy core would disturb (tests/conftest.py
# collects only their files).
test: $(VENV)/.installed-test
	$(BIN)/ruff check attnbench scripts tests
	$(BIN)/python -m pytest -q -p no:cacheprovider -n auto --dist loadgroup -m "not serial"
	$(BIN)/python -m pytest -q -p no:cacheprovider -m serial
	$(BIN)/hadolint Dockerfile
	site=$$(mktemp -d) && $(BIN)/mkdocs build --strict --site-dir "$$site"; rc=$$?; rm -rf "$$site"; exit $$rc

# The inner loop, in about a minute: the lint, then every test not marked `slow` (over a second or so: a real suite,
# a subprocess, a compile, a browser), `serial` or `slurm`, on every core, stopping at the first failure.
check: $(VENV)/.installed-test
	$(BIN)/ruff check attnbench scripts tests
	$(BIN)/python -m pytest -q -p no:cacheprovider -n auto --dist loadgroup -x -m "not slow and not serial and not slurm"

# The readers' fuzz tests (tests/test_fuzz_readers.py) with new random examples, FUZZ_EXAMPLES of each (make test
# runs 20 of each, the same every time); FUZZ_CHARTS=1 draws the report's charts too (about 2 s of CPU a report).
FUZZ_EXAMPLES ?= 1000
FUZZ_CHARTS ?= 0
fuzz: $(VENV)/.installed-test
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) FUZZ_CHARTS=$(FUZZ_CHARTS) $(BIN)/python -m pytest -q -p no:cacheprovider \
		tests/test_fuzz_readers.py

# Mutation testing with mutmut (configured in pyproject.toml), not part of `make test` or CI: every mutant
# of check, timing, case, runner, inputs and the backends, each against the tests that reach its function.
# One thread per child (two children on two cores; OpenMP threads are not fork-safe) and 4 GB of address
# space each, so a mutant that loops while appending fails fast instead of filling the machine's memory.
# MUTANTS narrows the run, e.g. make mutation MUTANTS='attnbench.verify.check.*'
MUTANTS ?=
mutation: $(VENV)/.installed-test
	$(BIN)/python -c "import mutmut" 2>/dev/null || $(BIN)/pip install --quiet -e '.[test,dev]'
	rm -rf mutants
	ulimit -v 4000000; OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/mutmut run --max-children 2 $(MUTANTS) > mutants.log 2>&1 \
		|| { tail -n 20 mutants.log; exit 1; }
	$(BIN)/python scripts/mutation_scores.py

clean:
	rm -rf $(VENV) build dist *.egg-info mutants mutants.log
