"""Where a chapter writes its figures and tables follows from the profile alone, whoever runs the notebook.

A profile that publishes (smoke, full) writes the repository's `figures/` and `paper/generated/`; one that does not (ci)
writes `runs/<profile>/figures` and `runs/<profile>/generated`. The papermill tests run a chapter notebook as a reader
would, with papermill and no driver: the reviewer's `papermill nbs/... out.ipynb -p profile ci` must leave the committed
folders as they are. The publishing case runs in a temporary project (`$SHOPDISTILL_HOME`), never in this checkout.
"""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from shopdistill.core.run import Run, figures_dir, generated_dir, repo_root
from shopdistill.reproduce.settings import load_config

from test_reproduce import project, write_nb  # noqa: F401  (the tiny project)
from test_reproduce_records import RESULTS

ROOT = Path(__file__).resolve().parents[1]
RULES = (
    ROOT / "nbs" / "00_arena_mechanics" / "00_rules.ipynb"
)  # writes figures/00_challenge_margin.* from the settings alone
PUBLISHED = ("figures", "paper/generated")


# ---- the decision, on the settings object -------------------------------------------------------------------------


def test_a_profile_that_does_not_publish_writes_into_its_own_run(tmp_path, monkeypatch):
    monkeypatch.setenv("SHOPDISTILL_RUNS", str(tmp_path / "runs"))
    ci = load_config("ci")
    assert not ci.publish
    assert (ci.figures, ci.generated) == (
        tmp_path / "runs" / "ci" / "figures",
        tmp_path / "runs" / "ci" / "generated",
    )
    assert (
        (ci.figures, ci.generated) == (ci.run.figures, ci.run.generated)
        and ci.figures.is_dir()
        and ci.generated.is_dir()
    )
    (tmp_path / "mine.yaml").write_text(
        "extends: smoke\npublish: false\n"
    )  # a profile of one's own, by its path
    mine = load_config(tmp_path / "mine.yaml")
    assert (mine.figures, mine.generated) == (
        tmp_path / "runs" / "mine" / "figures",
        tmp_path / "runs" / "mine" / "generated",
    )


def test_a_profile_that_publishes_writes_the_repository_s_folders(tmp_path, monkeypatch):
    for name in ("smoke", "full"):
        s = load_config(name)
        assert s.publish and (s.figures, s.generated) == (
            repo_root() / "figures",
            repo_root() / "paper" / "generated",
        )
    smoke = load_config("smoke")
    monkeypatch.setenv(
        "SHOPDISTILL_HOME", str(tmp_path)
    )  # another repository: its own published folders
    assert (smoke.figures, smoke.generated) == (
        tmp_path / "figures",
        tmp_path / "paper" / "generated",
    )
    assert (figures_dir(), generated_dir()) == (smoke.figures, smoke.generated)


