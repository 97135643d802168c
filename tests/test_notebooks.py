"""Every notebook in nbs/ through nbdev's own test runner: one test per notebook.

The cells `nbdev-test` skips are skipped here too (the `tst_flags` of pyproject's [tool.nbdev]); set
NBDEV_FLAGS="slow gpu" to run flagged cells, as `nbdev-test --flags` does. `make test` runs `nbdev-test`
itself and leaves this file out; it is here for `pytest` alone and for IDEs.
"""

import io
import os
import sys
from pathlib import Path

import pytest
from nbdev.config import get_config
from nbdev.test import (
    test_nb as run_notebook,
)  # renamed, or pytest would collect nbdev's function as a test

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(
    p for p in (ROOT / "nbs").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts
)


def nbdev_settings():
    "(skip flags, cell timeout) as `nbdev-test` reads them from pyproject."
    cfg = get_config(ROOT)
    flags = cfg.tst_flags
    return (flags.split() if isinstance(flags, str) else list(flags)), int(
        cfg.get("cell_timeout", 600) or 600
    )


@pytest.mark.parametrize(
    "notebook",
    NOTEBOOKS,
    ids=[p.relative_to(ROOT / "nbs").with_suffix("").as_posix() for p in NOTEBOOKS],
)
def test_notebook(notebook, monkeypatch):
    skip, timeout = nbdev_settings()
    force = os.environ.get("NBDEV_FLAGS", "").split()
    # test_nb writes the failing cell's traceback to sys.__stderr__; catch it so the report shows it
    err = io.StringIO()
    monkeypatch.setattr(sys, "__stderr__", err)
    ok, _ = run_notebook(
        notebook, skip_flags=skip, force_flags=force, basepath=ROOT, cell_timeout=timeout
    )
    assert ok, f"{notebook.name} failed:\n{err.getvalue()}"
