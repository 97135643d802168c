"""`shopdistill train --stage`: one stage of the recipe through the functions chapter 05's notebook calls, in one process and
in two processes started by `accelerate launch` (CPU, gloo), with the same losses.

Why `--multi_gpu` and not `--cpu`: with accelerate 1.15, `accelerate launch --cpu --num_processes 2` starts ONE process (its
multi-CPU launcher is `mpirun`, used only with `--mpirun_hostfile`; without it `--cpu` takes the simple launcher, which ignores
`--num_processes`). `--multi_gpu` takes torchrun's launcher; with no CUDA device visible (`CUDA_VISIBLE_DEVICES=""`) each
process trains on the CPU and the trainer's process group is gloo (accelerate's `MULTI_CPU`)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# The tiny model: a 2-layer Qwen3 of width 32 built offline, 4 SFT steps of a global batch of 4 conversations.
PROFILE = {
    "seed": 0,
    "catalog": {"n_products": 300, "seed": 0},
    "tasks": {"n": {"product": 8, "shop": 0, "voucher": 0}, "seed": 0},
    "scoring": {"similarity": "offline"},
    "judge": {"backend": "proxy"},
    "train": {
        "base": "tiny",
        "max_length": 2048,
        "max_tool_chars": 150,
        "dtype": "float32",
        "tiny": {
            "hidden": 32,
            "layers": 2,
            "heads": 2,
            "kv_heads": 2,
            "intermediate": 64,
            "bpe_vocab": 400,
        },
        "sft": {
            "categories": ["product"],
            "lr": 0.003,
            "lr_sweep": [0.003],
            "batch_size": 1,
            "grad_accum": 4,
            "max_steps": 4,
            "lora": False,
            "bf16": False,
            "save_steps": 4,
            "logging_steps": 1,
            "warmup_ratio": 0.0,
            "scheduler": "constant",
        },
        "rollout": {
            "backend": "transformers",
            "batch_size": 4,
            "step_cap": 2,
            "max_new_tokens": 8,
            "max_prompt_tokens": 2048,
        },
        "eval": {"categories": ["product"], "n_problems": 2, "n_samples": 1},
    },
}
TOLERANCE = 1e-4  # relative, per logged step: the two runs sum the same token losses in another order (gloo's all-reduce)


def write_run(tmp: Path, name: str, grad_accum: int) -> Path:
    """A profile file `name.yaml` and the inputs its stage 1 reads, made as chapters 01-04 would: a problem bank (open and
    held-out problems, one leak cluster each) and a corpus of the reference agent's conversations on the open ones."""
    import datasets
    from shopdistill.corpus.readers import new_meta
    from shopdistill.corpus.trajectory import to_arrow_row
    from shopdistill.reproduce.settings import load_config
    from shopdistill.sandbox.profile import load_sandbox
    from shopdistill.training.rendering import tool_schemas_for_training
    from shopdistill.training.teacher import teacher_trajectory

    prof = json.loads(json.dumps(PROFILE))
    prof["train"]["sft"]["grad_accum"] = grad_accum
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(prof))
    cfg = load_config(path)
    _, engine, tasks = load_sandbox(cfg.run, cfg.catalog, cfg.search, cfg.tasks)
    bank = [
        {**t, "pool": "open" if i % 4 else "held_out", "cluster": i} for i, t in enumerate(tasks)
    ]
    cfg.run.arena().make()
    cfg.run.bank().write_text("".join(json.dumps(p) + "\n" for p in bank))
    rows = [
        to_arrow_row(
            {
                "trajectory_id": f"t{i:019d}",
                "problem_id": p["id"],
                "query": p["query"],
                "category": p["category"],
                "messages": teacher_trajectory(p, engine)["messages"],
                "tools": tool_schemas_for_training(),
                "meta": new_meta("openai_messages", "teacher", i),
            }
        )
        for i, p in enumerate(bank)
        if p["pool"] == "open"
    ]
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows), "eval": datasets.Dataset.from_list(rows[:1])}
    ).save_to_disk(str(cfg.run.corpus().dataset))
    return path


