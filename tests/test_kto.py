"Stage 4 (KTO): explicit config with β = 0.02, assistant-only completion masks, the KL batch, a few steps on a tiny policy."

import json, math

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from shopdistill.reproduce.settings import load_config
from shopdistill.training.kto import (
    AssistantMaskCollator,
    KtoSettings,
    kto_config,
    kto_row,
    kto_stage,
    kto_weights,
)
from shopdistill.core.run import StageFolder
from shopdistill.training.settings import TinySettings, TrainSettings, cpu_bf16
from shopdistill.training.policy import load_policy
from shopdistill.training.rendering import tool_schemas_for_training
from shopdistill.corpus.trajectory import assistant_message, make_tool_call

TINY = TrainSettings(
    tiny=TinySettings(
        bpe_vocab=400, hidden=32, layers=2, heads=2, kv_heads=1, intermediate=64, seed=0
    ),
    max_tool_chars=200,
)


@pytest.fixture(scope="module")
def tiny():
    return load_policy("tiny", TINY)


def episode(i: int, success: bool, end_with_tool: bool = False) -> dict:
    msgs = [
        {"role": "user", "content": f"a red cotton shirt number {i}"},
        assistant_message(
            "", "Search.", [make_tool_call("c0", "find_product", {"q": f"red shirt {i}"})]
        ),
        {
            "role": "tool",
            "tool_call_id": "c0",
            "name": "find_product",
            "content": json.dumps([{"product_id": "1000000001", "title": "y" * 300}]),
        },
        assistant_message(
            "",
            "The first hit.",
            [make_tool_call("c1", "recommend_product", {"product_ids": "1000000001"})],
        ),
    ]
    if end_with_tool:
        msgs.append(
            {
                "role": "tool",
                "tool_call_id": "c1",
                "name": "recommend_product",
                "content": "Recommendation recorded.",
            }
        )
    return {
        "trajectory_id": f"t{i}",
        "problem_id": f"p{i}",
        "sample": 0,
        "messages": msgs,
        "tools": tool_schemas_for_training(),
        "success": success,
    }


@pytest.mark.parametrize("profile", ["smoke", "full"])
def test_config_explicit_beta(profile, tmp_path):
    s = load_config(profile).kto
    c = kto_config(s, tmp_path, desirable_weight=1.0, undesirable_weight=0.5, cpu=True)
    assert (
        c.beta == s.beta == {"smoke": 0.1, "full": 0.02}[profile] and c.loss_type == "kto"
    )  # the profile's beta reaches TRL
    assert (c.desirable_weight, c.undesirable_weight) == (1.0, 0.5)
    assert c.train_sampling_strategy == "sequential" and not c.remove_unused_columns
    assert (
        c.per_device_train_batch_size >= 2 and c.use_cpu and c.bf16 == (s.bf16 and cpu_bf16())
    )  # bf16 means what it means in every stage
    assert (c.adam_beta1, c.adam_beta2) == (s.adam_beta1, s.adam_beta2) == (0.9, 0.999)
    assert c.learning_rate == s.lr and c.weight_decay == 0.0


def test_weights_follow_eq8():
    assert kto_weights(10, 40) == (1.0, 0.25)
    assert kto_weights(40, 10) == (0.25, 1.0)
    assert kto_weights(0, 10) == (1.0, 1.0) == kto_weights(5, 10, balance=False)
    with pytest.raises(ValueError):
        KtoSettings(batch_size=1)


@pytest.mark.parametrize("end_with_tool", [False, True])
def test_mask_covers_exactly_the_assistant_turns(tiny, end_with_tool):
    _, tok = tiny
    ep = episode(0, True, end_with_tool)
    row = kto_row(tok, ep)
    assert row["label"] is True and row["prompt"].endswith("<|im_start|>assistant\n")
    assert row["completion"].endswith(tok.eos_token)  # TRL will not append another EOS
    comp_ids = tok(row["prompt"] + row["completion"])["input_ids"][
        len(tok(row["prompt"])["input_ids"]) :
    ]
    assert len(comp_ids) == len(row["assistant_mask"])
    masked = tok.decode(
        [t for t, m in zip(comp_ids, row["assistant_mask"]) if m], skip_special_tokens=False
    )
    # the two assistant turns, each with its closing <|im_end|>, and nothing of the tool result
    assert masked.count("<tool_call>") == 2 and masked.count("<|im_end|>") == 2
    assert "tool_response" not in masked and "y" * 50 not in masked
    assert "Search." in masked and "The first hit." in masked


