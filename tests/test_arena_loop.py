"Chapter 07's loop: a trained checkpoint as an SN15 miner (`agent_main`), and a season of the arena with it entered."

import json
import random
import re

import pytest

from shopdistill.results.loop import (
    CheckpointMiner,
    LoopSettings,
    last_checkpoint_stage,
    placing,
    run_loop,
)
from shopdistill.training.settings import TinySettings, TrainSettings
from shopdistill.training.policy import load_policy

TINY = TrainSettings(
    tiny=TinySettings(hidden=32, layers=2, heads=2, kv_heads=2, intermediate=64, bpe_vocab=400),
    max_tool_chars=200,
)


@pytest.fixture(scope="module")
def world():
    from shopdistill.sandbox.catalog import Catalog, generate_catalog
    from shopdistill.sandbox.search import SearchEngine
    from shopdistill.sandbox.task_synthesis import synthesize_tasks

    catalog = Catalog.from_records(list(generate_catalog(300, seed=0)))
    engine = SearchEngine.build(catalog)
    problem = synthesize_tasks(catalog, {"product": 1}, seed=0)[0]
    model, tok = load_policy("tiny", TINY)
    return catalog, engine, problem, model, tok


def _client(engine, seed=0):
    from shopdistill.arena.tool_client import InProcessToolClient, ProxyLog, SearchCache, SimClock

    return InProcessToolClient(
        SearchCache(engine), SimClock(1_000), random.Random(seed), ProxyLog(2000)
    )


def scripted(tok, texts):
    """A scripted sampler in place of a trained policy's (a trained model cannot be produced inside a unit test): it returns the
    token ids of `texts`, one per turn. Everything around it (rendering, parsing, tools, billing, the envelope) is real."""
    turns = iter(texts)

    def generate(model, prompts, **kw):
        return [
            tok(next(turns) + "<|im_end|>", add_special_tokens=False)["input_ids"] for _ in prompts
        ]

    return generate


def _call(name, args):
    return f"<think>\nlooking\n</think>\n\n<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


def test_checkpoint_miner_calls_tools_and_the_validator_scores_it(world):
    from shopdistill.arena.validator import Limits, problem_success, run_problem

    catalog, engine, problem, model, tok = world
    hits = engine.find_product(problem["query"])
    first = str(hits[0]["product_id"])
    miner = CheckpointMiner(
        model,
        tok,
        step_cap=5,
        max_new_tokens=64,
        backend=scripted(
            tok,
            [
                _call("find_product", {"q": problem["query"]}),
                _call("recommend_product", {"product_ids": first}),
                _call("terminate", {"status": "success"}),
            ],
        ),
    )
    client = _client(engine)
    env, calls = run_problem(miner.agent_main, problem, client, Limits(step_cap=5))
    assert (
        env["status"] == "SUCCESS" and miner.turns == 3
    )  # terminate ends the episode: no fourth turn
    assert [c["kind"] for c in calls].count("inference") == 3  # one billed model call per turn
    assert [c["path"] for c in calls if c["kind"] == "search"] == [
        "/find_product"
    ]  # the search went through the proxy
    steps = env["dialogue"]
    assert len(steps) == 3
    names = [json.dumps(s, default=str) for s in steps]
    assert (
        "find_product" in names[0]
        and "recommend_product" in names[1]
        and first in names[1]
        and "terminate" in names[2]
    )
    # the validator's verdict, against what the test knows: a product task is solved exactly when the gold product is recommended
    assert problem_success(problem, env, catalog) is (first == problem["reward"]["product_id"])
    assert (
        first == problem["reward"]["product_id"]
    )  # this seed's search ranks the gold first: the case above is a success


def test_the_validator_fails_a_miner_that_recommends_a_wrong_product(world):
    "The same run with a known-wrong id (another of the search hits, not the gold) is not a success."
    from shopdistill.arena.validator import Limits, problem_success, run_problem

    catalog, engine, problem, model, tok = world
    gold = problem["reward"]["product_id"]
    wrong = next(
        str(h["product_id"])
        for h in engine.find_product(problem["query"])
        if str(h["product_id"]) != gold
    )
    miner = CheckpointMiner(
        model,
        tok,
        step_cap=5,
        max_new_tokens=64,
        backend=scripted(
            tok,
            [
                _call("find_product", {"q": problem["query"]}),
                _call("recommend_product", {"product_ids": wrong}),
                _call("terminate", {"status": "success"}),
            ],
        ),
    )
    env, _ = run_problem(miner.agent_main, problem, _client(engine), Limits(step_cap=5))
    assert env["status"] == "SUCCESS" and wrong in json.dumps(
        env["dialogue"], default=str
    )  # the run itself went through
    assert problem_success(problem, env, catalog) is False


