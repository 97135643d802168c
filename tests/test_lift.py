"""Chapter 04's lifting (issue 38): a sub-task trajectory's proxy log read back as the conversation in which the
assistant makes the script's calls, kept only where it agrees with what was observed, every other one ledgered; and the
corpus build behind `corpus.lift`: every Axis-B trajectory of a toy season lifted or ledgered, the lifted split under the
corpus's leak guard, and the filtered corpus byte for byte the same with the setting off."""

import copy
import json
import shutil
from collections import Counter
from dataclasses import replace

import datasets
import pandas as pd
import pytest

from shopdistill.arena.envelope import tool_call_id
from shopdistill.core.run import ArenaFolder, CorpusFolder
from shopdistill.corpus.build import LIFTED_SPLITS, build_corpus, split_lifted
from shopdistill.corpus.chat import render_chat
from shopdistill.corpus.checks import toy_trajectory
from shopdistill.corpus.lift import LIFT_REASONS, LiftReject, lift, lift_all
from shopdistill.corpus.normalise import read_shard
from shopdistill.corpus.trajectory import (
    assistant_message,
    from_arrow_row,
    make_tool_call,
    text_message,
    tool_message,
    trajectory_problems,
)
from shopdistill.reproduce.settings import load_config

QUERY = "a black cotton shirt"
HITS = json.dumps(
    [
        {"product_id": "1000000001", "title": "Black cotton shirt", "price": 250},
        {"product_id": "1000000002", "title": "Grey shirt", "price": 180},
    ]
)
VIEWED = json.dumps([{"product_id": "1000000001", "color": "black"}])


def model(tokens: int) -> dict:
    return {
        "kind": "inference",
        "method": "POST",
        "path": "/inference/chat/completions",
        "status_code": 200,
        "timestamp": 10,
        "response": {"usage": {"completion_tokens": tokens}},
    }


def request(tool: str, params: dict, response, ts: int) -> dict:
    "A logged search as SN15's HTTP proxy writes it: the query string's values are text."
    ids = [r["product_id"] for r in response if "product_id" in r]
    return {
        "kind": "search",
        "method": "GET",
        "path": "/" + tool,
        "status_code": 200,
        "timestamp": ts,
        "duration_ms": 9.0,
        "params": params,
        "json_data": None,
        "response": response,
        "result_product_ids": ids,
    }


def harness(
    line: int = 1, recommend: str = "1000000001", quality: float = 0.9, hidden_search: bool = False
) -> dict:
    """A keyword harness's trace: two tiny model calls, then the script searches, views, recommends and terminates,
    narrating with a step counter. `hidden_search`: the script first ran a search that found nothing and that its
    dialogue never shows."""
    turns = [
        ("Step 1: find_product.", [("find_product", {"q": "black cotton shirt"}, HITS)], ""),
        (
            "Step 2: view_product_information.",
            [("view_product_information", {"product_ids": "1000000001"}, VIEWED)],
            "",
        ),
        (
            "Step 3: recommend_product.",
            [("recommend_product", {"product_ids": recommend}, "Recommendation recorded.")],
            "",
        ),
        (
            "Step 4: terminate.",
            [("terminate", {"status": "success"}, None)],
            f"I recommend {recommend}.",
        ),
    ]
    t = toy_trajectory(QUERY, turns, proxy=[[], [], [], []], quality=quality, line=line)
    steps = t["meta"]["steps"]
    steps[0]["proxy_calls"] = (
        [model(1), model(5)]
        + (
            [request("find_product", {"q": "cotton shirt black", "page": "1"}, [], 20)]
            if hidden_search
            else []
        )
        + [request("find_product", {"q": "black cotton shirt", "page": "1"}, json.loads(HITS), 30)]
    )
    steps[1]["proxy_calls"] = [
        request("view_product_information", {"product_ids": "1000000001"}, json.loads(VIEWED), 40)
    ]
    return t


def turn(think: str, name: str, args: dict, result: str | None, content: str = "") -> list:
    cid = tool_call_id(name, args)
    return [assistant_message(content, think, [make_tool_call(cid, name, args)])] + (
        [tool_message(cid, name, result)] if result is not None else []
    )


