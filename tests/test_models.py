"Chapter 05's model factory: tool schemas, chat template and masks, one rendering for SFT and rollouts, parsing, save/load."

import inspect, json

import pytest
import torch

from shopdistill.training.settings import TinySettings, TrainSettings
from shopdistill.training.policy import load_policy, save_policy
from shopdistill.training.rendering import (
    fit_messages,
    parse_assistant,
    render_prompt,
    sft_row,
    tool_schemas_for_training,
)
from shopdistill.training.loss import lm_loss
from shopdistill.corpus.trajectory import assistant_message, make_tool_call, tool_message

IDS = ["1000000003", "1000000007", "1000000012"]
SMALL = TrainSettings(
    tiny=TinySettings(hidden=32, layers=2, heads=2, kv_heads=2, intermediate=64, bpe_vocab=400),
    max_tool_chars=120,
)


@pytest.fixture(scope="module")
def policy():
    return load_policy("tiny", SMALL)


@pytest.fixture(scope="module")
def tools():
    return tool_schemas_for_training()


def conversation():
    "A corpus-like conversation: thinking, tool calls with arguments, a long tool result, a final text turn."
    page = json.dumps(
        [
            {"product_id": i, "shop_id": "100001", "title": f"Red Mug {k}", "price": 99.5 + k}
            for k, i in enumerate(IDS)
        ]
    )
    return [
        {"role": "user", "content": "a red mug under 300 pesos"},
        assistant_message(
            "",
            "I'll search for 'red mug'.",
            [make_tool_call("c0", "find_product", {"q": "red mug", "price": "-300"})],
        ),
        tool_message("c0", "find_product", page),
        assistant_message(
            "",
            f"The top result is {IDS[0]}.",
            [make_tool_call("c1", "recommend_product", {"product_ids": IDS[0]})],
        ),
        tool_message("c1", "recommend_product", "Recommendation recorded."),
        assistant_message(
            "", "Done; ending.", [make_tool_call("c2", "terminate", {"status": "success"})]
        ),
        tool_message("c2", "terminate", "Episode terminated with status success."),
    ]


def test_tool_schemas_are_what_grpo_builds(tools):
    "TRL's environment_factory: public functions of the class except reset/get_reward, get_json_schema on bound methods."
    from transformers.utils import get_json_schema
    from shopdistill.sandbox.catalog import Catalog, generate_catalog
    from shopdistill.sandbox.tools import ShoppingEnv, tool_schemas
    from shopdistill.sandbox.search import SearchEngine

    env = ShoppingEnv(SearchEngine.build(Catalog.from_records(list(generate_catalog(50, seed=0)))))
    methods = [
        getattr(env, n)
        for n, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
        if n not in ("reset", "get_reward") and not n.startswith("_")
    ]
    assert tools == [get_json_schema(m) for m in methods] == tool_schemas()
    assert [t["function"]["name"] for t in tools] == [
        "find_product",
        "recommend_product",
        "terminate",
        "view_product_information",
    ]


def test_tokenizer_has_qwen_tokens_and_trl_template(policy):
    from trl.chat_template_utils import qwen3_chat_template

    _, tok = policy
    assert tok.chat_template == qwen3_chat_template and tok.padding_side == "left"
    for t in (
        "<|im_start|>",
        "<|im_end|>",
        "<|endoftext|>",
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "<tool_response>",
        "</tool_response>",
    ):
        assert len(tok(t, add_special_tokens=False)["input_ids"]) == 1, t
    assert (
        tok.get_vocab() == load_policy("tiny", SMALL)[1].get_vocab()
    )  # built the same every time: stage 1 loads it more than once