def launch(cmd: list[str], tmp: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "SHOPDISTILL_RUNS": str(tmp / "runs"),
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONUNBUFFERED": "1",
    }
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def losses(run: Path) -> list[float]:
    log = json.loads((run / "train" / "stage1_sft" / "train_log.json").read_text())
    return [h["loss"] for h in log["log_history"] if "loss" in h]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    "Stage 1 trained twice: one process (batch 1 x accumulation 4), and two processes (batch 1 x accumulation 2 each)."
    tmp = tmp_path_factory.mktemp("train-stage")
    os.environ["SHOPDISTILL_RUNS"] = str(tmp / "runs")
    try:
        one, two = write_run(tmp, "one", grad_accum=4), write_run(tmp, "two", grad_accum=2)
    finally:
        del os.environ["SHOPDISTILL_RUNS"]
    cli = ["-m", "shopdistill.reproduce.cli", "train", "--stage", "sft", "--profile"]
    single = launch([sys.executable, *cli, str(one)], tmp)
    double = launch(
        [
            str(BIN / "accelerate"),
            "launch",
            "--multi_gpu",
            "--num_processes",
            "2",
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            *cli,
            str(two),
        ],
        tmp,
    )
    return tmp / "runs", single, double


def test_one_stage_trains_and_is_evaluated_in_one_process(runs):
    root, single, _ = runs
    assert single.returncode == 0, single.stderr[-3000:]
    stage = root / "one" / "train" / "stage1_sft"
    assert (stage / "model" / "config.json").is_file() and json.loads(
        (stage / "eval.json").read_text()
    )["n_problems"] == 2
    assert "stage stage1_sft: ASR" in single.stdout
    assert len(losses(root / "one")) == 4


def test_two_processes_train_the_same_steps_and_the_main_one_writes(runs):
    root, single, double = runs
    assert double.returncode == 0, double.stderr[-3000:]
    stage = root / "two" / "train" / "stage1_sft"
    assert sorted(p.name for p in (stage / "trainer").glob("checkpoint-*")) == [
        "checkpoint-4"
    ]  # one checkpoint, at save_steps
    assert (stage / "model" / "config.json").is_file() and (stage / "eval.json").is_file()
    assert (
        double.stdout.count("stage stage1_sft: ASR") == 1
    )  # only the main process evaluates and reports
    log = json.loads((stage / "train_log.json").read_text())
    assert log["global_step"] == 4
    a, b = losses(root / "one"), losses(root / "two")
    assert len(a) == len(b) == 4
    assert all(abs(x - y) <= TOLERANCE * abs(x) for x, y in zip(a, b)), (a, b)
    print(
        f"losses, one process: {a}; two processes: {b}; largest relative difference {max(abs(x - y) / abs(x) for x, y in zip(a, b)):.2e}"
    )


def test_two_processes_end_with_the_weights_of_one(runs):
    "Same global batch, same data order (accelerate deals each process every other batch of the one sampler): the same update."
    from safetensors.torch import load_file

    root, _, _ = runs
    one, two = (
        load_file(next((root / n / "train" / "stage1_sft" / "model").glob("*.safetensors")))
        for n in ("one", "two")
    )
    assert one.keys() == two.keys()
    worst = max(float((one[k] - two[k]).abs().max()) for k in one)
    print(f"largest weight difference after 4 steps: {worst:.2e}")
    assert worst <= 1e-5


