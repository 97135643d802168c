"""Chapter 04's stages, table-driven: the reasoning gate, the format gate, the five hard rejects, ranking, exact and near
dedup, the token counter and the chat rendering (against TRL's template through a tokenizer), and the Axis-A
classification measured against the hidden style labels of a tiny simulated season (precision >= 0.95, recall >= 0.90)."""

import copy
import json
from dataclasses import replace

import pandas as pd
import pytest

from shopdistill.corpus.checks import (
    FilterSettings,
    argument_problems,
    ends_without_action,
    format_problems,
    pairing_problems,
    reasoning_gate,
    recommend_calls,
    recommend_problems,
    toy_trajectory,
    unanimous_groups,
)
from shopdistill.corpus.filter import STAGES, apply_stages, funnel, trajectory_features
from shopdistill.corpus.tokens import TokenCounter, load_counter, train_bpe
from shopdistill.corpus.dedup import (
    assistant_shingles,
    exact_key,
    minhash_signature,
    near_duplicates,
)
from shopdistill.corpus.axes import (
    axis_signals,
    classify_axis,
    templated_shares,
    thinking_templates,
)
from shopdistill.corpus.chat import qwen3_template_text, render_chat
from shopdistill.corpus.ranking import structural_score, structure_signals
from shopdistill.core.run import ArenaFolder

S = FilterSettings(tokenizer="chars/4")
HITS = json.dumps(
    [
        {"product_id": "1000000001", "title": "Black cotton shirt", "price": 250},
        {"product_id": "1000000002", "title": "Grey shirt", "price": 180},
    ]
)
SEARCH = ("Search for the shirt.", [("find_product", {"q": "black cotton shirt"}, HITS)], "")
VIEW = (
    "1000000001 is black cotton, 1000000002 grey: check the first.",
    [("view_product_information", {"product_ids": "1000000001"}, '[{"product_id": "1000000001"}]')],
    "",
)
REC = (
    "Black cotton at 250 PHP: recommend it.",
    [("recommend_product", {"product_ids": "1000000001"}, "Recommendation recorded.")],
    "",
)
TERM = ("Done.", [("terminate", {"status": "success"}, None)], "I recommend 1000000001.")
GOOD = [SEARCH, VIEW, REC, TERM]
CATALOG = {"1000000001", "1000000002"}


def traj(turns=GOOD, **kw):
    return toy_trajectory("a black cotton shirt", turns, **kw)


# ---- the reasoning gate ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "quality,threshold,ok",
    [
        (0.1, 0.5, False),
        (0.3, 0.5, False),
        (0.5, 0.5, True),
        (0.7, 0.5, True),
        (0.9, 0.5, True),
        (None, 0.5, False),
        (0.7, 0.7, True),
        (0.5, 0.7, False),
    ],
)
def test_reasoning_gate(quality, threshold, ok):
    assert reasoning_gate(quality, threshold) is ok


def test_unanimous_groups():
    assert unanimous_groups(
        [("v1", "p"), ("v1", "p"), ("v2", "p"), ("v1", "q")], [True, False, True, True]
    ) == [False, False, True, True]


# ---- the format gate ---------------------------------------------------------------------------------------------------
FIND = {
    "type": "object",
    "properties": {
        "q": {"type": "string"},
        "page": {"type": "integer"},
        "shop_id": {"type": "string", "nullable": True},
    },
    "required": ["q"],
}


@pytest.mark.parametrize(
    "args,problems",
    [
        ({"q": "x"}, []),
        ({"q": "x", "page": 2}, []),
        ({"q": "x", "shop_id": None}, []),
        ({}, ["missing q"]),
        ({"q": "x", "colour": "red"}, ["unexpected colour"]),
        ({"q": 3}, ["q should be string, got int"]),
        ({"q": "x", "page": "2"}, ["page should be integer, got str"]),
        ({"q": "x", "page": True}, ["page should be integer, got bool"]),
        ({"q": None}, ["q should be string, got NoneType"]),
        ({"q": ["x"]}, ["q should be string, got list"]),
    ],
)
def test_argument_problems(args, problems):
    assert argument_problems(args, FIND) == problems


