"""`make lab`: readers step through the notebooks in JupyterLab, from the project's environment. Three chapter notebooks run
one by one in that environment's kernel, outside the reproduction driver, against a run of the ci profile in a temporary
runs root, each reading what the one before wrote; the make target names `.venv`'s `jupyter lab`; every notebook that
takes a profile reads it from `$SHOPDISTILL_PROFILE` and says at its top what of the run it reads and writes."""

import importlib.metadata
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import nbformat
import pytest

from shopdistill.core.run import PROFILE_ENV, WRITERS, Run, reads, writer_of

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"
# three consecutive chapter notebooks, each reading what the one before wrote: the sandbox, the season played on it, the
# season's traces normalised into trajectories (about 4 s, 5 s and 3 s of cells on the ci profile)
CHAIN = (
    "01_shopping_sandbox/10_the_sandbox_of_this_profile",
    "02_arena_traces/12_the_season_of_this_profile",
    "03_normalise_and_judge/04_the_trajectories_of_this_profile",
)
# a line of `reads`: "  reads    <path>: there, written by <notebook>"
READ_LINE = re.compile(r"^  (reads|may read) +(.+?): (there|MISSING)(?:, written by (\S+))?$", re.M)


def notebooks_with_parameters() -> list[Path]:
    return [
        p
        for p in sorted(NBS.rglob("*.ipynb"))
        if ".ipynb_checkpoints" not in p.parts
        and any(
            "parameters" in c.metadata.get("tags", []) for c in nbformat.read(p, as_version=4).cells
        )
    ]


def stream_text(nb) -> str:
    return "".join(
        o.get("text", "")
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "stream"
    )


def execute(path: Path, out: Path):
    "Run the notebook top to bottom as JupyterLab's kernel would (every cell, flags ignored), in its own folder; the executed copy."
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    nbformat.write(nb, out)
    return nb


@pytest.fixture
def lab_env(tmp_path, monkeypatch):
    "What `make lab PROFILE=ci` hands the kernels: the profile, with its run (and so ci's figures and LaTeX) outside the repository."
    for k in (
        "SHOPDISTILL_CHAPTER_KEY",
        "SHOPDISTILL_PROGRESS",
        "SHOPDISTILL_HOME",
        "SHOPDISTILL_CONFIGS",
    ):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv(PROFILE_ENV, "ci")
    monkeypatch.setenv(
        "SHOPDISTILL_RUNS", str(tmp_path / "runs")
    )  # where ci's figures and LaTeX go follows from its settings
    return tmp_path


