"""End-to-end tests of `shopdistill.reproduce.driver` (and the settings and CLI around it).

Each test makes a tiny project in a temporary folder: two numbered chapters, a tooling notebook that must
never run, a profile file and a pyproject with nbdev's `tst_flags`. papermill runs real `python3` kernels,
so each executed chapter costs a second or two.
"""

import json
import re
import tomllib
from pathlib import Path

import nbformat
import pytest
import yaml

from shopdistill.reproduce.cli import main
from shopdistill.core.settings import ConfigError
from shopdistill.reproduce.settings import load_config
from shopdistill.reproduce.driver import ChapterFailed, ReproduceError, plan, reproduce

ROOT = Path(__file__).resolve().parents[1]
KERNEL = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}

# chapter 00: no parameters cell; appends to a log in the runs root (found through the environment the
# driver sets) so the tests see execution order; its `#| slow` cell fails if it ever runs.
FIRST = [
    nbformat.v4.new_markdown_cell("# First chapter"),
    nbformat.v4.new_code_cell(
        "import os, pathlib\n"
        "with open(pathlib.Path(os.environ['SHOPDISTILL_RUNS']) / 'order.log', 'a') as f: f.write('00\\n')"
    ),
    nbformat.v4.new_code_cell("#| slow\nraise RuntimeError('the slow cell ran')"),
]


def second_cells(body="x = 1"):
    "Chapter 01: a parameters cell, then a cell that reads the injected profile's settings and writes into its run folder."
    params = nbformat.v4.new_code_cell('profile = "smoke"')
    params.metadata["tags"] = ["parameters"]
    return [
        nbformat.v4.new_markdown_cell("# Second chapter"),
        params,
        nbformat.v4.new_code_cell(
            "from shopdistill.reproduce.settings import load_config\n"
            "cfg = load_config(profile)\n"
            "(cfg.run.make().path / 'second.txt').write_text(f'{profile} {cfg.seed} {cfg.catalog.n_products}')\n"
            "with open(cfg.run.path.parent / 'order.log', 'a') as f: f.write('01\\n')"
        ),
        nbformat.v4.new_code_cell(body),
    ]


def write_nb(path: Path, cells):
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = KERNEL
    nbformat.write(nb, path)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.nbdev]\ntst_flags = ["notest", "slow", "gpu"]\n'
    )
    (tmp_path / "nbs").mkdir()
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "tiny.yaml").write_text(
        "seed: 7\ncatalog:\n  n_products: 10\n  seed: 3\n"
    )
    write_nb(tmp_path / "nbs" / "00_first.ipynb", FIRST)
    write_nb(tmp_path / "nbs" / "01_second.ipynb", second_cells())
    write_nb(
        tmp_path / "nbs" / "99_tooling.ipynb",
        [nbformat.v4.new_code_cell("raise RuntimeError('tooling ran')")],
    )
    return tmp_path


def run(project: Path, **kw) -> dict:
    kw.setdefault("html", False)
    return reproduce(
        "tiny",
        nbs_dir=project / "nbs",
        runs_root=project / "runs",
        configs_dir=project / "configs",
        progress=False,
        **kw,
    )


def order(project: Path) -> list[str]:
    p = project / "runs" / "order.log"
    return p.read_text().split() if p.exists() else []


def statuses(manifest: dict) -> dict:
    return {k: v["status"] for k, v in manifest["notebooks"].items()}