def test_format_gate_reads_issues_schemas_and_unknown_tools():
    assert format_problems(traj()) == []
    t = traj()
    t["meta"]["issues"].append({"code": "unparseable_arguments", "step": 1, "detail": {}})
    assert format_problems(t) == ["unparseable_arguments at step 1"]
    t = traj([SEARCH, ("x", [("get_weather", {"city": "Manila"}, "sunny")], ""), REC, TERM])
    assert any("unknown tool get_weather" in p for p in format_problems(t))
    t = traj(
        [SEARCH, ("x", [("recommend_product", {"product_ids": ["1000000001"]}, "ok")], ""), TERM]
    )
    assert format_problems(t) == [
        "message 3: recommend_product: product_ids should be string, got list"
    ]
    t = traj()
    t["meta"]["issues"].append(
        {"code": "duplicate_tool_call_id", "step": 1, "detail": "a -> a-2"}
    )  # renamed ids are not a format fault
    assert format_problems(t) == []


# ---- the five hard rejects ---------------------------------------------------------------------------------------------
def _rejects(t, known=CATALOG, tokens=None, budget=14_336):
    out = set()
    if pairing_problems(t):
        out.add("unpaired")
    if ends_without_action(t):
        out.add("think_then_stop")
    if len(recommend_calls(t)) != 1:
        out.add("recommend_count")
    elif recommend_problems(t, known):
        out.add("recommend_arguments")
    if tokens is not None and tokens > budget:
        out.add("over_budget")
    return out


def _no_result(turn):
    return (turn[0], [(n, a, None) for n, a, _ in turn[1]], turn[2])


def _orphan_result():
    t = traj()
    t["messages"].insert(
        3, {"role": "tool", "tool_call_id": "nobody", "name": "find_product", "content": "[]"}
    )
    t["meta"]["steps"] = [
        {**s, "message_index": s["message_index"] + (s["message_index"] > 3)}
        for s in t["meta"]["steps"]
    ]
    return t


def _late_result():  # a result that arrives after the next assistant turn answers no open call
    t = traj()
    res = t["messages"].pop(2)
    t["messages"].insert(3, res)
    return t


CASES = {
    "good": (traj(), set()),
    "final terminate unanswered is exempt": (traj(), set()),
    "final terminate answered": (
        traj([SEARCH, VIEW, REC, ("Done.", [("terminate", {"status": "success"}, "ok")], "")]),
        set(),
    ),
    "search without result": (traj([_no_result(SEARCH), VIEW, REC, TERM]), {"unpaired"}),
    "recommend without result": (traj([SEARCH, VIEW, _no_result(REC), TERM]), {"unpaired"}),
    "result answering nothing": (_orphan_result(), {"unpaired"}),
    "result after the next turn": (_late_result(), {"unpaired"}),
    "no recommendation": (traj([SEARCH, VIEW, TERM]), {"recommend_count"}),
    "two recommendations": (traj([SEARCH, REC, REC, TERM]), {"recommend_count"}),
    "list of ids": (
        traj(
            [
                SEARCH,
                ("r", [("recommend_product", {"product_ids": ["1000000001"]}, "ok")], ""),
                TERM,
            ]
        ),
        {"recommend_arguments"},
    ),
    "ids not digits": (
        traj(
            [
                SEARCH,
                ("r", [("recommend_product", {"product_ids": "the black one"}, "ok")], ""),
                TERM,
            ]
        ),
        {"recommend_arguments"},
    ),
    "missing argument": (
        traj([SEARCH, ("r", [("recommend_product", {}, "ok")], ""), TERM]),
        {"recommend_arguments"},
    ),
    "unknown id": (
        traj(
            [SEARCH, ("r", [("recommend_product", {"product_ids": "1000000009"}, "ok")], ""), TERM]
        ),
        {"recommend_arguments"},
    ),
    "one of two ids unknown": (
        traj(
            [
                SEARCH,
                ("r", [("recommend_product", {"product_ids": "1000000001,1000000009"}, "ok")], ""),
                TERM,
            ]
        ),
        {"recommend_arguments"},
    ),
    "two known ids": (
        traj(
            [
                SEARCH,
                ("r", [("recommend_product", {"product_ids": "1000000001, 1000000002"}, "ok")], ""),
                TERM,
            ]
        ),
        set(),
    ),
    "thinks then stops": (
        traj([SEARCH, VIEW, ("1000000001 looks best.", [], "")]),
        {"think_then_stop", "recommend_count"},
    ),
    "stops with nothing": (traj([SEARCH, REC, ("", [], "")]), {"think_then_stop"}),
    "ends on a response": (traj([SEARCH, REC, ("", [], "I recommend 1000000001.")]), set()),
}