def test_generation_mask_covers_exactly_the_assistant_turns(policy, tools):
    from trl.chat_template_utils import get_training_chat_template

    _, tok = policy
    msgs = conversation()
    row = sft_row(tok, msgs, tools)
    enc = tok.apply_chat_template(
        row["messages"],
        tools=json.loads(row["tools"]),
        chat_template=get_training_chat_template(tok),
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    ids, mask = enc["input_ids"], enc["assistant_masks"]
    spans, cur = [], []
    for i, m in zip(ids, mask):
        if m:
            cur.append(i)
        elif cur:
            spans.append(tok.decode(cur))
            cur = []
    if cur:
        spans.append(tok.decode(cur))
    expected = []
    for t, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        before, _ = render_prompt(tok, msgs[:t], tools)
        after, _ = render_prompt(tok, msgs[: t + 1], tools, add_generation_prompt=False)
        assert after.startswith(before)
        expected.append(after[len(before) :])
    assert spans == expected and len(spans) == 3
    # the rendered training text is the plain template's text (TRL only adds generation markers)
    assert tok.decode(ids) == render_prompt(tok, msgs, tools, add_generation_prompt=False)[0]


def test_sft_and_rollout_prompts_are_byte_identical(policy, tools):
    "Every state's rollout/GRPO prompt (render_prompt) is a prefix, in text and in ids, of the SFT example's rendering."
    _, tok = policy
    msgs = conversation()
    row = sft_row(tok, msgs, tools)
    full_text = tok.apply_chat_template(
        row["messages"], tools=json.loads(row["tools"]), tokenize=False
    )
    full_ids = tok(full_text, add_special_tokens=False)["input_ids"]
    for t, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        text, ids = render_prompt(tok, msgs[:t], tools)
        assert full_text.startswith(text) and full_ids[: len(ids)] == ids
    # the context fitting cut the long search page the same way in both
    assert (
        "[...]" in full_text
        and fit_messages(row["messages"], SMALL.max_tool_chars) == row["messages"]
    )


def test_parse_assistant_round_trips_a_rendered_turn(policy, tools):
    _, tok = policy
    msgs = conversation()
    for t in (1, 3, 5):
        prompt_text, prompt_ids = render_prompt(tok, msgs[:t], tools)
        full_text, _ = render_prompt(tok, msgs[: t + 1], tools, add_generation_prompt=False)
        completion = tok(full_text[len(prompt_text) :].rstrip("\n"), add_special_tokens=False)[
            "input_ids"
        ]
        got = parse_assistant(tok, completion, prompt_ids, tools)
        want = msgs[t]
        assert got["reasoning_content"] == want["reasoning_content"]
        assert [c["function"] for c in got["tool_calls"]] == [
            c["function"] for c in want["tool_calls"]
        ]
    bad = tok(
        '<think>\nhm\n</think>\n\n<tool_call>\n{"name": "find_product", "arguments": {"q": }\n</tool_call><|im_end|>',
        add_special_tokens=False,
    )["input_ids"]
    assert (
        parse_assistant(tok, bad, render_prompt(tok, msgs[:1], tools)[1], tools)["tool_calls"] == []
    )


def test_save_load_keeps_what_the_folder_alone_would_lose(policy, tmp_path):
    model, tok = policy
    save_policy(model, tok, tmp_path / "p")
    m2, t2 = load_policy(str(tmp_path / "p"))
    assert (
        t2.padding_side == "left"
        and t2.max_tool_chars == SMALL.max_tool_chars
        and t2.get_vocab() == tok.get_vocab()
    )
    x = torch.tensor([[5, 6, 8, 7]])
    assert torch.allclose(model(input_ids=x).logits, m2(input_ids=x).logits, atol=1e-5)


def test_lm_loss_matches_the_models_own(policy):
    model, tok = policy
    model.zero_grad()
    ids = torch.tensor([[5, 11, 6, 7, 12, 9]])
    lab = ids.clone()
    lab[0, :2] = -100
    loss = lm_loss(model, ids, torch.ones_like(ids), lab)
    assert abs(loss.item() - model(input_ids=ids, labels=lab).loss.item()) < 1e-4
    loss.backward()
    assert model.get_input_embeddings().weight.grad.abs().sum().item() > 0
    model.zero_grad()


def test_hub_id_fails_fast_with_a_clear_error():
    from shopdistill.training.policy import hub_reachable

    if hub_reachable():
        pytest.skip("the hub is reachable here: the offline error path cannot be exercised")
    with pytest.raises(
        RuntimeError,
        match="(?s)cannot load model .Qwen/Qwen3-4B.*train.base: smollm2-135m-instruct",
    ):
        load_policy("Qwen/Qwen3-4B")


def test_both_profiles_have_a_valid_train_section():
    from shopdistill.reproduce.settings import load_config

    smoke = load_config("smoke").train
    full = load_config("full").train
    assert (
        smoke.base == "smollm2-135m-instruct"
        and not smoke.sft.lora
        and smoke.rollout.backend == "vllm"
    )
    assert (
        full.base == "Qwen/Qwen3-4B"
        and full.max_length == 14_336
        and full.sft.lora
        and full.sft.lora_r > 0
    )
    assert (full.rejection.k, full.rejection.temperature, full.rejection.top_p) == (
        8,
        0.9,
        0.95,
    ) and len(full.sft.lr_sweep) > 1
    assert full.max_tool_chars is None
    assert {"stage4_kto", "dr_grpo"} <= set(
        smoke.eval.sampled
    ) and smoke.eval.sampled_problems == 20
    # stage 5's seeds draw samples too: each seed's pass@1 and pass@8
    assert smoke.eval.sampled_variants == ["seed.1", "seed.2"]


def under_view(policy, view: dict):
    "The module's tokenizer under `view` for one test; its own view comes back after."
    _, tok = policy
    saved, tok.agent_view = tok.agent_view, view
    yield tok
    tok.agent_view = saved


@pytest.fixture
def compact(policy):
    "The module's tokenizer under the compact view, 120 tokens a result (ids split into digits): the header and two of the page's three products fit."
    yield from under_view(policy, {"style": "compact", "result_tokens": 120})


def test_compact_view_is_one_rendering_for_sft_and_rollouts(compact, tools):
    "Under the compact view, SFT's rendering (through TRL's training template) and every rollout prompt are still the same bytes."
    from trl.chat_template_utils import get_training_chat_template

    tok, msgs = compact, conversation()
    row = sft_row(tok, msgs, tools)
    full_text = tok.apply_chat_template(
        row["messages"], tools=json.loads(row["tools"]), tokenize=False
    )
    enc = tok.apply_chat_template(
        row["messages"],
        tools=json.loads(row["tools"]),
        chat_template=get_training_chat_template(tok),
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    assert (
        tok.decode(enc["input_ids"])
        == full_text
        == render_prompt(tok, msgs, tools, add_generation_prompt=False)[0]
    )
    for t, m in enumerate(msgs):
        if m["role"] == "assistant":
            text, ids = render_prompt(tok, msgs[:t], tools)
            assert (
                full_text.startswith(text)
                and tok(full_text, add_special_tokens=False)["input_ids"][: len(ids)] == ids
            )
    # the view, not the paper's JSON: one line per tool, one line per product, the budget's cut said
    assert (
        '"parameters"' not in full_text
        and '"product_id"' not in full_text
        and "\n[1 more not shown]" in full_text
    )
    assert f"{IDS[0]} | Red Mug 0 | 99.5 | 100001 | - | 0" in full_text
    page = next(m["content"] for m in row["messages"] if m["role"] == "tool")
    assert (
        len(tok(page.rsplit("\n", 1)[0] + "\n", add_special_tokens=False)["input_ids"]) <= 120
    )  # the lines shown fit the budget


def test_a_checkpoint_keeps_the_view_it_was_trained_with(compact, tmp_path):
    model, _ = load_policy("tiny", SMALL)
    save_policy(model, compact, tmp_path / "p")
    _, tok2 = load_policy(
        str(tmp_path / "p"), TrainSettings()
    )  # another profile's settings: the checkpoint's view wins
    assert (
        tok2.agent_view == {"style": "compact", "result_tokens": 120}
        and tok2.max_tool_chars == SMALL.max_tool_chars
    )


def test_a_view_style_outside_the_two_is_refused():
    from shopdistill.training.settings import ViewSettings

    with pytest.raises(ValueError, match="view.style must be paper or compact, got 'tabular'"):
        ViewSettings(style="tabular")


@pytest.fixture
def thoughtless(policy):
    "The module's tokenizer under the paper's view without the reasoning (`train.view.think: false`, the smoke profile's)."
    yield from under_view(policy, {"style": "paper", "result_tokens": 0, "think": False})


def test_a_view_without_thinking_trains_and_prompts_no_reasoning(thoughtless, tools):
    "SFT targets and every later turn's prompt lose the reasoning, and the prompts are still prefixes of the SFT rendering."
    from trl.chat_template_utils import get_training_chat_template

    tok, msgs = thoughtless, conversation()
    row = sft_row(tok, msgs, tools)
    enc = tok.apply_chat_template(
        row["messages"],
        tools=json.loads(row["tools"]),
        chat_template=get_training_chat_template(tok),
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    full_text = tok.decode(enc["input_ids"])
    trained = tok.decode([t for t, m in zip(enc["input_ids"], enc["assistant_masks"]) if m])
    for m in msgs:
        if m["role"] == "assistant":
            assert m["reasoning_content"] not in full_text
    assert '"name": "recommend_product"' in trained and "I'll search" not in trained
    for t, m in enumerate(msgs):
        if m["role"] == "assistant":
            text, ids = render_prompt(tok, msgs[:t], tools)
            assert full_text.startswith(text) and "top result" not in text
    # the same conversation under the default view keeps it: the setting, not the template, removed it
    tok.agent_view = {"style": "paper"}
    assert (
        "I'll search for 'red mug'."
        in render_prompt(tok, msgs, tools, add_generation_prompt=False)[0]
    )


def test_smoke_trains_without_reasoning_and_full_with_it():
    from shopdistill.reproduce.settings import load_config

    assert (load_config("smoke").train.view.think, load_config("full").train.view.think) == (
        False,
        True,
    )
