"Chapter 05's stages: SFT learns and resumes, evaluation problems stay unseen, the stage table keeps recipe order."

import json

import pytest

from shopdistill.core.run import StageFolder, TrainFolder
from shopdistill.training.settings import SftSettings, TinySettings, TrainSettings
from shopdistill.training.policy import load_policy
from shopdistill.training.evaluation import corpus_clusters, heldout_problems
from shopdistill.training.sft import corpus_loss, sft
from shopdistill.training.trainer import last_checkpoint
from shopdistill.training.stages import stage_table
from shopdistill.training.recipe import stage_names
from shopdistill.training.teacher import teacher_trajectory
from shopdistill.training.rendering import sft_row, tool_schemas_for_training

SMALL = TrainSettings(
    tiny=TinySettings(hidden=32, layers=2, heads=2, kv_heads=2, intermediate=64, bpe_vocab=400),
    max_tool_chars=150,
    max_length=4096,
    sft=SftSettings(
        lr=3e-3,
        lr_sweep=[3e-3],
        batch_size=2,
        grad_accum=1,
        lora=False,
        bf16=False,
        save_steps=3,
        logging_steps=1,
        warmup_ratio=0.0,
        scheduler="constant",
    ),
)


@pytest.fixture(scope="module")
def world():
    from shopdistill.sandbox.catalog import Catalog, generate_catalog
    from shopdistill.sandbox.search import SearchEngine
    from shopdistill.sandbox.task_synthesis import synthesize_tasks

    catalog = Catalog.from_records(list(generate_catalog(300, seed=0)))
    engine = SearchEngine.build(catalog)
    problems = synthesize_tasks(catalog, {"product": 6}, seed=0)
    return catalog, engine, problems


@pytest.fixture(scope="module")
def rows(world):
    catalog, engine, problems = world
    _, tok = load_policy("tiny", SMALL)
    tools = tool_schemas_for_training()
    return tok, [sft_row(tok, teacher_trajectory(p, engine)["messages"], tools) for p in problems]