@pytest.mark.parametrize("name", list(CASES))
def test_hard_rejects(name):
    t, want = CASES[name]
    assert _rejects(t) == want


def test_unpaired_exemption_is_a_setting():
    assert pairing_problems(traj(), exempt_final_terminate=False) == [
        "call call3_0 (terminate) has no result"
    ]


def test_unknown_ids_without_a_catalog_are_ids_the_trace_never_saw():
    assert recommend_problems(traj(), None) == []
    t = traj(
        [SEARCH, ("r", [("recommend_product", {"product_ids": "1000000003"}, "ok")], ""), TERM]
    )
    assert recommend_problems(t, None) == ["unknown product id 1000000003"]


@pytest.mark.parametrize("tokens,rejected", [(100, False), (14_336, False), (14_337, True)])
def test_token_budget(tokens, rejected):
    assert ("over_budget" in _rejects(traj(), tokens=tokens)) is rejected


# ---- ranking and dedup -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "turns,signals",
    [
        (
            GOOD,
            {
                "depth": 4,
                "reformulations": 0,
                "verification": 1.0,
                "calls": 4,
                "repeats": 0,
                "max_repeat": 1,
            },
        ),
        (
            [SEARCH, SEARCH, SEARCH, REC, TERM],
            {
                "depth": 5,
                "reformulations": 0,
                "verification": 0.0,
                "calls": 5,
                "repeats": 2,
                "max_repeat": 3,
            },
        ),
        (
            [
                ("a", [("find_product", {"q": "black cotton shirt xl"}, "[]")], ""),
                SEARCH,
                VIEW,
                REC,
                TERM,
            ],
            {
                "depth": 5,
                "reformulations": 1,
                "verification": 1.0,
                "calls": 5,
                "repeats": 0,
                "max_repeat": 1,
            },
        ),
        (
            [
                SEARCH,
                ("", [("recommend_product", {"product_ids": "1000000001,1000000002"}, "ok")], ""),
                TERM,
            ],
            {
                "depth": 2,
                "reformulations": 0,
                "verification": 0.0,
                "calls": 3,
                "repeats": 0,
                "max_repeat": 1,
            },
        ),
        (
            [
                SEARCH,
                ("", [("view_product_information", {"product_ids": "1000000002"}, "[]")], ""),
                ("", [("recommend_product", {"product_ids": "1000000001,1000000002"}, "ok")], ""),
                TERM,
            ],
            {
                "depth": 2,
                "reformulations": 0,
                "verification": 0.5,
                "calls": 4,
                "repeats": 0,
                "max_repeat": 1,
            },
        ),
    ],
)
def test_structure_signals(turns, signals):
    assert structure_signals(traj(turns)) == signals


