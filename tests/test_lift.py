"""Chapter 04's lifting (issue 38): a sub-task trajectory's proxy log read back as the conversation in which the
assistant makes the script's calls, kept only where it agrees with what was observed, every other one ledgered."""
import copy
import json

import pytest

from shopdistill.arena.envelope import tool_call_id
from shopdistill.corpus.checks import toy_trajectory
from shopdistill.corpus.lift import LIFT_REASONS, LiftReject, lift, lift_all
from shopdistill.corpus.trajectory import assistant_message, make_tool_call, text_message, tool_message, trajectory_problems

QUERY = "a black cotton shirt"
HITS = json.dumps([{"product_id": "1000000001", "title": "Black cotton shirt", "price": 250},
                   {"product_id": "1000000002", "title": "Grey shirt", "price": 180}])
VIEWED = json.dumps([{"product_id": "1000000001", "color": "black"}])


def model(tokens: int) -> dict:
    return {"kind": "inference", "method": "POST", "path": "/inference/chat/completions", "status_code": 200,
            "timestamp": 10, "response": {"usage": {"completion_tokens": tokens}}}


def request(tool: str, params: dict, response, ts: int) -> dict:
    "A logged search as SN15's HTTP proxy writes it: the query string's values are text."
    ids = [r["product_id"] for r in response if "product_id" in r]
    return {"kind": "search", "method": "GET", "path": "/" + tool, "status_code": 200, "timestamp": ts,
            "duration_ms": 9.0, "params": params, "json_data": None, "response": response, "result_product_ids": ids}


def harness(line: int = 1, recommend: str = "1000000001", quality: float = 0.9, hidden_search: bool = False) -> dict:
    """A keyword harness's trace: two tiny model calls, then the script searches, views, recommends and terminates,
    narrating with a step counter. `hidden_search`: the script first ran a search that found nothing and that its
    dialogue never shows."""
    turns = [("Step 1: find_product.", [("find_product", {"q": "black cotton shirt"}, HITS)], ""),
             ("Step 2: view_product_information.", [("view_product_information", {"product_ids": "1000000001"}, VIEWED)], ""),
             ("Step 3: recommend_product.", [("recommend_product", {"product_ids": recommend}, "Recommendation recorded.")], ""),
             ("Step 4: terminate.", [("terminate", {"status": "success"}, None)], f"I recommend {recommend}.")]
    t = toy_trajectory(QUERY, turns, proxy=[[], [], [], []], quality=quality, line=line)
    steps = t["meta"]["steps"]
    steps[0]["proxy_calls"] = ([model(1), model(5)]
                               + ([request("find_product", {"q": "cotton shirt black", "page": "1"}, [], 20)] if hidden_search else [])
                               + [request("find_product", {"q": "black cotton shirt", "page": "1"}, json.loads(HITS), 30)])
    steps[1]["proxy_calls"] = [request("view_product_information", {"product_ids": "1000000001"}, json.loads(VIEWED), 40)]
    return t


def turn(think: str, name: str, args: dict, result: str | None, content: str = "") -> list:
    cid = tool_call_id(name, args)
    return [assistant_message(content, think, [make_tool_call(cid, name, args)])] + ([tool_message(cid, name, result)] if result is not None else [])


def test_a_hand_made_subtask_trajectory_lifts_to_the_expected_conversation():
    original = harness(hidden_search=True)
    out = lift(original)
    expected = ([text_message("user", QUERY)]
                + turn("", "find_product", {"q": "cotton shirt black", "page": 1}, "[]")  # in the log, not the dialogue
                + turn("Step 1: find_product.", "find_product", {"q": "black cotton shirt", "page": 1}, HITS)
                + turn("Step 2: view_product_information.", "view_product_information", {"product_ids": "1000000001"}, VIEWED)
                + turn("Step 3: recommend_product.", "recommend_product", {"product_ids": "1000000001"}, "Recommendation recorded.")
                + turn("Step 4: terminate.", "terminate", {"status": "success"}, None, "I recommend 1000000001."))
    assert out["messages"] == expected
    assert trajectory_problems(out) == []
    assert out["meta"]["extra"]["lifted_from"] == original["trajectory_id"] != out["trajectory_id"]
    assert (out["problem_id"], out["query"], out["meta"]["judge"]) == (original["problem_id"], QUERY, original["meta"]["judge"])
    # the lifted steps hold the original's whole proxy log, each request with the turn that shows it
    assert [[c["kind"] for c in s["proxy_calls"]] for s in out["meta"]["steps"]] == [
        ["inference", "inference", "search"], ["search"], ["search"], [], []]