def test_a_hand_made_subtask_trajectory_lifts_to_the_expected_conversation():
    original = harness(hidden_search=True)
    out = lift(original)
    expected = (
        [text_message("user", QUERY)]
        + turn(
            "", "find_product", {"q": "cotton shirt black", "page": 1}, "[]"
        )  # in the log, not the dialogue
        + turn(
            "Step 1: find_product.", "find_product", {"q": "black cotton shirt", "page": 1}, HITS
        )
        + turn(
            "Step 2: view_product_information.",
            "view_product_information",
            {"product_ids": "1000000001"},
            VIEWED,
        )
        + turn(
            "Step 3: recommend_product.",
            "recommend_product",
            {"product_ids": "1000000001"},
            "Recommendation recorded.",
        )
        + turn(
            "Step 4: terminate.",
            "terminate",
            {"status": "success"},
            None,
            "I recommend 1000000001.",
        )
    )
    assert out["messages"] == expected
    assert trajectory_problems(out) == []
    assert out["meta"]["extra"]["lifted_from"] == original["trajectory_id"] != out["trajectory_id"]
    assert (out["problem_id"], out["query"], out["meta"]["judge"]) == (
        original["problem_id"],
        QUERY,
        original["meta"]["judge"],
    )
    # the lifted steps hold the original's whole proxy log, each request with the turn that shows it
    assert [[c["kind"] for c in s["proxy_calls"]] for s in out["meta"]["steps"]] == [
        ["inference", "inference", "search"],
        ["search"],
        ["search"],
        [],
        [],
    ]


def test_a_recommended_id_never_shown_in_a_result_is_dropped_with_that_reason():
    with pytest.raises(LiftReject) as e:
        lift(harness(recommend="1000000007"))
    assert (e.value.reason, e.value.detail) == ("unseen_recommendation", "1000000007")
    # the dialogue claims a result naming the id, but the proxy logged another: the conversation shows the log's
    forged = harness(recommend="1000000007")
    forged["messages"][2]["content"] = json.dumps(
        [{"product_id": "1000000007", "title": "Black cotton shirt"}]
    )
    lifted, ledger = lift_all([forged])
    assert lifted == [] and [(x["reason"], x["detail"]) for x in ledger.entries] == [
        ("unseen_recommendation", "1000000007")
    ]


def test_a_cut_result_is_used_only_when_the_dialogue_confirms_it():
    cut = harness()
    for s in cut["meta"]["steps"]:
        for c in s["proxy_calls"]:
            if c["kind"] == "search":
                c["response_truncated"] = json.dumps(c.pop("response"))[:30]
    assert lift(cut)["messages"][2]["content"] == HITS
    forged = copy.deepcopy(cut)
    forged["messages"][2]["content"] = json.dumps(
        [{"product_id": "1000000001", "title": "Something else"}]
    )
    with pytest.raises(LiftReject, match="unpaired"):
        lift(forged)


def test_the_ledger_accounts_for_every_subtask_trajectory_of_a_batch():
    failed = harness(line=5)
    failed["meta"]["steps"][1]["proxy_calls"][0]["status_code"] = 500
    no_log = harness(line=6)
    no_log["meta"]["source"]["format"] = "openai_messages"
    two_recs = harness(line=7)
    two_recs["messages"][5]["tool_calls"].append(
        make_tool_call("x", "recommend_product", {"product_ids": "1000000002"})
    )
    batch = [
        harness(line=1),
        harness(line=2, hidden_search=True),
        harness(line=3, recommend="1000000007"),
        harness(line=4, quality=0.3),
        failed,
        no_log,
        two_recs,
    ]
    lifted, ledger = lift_all(batch)
    assert len(lifted) + len(ledger) == len(batch) == 7
    assert ledger.reasons() == {
        "judge_verdict": 1,
        "no_proxy_log": 1,
        "no_recommendation": 1,
        "unliftable_request": 1,
        "unseen_recommendation": 1,
    }
    assert all(e["reason"] in LIFT_REASONS for e in ledger.entries)
    accounted = [t["meta"]["extra"]["lifted_from"] for t in lifted] + [
        e["trajectory_id"] for e in ledger.entries
    ]
    assert sorted(accounted) == sorted(t["trajectory_id"] for t in batch)