def test_executes_chapters_in_order_into_the_run_folder(project):
    m = run(project, html=True)
    run_dir = project / "runs" / "tiny"
    assert order(project) == ["00", "01"]
    assert statuses(m) == {
        "00_first": "executed",
        "01_second": "executed",
    }  # 99_tooling is not a chapter
    assert (run_dir / "00_first.ipynb").exists() and (run_dir / "01_second.ipynb").exists()
    assert not (run_dir / "99_tooling.ipynb").exists()
    assert (run_dir / "html" / "00_first.html").stat().st_size > 0
    # the profile was injected after the parameters cell, and the chapter saw the test's folders through it
    out = nbformat.read(run_dir / "01_second.ipynb", as_version=4)
    injected = [c for c in out.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and 'profile = "tiny"' in injected[0].source
    first = nbformat.read(
        run_dir / "00_first.ipynb", as_version=4
    )  # no parameters cell: nothing injected, nothing warned
    assert not [c for c in first.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert (run_dir / "second.txt").read_text() == "tiny 7 10"
    assert not list((project / "nbs").glob("*.html")), "nothing is written into nbs/"


def test_slow_cell_is_raw_unless_flag_given(project):
    run(project)
    out = nbformat.read(project / "runs" / "tiny" / "00_first.ipynb", as_version=4)
    slow = [c for c in out.cells if "the slow cell ran" in c.source]
    assert [c.cell_type for c in slow] == ["raw"]
    with pytest.raises(ChapterFailed) as e:
        run(project, flags="slow")
    msg = str(e.value)
    assert (
        "00_first" in msg and "cell 2" in msg and "raise RuntimeError('the slow cell ran')" in msg
    )
    assert "RuntimeError: the slow cell ran" in msg
    prepared = nbformat.read(
        project / "runs" / "tiny" / "prepared" / "00_first.ipynb", as_version=4
    )
    assert prepared.cells[2].cell_type == "code"


def test_manifest_records_versions_seeds_and_timings(project):
    run(project)
    path = project / "runs" / "tiny" / "manifest.json"
    text = path.read_text()
    m = json.loads(text)
    assert (
        text == json.dumps(m, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    )  # deterministic layout
    assert m["git"] == {
        "commit": "unknown",
        "dirty": None,
    }  # the temporary project is not a checkout
    assert re.fullmatch(r"3\.\d+\.\d+", m["python"])
    assert {
        "shopdistill",
        "numpy",
        "torch",
        "transformers",
        "trl",
        "datasets",
        "papermill",
        "nbdev",
    } <= set(m["packages"])
    assert m["packages"]["papermill"] and m["packages"]["nbdev"]
    seeds = m[
        "seeds"
    ]  # every section's seeds: the file's where it sets them, the defaults elsewhere
    assert {k: seeds[k] for k in ("seed", "catalog.seed", "tasks.seed", "agent.seed")} == {
        "seed": 7,
        "catalog.seed": 3,
        "tasks.seed": 0,
        "agent.seed": 0,
    }
    assert {"arena_traces.seed", "train.seed", "grpo.seed", "loop.seed"} <= set(seeds)
    assert (
        m["profile"] == "tiny"
        and m["config"]["files"] == ["configs/tiny.yaml"]
        and m["flags"] == ["reproduce"]
    )  # always on in a reproduction
    for name, entry in m["notebooks"].items():
        assert entry["status"] == "executed" and entry["seconds"] >= 0 and len(entry["key"]) == 64
        assert entry["output"] == f"{name}.ipynb"


def test_unchanged_second_run_executes_nothing(project):
    run(project)
    m = run(project)
    assert statuses(m) == {"00_first": "cached", "01_second": "cached"}
    assert order(project) == ["00", "01"]
    assert [
        s["action"]
        for s in plan(
            "tiny",
            nbs_dir=project / "nbs",
            runs_root=project / "runs",
            configs_dir=project / "configs",
        )
    ] == ["cached", "cached"]
    m = run(project, force=True)
    assert statuses(m) == {"00_first": "executed", "01_second": "executed"}


def test_each_kernel_gets_its_chapters_key_and_a_keyed_folder_follows_it(project):
    "The key in the manifest reaches the chapter (`$SHOPDISTILL_CHAPTER_KEY`): a stage folder keyed on it survives an unchanged rerun only."
    body = (
        "import os\nfrom shopdistill.core.run import Run, keyed_dir\n"
        "d = keyed_dir(Run.of(profile).path / 'stage')\n"
        "(Run.of(profile).path / 'key.txt').write_text(os.environ['SHOPDISTILL_CHAPTER_KEY'])\n"
        "(d / 'work').write_text('done') if not (d / 'work').exists() else None\n"
        "(d / 'runs').open('a').write('x')"
    )
    write_nb(project / "nbs" / "01_second.ipynb", second_cells(body))
    m = run(project)
    stage = project / "runs" / "tiny" / "stage"
    assert (project / "runs" / "tiny" / "key.txt").read_text() == m["notebooks"]["01_second"]["key"]
    assert (stage / "inputs.key").read_text().strip() == m["notebooks"]["01_second"]["key"]
    run(project, force=True)  # same inputs, run again (as after a kill): the folder's work is kept
    assert (stage / "runs").read_text() == "xx"
    (project / "configs" / "tiny.yaml").write_text(
        "seed: 8\ncatalog:\n  n_products: 10\n  seed: 3\n"
    )
    m = run(project)  # other inputs: the folder is emptied before the chapter writes into it
    assert (stage / "runs").read_text() == "x" and (stage / "inputs.key").read_text().strip() == m[
        "notebooks"
    ]["01_second"]["key"]


def test_changing_the_config_reruns_the_chain(project):
    run(project)
    cfg = project / "configs" / "tiny.yaml"
    cfg.write_text(cfg.read_text().replace("n_products: 10", "n_products: 12"))
    steps = plan(
        "tiny", nbs_dir=project / "nbs", runs_root=project / "runs", configs_dir=project / "configs"
    )
    assert [(s["action"], s["why"]) for s in steps] == [
        ("run", "the profile's settings changed")
    ] * 2
    m = run(project)
    assert statuses(m) == {"00_first": "executed", "01_second": "executed"}
    assert (project / "runs" / "tiny" / "second.txt").read_text() == "tiny 7 12"


def test_changing_a_chapter_reruns_it_and_the_ones_after(project):
    run(project)
    write_nb(
        project / "nbs" / "01_second.ipynb", second_cells("x = 2")
    )  # only the last chapter changes
    assert statuses(run(project)) == {"00_first": "cached", "01_second": "executed"}
    write_nb(
        project / "nbs" / "00_first.ipynb",
        FIRST + [nbformat.v4.new_markdown_cell("A new paragraph.")],
    )
    assert statuses(run(project)) == {
        "00_first": "cached",
        "01_second": "cached",
    }  # prose decides no output
    write_nb(project / "nbs" / "00_first.ipynb", FIRST + [nbformat.v4.new_code_cell("y = 1")])
    steps = plan(
        "tiny", nbs_dir=project / "nbs", runs_root=project / "runs", configs_dir=project / "configs"
    )
    assert [s["why"] for s in steps] == ["its cells changed", "an earlier notebook changed"]
    assert statuses(run(project)) == {"00_first": "executed", "01_second": "executed"}
    assert order(project) == ["00", "01", "01", "00", "01"]


LIBRARY = [
    nbformat.v4.new_markdown_cell("# A library notebook"),
    nbformat.v4.new_code_cell("#| export\ndef twice(x): return 2 * x"),
    nbformat.v4.new_code_cell("twice(2)"),
]


def test_a_library_notebooks_new_demonstration_reruns_it_alone(project):
    "A notebook that writes nothing into the runs hands on only its exported code: a new demonstration reruns it alone."
    write_nb(project / "nbs" / "00_first.ipynb", LIBRARY)
    m = run(project)
    assert (
        m["notebooks"]["00_first"]["library"] is True
        and m["notebooks"]["01_second"]["library"] is False
    )
    write_nb(project / "nbs" / "00_first.ipynb", LIBRARY + [nbformat.v4.new_code_cell("twice(3)")])
    assert statuses(run(project)) == {"00_first": "executed", "01_second": "cached"}
    write_nb(
        project / "nbs" / "00_first.ipynb",
        LIBRARY[:1]
        + [nbformat.v4.new_code_cell("#| export\ndef twice(x): return x + x")]
        + LIBRARY[2:],
    )
    steps = plan(
        "tiny", nbs_dir=project / "nbs", runs_root=project / "runs", configs_dir=project / "configs"
    )
    assert [s["why"] for s in steps] == [
        "its cells changed; its exported code changed",
        "an earlier notebook changed",
    ]


def test_a_notebook_that_begins_to_write_results_reruns_the_ones_after(project):
    "The driver sees what a notebook wrote: a library notebook that starts writing into the run becomes a results one."
    write_nb(project / "nbs" / "00_first.ipynb", LIBRARY)
    run(project)
    write_nb(project / "nbs" / "00_first.ipynb", LIBRARY + FIRST[1:2])
    m = run(project)
    assert statuses(m) == {"00_first": "executed", "01_second": "executed"}
    assert (
        m["notebooks"]["00_first"]["library"] is False and m["notebooks"]["00_first"]["wrote"] == 1
    )


def test_only_runs_the_named_chapters(project):
    m = run(project, only=["01"])
    assert statuses(m) == {"01_second": "executed"}
    assert order(project) == ["01"]
    with pytest.raises(Exception, match="no chapter matches '07'"):
        run(project, only=["07"])


def test_chapter_run_alone_after_a_stale_one_runs_again_once_that_is_fixed(project):
    run(project)
    cfg = project / "configs" / "tiny.yaml"
    cfg.write_text(cfg.read_text().replace("seed: 7", "seed: 8"))
    assert statuses(run(project, only=["01"])) == {"00_first": "executed", "01_second": "executed"}
    m = run(
        project
    )  # 00 catches up with the new profile, so 01, which read its stale outputs, runs again
    assert statuses(m) == {"00_first": "executed", "01_second": "executed"}
    assert order(project) == ["00", "01", "01", "00", "01"]
    assert statuses(run(project)) == {"00_first": "cached", "01_second": "cached"}


def test_failing_cell_stops_the_run_and_names_notebook_and_cell(project):
    write_nb(
        project / "nbs" / "00_first.ipynb",
        FIRST[:2] + [nbformat.v4.new_code_cell("#| export\ny = 1 / 0")] + FIRST[2:],
    )
    with pytest.raises(ChapterFailed) as e:
        run(project)
    err = e.value
    assert (err.chapter, err.cell_index, err.first_line, err.ename) == (
        "00_first",
        2,
        "y = 1 / 0",
        "ZeroDivisionError",
    )
    assert "chapter 00_first failed at cell 2 (`y = 1 / 0`): ZeroDivisionError" in str(err)
    assert order(project) == ["00"], "the chapter after the failing one does not run"
    m = json.loads((project / "runs" / "tiny" / "manifest.json").read_text())
    assert m["notebooks"]["00_first"]["status"] == "failed" and "01_second" not in m["notebooks"]
    # fixed, the failed chapter runs again even though nothing else changed
    write_nb(project / "nbs" / "00_first.ipynb", FIRST)
    assert statuses(run(project)) == {"00_first": "executed", "01_second": "executed"}


def test_a_second_driver_on_the_same_run_folder_is_refused(project):
    import fcntl

    run_dir = project / "runs" / "tiny"
    run_dir.mkdir(parents=True)
    with open(run_dir / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(ReproduceError, match="another reproduce is running"):
            run(project)
    assert order(project) == []


def test_cli_reports_user_errors_without_traceback(project, capsys):
    assert main(["reproduce", "--profile", str(project / "configs" / "missing.yaml")]) == 1
    err = capsys.readouterr().err
    assert "missing.yaml does not exist" in err and "Traceback" not in err
    assert (
        main(["score", "--tasks", str(project / "nope.jsonl"), "--catalog", "x", "--answers", "y"])
        == 2
    )
    assert "tasks file" in capsys.readouterr().err


def test_config_rejects_unknown_keys_naming_key_and_file(tmp_path):
    p = tmp_path / "typo.yaml"
    p.write_text("search:\n  k1: 0.9\n  hitcap: 5\n")
    with pytest.raises(ConfigError, match=r"unknown key 'search\.hitcap'") as e:
        load_config(p)
    assert str(p) in str(e.value)
    p.write_text("catalog:\n  n_products: many\n")
    with pytest.raises(ConfigError, match=r"'catalog\.n_products' should be int, got 'many'"):
        load_config(p)
    p.write_text("sed: 1\n")
    with pytest.raises(ConfigError, match="unknown section 'sed'; did you mean 'seed'"):
        load_config(p)
    p.write_text(
        "grpo:\n  num_generation: 8\n"
    )  # a later chapter's section is checked when the file is read
    with pytest.raises(ConfigError, match=r"unknown key 'grpo\.num_generation'"):
        load_config(p)


def test_profiles_in_the_repository_load():
    smoke, full = load_config("smoke"), load_config("full")
    assert smoke.catalog.n_products == 20_000 and smoke.scoring.similarity == "offline"
    assert (
        full.catalog.n_products == 2_500_000
        and full.scoring.similarity == "Qwen/Qwen3-Embedding-0.6B"
    )
    assert full.tasks.n == {"product": 250, "shop": 250, "voucher": 250}
    assert (full.env.step_cap, full.env.step_cap_oro, full.server.port) == (30, 25, 5632)


def test_environment_yml_mirrors_pyproject_pins():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pinned = set(deps["dependencies"]) | set(deps["optional-dependencies"]["dev"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    listed = {d for d in pip if "==" in d}
    assert pinned == listed, (
        f"only in pyproject: {sorted(pinned - listed)}; only in environment.yml: {sorted(listed - pinned)}"
    )


def test_cli_counts_only_what_this_run_executed(project, capsys, monkeypatch):
    monkeypatch.setenv("SHOPDISTILL_HOME", str(project))
    monkeypatch.setenv("SHOPDISTILL_RUNS", str(project / "runs"))
    assert main(["reproduce", "--profile", "tiny", "--no-html"]) == 0
    assert "done: 2 of 2 executed" in capsys.readouterr().out
    # a second run of one chapter: nothing changed, so nothing ran, though the manifest still records both as executed before
    assert main(["reproduce", "--profile", "tiny", "--only", "01", "--no-html"]) == 0
    assert "done: 0 of 1 executed" in capsys.readouterr().out


def test_a_chapter_folder_runs_its_notebooks_in_order_from_their_own_folder(project):
    "A chapter is a folder of notebooks: each runs in turn, in its folder, into runs/<profile>/<chapter>/<notebook>.ipynb."
    folder = project / "nbs" / "02_third"
    folder.mkdir()
    for name, tag in (("00_module.ipynb", "02a"), ("01_this_profile.ipynb", "02b")):
        write_nb(
            folder / name,
            [
                nbformat.v4.new_code_cell(
                    "import os, pathlib\n"
                    "assert pathlib.Path.cwd().name == '02_third', pathlib.Path.cwd()  # as nbdev-test runs it\n"
                    f"with open(pathlib.Path(os.environ['SHOPDISTILL_RUNS']) / 'order.log', 'a') as f: f.write('{tag}\\n')"
                )
            ],
        )
    (folder / "notes.ipynb").write_text("not a notebook of the chapter: no number")
    m = run(project, html=True)
    assert order(project) == ["00", "01", "02a", "02b"]
    assert list(m["notebooks"]) == [
        "00_first",
        "01_second",
        "02_third/00_module",
        "02_third/01_this_profile",
    ]
    out = project / "runs" / "tiny"
    assert (out / "02_third" / "01_this_profile.ipynb").exists() and (
        out / "html" / "02_third" / "00_module.html"
    ).exists()
    assert m["notebooks"]["02_third/00_module"]["output"] == "02_third/00_module.ipynb"
    # --only by chapter number runs the chapter's notebooks; editing the first notebook re-runs the one after it
    nb = nbformat.read(folder / "00_module.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("y = 2"))
    nbformat.write(nb, folder / "00_module.ipynb")
    m = run(project, only=["02"])
    assert {k: v["status"] for k, v in m["notebooks"].items() if k.startswith("02")} == {
        "02_third/00_module": "executed",
        "02_third/01_this_profile": "executed",
    }
    assert order(project)[-2:] == ["02a", "02b"]
    assert [
        s["chapter"]
        for s in plan(
            "tiny",
            only=["02_third/01_this_profile"],
            nbs_dir=project / "nbs",
            runs_root=project / "runs",
            configs_dir=project / "configs",
        )
    ] == ["02_third/01_this_profile"]


@pytest.mark.parametrize(
    "section",
    [
        s
        for s in __import__(
            "shopdistill.reproduce.settings", fromlist=["Settings"]
        ).Settings.sections()
        if s not in ("seed", "publish", "variants")
    ],
)
def test_a_typo_in_any_section_is_reported_with_its_section(tmp_path, section):
    "Every chapter's section is typed: a misspelt key anywhere in the file is an error naming section, key and file."
    p = tmp_path / "typo.yaml"
    p.write_text(f"{section}:\n  not_a_{section}_key: 1\n")
    with pytest.raises(
        ConfigError,
        match=rf"unknown key '{section}\.not_a_{section}_key' \(known keys of '{section}': ",
    ) as e:
        load_config(p)
    assert str(p) in str(e.value)


@pytest.mark.parametrize(
    "text, says",
    [
        (
            "variants:\n  stage9_dpo: {seeds: [1]}\n",
            "'variants.stage9_dpo': no such stage (stages: base, stage1_sft",
        ),
        (
            "variants:\n  dr_grpo: {arms: {cool: {temprature: 0.2}}}\n",
            "unknown key 'variants.dr_grpo.arms.cool.temprature'",
        ),
        (
            "variants:\n  dr_grpo: {arms: {cool: {temperature: hot}}}\n",
            "'variants.dr_grpo.arms.cool.temperature' should be float",
        ),
        ("variants:\n  dr_grpo: {sedes: [1]}\n", "unknown key 'variants.dr_grpo.sedes'"),
        ("variants:\n  base: {seeds: [1]}\n", "stage base trains nothing"),
    ],
)
def test_a_mistake_in_a_variant_is_reported_when_the_profile_loads(tmp_path, text, says):
    "`variants:` names stages and their settings keys: a wrong stage, key or value is an error naming it and the file."
    p = tmp_path / "variants.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(says)) as e:
        load_config(p)
    assert str(p) in str(e.value)


def test_a_typo_stops_the_reproduction_before_any_chapter_runs(project):
    "The driver reads the whole profile first: a mistake in a late chapter's section costs no chapter's time."
    (project / "configs" / "tiny.yaml").write_text("seed: 7\ngrpo:\n  num_generation: 8\n")
    with pytest.raises(ConfigError, match=r"unknown key 'grpo\.num_generation'"):
        run(project)
    assert order(project) == [] and not (project / "runs" / "tiny" / "00_first.ipynb").exists()