def test_structural_score_orders_and_rejects_unknown_weights():
    good, loop = (
        structural_score(structure_signals(traj()), S),
        structural_score(structure_signals(traj([SEARCH] * 4 + [REC, TERM])), S),
    )
    assert 0 <= loop < good <= 1
    with pytest.raises(ValueError, match="unknown signals"):
        structural_score(
            structure_signals(traj()), replace(S, weights={"depth": 1.0, "charm": 1.0})
        )


def test_exact_key_ignores_ids_and_whitespace_but_not_content():
    a, b = traj(line=1), traj(line=2)
    b["messages"][1]["tool_calls"][0]["id"] = "other"
    b["messages"][1]["reasoning_content"] = "  Search for   the shirt. "
    assert exact_key(a) == exact_key(b)
    c = traj()
    c["messages"][1]["tool_calls"][0]["function"]["arguments"] = {"q": "grey shirt"}
    assert exact_key(a) != exact_key(c)


def test_near_duplicates_keep_the_first_visited():
    long_think = " ".join(f"word{i}" for i in range(300))
    base = traj([(long_think, SEARCH[1], ""), VIEW, REC, TERM])
    near = copy.deepcopy(base)
    near["messages"][1]["reasoning_content"] += " and one more sentence here"
    other = traj([("completely different words " * 40, SEARCH[1], ""), REC, TERM])
    sigs = [minhash_signature(assistant_shingles(t), 128, 1) for t in (base, near, other)]
    assert near_duplicates(["base", "near", "other"], sigs, 0.85) == {"near": "base"}
    assert near_duplicates(["near", "base", "other"], [sigs[1], sigs[0], sigs[2]], 0.85) == {
        "base": "near"
    }
    assert near_duplicates(["base", "near"], sigs[:2], 0.999) == {}


# ---- tokens and the chat template --------------------------------------------------------------------------------------
def test_template_is_trls_and_renders_as_a_tokenizer_does(make_qwen3_tokenizer):
    from trl.chat_template_utils import qwen3_chat_template

    assert qwen3_template_text() == qwen3_chat_template
    t = traj()
    tok = make_qwen3_tokenizer([render_chat(t["messages"], t["tools"])], 400)
    for x in (
        t,
        traj([SEARCH, VIEW, ("thinking only", [], "")]),
        traj([("", [("find_product", {"q": 'é ✓ "quoted"'}, "[]")], ""), REC, TERM]),
    ):
        assert render_chat(x["messages"], x["tools"]) == tok.apply_chat_template(
            x["messages"], tools=x["tools"], tokenize=False
        )


def test_token_counter_is_exact_and_memoised():
    texts = [
        render_chat(traj(g)["messages"], traj(g)["tools"])
        for g in (GOOD, [SEARCH, REC, TERM], [SEARCH] * 5 + [REC, TERM])
    ]
    tok = train_bpe(texts, 500)
    c = TokenCounter(tok, "test")
    for text in texts + texts:
        assert c.count(text) == len(tok.encode(text, add_special_tokens=False).ids)
    assert c.memo  # the spans were memoised
    assert (
        c.model is not None and c.words
    )  # the trained BPE is Qwen's pipeline: ASCII spans were counted word by word