def test_a_malformed_proxy_log_is_ledgered_not_raised():
    "Chapter 03 keeps a proxy log's entries as logged: odd ones end in the ledger with a reason, never as an exception."
    odd_params, odd_ids, odd_entry = harness(line=1), harness(line=2), harness(line=3)
    odd_params["meta"]["steps"][1]["proxy_calls"][0]["params"] = ["product_ids", "1000000001"]
    cut = odd_ids["meta"]["steps"][0]["proxy_calls"][-1]
    cut["response_truncated"], cut["result_product_ids"] = (
        json.dumps(cut.pop("response"))[:30],
        "1000000001,1000000002",
    )
    odd_entry["meta"]["steps"][0]["proxy_calls"].insert(0, "not a request")
    lifted, ledger = lift_all([odd_params, odd_ids, odd_entry])
    assert [e["reason"] for e in ledger.entries] == ["unliftable_request", "unpaired"]
    assert (
        lifted[0]["meta"]["steps"][0]["proxy_calls"][0] == "not a request"
    )  # kept in the log, shown as no call


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
    for spec in (
        MinerSpec.make("subtask", "keywords"),
        MinerSpec.make("subtask", "narrator", narrate_detail=1.0),
    ):
        for i, t in enumerate(tasks):
            env, _ = run_problem(
                MinerAgent(spec),
                t,
                InProcessToolClient(cache, SimClock(1_774_000_000_000), random.Random(i)),
            )
            tr = read_sn15_envelope(env, f"{spec.variant}.jsonl", i + 1, json.dumps(env).encode())
            tr["meta"]["judge"] = GateProxyJudge().judge(tr)
            trajs.append(tr)
    assert any(
        "response_truncated" in c
        for tr in trajs
        for s in tr["meta"]["steps"]
        for c in s["proxy_calls"]
    )
    lifted, ledger = lift_all(
        trajs, replace(FilterSettings(), min_quality=0.0), judge=GateProxyJudge()
    )
    assert len(ledger) == 0 and len(lifted) == len(trajs)
    for out, tr in zip(lifted, trajs):
        results = lambda x: [m["content"] for m in x["messages"] if m["role"] == "tool"]
        assert results(out) == results(
            tr
        )  # this harness shows every request faithfully: the same results, in order


# ---- the corpus build with lifting (issue 38, Build point 1), on the tiny season of conftest ----


OPEN_GATE = lambda fs: replace(
    fs, min_quality=0.1
)  # the tiny season's filter with the lowest score the gate proxy gives


@pytest.fixture(scope="module")
def season_builds(tmp_path_factory, tiny_corpus):
    """(the tiny season's folder, {lift: the build's summary}): the corpus built with `corpus.lift` on and off from the
    same chapter 03 trajectories (those of conftest's `tiny_corpus`), in one process each. The gate proxy scores every
    harness of the tiny season 0.1, so the gate is opened to it: the lift then decides by its own rules."""
    d, _ = tiny_corpus
    with (
        pytest.MonkeyPatch.context() as mp
    ):  # the builds find their sandbox where the first one put it
        mp.setenv("SHOPDISTILL_RUNS", str(tmp_path_factory.getbasetemp() / "runs"))
        cfg = load_config(d / "tiny.yaml")
        return d, {
            on: build_corpus(
                cfg.run,
                OPEN_GATE(cfg.filter),
                replace(cfg.corpus, lift=on),
                cfg.normalise,
                cfg.judge,
                cfg.arena.clusters,
                cfg.catalog,
                None,
                tmp_path_factory.mktemp(f"lift-{on}"),
                trajectories_dir=CorpusFolder(d / "corpus").trajectories,
                workers=1,
                progress=False,
            )
            for on in (True, False)
        }


def lifted_parts(out: CorpusFolder) -> dict:
    "Part -> the lifted split's rows of that part (an empty frame for a part the build wrote no file for)."
    return {
        p: pd.read_parquet(out.split_file(p, "lifted"))
        if out.split_file(p, "lifted").exists()
        else pd.DataFrame(columns=["trajectory_id", "problem_id", "cluster", "lifted_from"])
        for p in LIFTED_SPLITS
    }