def test_collator_masks_and_kl_rotation(tiny):
    _, tok = tiny
    rows = [kto_row(tok, episode(i, i % 2 == 0)) for i in range(3)]
    examples = []
    for r in rows:  # as TRL's _prepare_dataset tokenises them
        p, pc = tok(r["prompt"])["input_ids"], tok(r["prompt"] + r["completion"])["input_ids"]
        examples.append(
            {
                "prompt_ids": p,
                "completion_ids": pc[len(p) :],
                "assistant_mask": r["assistant_mask"],
                "label": r["label"],
            }
        )
    b = AssistantMaskCollator(tok.pad_token_id, max_length=4096)(examples)
    for i, e in enumerate(examples):
        n = len(e["prompt_ids"]) + len(e["completion_ids"])
        assert (
            b["completion_mask"][i, :n].tolist() == [0] * len(e["prompt_ids"]) + e["assistant_mask"]
        )
        prev = examples[i - 1]  # KL pair: this prompt, the previous example's completion
        kl = b["KL_input_ids"][i, : len(e["prompt_ids"]) + len(prev["completion_ids"])].tolist()
        assert kl == e["prompt_ids"] + prev["completion_ids"]
        assert b["KL_completion_mask"][i].sum().item() == sum(prev["assistant_mask"])
    assert b["label"].tolist() == [True, False, True]


@pytest.mark.parametrize(
    "bf16", [False, True]
)  # smoke trains KTO under bf16 autocast where the CPU computes bf16 natively
def test_two_steps_finite_loss(tiny, tmp_path, bf16):
    model, tok = tiny
    s = KtoSettings(
        batch_size=2,
        grad_accum=1,
        max_steps=2,
        lr=1e-3,
        lora=False,
        bf16=bf16,
        logging_steps=1,
        save_steps=1000,
        max_length=4096,
        scheduler="constant",
        warmup_ratio=0.0,
    )
    w0 = [p.detach().clone() for p in model.parameters()]
    out = kto_stage(
        model,
        tok,
        [episode(i, True) for i in range(2)],
        [episode(i, False) for i in range(2, 6)],
        s,
        StageFolder(tmp_path / "kto"),
        resume=False,
        cpu=True,
    )
    log = json.loads(StageFolder(tmp_path / "kto").train_log.read_text())
    losses = [h["loss"] for h in log["log_history"] if "loss" in h]
    assert log["global_step"] == 2 and losses and all(math.isfinite(x) for x in losses)
    assert (log["desirable"], log["undesirable"], log["undesirable_weight"], log["beta"]) == (
        2,
        4,
        0.5,
        0.02,
    )
    assert any(not torch.equal(a, b) for a, b in zip(w0, model.parameters()))  # it trained
    m2, _ = load_policy(str(out))
    assert m2.config.hidden_size == 32


def test_full_profile_trainer_builds_on_the_tiny_model(tmp_path):
    from shopdistill.training.kto import kto_trainer

    model, tok = load_policy("tiny", TINY)
    s = load_config("full").kto
    tr = kto_trainer(
        model,
        tok,
        [episode(0, True)],
        [episode(1, False), episode(2, False)],
        s,
        StageFolder(tmp_path),
        cpu=True,
    )
    info = tr.kto_info
    assert (
        tr.args.beta == 0.02 and tr.ref_model is None and hasattr(tr.model, "peft_config")
    )  # LoRA: the reference is the adapter-free model
    assert (info["desirable_weight"], info["undesirable_weight"]) == (1.0, 0.5)


def test_corpus_desirable_top_up():
    import datasets
    from shopdistill.training.kto import corpus_desirable
    from shopdistill.corpus.trajectory import to_arrow_row

    rows = [
        {
            **to_arrow_row(
                {
                    **episode(i, True),
                    "query": "q",
                    "category": "product" if i % 2 else "shop",
                    "meta": {},
                }
            ),
            "success": i % 3 != 0,
        }
        for i in range(12)
    ]
    ds = datasets.Dataset.from_list(rows)
    got = corpus_desirable(ds, 3, ["product"], seed=0)
    assert len(got) == 3 and all(g["success"] and g["source"] == "corpus" for g in got)
    assert {g["trajectory_id"] for g in got} <= {f"t{i}" for i in range(12) if i % 2 and i % 3}
    assert got == corpus_desirable(ds, 3, ["product"], seed=0)
    assert len(corpus_desirable(ds, 100, ["product"])) == 4  # all there are
