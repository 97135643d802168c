"Chapter 05's rollout engine: well-formed, scored trajectories; seeds per episode; parsing as GRPO parses."

import json

import pytest
import torch

from shopdistill.training.settings import RolloutSettings, TinySettings, TrainSettings
from shopdistill.training.policy import load_policy
from shopdistill.training.rollout import episode_seed, generate_transformers, run_episodes
from shopdistill.corpus.trajectory import trajectory_problems

KEYS = ("trajectory_id", "problem_id", "query", "category", "messages", "tools", "meta")


@pytest.fixture(scope="module")
def world():
    from shopdistill.sandbox.catalog import Catalog, generate_catalog
    from shopdistill.sandbox.search import SearchEngine
    from shopdistill.sandbox.task_synthesis import synthesize_tasks

    catalog = Catalog.from_records(list(generate_catalog(300, seed=0)))
    engine = SearchEngine.build(catalog)
    problems = synthesize_tasks(catalog, {"product": 2}, seed=0)
    s = TrainSettings(
        tiny=TinySettings(hidden=32, layers=2, heads=2, kv_heads=2, intermediate=64, bpe_vocab=400),
        max_tool_chars=200,
    )
    model, tok = load_policy("tiny", s)
    return model, tok, engine, problems


def test_run_episodes_returns_well_formed_scored_trajectories(world):
    model, tok, engine, problems = world
    eps = run_episodes(
        model,
        tok,
        problems,
        engine,
        RolloutSettings(step_cap=3, max_new_tokens=16, batch_size=3),
        n_samples=2,
        temperature=1.0,
        greedy_first=True,
    )
    assert len(eps) == 4 and [(e["problem_id"], e["sample"]) for e in eps] == [
        (p["id"], s) for p in problems for s in range(2)
    ]
    for e in eps:
        assert trajectory_problems({k: e[k] for k in KEYS}) == []
        assert isinstance(e["success"], bool) and e["score"]["id"] == e["problem_id"]
        assert (
            0 <= e["valid_calls"] <= e["n_calls"]
            and isinstance(e["recommended"], list)
            and isinstance(e["recommended_exist"], bool)
        )
        assert e["messages"][0] == {
            "role": "user",
            "content": next(p["query"] for p in problems if p["id"] == e["problem_id"]),
        }
        assert e["end"] in ("no_tool_call", "length", "terminate", "step_cap", "context")
        # success, re-scored from the conversation alone: the last recommend_product call the sandbox ran (no env state read)
        problem = next(p for p in problems if p["id"] == e["problem_id"])
        assert e["success"] is _rescored(problem, e["messages"], engine.catalog)
    # episodes whose outcome the test knows: the gold product recommended succeeds, another search hit does not
    for problem, pick in (
        (problems[0], "gold"),
        (problems[1], "gold"),
        (problems[0], "wrong"),
        (problems[1], "none"),
    ):
        gold = problem["reward"]["product_id"]
        rec = {
            "gold": gold,
            "none": None,
            "wrong": next(
                h["product_id"]
                for h in engine.find_product(problem["query"])
                if h["product_id"] != gold
            ),
        }[pick]
        ep = _scripted_episode(tok, engine, problem, rec)
        assert ep["recommended"] == ([rec] if rec else []) and ep["end"] == "terminate"
        assert ep["success"] is (pick == "gold") and ep["score"]["success"] is (pick == "gold"), (
            problem["id"],
            pick,
        )


def _rescored(problem, messages, catalog) -> bool:
    "Success recomputed from the messages: the last recommend_product call whose tool result says it was recorded, scored afresh."
    from shopdistill.sandbox.scoring import score_task

    results = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    rec = None
    for m in messages:
        for c in m.get("tool_calls") or []:
            if (
                c["function"]["name"] == "recommend_product"
                and results.get(c["id"]) == "Recommendation recorded."
            ):
                args = c["function"]["arguments"]
                rec = (json.loads(args) if isinstance(args, str) else args)["product_ids"]
    return rec is not None and bool(score_task(problem, rec, catalog)["success"])


def _scripted_episode(tok, engine, problem, rec_id):
    "One episode of a scripted policy (a backend in BACKENDS): search, recommend `rec_id` (skipped when None), terminate."
    from shopdistill.training.rollout import BACKENDS

    call = lambda name, args: (
        f"<think>\nstep\n</think>\n\n<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call><|im_end|>"
    )
    turns = [call("find_product", {"q": problem["query"]})] + (
        [call("recommend_product", {"product_ids": rec_id})] if rec_id else []
    )
    turns.append(call("terminate", {"status": "success"}))
    it = iter(turns)
    BACKENDS["scripted"] = lambda model, prompts, **kw: [
        tok(next(it), add_special_tokens=False)["input_ids"] for _ in prompts
    ]
    try:
        return run_episodes(None, tok, [problem], engine, RolloutSettings(backend="scripted"))[0]
    finally:
        BACKENDS.pop("scripted")