def test_the_build_lifts_or_ledgers_every_subtask_trajectory_of_a_toy_season(season_builds):
    d, built = season_builds
    s, out = built[True], CorpusFolder(built[True]["out_dir"])
    decisions = pd.read_parquet(out.decisions)
    subtask = decisions.loc[decisions["axis"] == "B"]
    assert len(subtask) and (subtask["stage"] != "kept").all()
    lifted = pd.concat(lifted_parts(out).values(), ignore_index=True)
    ledger = [json.loads(line) for line in out.lift_ledger.read_text().splitlines()]
    assert len(lifted) and len(ledger)  # both outcomes occur in the toy season
    assert len(lifted) + len(ledger) == len(subtask) == s["lift"]["subtask"]
    assert sorted(list(lifted["lifted_from"]) + [e["trajectory_id"] for e in ledger]) == sorted(
        subtask["trajectory_id"]
    )
    assert dict(Counter(e["reason"] for e in ledger)) == s["lift"]["ledger"] and set(
        s["lift"]["ledger"]
    ) <= set(LIFT_REASONS)
    assert s["lift"]["splits"] == {p: int((lifted["split"] == p).sum()) for p in LIFTED_SPLITS}
    # rows of the corpus's own form, sources named relative to the traces' folder as the corpus names them
    assert (lifted["axis"] == "B").all() and set(lifted["source_file"]) <= set(
        subtask["source_file"]
    )
    assert not any(e["source"].startswith("/") for e in ledger)
    # each stored conversation is the one `lift` makes of its original, and renders as it does
    dd = datasets.load_from_disk(str(out.lifted))
    assert sum(len(v) for v in dd.values()) == len(lifted)
    fs = OPEN_GATE(load_config(d / "tiny.yaml").filter)
    originals = {
        t["trajectory_id"]: t
        for p in sorted(CorpusFolder(d / "corpus").trajectories.glob("shard-*.jsonl.gz"))
        for t in read_shard(p)
        if t["trajectory_id"] in set(lifted["lifted_from"])
    }
    for part in dd.values():
        for row in part.select(range(min(10, len(part)))):
            want, back = lift(originals[row["lifted_from"]], fs), from_arrow_row(row)
            assert back["messages"] == want["messages"] and back["tools"] == want["tools"]
            assert render_chat(row["messages"], json.loads(row["tools"])) == render_chat(
                want["messages"], want["tools"]
            )


def test_a_lifted_conversation_trains_only_where_the_corpus_split_and_the_held_out_evaluation_allow():
    "Unit: the split of a lifted conversation is its leak cluster's in the corpus, and the bank's held-out clusters hold it back."
    result = {
        "kept": pd.DataFrame(
            {"problem_id": ["p1", "p2"], "cluster": [0, 1], "split": ["train", "eval"]}
        ),
        "cluster_of": {"p1": 0, "p2": 1, "p3": 0, "p4": 2, "p5": 0},
    }
    rows = pd.DataFrame({"problem_id": ["p1", "p2", "p3", "p4", "p5"], "query": ["q"] * 5})
    bank = {
        "p1": 10,
        "p2": 11,
        "p3": 10,
        "p5": 12,
    }  # p5: of a bank cluster the corpus holds no problem of
    assert list(split_lifted(rows, result, bank)["split"]) == [
        "train",
        "eval",
        "train",
        "unassigned",
        "unassigned",
    ]


def test_a_lifted_conversation_of_a_held_out_cluster_problem_never_lands_in_train(season_builds):
    from shopdistill.training.evaluation import corpus_clusters, heldout_problems

    d, built = season_builds
    s, out = built[True], CorpusFolder(built[True]["out_dir"])
    train, ev = (pd.read_parquet(out.split_file(p)) for p in ("train", "eval"))
    parts = lifted_parts(out)
    assert len(parts["train"]) and len(parts["eval"]) + len(
        parts["unassigned"]
    )  # the guard has something to decide
    # the corpus's leak-cluster split: lifted train only in train clusters, lifted eval only in eval clusters
    assert set(parts["train"]["cluster"]) <= set(train["cluster"]) and not set(
        parts["train"]["cluster"]
    ) & set(ev["cluster"])
    assert set(parts["eval"]["cluster"]) <= set(ev["cluster"])
    assert s["lift"]["audit"] == [] == s["audit"]
    # chapter 05's held-out evaluation, drawn as it draws it from the corpus: no lifted train problem shares a bank cluster with it
    bank = [json.loads(line) for line in open(ArenaFolder(d / "arena").bank)]
    cluster = {p["id"]: p["cluster"] for p in bank}
    held_out = heldout_problems(
        bank,
        ["product", "shop", "voucher"],
        10**6,
        exclude_clusters=corpus_clusters(bank, set(train["problem_id"]) | set(ev["problem_id"])),
    )
    assert held_out and not {p["cluster"] for p in held_out} & {
        cluster.get(p) for p in parts["train"]["problem_id"]
    }
    # nor does any lifted conversation of an evaluation problem itself
    assert not {p["id"] for p in held_out} & set(parts["train"]["problem_id"])