def test_token_counter_ascii_path_cuts_where_the_tokenizer_does():
    "Python's split of ASCII text and the tokenizer's own regex agree on every ASCII character, in any company."
    import random

    rng = random.Random(0)
    texts = [
        render_chat(traj(g)["messages"], traj(g)["tools"]) for g in (GOOD, [SEARCH, REC, TERM])
    ]
    tok = train_bpe(texts + ["".join(chr(i) for i in range(128)) * 3], 600)
    pieces = [
        "'s",
        "'T",
        "'re",
        "'VE",
        "'m",
        "'Ll",
        "'d",
        "'x",
        " ",
        "  ",
        "\t",
        "\n",
        "\r\n",
        "\x0b",
        "\x0c",
        "\x1c",
        "\x1f",
        "\x00",
        "\x7f",
        "a",
        "Zz",
        "9",
        "12",
        "!",
        "?!",
        " .",
        "_",
        "__init__",
        "<think>",
        "</tool_call>",
        "<|im_start|>",
        "é",
        "\u00a0",
        "\u2028",
        "\x85",
    ]
    samples = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 40))) for _ in range(3000)]
    samples += [
        "".join(chr(rng.randrange(128)) for _ in range(rng.randint(1, 60))) for _ in range(2000)
    ]
    c = TokenCounter(tok, "test")
    assert c.model is not None
    for text in samples + texts:
        assert c.count(text) == len(tok.encode(text, add_special_tokens=False).ids), repr(text)
    tok.pre_tokenizer = None  # another pipeline: no ASCII path, the tokenizer counts everything
    c = TokenCounter(tok, "test")
    assert c.model is None and c.count(texts[0]) == len(
        tok.encode(texts[0], add_special_tokens=False).ids
    )
    assert load_counter("chars/4").count("abcdefghi") == 3 and not load_counter("chars/4").exact
    with pytest.raises(FileNotFoundError, match="not been trained"):
        load_counter("bpe", "/nonexistent")


# ---- Axis A / Axis B ---------------------------------------------------------------------------------------------------
AXIS = {  # name: (turns, proxy log per turn, axis)
    "model writes each action": (GOOD, None, "A"),
    "harness, no model": ([("", t[1], "") for t in GOOD], [[]] * 4, "B"),
    "keyword harness": (
        [(f"Step {k}.", t[1], "") for k, t in enumerate(GOOD)],
        [[1, 5], [], [], []],
        "B",
    ),
    "yes/no classifier": (GOOD, [[], [], [1], []], "B"),
    "narrator": (GOOD, [[1, 5], [], [1, 200], []], "B"),
    "model with one failed log entry": (GOOD, [None, [0, 60], None, None], "A"),
    "model, one turn unlogged of five": (
        [SEARCH, SEARCH, VIEW, REC, TERM],
        [None, None, None, None, []],
        "A",
    ),
}


@pytest.mark.parametrize("name", list(AXIS))
def test_axis_from_the_proxy_log(name):
    turns, proxy, want = AXIS[name]
    t = traj(turns)
    if proxy is not None:
        for k, p in enumerate(proxy):
            if p is None:
                continue
            t["meta"]["steps"][k]["proxy_calls"] = [
                {
                    "kind": "inference",
                    "status_code": 200 if x else 503,
                    "response": {"usage": {"completion_tokens": x}},
                }
                for x in p
            ] + [{"kind": "search"}]
    assert classify_axis(axis_signals(t), None, S) == (want, "proxy_log")


def test_axis_without_a_log_reads_the_text():
    model = traj(fmt="openai_messages")
    harness = traj(
        [(f"Step {k + 1}: {t[1][0][0]}.", t[1], "") for k, t in enumerate(GOOD)],
        fmt="openai_messages",
    )
    silent = traj([("", t[1], "") for t in GOOD], fmt="openai_messages")
    shares = templated_shares(
        ["m"] * 30 + ["n", "o"],
        [thinking_templates(harness)] * 30
        + [thinking_templates(model), thinking_templates(silent)],
        20,
    )
    assert shares[0] == 1.0 and shares[30] == 0.0 and shares[31] == 1.0
    assert classify_axis(axis_signals(harness), shares[0], S) == ("B", "text")
    assert classify_axis(axis_signals(model), shares[30], S) == ("A", "text")
    assert classify_axis(axis_signals(silent), shares[31], S) == ("B", "text")