def test_checkpoint_miner_stops_on_a_turn_without_a_call(world):
    from shopdistill.arena.validator import Limits, run_problem

    _, engine, problem, model, tok = world
    miner = CheckpointMiner(
        model,
        tok,
        step_cap=5,
        max_new_tokens=64,
        backend=scripted(tok, ["<think>\nno idea\n</think>\n\nSorry."]),
    )
    env, calls = run_problem(miner.agent_main, problem, _client(engine), Limits(step_cap=5))
    assert env["status"] == "SUCCESS" and miner.turns == 1 and len(env["dialogue"]) == 1
    assert not any(c["kind"] == "search" for c in calls)


def test_checkpoint_miner_keeps_each_problems_kv_cache_between_turns(world):
    """With KV reuse a turn prefills only what the last one added, and the greedy completions are the ones a full prefill
    gives. The real generator runs every turn; the scripted text it hands back keeps the episode going (a random tiny
    model writes no tool call), and the cached prefix then ends where the scripted text departs from the sampled one."""
    from shopdistill.training.rollout import KVStore, generate_transformers
    from shopdistill.arena.validator import Limits, run_problem

    _, engine, problem, model, tok = world
    script = [
        _call("find_product", {"q": problem["query"]}),
        _call("find_product", {"q": "bottle"}),
        "<think>\ndone\n</think>\n\nok",
    ]

    class Counting(KVStore):
        reused = []

        def take(self, key, prompt):
            n, layers = super().take(key, prompt)
            self.reused.append((key, n, len(prompt)))
            return n, layers

    def play(kv_reuse):
        real, turns = [], iter(script)

        def generate(model_, prompts, **kw):
            real.append(generate_transformers(model_, prompts, **kw)[0])
            return [tok(next(turns) + "<|im_end|>", add_special_tokens=False)["input_ids"]]

        miner = CheckpointMiner(
            model, tok, step_cap=3, max_new_tokens=12, backend=generate, kv_reuse=kv_reuse
        )
        if kv_reuse:
            miner.kv = Counting()
        run_problem(miner.agent_main, problem, _client(engine), Limits(step_cap=3))
        return real, miner

    cold, _ = play(False)
    warm, miner = play(True)
    assert (
        len(cold) == len(warm) == 3 and warm == cold
    )  # the same greedy tokens with and without the cache
    reused = [n for _, n, _ in Counting.reused]
    assert reused[0] == 0 and all(
        0 < n < L for _, n, L in Counting.reused[1:]
    )  # turns 2 and 3 started from the cache
    assert len(miner.kv) == 0  # the problem's cache is dropped once it ends
    assert (
        CheckpointMiner(model, tok).kv is not None
        and CheckpointMiner(model, tok, backend=scripted(tok, [])).kv is None
    )


def test_checkpoint_miner_is_deterministic_when_greedy(world):
    from shopdistill.arena.validator import Limits, run_problem

    _, engine, problem, model, tok = world
    runs = []
    for _ in range(2):
        miner = CheckpointMiner(model, tok, step_cap=3, max_new_tokens=24)
        env, _ = run_problem(miner.agent_main, problem, _client(engine), Limits(step_cap=3))
        runs.append(json.dumps(env["dialogue"], sort_keys=True))
    assert runs[0] == runs[1]


def test_a_greedy_miner_runs_each_turn_once_however_many_validators_replay_it(world):
    """Validators replay the same suite: a greedy miner's second play of a problem is answered from memory, turn for turn the
    same, without running the model; a sampling miner runs the model every time."""
    from shopdistill.arena.validator import Limits, run_problem
    from shopdistill.training.rollout import generate_transformers

    _, engine, problem, model, tok = world
    ran = []

    def counting(model_, prompts, **kw):
        ran.append(len(prompts))
        return generate_transformers(model_, prompts, **kw)

    for temperature, second_play_runs in ((0.0, False), (1.0, True)):
        miner, plays = (
            CheckpointMiner(
                model, tok, step_cap=3, max_new_tokens=16, temperature=temperature, backend=counting
            ),
            [],
        )
        for validator in range(2):
            ran.clear()
            env, _ = run_problem(
                miner.agent_main, problem, _client(engine, seed=validator), Limits(step_cap=3)
            )
            plays.append(
                ([json.dumps(st["completion"], sort_keys=True) for st in env["dialogue"]], sum(ran))
            )  # times differ
        assert plays[0][1] > 0 and (plays[1][1] > 0) is second_play_runs
        if temperature == 0:
            assert plays[0][0] == plays[1][0] and miner.generate.hits == plays[0][1]