def test_three_chapter_notebooks_run_one_by_one_outside_the_driver(lab_env):
    published = subprocess.run(
        ["git", "status", "--porcelain", "--", "figures", "paper/generated"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout
    run, said, seconds = Run.of("ci", root=lab_env / "runs"), {}, {}
    for name in CHAIN:
        t0 = time.time()
        nb = execute(
            NBS / f"{name}.ipynb", lab_env / f"{Path(name).name}.ipynb"
        )  # a failing cell raises here
        seconds[name] = round(time.time() - t0, 1)
        said[name] = READ_LINE.findall(stream_text(nb))
    print(seconds)
    assert run.sandbox().catalog.is_file() and run.sandbox().tasks.is_file()
    assert any(run.arena().firehose.glob("shard-*.jsonl.gz")) and run.bank().is_file()
    assert run.trajectories().summary.is_file()
    # the later notebooks said what they read, and it is there: what the notebook before wrote, in this run
    for later, earlier in zip(CHAIN[1:], CHAIN):
        lines = said[later]
        assert lines, f"{later} did not say what it reads"
        assert all(
            state == "there" and Path(p).exists() and Path(p).is_relative_to(run.path)
            for _, p, state, _ in lines
        ), lines
        assert earlier in {w for _, _, _, w in lines}, (
            f"{later} reads nothing {earlier} wrote: {lines}"
        )
    assert {p for v, p, _, _ in said[CHAIN[2]] if v == "reads"} == {str(run.arena().firehose)}
    # figures went to the run's own folder (ci does not publish), nothing of the repository's changed
    assert {"01_catalog.png", "02_race_winners.png"} <= {
        p.name for p in (lab_env / "runs" / "ci" / "figures").iterdir()
    }
    assert (
        subprocess.run(
            ["git", "status", "--porcelain", "--", "figures", "paper/generated"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout
        == published
    )


def test_the_kernel_is_the_environments_own(tmp_path):
    "The `python3` kernel JupyterLab starts from `.venv` runs `.venv`'s interpreter, with this checkout's package."
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "import sys, shopdistill; print(sys.prefix); print(shopdistill.__file__)"
            )
        ]
    )
    p = tmp_path / "k.ipynb"
    nbformat.write(nb, p)
    prefix, package = stream_text(execute(p, p)).split("\n")[:2]
    assert prefix == sys.prefix
    assert Path(package).resolve().is_relative_to(ROOT)


def test_make_lab_starts_jupyterlab_from_the_venv():
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    out = subprocess.run(
        ["make", "-n", "lab", "PROFILE=ci", "LAB_ARGS=--no-browser --port 8899"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert (
        ".venv/bin/jupyter lab --notebook-dir=nbs $root --no-browser --port 8899" in out
    )  # $root: --allow-root for root
    assert 'SHOPDISTILL_PROFILE="${d[0]}"' in out and "make reproduce PROFILE=ci" in out
    assert "extras=dev,docs,lab" in out  # make env installs the lab extra


def test_jupyterlab_is_installed_at_the_pinned_version():
    pytest.importorskip(
        "jupyterlab",
        reason="jupyterlab is not installed here: `make env` installs the lab extra "
        "(pip install -e '.[lab]')",
    )
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"][
        "lab"
    ]
    assert pins == [f"jupyterlab=={importlib.metadata.version('jupyterlab')}"]


def test_every_notebook_that_takes_a_profile_reads_it_from_the_environment_and_says_what_it_reads():
    found = notebooks_with_parameters()
    assert len(found) >= 20
    for p in found:
        cells = nbformat.read(p, as_version=4).cells
        i = next(i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", []))
        # a literal papermill can read, resolved in the next cell (`chosen_profile`: the injected one, else the environment's)
        assert re.fullmatch(r"profile = None(\s*#.*)?", cells[i].source.strip()), p
        assert "profile = chosen_profile(profile)" in cells[i + 1].source, p
        assert any(
            re.search(r"^reads\(", c.source, re.M)
            for c in cells[i + 1 : i + 5]
            if c.cell_type == "code"
        ), f"{p.relative_to(ROOT)}: no reads(...) in the cells after its parameters"


def test_each_writer_is_a_chapter_notebook():
    assert all((NBS / f"{w}.ipynb").is_file() for w in WRITERS.values()), WRITERS


def test_a_missing_input_stops_with_one_clear_error(tmp_path, capsys):
    run = Run.of("ci", root=tmp_path)
    run.sandbox().make().tasks.write_text("{}\n")
    with pytest.raises(FileNotFoundError) as e:
        reads(
            run,
            run.sandbox(),
            run.arena().firehose,
            optional=[run.trajectories()],
            writes=[run.corpus()],
        )
    msg = str(e.value)
    assert str(run.arena().firehose) in msg and str(run.sandbox().path) not in msg
    assert (
        "`make reproduce PROFILE=ci` makes it" in msg
        and "nbs/02_arena_traces/12_the_season_of_this_profile.ipynb" in msg
    )
    said = READ_LINE.findall(capsys.readouterr().out)
    assert [(v, s) for v, _, s, _ in said] == [
        ("reads", "there"),
        ("reads", "MISSING"),
        ("may read", "MISSING"),
    ]
    assert writer_of(run, run.arena().firehose) == "02_arena_traces/12_the_season_of_this_profile"
    reads(run, run.sandbox(), optional=[run.trajectories()])  # an optional input may be missing