def test_teacher_trajectories_are_canonical(world):
    from shopdistill.corpus.readers import new_meta
    from shopdistill.corpus.trajectory import trajectory_problems

    catalog, engine, problems = world
    tr = teacher_trajectory(problems[0], engine)
    roles = [m["role"] for m in tr["messages"]]
    assert (
        roles[0] == "user"
        and roles[1::2] == ["assistant"] * (len(roles) // 2)
        and isinstance(tr["success"], bool)
    )
    full = {
        "trajectory_id": "0" * 20,
        "problem_id": tr["problem_id"],
        "query": problems[0]["query"],
        "category": "product",
        "messages": tr["messages"],
        "tools": tool_schemas_for_training(),
        "meta": new_meta("openai_messages", "t", 1),
    }
    assert trajectory_problems(full) == []


def test_tiny_sft_lowers_loss_and_resumes_from_its_checkpoint(rows, tmp_path):
    tok, data = rows
    model, _ = load_policy("tiny", SMALL)
    # same tokenizer for the model: rebuilt deterministically, so it is the same
    assert model.config.vocab_size == len(tok)
    before = corpus_loss(model, tok, data, SMALL.max_length)
    out = StageFolder(tmp_path / "s")
    sft(model, tok, data, SMALL, out, max_steps=6)
    assert last_checkpoint(out.trainer).endswith("checkpoint-6")
    trained, _ = load_policy(str(out.policy))
    after = corpus_loss(trained, tok, data, SMALL.max_length)
    assert after < before - 0.5, (before, after)
    # an interrupted run: the final model is gone, the checkpoint remains; a longer run resumes at step 6
    import shutil

    shutil.rmtree(out.policy)
    sft(load_policy("tiny", SMALL)[0], tok, data, SMALL, out, max_steps=9)
    log = json.loads(out.train_log.read_text())
    assert log["resumed_from"].endswith("checkpoint-6") and log["global_step"] == 9
    assert [h["step"] for h in log["log_history"] if "loss" in h] == list(
        range(1, 10)
    )  # the checkpoint carries the log of steps 1-6
    # a finished stage is not trained again
    assert sft(None, tok, data, SMALL, out) == out.policy


def test_a_stage_killed_after_a_checkpoint_ends_with_the_same_weights(rows, tmp_path):
    "Resuming from the last checkpoint (model, optimizer, scheduler, RNG, data order) gives the uninterrupted run's weights, bit for bit."
    import shutil
    import torch

    tok, data = rows
    out = StageFolder(tmp_path / "s")
    sft(load_policy("tiny", SMALL)[0], tok, data, SMALL, out, max_steps=6)
    whole = {k: v.clone() for k, v in load_policy(str(out.policy))[0].state_dict().items()}
    # the run as a kill after step 3 leaves it: checkpoint-3, no later checkpoint, no final model
    shutil.rmtree(out.policy)
    shutil.rmtree(out.trainer / "checkpoint-6")
    sft(load_policy("tiny", SMALL)[0], tok, data, SMALL, out, max_steps=6)
    assert json.loads(out.train_log.read_text())["resumed_from"].endswith("checkpoint-3")
    resumed = load_policy(str(out.policy))[0].state_dict()
    assert whole.keys() == resumed.keys()
    assert [k for k in whole if not torch.equal(whole[k], resumed[k])] == []


def test_heldout_problems_skip_clusters_the_corpus_holds():
    bank = [
        {
            "id": f"p{i}",
            "pool": "held_out" if i < 6 else "open",
            "category": "product",
            "cluster": f"c{i // 2}",
        }
        for i in range(8)
    ]
    seen = corpus_clusters(bank, {"p1", "p6"})
    assert seen == {"c0", "c3"}
    assert [p["id"] for p in heldout_problems(bank, ["product"], 10, seen)] == [
        "p2",
        "p3",
        "p4",
        "p5",
    ]
    assert [p["id"] for p in heldout_problems(bank, ["product"], 3, seen)] == ["p2", "p3", "p4"]


def test_heldout_problems_are_a_total_split_evenly_over_categories():
    bank = [
        {"id": f"{c}{i}", "pool": "held_out", "category": c, "cluster": f"{c}{i}"}
        for c in ("product", "shop", "voucher")
        for i in range(40)
    ]
    got = heldout_problems(bank, ["product", "shop", "voucher"], 75)
    assert len(got) == 75 and [
        sum(p["category"] == c for p in got) for c in ("product", "shop", "voucher")
    ] == [25, 25, 25]
    got = heldout_problems(bank, ["product", "shop", "voucher"], 8)
    assert [p["id"] for p in got] == [
        "product0",
        "product1",
        "product2",
        "shop0",
        "shop1",
        "shop2",
        "voucher0",
        "voucher1",
    ]


def test_an_untrained_stage_reuses_the_previous_evaluation(tmp_path):
    import gzip
    from shopdistill.training.evaluation import read_episodes, reuse_evaluation
    from shopdistill.core.files import write_json

    train = TrainFolder(tmp_path)
    src, dst = train.stage("stage1_sft").make(), train.stage("stage2_rejection")
    eps = [{"problem_id": "p1", "sample": 0, "success": False}]
    with gzip.open(src.episodes, "wt") as f:
        f.write(json.dumps(eps[0]) + "\n")
    write_json(
        src.evaluation,
        {"stage": "stage1_sft", "asr": 0.0, "pass@8": float("nan"), "eval_seconds": 12.5},
    )
    row = reuse_evaluation(src, dst)
    assert row == {
        "stage": "stage2_rejection",
        "asr": 0.0,
        "pass@8": None,
        "eval_seconds": 0.0,
        "same_policy_as": "stage1_sft",
    }
    assert read_episodes(dst.episodes) == eps
    assert json.loads(dst.evaluation.read_text()) == row


def test_stage_table_orders_stages_found_on_disk(tmp_path):
    train = TrainFolder(tmp_path)
    for s in ("stage1_sft", "base", "dr_grpo", "zzz_extra"):
        train.stage(s).make().evaluation.write_text(json.dumps({"stage": s}))
    assert [r["stage"] for r in stage_table(train, stage_names())] == [
        "base",
        "stage1_sft",
        "dr_grpo",
        "zzz_extra",
    ]