def test_last_checkpoint_stage_follows_the_recipe_order(tmp_path):
    from shopdistill.core.run import TrainFolder

    train = TrainFolder(tmp_path)
    with pytest.raises(FileNotFoundError, match="no stage checkpoint"):
        last_checkpoint_stage(train)
    for s in ("base", "stage1_sft", "stage4_kto"):
        train.stage(s).policy.mkdir(parents=True)
        (train.stage(s).policy / "config.json").write_text("{}")
    train.stage("dr_grpo").make()  # evaluated or screened, but no model: not a checkpoint
    assert last_checkpoint_stage(train) == "stage4_kto"


def test_a_loop_season_places_the_entrant_every_day(
    tiny_season, tiny_season_yaml, tmp_path_factory, capsys
):
    from shopdistill.reproduce.settings import load_config

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(
            "SHOPDISTILL_RUNS", str(tmp_path_factory.getbasetemp() / "runs")
        )  # the tiny season's sandbox
        cfg = load_config(tiny_season / "season.yaml")
        from shopdistill.sandbox.profile import load_sandbox

        load_sandbox(cfg.run, cfg.catalog, cfg.search, cfg.tasks)  # builds the run's sandbox files
        model, tok = load_policy("tiny", TINY)
        out = run_loop(
            cfg.run,
            cfg.arena_traces,
            cfg.arena,
            cfg.catalog,
            cfg.search,
            cfg.tasks,
            cfg.train.rollout,
            LoopSettings(days=2, max_new_tokens=8),
            model,
            tok,
            progress=True,
        )
    err = capsys.readouterr().err
    played = [int(n) for n in re.findall(r"loop: the checkpoint's problems: (\d+)problem", err)]
    assert (
        played and 2 * 2 * 6 <= played[-1] <= out["summary"]["model_calls"]
    )  # the bar counted every problem it played
    place, races = out["placing"], out["races"]
    assert [p["day"] for p in place] == [0, 1]
    entrant = out["entrant"]
    for p in place:
        q = races[(races["day"] == p["day"]) & (races["phase"] == "qualifying")]
        assert p["entrants"] == len(q) and 1 <= p["qualifying_rank"] <= p["entrants"]
        assert p["leader_score"] == q["score"].max() >= p["score"]
    # the entrant ran every day with one version, and nobody copied or improved it
    versions = races.drop_duplicates("agent_version_id")
    mine = versions[
        versions["hotkey"]
        == versions.loc[versions["agent_version_id"] == entrant, "hotkey"].iloc[0]
    ]
    assert list(mine["agent_version_id"]) == [entrant]
    assert (
        out["summary"]["model_calls"] >= 2 * 2 * 6
    )  # two days x two validators x the suite's problems, a call each at least
    assert out["summary"]["days"] == 2 and placing(races, entrant) == place


def test_placing_shares_a_place_between_ties():
    import pandas as pd

    rows = [
        {
            "day": 0,
            "phase": "qualifying",
            "agent_version_id": v,
            "score": s,
            "success_rate": s,
            "qualified": s > 0.5,
            "rank": None,
            "weight": None,
        }
        for v, s in (("v000002", 0.0), ("v000001", 0.9), ("v-distilled", 0.0), ("v000003", 0.0))
    ]
    rows.append(
        {
            "day": 0,
            "phase": "race",
            "agent_version_id": "v000001",
            "score": 0.8,
            "success_rate": 0.8,
            "qualified": True,
            "rank": 1,
            "weight": 65535,
        }
    )
    (p,) = placing(pd.DataFrame(rows), "v-distilled")
    assert (p["qualifying_rank"], p["entrants"], p["qualified"], p["race_rank"], p["weight"]) == (
        2,
        4,
        False,
        None,
        0.0,
    )
    assert p["leader_score"] == 0.9 and p["race_entrants"] == 1