def test_a_finished_stage_is_not_trained_again(runs):
    root, _, _ = runs
    before = (root / "one" / "train" / "stage1_sft" / "train_log.json").read_text()
    again = launch(
        [
            sys.executable,
            "-m",
            "shopdistill.reproduce.cli",
            "train",
            "--stage",
            "stage1_sft",
            "--profile",
            str(root.parent / "one.yaml"),
        ],
        root.parent,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert (root / "one" / "train" / "stage1_sft" / "train_log.json").read_text() == before


def toy_run(job):
    "The toy stage's run: the job's base evaluated again, in the job's folder (a variant's too)."
    from shopdistill.training.stages import StageResult, stage_eval

    return StageResult(job.label, job.settings.base, stage_eval(job, job.settings.base))


def toy_stage():
    "A stage a test adds to the recipe (first, before the base), defined here once; a seed variant reseeds its tiny model."
    from shopdistill.training.recipe import Stage

    return Stage(
        "toy_rerun",
        "toy",
        None,
        "train",
        toy_run,
        "the toy stage",
        "T toy",
        "05",
        seed_keys=("tiny.seed",),
    )


@pytest.fixture
def with_toy(monkeypatch):
    import shopdistill.training.recipe as recipe

    monkeypatch.setattr(recipe, "RECIPE", (toy_stage(),) + recipe.RECIPE)
    return recipe


def train(path: Path, stage: str) -> int:
    from shopdistill.reproduce.cli import main

    return main(["train", "--stage", stage, "--profile", str(path), "--no-preflight"])


def test_a_stage_added_to_the_list_runs_by_its_name_and_takes_its_place_in_the_stage_table(
    tmp_path, monkeypatch, capsys, with_toy
):
    """Adding a stage is one entry in `training.recipe.RECIPE` and its run function: `shopdistill train --stage` runs it
    through the recipe's loop by its short name, and the stage table orders it where the list puts it (first here,
    before the base, against alphabetical order)."""
    monkeypatch.setenv("SHOPDISTILL_RUNS", str(tmp_path / "runs"))
    path = write_run(tmp_path, "toy", grad_accum=4)
    assert train(path, "base") == 0 and train(path, "toy") == 0
    table = json.loads((tmp_path / "runs" / "toy" / "train" / "stages.json").read_text())
    assert [r["stage"] for r in table["rows"]] == ["toy_rerun", "base"]
    assert "stage toy_rerun: ASR" in capsys.readouterr().out
    monkeypatch.setattr(with_toy, "RECIPE", with_toy.RECIPE[1:])
    assert train(path, "toy") == 2  # gone from the list: unknown


def variant_run(tmp_path, monkeypatch, arms: dict, seeds: list):
    "A tiny run whose profile declares `arms` and `seeds` of the toy stage; the base and the toy stage trained."
    monkeypatch.setenv("SHOPDISTILL_RUNS", str(tmp_path / "runs"))
    path = write_run(tmp_path, "arms", grad_accum=4)
    prof = yaml.safe_load(path.read_text())
    prof["variants"] = {"toy_rerun": {"seeds": seeds, "arms": arms}}
    path.write_text(yaml.safe_dump(prof))
    assert train(path, "base") == 0 and train(path, "toy") == 0
    return tmp_path / "runs" / "arms" / "train"


def test_an_arm_and_a_seed_are_evaluated_in_their_own_folders_and_collected_with_paired_differences(
    tmp_path, monkeypatch, with_toy
):
    from shopdistill.core.run import TrainFolder
    from shopdistill.results.collect import variant_results

    train_dir = variant_run(tmp_path, monkeypatch, {"other_tiny": {"tiny": {"seed": 2}}}, [1])
    stage = TrainFolder(train_dir).stage("toy_rerun")
    assert [v.name for v in stage.variant_folders()] == ["arm.other_tiny", "seed.1"]
    for v in (
        stage.variant_folders()
    ):  # evaluated exactly as the stage: same problems, same number of episodes
        assert v.has_evaluation and json.loads(v.evaluation.read_text())["n_problems"] == 2
    got = variant_results(TrainFolder(train_dir), n_boot=200)
    for p in ("stage.toy_rerun.arm.other_tiny", "stage.toy_rerun.seed.1"):
        assert {
            f"{p}.{k}"
            for k in (
                "asr",
                "asr_lo",
                "asr_hi",
                "pass@1",
                "vs_stage.diff",
                "vs_stage.lo",
                "vs_stage.hi",
            )
        } <= set(got), sorted(got)
        assert got[f"{p}.vs_stage.lo"] <= got[f"{p}.vs_stage.diff"] <= got[f"{p}.vs_stage.hi"]
    # the main line's table is the stages', not the variants'
    assert [r["stage"] for r in json.loads((train_dir / "stages.json").read_text())["rows"]] == [
        "toy_rerun",
        "base",
    ]


def test_a_failing_arm_is_reported_not_dropped(tmp_path, monkeypatch, capsys, with_toy):
    from shopdistill.core.run import TrainFolder
    from shopdistill.results.collect import variant_results

    missing = tmp_path / "no-such-checkpoint"
    train_dir = variant_run(tmp_path, monkeypatch, {"missing_model": {"base": str(missing)}}, [])
    assert "variant toy_rerun/arm.missing_model FAILED" in capsys.readouterr().out
    got = variant_results(TrainFolder(train_dir), n_boot=200)
    assert "no-such-checkpoint" in got["stage.toy_rerun.arm.missing_model.failed"]
    assert (train_dir / "toy_rerun" / "eval.json").is_file()  # the stage itself is unaffected
