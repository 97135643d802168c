"""What a reproduction leaves behind when it is killed, and what the results it publishes say about where they came from.

Each test builds a tiny project in a temporary folder (the fixtures of `test_reproduce.py`) and runs the real driver:
papermill with real `python3` kernels, and for interruptions the real command in a child process sent a real signal.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import yaml

from shopdistill.core.run import Run, figures_dir, generated_dir
from shopdistill.reproduce.cli import main
from shopdistill.reproduce.driver import check_published, published_folders, reproduce
from shopdistill.reproduce.settings import load_config

from test_reproduce import project, run, statuses, write_nb  # noqa: F401  (the tiny project)

# waits while the file `hold` exists in the runs folder, after saying it started: a notebook a test can interrupt at will
HOLDER = [
    nbformat.v4.new_code_cell(
        "import os, pathlib, time\n"
        "runs = pathlib.Path(os.environ['SHOPDISTILL_RUNS'])\n"
        "(runs / 'started').write_text('yes')\n"
        "while (runs / 'hold').exists(): time.sleep(0.2)"
    )
]

# a results chapter: a figure into the profile's figures folder, a table into its generated one, both made from its settings
RESULTS_PARAMS = nbformat.v4.new_code_cell('profile = "tiny"')
RESULTS_PARAMS.metadata["tags"] = ["parameters"]
RESULTS = [
    RESULTS_PARAMS,
    nbformat.v4.new_code_cell(
        "from shopdistill.reproduce.settings import load_config\n"
        "cfg = load_config(profile)\n"
        "(cfg.figures / 'f.png').write_bytes(b'figure of %d products' % cfg.catalog.n_products)\n"
        "(cfg.generated / 't.tex').write_text(f'seed {cfg.seed}')"
    ),
]


def _start(project: Path, *args) -> subprocess.Popen:
    "`shopdistill reproduce --profile tiny ARGS` on the tiny project, in a child process of its own, as a user's terminal would start it."
    env = {
        **os.environ,
        "SHOPDISTILL_HOME": str(project),
        "SHOPDISTILL_CONFIGS": str(project / "configs"),
        "SHOPDISTILL_RUNS": str(project / "runs"),
        "TERM": "dumb",
    }
    # SIGINT as a terminal's foreground process has it: a shell without job control (CI's) starts background jobs ignoring it
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "shopdistill.reproduce.cli",
            "reproduce",
            "--profile",
            "tiny",
            "--no-html",
            *args,
        ],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _interrupt_inside_the_holder(project: Path, sig, *args) -> tuple[int, str, str]:
    "Start a reproduction, wait until it is inside 02_holder, send `sig`; (exit status, stdout, stderr)."
    runs = project / "runs"
    runs.mkdir(exist_ok=True)
    (runs / "started").unlink(missing_ok=True)
    (runs / "hold").write_text("")
    p = _start(project, *args)
    deadline = time.time() + 180
    while not (runs / "started").exists():
        assert p.poll() is None, p.communicate()
        assert time.time() < deadline, "the holder notebook never started"
        time.sleep(0.2)
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    (runs / "hold").unlink()
    return p.returncode, out, err


@pytest.fixture
def holding(project):
    write_nb(project / "nbs" / "02_holder.ipynb", HOLDER)
    return project


def test_ctrl_c_inside_a_notebook_prints_one_line_and_the_next_run_executes_it_again(holding):
    rc, out, err = _interrupt_inside_the_holder(holding, signal.SIGINT)
    assert rc == 130
    assert err.strip() == "shopdistill: interrupted", (
        err
    )  # no kernel traceback (it goes to the run's log), no driver traceback
    assert "Traceback" not in out + err
    m = json.loads((holding / "runs" / "tiny" / "manifest.json").read_text())
    assert statuses(m) == {"00_first": "executed", "01_second": "executed", "02_holder": "running"}
    assert not (
        holding / "runs" / "tiny" / "02_holder.ipynb"
    ).exists()  # no executed copy of a notebook that did not finish
    again = run(holding)
    assert statuses(again) == {"00_first": "cached", "01_second": "cached", "02_holder": "executed"}


def test_a_forced_run_interrupted_inside_a_notebook_leaves_it_to_run_again(holding):
    assert statuses(run(holding)) == {
        "00_first": "executed",
        "01_second": "executed",
        "02_holder": "executed",
    }
    # as in the issue: one notebook forced, interrupted after it has rewritten part of its outputs
    rc, _, err = _interrupt_inside_the_holder(
        holding, signal.SIGINT, "--only", "02_holder", "--force"
    )
    assert rc == 130 and err.strip() == "shopdistill: interrupted"
    again = run(holding)  # not forced: the earlier complete run's record must not make it "cached"
    assert statuses(again) == {"00_first": "cached", "01_second": "cached", "02_holder": "executed"}


def test_a_killed_driver_leaves_the_notebook_marked_running_and_it_runs_again(holding):
    rc, _, _ = _interrupt_inside_the_holder(holding, signal.SIGKILL)
    assert rc == -signal.SIGKILL
    from shopdistill.reproduce.driver import plan

    p = {
        s["chapter"]: (s["action"], s["why"])
        for s in plan(
            "tiny",
            nbs_dir=holding / "nbs",
            runs_root=holding / "runs",
            configs_dir=holding / "configs",
        )
    }
    assert p["02_holder"] == ("run", "its last run never finished (killed or interrupted)")
    assert p["01_second"][0] == "cached"
    assert statuses(run(holding))["02_holder"] == "executed"


def test_the_effective_settings_are_written_into_the_run_folder(project):
    (project / "configs" / "small.yaml").write_text("extends: tiny\ncatalog: {n_products: 4}\n")
    reproduce(
        "small",
        nbs_dir=project / "nbs",
        runs_root=project / "runs",
        configs_dir=project / "configs",
        progress=False,
        html=False,
    )
    text = (project / "runs" / "small" / "settings.yaml").read_text()
    assert text.splitlines()[0].startswith(
        "# the effective settings of profile small (configs/small.yaml extending configs/tiny.yaml)"
    )
    eff = yaml.safe_load(text)
    assert (eff["seed"], eff["catalog"]["n_products"], eff["catalog"]["seed"]) == (
        7,
        4,
        3,
    )  # tiny's seeds, small's size
    assert (
        eff == load_config(project / "configs" / "small.yaml").effective()
    )  # every key, defaults included
    m = json.loads((project / "runs" / "small" / "manifest.json").read_text())
    assert m["config"]["files"] == ["configs/small.yaml", "configs/tiny.yaml"]


@pytest.fixture
def publishing(project, monkeypatch):
    "The tiny project with a results chapter, a profile `pub` that publishes, and its own figures/ and paper/generated/."
    write_nb(project / "nbs" / "02_results.ipynb", RESULTS)
    (project / "configs" / "pub.yaml").write_text("extends: tiny\npublish: true\n")
    for k, v in {
        "SHOPDISTILL_HOME": project,
        "SHOPDISTILL_CONFIGS": project / "configs",
        "SHOPDISTILL_RUNS": project / "runs",
    }.items():
        monkeypatch.setenv(k, str(v))
    return project


def _reproduce(project, profile, **kw):
    return reproduce(
        profile,
        nbs_dir=project / "nbs",
        runs_root=project / "runs",
        configs_dir=project / "configs",
        progress=False,
        html=False,
        **kw,
    )


def test_a_profile_that_does_not_publish_writes_its_figures_and_tables_into_its_run_only(
    publishing,
):
    _reproduce(publishing, "tiny")
    assert not list((publishing / "figures").glob("*")) and not list(
        (publishing / "paper" / "generated").glob("*")
    )
    r = Run.of("tiny", publishing / "runs")
    assert (r.figures / "f.png").read_bytes() == b"figure of 10 products" and (
        r.generated / "t.tex"
    ).read_text() == "seed 7"


def test_the_ci_profile_publishes_nothing(tmp_path, monkeypatch):
    ci, smoke = load_config("ci"), load_config("smoke")
    monkeypatch.setenv("SHOPDISTILL_RUNS", str(tmp_path))  # asking for ci's folders makes them
    assert (ci.publish, smoke.publish, load_config("full").publish) == (False, True, True)
    figs, gen = published_folders(ci, ci.run)
    assert figs == ci.run.figures and gen.path == ci.run.generated
    assert figs.is_relative_to(ci.run.path) and gen.path.is_relative_to(ci.run.path)
    assert (figures_dir(), generated_dir()) not in ((figs, gen.path),)
    assert (ci.figures, ci.generated) == (figs, gen.path) and (smoke.figures, smoke.generated) == (
        figures_dir(),
        generated_dir(),
    )


def test_published_results_carry_their_record_and_a_changed_setting_makes_them_stale(
    publishing, capsys
):
    figs, gen = publishing / "figures", publishing / "paper" / "generated"
    _reproduce(publishing, "pub")
    rec = json.loads((gen / "reproduction.json").read_text())
    assert rec["profile"] == "pub" and rec["settings"]["files"] == [
        "configs/pub.yaml",
        "configs/tiny.yaml",
    ]
    assert set(rec["files"]) == {"figures/f.png", "paper/generated/t.tex"}
    assert (
        set(rec["notebooks"]) == {"00_first", "01_second", "02_results"}
        and rec["seconds"]["total"] > 0
    )
    assert (
        rec["machine"]["cores"] >= 1
        and "vector_extensions" in rec["machine"]
        and rec["packages"]["torch"]
    )
    assert rec["regenerate"].startswith("make reproduce PROFILE=pub")
    check = lambda: check_published(generated=gen, figures=figs)
    assert check() == []
    assert main(["check-results"]) == 0 and "check-results: current" in capsys.readouterr().out

    tiny = publishing / "configs" / "tiny.yaml"
    original = tiny.read_text()
    tiny.write_text(original + "# a comment is not a setting\n")
    assert check() == []
    tiny.write_text(
        original.replace("n_products: 10", "n_products: 11")
    )  # a setting that decides the figure, in the file pub extends
    problems = check()
    assert problems == [
        f"{n}: would run again: the profile's settings changed"
        for n in ("00_first", "01_second", "02_results")
    ]
    assert main(["check-results"]) == 1
    out = capsys.readouterr().out
    assert "NOT current" in out and "make reproduce PROFILE=pub" in out

    _reproduce(publishing, "pub")  # regenerated: current again, with the new figure
    assert check() == [] and (figs / "f.png").read_bytes() == b"figure of 11 products"
    (gen / "t.tex").write_text("edited by hand")
    (figs / "stray.png").write_bytes(b"")
    assert check() == [
        "paper/generated/t.tex: changed since the reproduction wrote it",
        "figures/stray.png: not written by the recorded reproduction",
    ]


def test_a_changed_notebook_makes_published_results_stale(publishing):
    _reproduce(publishing, "pub")
    nb = nbformat.read(publishing / "nbs" / "01_second.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("y = 2"))
    nbformat.write(nb, publishing / "nbs" / "01_second.ipynb")
    assert check_published(
        generated=publishing / "paper" / "generated", figures=publishing / "figures"
    ) == [
        "01_second: would run again: its cells changed",
        "02_results: would run again: an earlier notebook changed",
    ]


def test_a_run_that_executes_nothing_leaves_the_record_of_the_run_that_made_the_files(publishing):
    _reproduce(publishing, "pub")
    record = publishing / "paper" / "generated" / "reproduction.json"
    before, stat = record.read_bytes(), record.stat()
    m = _reproduce(publishing, "pub")
    assert set(statuses(m).values()) == {"cached"} and record.read_bytes() == before
    assert (record.stat().st_ino, record.stat().st_mtime_ns) == (
        stat.st_ino,
        stat.st_mtime_ns,
    )  # not even rewritten
    record.unlink()  # a lost record is written again from the manifest, without executing anything
    m = _reproduce(publishing, "pub")
    assert (
        set(statuses(m).values()) == {"cached"}
        and json.loads(record.read_text())["notebooks"].keys()
        == json.loads(before)["notebooks"].keys()
    )


def test_no_record_is_written_while_a_notebook_is_not_up_to_date(publishing):
    _reproduce(publishing, "pub", only=["00"])
    assert not (publishing / "paper" / "generated" / "reproduction.json").exists()