def test_episodes_do_not_depend_on_the_batch(world):
    model, tok, engine, problems = world
    kw = dict(n_samples=2, temperature=1.0, seed=3)
    a = run_episodes(
        model,
        tok,
        problems,
        engine,
        RolloutSettings(step_cap=2, max_new_tokens=12, batch_size=4),
        **kw,
    )
    b = run_episodes(
        model,
        tok,
        problems,
        engine,
        RolloutSettings(step_cap=2, max_new_tokens=12, batch_size=1),
        **kw,
    )
    assert [e["messages"] for e in a] == [e["messages"] for e in b]
    assert episode_seed(0, "p", 0, 0) != episode_seed(0, "p", 1, 0) and episode_seed(
        0, "p", 0, 0
    ) == episode_seed(0, "p", 0, 0)


def test_generation_matches_the_model_greedy_argmax(world):
    "The KV-cache loop's greedy tokens are the argmax of a full forward pass over the growing sequence."
    model, tok, _, _ = world
    prompt = tok("hello shop", add_special_tokens=False)["input_ids"]
    out = generate_transformers(
        model,
        [prompt, prompt[:1]],
        max_new_tokens=5,
        temperature=0.0,
        top_p=1.0,
        seeds=[0, 0],
        stop_ids=[tok.eos_token_id],
        pad_id=tok.pad_token_id,
    )[0]
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(len(out)):
            seq.append(int(model(input_ids=torch.tensor([seq])).logits[0, -1].argmax()))
    assert seq[len(prompt) :] == out


def test_a_scripted_model_solves_a_problem(world):
    "Feed the engine a policy that always recommends the first hit: the episode is scored like the sandbox scores it."
    import json
    from shopdistill.training.rollout import BACKENDS

    _, tok, engine, problems = world
    p = problems[0]
    first = (
        engine.find_product(p["query"])[0]["product_id"] if engine.find_product(p["query"]) else "0"
    )
    turns = [
        f'<think>\nsearch\n</think>\n\n<tool_call>\n{{"name": "find_product", "arguments": {json.dumps({"q": p["query"]})}}}\n</tool_call><|im_end|>',
        f'<think>\nfirst\n</think>\n\n<tool_call>\n{{"name": "recommend_product", "arguments": {{"product_ids": "{first}"}}}}\n</tool_call><|im_end|>',
        '<think>\nend\n</think>\n\n<tool_call>\n{"name": "terminate", "arguments": {"status": "success"}}\n</tool_call><|im_end|>',
    ]
    calls = {"n": 0}

    def scripted(model, prompts, **kw):
        out = [
            tok(turns[min(calls["n"], 2)], add_special_tokens=False)["input_ids"] for _ in prompts
        ]
        calls["n"] += 1
        return out

    BACKENDS["scripted"] = scripted
    try:
        ep = run_episodes(None, tok, [p], engine, RolloutSettings(backend="scripted"))[0]
    finally:
        BACKENDS.pop("scripted")
    assert (
        ep["n_calls"] == ep["valid_calls"] == 3
        and ep["end"] == "terminate"
        and ep["recommended"] == [first]
    )
    assert (
        first == p["reward"]["product_id"] and ep["success"] is True
    )  # this seed's search ranks the gold first


def test_sampling_follows_the_distribution_and_each_rows_own_stream():
    "Inverse-CDF sampling with a generator per row: frequencies match softmax(logits / T) (chi-square), top-p drops the tail, rows are independent."
    from scipy.stats import chisquare
    from shopdistill.training.rollout import _sample_rows

    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -30.0])
    n = 20_000
    gens = [torch.Generator().manual_seed(s) for s in range(n)]
    draws = _sample_rows(logits.expand(n, -1), 0.7, 1.0, gens)
    p = torch.softmax(logits / 0.7, -1)
    counts = torch.bincount(draws, minlength=6)
    assert counts[5] == 0  # a token of probability ~1e-19 is never drawn
    expected = (p[:5].double() / p[:5].double().sum() * n).numpy()
    assert (
        chisquare(
            counts[:5].double().numpy(), expected * counts[:5].sum().item() / expected.sum()
        ).pvalue
        > 1e-3
    )
    top = _sample_rows(
        logits.expand(n, -1), 1.0, 0.5, [torch.Generator().manual_seed(s) for s in range(n)]
    )
    assert set(top.tolist()) <= {
        0,
        1,
    }  # 0.5 of the mass: the top token (0.48) and the one that crosses 0.5
    # a row's draw depends on its own generator only, not on the rows beside it
    one = _sample_rows(logits[None], 0.7, 1.0, [torch.Generator().manual_seed(123)])
    many = _sample_rows(
        logits.expand(3, -1), 0.7, 1.0, [torch.Generator().manual_seed(s) for s in (7, 123, 9)]
    )
    assert one[0] == many[1]