def test_a_recommended_id_never_shown_in_a_result_is_dropped_with_that_reason():
    with pytest.raises(LiftReject) as e: lift(harness(recommend="1000000007"))
    assert (e.value.reason, e.value.detail) == ("unseen_recommendation", "1000000007")
    # the dialogue claims a result naming the id, but the proxy logged another: the conversation shows the log's
    forged = harness(recommend="1000000007")
    forged["messages"][2]["content"] = json.dumps([{"product_id": "1000000007", "title": "Black cotton shirt"}])
    lifted, ledger = lift_all([forged])
    assert lifted == [] and [(x["reason"], x["detail"]) for x in ledger.entries] == [("unseen_recommendation", "1000000007")]


def test_a_cut_result_is_used_only_when_the_dialogue_confirms_it():
    cut = harness()
    for s in cut["meta"]["steps"]:
        for c in s["proxy_calls"]:
            if c["kind"] == "search": c["response_truncated"] = json.dumps(c.pop("response"))[:30]
    assert lift(cut)["messages"][2]["content"] == HITS
    forged = copy.deepcopy(cut)
    forged["messages"][2]["content"] = json.dumps([{"product_id": "1000000001", "title": "Something else"}])
    with pytest.raises(LiftReject, match="unpaired"): lift(forged)


def test_the_ledger_accounts_for_every_subtask_trajectory_of_a_batch():
    failed = harness(line=5)
    failed["meta"]["steps"][1]["proxy_calls"][0]["status_code"] = 500
    no_log = harness(line=6)
    no_log["meta"]["source"]["format"] = "openai_messages"
    two_recs = harness(line=7)
    two_recs["messages"][5]["tool_calls"].append(make_tool_call("x", "recommend_product", {"product_ids": "1000000002"}))
    batch = [harness(line=1), harness(line=2, hidden_search=True), harness(line=3, recommend="1000000007"),
             harness(line=4, quality=0.3), failed, no_log, two_recs]
    lifted, ledger = lift_all(batch)
    assert len(lifted) + len(ledger) == len(batch) == 7
    assert ledger.reasons() == {"judge_verdict": 1, "no_proxy_log": 1, "no_recommendation": 1, "unliftable_request": 1,
                                "unseen_recommendation": 1}
    assert all(e["reason"] in LIFT_REASONS for e in ledger.entries)
    accounted = [t["meta"]["extra"]["lifted_from"] for t in lifted] + [e["trajectory_id"] for e in ledger.entries]
    assert sorted(accounted) == sorted(t["trajectory_id"] for t in batch)


def test_the_simulated_harnesses_traces_lift_with_their_verdict_and_results():
    "Chapter 02's sub-task miners, through the validator and chapter 03's reader: every trace lifts, the proxy's cut results completed, the gate proxy's verdict unchanged."
    import random
    from dataclasses import replace
    from shopdistill.arena.miners import MinerAgent, MinerSpec
    from shopdistill.arena.tool_client import InProcessToolClient, SearchCache, SimClock
    from shopdistill.arena.validator import run_problem
    from shopdistill.corpus.checks import FilterSettings
    from shopdistill.corpus.judge import GateProxyJudge
    from shopdistill.corpus.readers import read_sn15_envelope
    from shopdistill.sandbox.catalog import Catalog, generate_catalog
    from shopdistill.sandbox.search import SearchEngine
    from shopdistill.sandbox.task_synthesis import synthesize_tasks
    cat = Catalog.from_records(generate_catalog(2000, seed=0))
    cache = SearchCache(SearchEngine.build(cat))
    tasks = synthesize_tasks(cat, {"product": 2, "shop": 2, "voucher": 2}, seed=3)
    trajs = []
    for spec in (MinerSpec.make("subtask", "keywords"), MinerSpec.make("subtask", "narrator", narrate_detail=1.0)):
        for i, t in enumerate(tasks):
            env, _ = run_problem(MinerAgent(spec), t, InProcessToolClient(cache, SimClock(1_774_000_000_000), random.Random(i)))
            tr = read_sn15_envelope(env, f"{spec.variant}.jsonl", i + 1, json.dumps(env).encode())
            tr["meta"]["judge"] = GateProxyJudge().judge(tr)
            trajs.append(tr)
    assert any("response_truncated" in c for tr in trajs for s in tr["meta"]["steps"] for c in s["proxy_calls"])
    lifted, ledger = lift_all(trajs, replace(FilterSettings(), min_quality=0.0), judge=GateProxyJudge())
    assert len(ledger) == 0 and len(lifted) == len(trajs)
    for out, tr in zip(lifted, trajs):
        results = lambda x: [m["content"] for m in x["messages"] if m["role"] == "tool"]
        assert results(out) == results(tr)  # this harness shows every request faithfully: the same results, in order