# ---- the stages together, and Axis against the hidden labels of a tiny season ------------------------------------------
def test_apply_stages_on_toys():
    toys = {
        "good": traj(),
        "copy": traj(line=2),
        "judged 0.3": traj(quality=0.3),
        "bad format": traj(
            [
                SEARCH,
                ("r", [("recommend_product", {"product_ids": ["1000000001"]}, "ok")], ""),
                TERM,
            ]
        ),
        "stops": traj([SEARCH, ("x", [], "")]),
        "harness": traj(
            [(f"Step {k}.", t[1], t[2]) for k, t in enumerate(GOOD)], proxy=[[], [], [], []]
        ),
    }
    for k, (n, t) in enumerate(toys.items()):
        t["trajectory_id"], t["meta"]["agent_version_id"] = f"t{k}", n
    counter = load_counter("chars/4")
    df = pd.DataFrame(
        [trajectory_features(t, S, CATALOG, counter) for t in toys.values()], index=list(toys)
    )
    sigs = {t["trajectory_id"]: minhash_signature(assistant_shingles(t)) for t in toys.values()}
    out = apply_stages(df, S, sigs)
    assert out["stage"].to_dict() == {
        "good": "kept",
        "copy": "exact_duplicate",
        "judged 0.3": "reasoning_gate",
        "bad format": "format",
        "stops": "think_then_stop",
        "harness": "axis_b",
    }
    tight = apply_stages(df, replace(S, max_tokens=10), sigs)
    assert tight.at["good", "stage"] == "over_budget"
    f = funnel(out)
    assert list(f.index) == ["trajectories", *STAGES] and f["all"].iloc[-1] == 1


@pytest.fixture(scope="module")
def season(tmp_path_factory, tiny_season):
    "The tiny season, normalised and judged by chapter 03."
    from shopdistill.corpus.normalise import normalise_traces

    d = tiny_season
    out = tmp_path_factory.mktemp("axis04")
    normalise_traces(
        ArenaFolder(d / "arena").firehose,
        out / "trajectories",
        judge="proxy",
        workers=2,
        progress=False,
    )
    return d, out


def test_axis_a_precision_and_recall_against_hidden_labels(season):
    from shopdistill.corpus.normalise import read_shard

    d, out = season
    rows = [
        trajectory_features(t, S)
        for p in sorted((out / "trajectories").glob("shard-*.jsonl.gz"))
        for t in read_shard(p)
    ]
    df = pd.DataFrame(rows)
    df["templated_share"] = templated_shares(
        list(df["hotkey"]), list(df["templates"]), S.template_min_traces
    )
    df["axis"] = [
        classify_axis(r, t, S)[0] for r, t in zip(df.to_dict("records"), df["templated_share"])
    ]
    labels = pd.read_parquet(ArenaFolder(d / "arena").trace_labels)[
        ["trace_id", "style"]
    ]  # read only to measure
    df = df.merge(labels, on="trace_id", how="left")
    assert df["style"].notna().all() and set(df["style"]) == {"agentic", "subtask", "decoy"}
    tp = ((df["axis"] == "A") & (df["style"] == "agentic")).sum()
    precision, recall = tp / (df["axis"] == "A").sum(), tp / (df["style"] == "agentic").sum()
    assert precision >= 0.95 and recall >= 0.90, (
        precision,
        recall,
        pd.crosstab(df["style"], df["axis"]),
    )


def test_smoke_outputs_axis_a_if_present():
    "The same measurement on the smoke corpus's decisions, when chapter 04 has run here."
    from shopdistill.core.run import Run

    dec, lab = Run.of("smoke").corpus().decisions, Run.of("smoke").arena().trace_labels
    if not (dec.exists() and lab.exists()):
        pytest.skip(
            "no smoke corpus here (run chapter 04, nbs/04_structural_filter/, with profile smoke)"
        )
    df = pd.read_parquet(dec, columns=["trace_id", "axis", "stage"]).merge(
        pd.read_parquet(lab, columns=["trace_id", "style"]), on="trace_id"
    )
    tp = ((df["axis"] == "A") & (df["style"] == "agentic")).sum()
    assert tp / (df["axis"] == "A").sum() >= 0.95 and tp / (df["style"] == "agentic").sum() >= 0.90
    assert set(df.loc[df["stage"] == "kept", "style"]) <= {"agentic"}