def test_with_lifting_off_nothing_is_lifted_and_the_filtered_corpus_is_byte_identical(
    season_builds, tmp_path, tmp_path_factory
):
    d, built = season_builds
    on, off = CorpusFolder(built[True]["out_dir"]), CorpusFolder(built[False]["out_dir"])
    assert built[False]["lift"] is None and built[True]["lift"]["lifted"] > 0
    assert (
        not off.lifted.exists()
        and not off.lift_ledger.exists()
        and not list(off.parquet.glob("lifted-*"))
    )
    assert (
        "## The lifted split" in on.card.read_text()
        and "## The lifted split" not in off.card.read_text()
    )
    files = [
        p.relative_to(on.path)
        for p in sorted(on.path.rglob("*"))
        if p.is_file()
        and (
            p.parent == on.parquet
            and not p.name.startswith("lifted-")
            or p.suffix == ".arrow"
            and "lifted" not in p.parts
        )
    ]
    assert len(files) >= 8 and on.decisions.relative_to(on.path) not in files
    for rel in files + [
        on.decisions.relative_to(on.path),
        on.problems.relative_to(on.path),
        on.funnel.relative_to(on.path),
        on.audits.relative_to(on.path),
    ]:
        assert (on.path / rel).read_bytes() == (off.path / rel).read_bytes(), rel
    # a build with lifting off over one that lifted leaves no lifted split behind
    shutil.copytree(on.path, tmp_path / "again")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SHOPDISTILL_RUNS", str(tmp_path_factory.getbasetemp() / "runs"))
        cfg = load_config(d / "tiny.yaml")
        build_corpus(
            cfg.run,
            OPEN_GATE(cfg.filter),
            replace(cfg.corpus, lift=False),
            cfg.normalise,
            cfg.judge,
            cfg.arena.clusters,
            cfg.catalog,
            None,
            tmp_path / "again",
            trajectories_dir=CorpusFolder(d / "corpus").trajectories,
            workers=1,
            progress=False,
        )
    again = CorpusFolder(tmp_path / "again")
    assert (
        not again.lifted.exists()
        and not again.lift_ledger.exists()
        and not list(again.parquet.glob("lifted-*"))
    )


def test_the_card_describes_the_lifted_split_and_loads_it(season_builds):
    "The released card: the lifted configuration in its header, its size, source, rules and default use in its prose, and its loading snippet runs."
    import re
    from huggingface_hub import DatasetCard
    from shopdistill.corpus.card import LOAD_FOLDER

    _, built = season_builds
    s, out = built[True], CorpusFolder(built[True]["out_dir"])
    card = DatasetCard.load(out.card)
    lifted = [c for c in card.data.to_dict()["configs"] if c["config_name"] == "lifted"][0]
    assert [f["path"] for f in lifted["data_files"]] == [
        f"parquet/lifted-{p}.parquet" for p, n in s["lift"]["splits"].items() if n
    ]
    prose = " ".join(card.text.split())
    assert (
        f"Of the {s['lift']['subtask']:,} it rejected here, {s['lift']['lifted']:,} are released lifted"
        in prose
    )
    assert (
        "every recommended id appears in a result" in prose
        and "No stage of the recipe trains on the lifted split" in prose
    )
    env = {}
    exec(
        re.search(r"```python\n(.*?)```", card.text, re.S)
        .group(1)
        .replace(LOAD_FOLDER, str(out.path)),
        env,
    )
    assert {k: len(v) for k, v in env["lifted"].items()} == {
        k: v for k, v in s["lift"]["splits"].items() if v
    }