def test_the_variables_that_used_to_move_the_folders_move_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SHOPDISTILL_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("SHOPDISTILL_FIGURES", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("SHOPDISTILL_GENERATED", str(tmp_path / "elsewhere"))
    assert load_config("ci").figures == tmp_path / "runs" / "ci" / "figures"
    assert load_config("smoke").generated == repo_root() / "paper" / "generated" == generated_dir()
    assert not (tmp_path / "elsewhere").exists()


# ---- papermill alone, as a reader runs one chapter ----------------------------------------------------------------


def user_env(**extra) -> dict:
    "A user's environment: nothing of the driver's (no SHOPDISTILL_* variable), plus `extra`."
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOPDISTILL_")}
    return {**env, **{k: str(v) for k, v in extra.items()}}


def papermill(notebook: Path, out: Path, profile, env: dict, cwd: Path = ROOT):
    "`papermill NOTEBOOK OUT -p profile PROFILE`, from `cwd`; fails the test, with papermill's output, unless it exits 0."
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "papermill",
            str(notebook),
            str(out),
            "-p",
            "profile",
            str(profile),
            "--kernel",
            "python3",
            "--no-progress-bar",
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def snapshot(root: Path) -> dict:
    "path -> (sha256, mtime, inode) of every file in `root`'s published folders: a rewrite with the same bytes shows too."
    out = {}
    for folder in PUBLISHED:
        for p in sorted((root / folder).rglob("*")):
            if p.is_file():
                st = p.stat()
                out[str(p.relative_to(root))] = (
                    hashlib.sha256(p.read_bytes()).hexdigest(),
                    st.st_mtime_ns,
                    st.st_ino,
                )
    return out


def git_status(root: Path) -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--", *PUBLISHED],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.fixture
def untouched_checkout():
    "Fails the test if it changed anything in this checkout's figures/ or paper/generated/ (contents, times or files)."
    before, status = snapshot(ROOT), git_status(ROOT)
    yield
    assert snapshot(ROOT) == before, "the checkout's published folders changed"
    assert git_status(ROOT) == status == "", status


def test_papermill_with_the_ci_profile_writes_into_the_run_not_the_checkout(
    tmp_path, untouched_checkout
):
    # the reviewer's command, on a chapter that writes a figure from the settings alone
    papermill(RULES, tmp_path / "out.ipynb", "ci", user_env(SHOPDISTILL_RUNS=tmp_path / "runs"))
    figs = Run.of("ci", root=tmp_path / "runs").figures
    assert {p.name for p in figs.iterdir()} == {
        "00_challenge_margin.png",
        "00_challenge_margin.pdf",
    }
    said = "".join(
        o.get("text", "")
        for c in nbformat.read(tmp_path / "out.ipynb", as_version=4).cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    )
    assert (
        f"writes   {figs}/00_challenge_margin.*" in said
    )  # what the notebook says it writes is where it wrote


def test_papermill_with_a_profile_file_that_does_not_publish(project, tmp_path, untouched_checkout):
    # a results chapter (a figure and a table) of a tiny project, and a profile given by its path
    write_nb(project / "nbs" / "02_results.ipynb", RESULTS)
    profile = tmp_path / "mine.yaml"
    profile.write_text(f"extends: {project / 'configs' / 'tiny.yaml'}\npublish: false\n")
    papermill(
        project / "nbs" / "02_results.ipynb",
        tmp_path / "out.ipynb",
        profile,
        user_env(SHOPDISTILL_HOME=project),
        cwd=project / "nbs",
    )
    run = Run.of("mine", root=project / "runs")
    assert (run.figures / "f.png").read_bytes() == b"figure of 10 products" and (
        run.generated / "t.tex"
    ).read_text() == "seed 7"
    assert snapshot(project) == {}  # the tiny project's own published folders stay empty


def test_papermill_with_a_publishing_profile_writes_the_published_folders(
    project, tmp_path, untouched_checkout
):
    # as the driver does for smoke: the repository's figures/ and paper/generated/; here the tiny project's
    write_nb(project / "nbs" / "02_results.ipynb", RESULTS)
    (project / "configs" / "pub.yaml").write_text("extends: tiny\npublish: true\n")
    env = user_env(SHOPDISTILL_HOME=project)
    papermill(
        project / "nbs" / "02_results.ipynb",
        tmp_path / "results.ipynb",
        "pub",
        env,
        cwd=project / "nbs",
    )
    papermill(
        RULES, tmp_path / "rules.ipynb", "pub", env, cwd=project / "nbs"
    )  # a real chapter, publishing
    assert set(snapshot(project)) == {
        "figures/f.png",
        "figures/00_challenge_margin.png",
        "figures/00_challenge_margin.pdf",
        "paper/generated/t.tex",
    }
    assert (project / "paper" / "generated" / "t.tex").read_text() == "seed 7"
    assert (
        not (project / "runs" / "pub" / "figures").exists()
        and not (project / "runs" / "pub" / "generated").exists()
    )