def test_kv_store_continues_a_conversation_like_a_fresh_prefill(world):
    """Three turns whose prompts extend the last prompt and completion, one of them re-rendered differently (the cached ids
    and the new prompt part ways before the end): with the KV cache kept between turns the completions, sampled with seeds,
    equal those of prefilling every prompt from scratch, and the store holds exactly the rows' caches."""
    from shopdistill.training.rollout import KVStore

    model, tok, _, _ = world
    enc = lambda t: tok(t, add_special_tokens=False)["input_ids"]
    prompts = [enc("find a red shirt"), enc("two blue mugs and a lamp please"), enc("shoes")]
    kv, kw = (
        KVStore(),
        dict(
            max_new_tokens=6,
            temperature=1.0,
            top_p=0.9,
            stop_ids=[tok.eos_token_id],
            pad_id=tok.pad_token_id,
        ),
    )
    for turn in range(3):
        seeds = [episode_seed(0, str(i), 0, turn) for i in range(3)]
        fresh = generate_transformers(model, prompts, seeds=seeds, **kw)
        kept = generate_transformers(model, prompts, seeds=seeds, keys=["a", "b", "c"], kv=kv, **kw)
        assert kept == fresh and len(kv) == 3
        tail = enc(" ok then") if turn != 1 else []
        prompts = [p + o + tail for p, o in zip(prompts, fresh)]
        if turn == 1:
            prompts[0] = (
                prompts[0][:3] + enc(" green") + prompts[0][3:]
            )  # row 0 re-rendered: only 3 cached tokens still match
    n, layers = kv.take("a", prompts[0] + [1])
    assert n > 0 and layers[0][0].shape[2] == n


def test_vllm_kv_cache_is_sized_for_every_sequence_at_full_length(tmp_path):
    "SmolLM2-135M's shape: 30 layers, 3 KV heads of 64: 46,080 bytes per token in fp32, half that in bf16; capped by free memory."
    import json, os
    from shopdistill.training.rollout import free_memory, kv_cache_bytes

    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "num_hidden_layers": 30,
                "num_attention_heads": 9,
                "num_key_value_heads": 3,
                "hidden_size": 576,
            }
        )
    )
    assert kv_cache_bytes(str(tmp_path), "float32", 1, 1) == 2 * 30 * 3 * 64 * 4
    assert kv_cache_bytes(str(tmp_path), "bfloat16", 2, 10) == 2 * 30 * 3 * 64 * 2 * 20
    big = kv_cache_bytes(
        str(tmp_path), "float32", 10**4, 10**5
    )  # 46 TB wanted: half of what is free where vLLM allocates instead
    free = free_memory()
    assert 0.3 * free < big < 0.7 * free and free <= os.sysconf("SC_PHYS_PAGES") * os.sysconf(
        "SC_PAGE_SIZE"
    )


def test_a_turn_hook_sees_each_completion_before_its_tool_calls_run(world):
    """The hook an episode's owner acts through (chapter 07's miner bills the proxy and records its steps with it): `generated`
    with the rendered prompt before the turn's tool calls reach the environment, `played` after them, with their results."""
    from shopdistill.sandbox.tools import ShoppingEnv, episode_state
    from shopdistill.training.rendering import tool_schemas_for_training
    from shopdistill.training.rollout import TurnHook, Turns, new_episode, play_rounds

    _, tok, engine, problems = world
    p = problems[0]
    texts = iter(
        [
            f"<tool_call>\n{json.dumps({'name': 'find_product', 'arguments': {'q': p['query']}})}\n</tool_call><|im_end|>",
            "nothing to call<|im_end|>",
        ]
    )
    scripted = lambda model, prompts, **kw: [
        tok(next(texts), add_special_tokens=False)["input_ids"] for _ in prompts
    ]
    events = []

    class Recording(TurnHook):
        def generated(self, ep, prompt, completion):
            events.append(
                (
                    "generated",
                    episode_state(ep["env"])["steps"],
                    prompt.rstrip().endswith("assistant"),
                )
            )

        def played(self, ep, msg, results):
            events.append(("played", episode_state(ep["env"])["steps"], [r[:1] for r in results]))

    env = ShoppingEnv(engine, step_cap=5)
    env.reset(**p)
    ep = new_episode(p, 0, env)
    turns = Turns(
        tok,
        tool_schemas_for_training(),
        temperature=0.0,
        top_p=1.0,
        seed=0,
        greedy_first=False,
        max_new_tokens=64,
        max_prompt_tokens=4096,
        hook=Recording(),
    )
    play_rounds(scripted, None, [ep], turns, batch_size=1)
    assert events == [
        ("generated", 0, True),
        ("played", 1, ["["]),
        ("generated", 1, True),
        ("played", 1, []),
    ]
    assert ep["done"] and ep["end"] == "no_tool_call" and not env.done


def test_tool_descriptions_are_one_paragraph_of_their_docstrings():
    """The tools' descriptions are read from the ShoppingEnv methods' docstrings (transformers' `get_json_schema`, as TRL
    builds them) and go into every prompt: re-wrapping a docstring must not put a line break into what the model reads
    (one did once, and moved stage 1 from 20 to 22 of 75 held-out problems)."""
    from shopdistill.training.rendering import tool_schemas_for_training

    texts = []
    for t in tool_schemas_for_training():
        f = t["function"]
        texts += [
            f["description"],
            *(p["description"] for p in f["parameters"]["properties"].values()),
        ]
    assert texts and all(s.strip() and "\n" not in s and "  " not in s for s in texts), texts
