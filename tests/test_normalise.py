"""Readers, Arrow round trips through `datasets`, the Qwen3 chat template, streaming and accounting (chapter 03).

The traces come from chapter 02's own machinery: real miners of every style run real problems on a small sandbox,
so the envelopes carry the arena's actual quirks (repeated searches, malformed tool JSON, crashes, timeouts). The
other formats are derived from them: upstream ShoppingBench rollouts as upstream writes them, and OpenAI-style rows in
each shape the readers accept.
"""

import gzip
import json
import random
from pathlib import Path

import pytest

from shopdistill.arena.envelope import tool_call_id
from shopdistill.corpus.normalise import (
    AccountingError,
    check_accounts,
    count_records,
    decode_record,
    detect_format,
    iter_records,
    normalise_file,
    normalise_traces,
    read_shard,
)
from shopdistill.corpus.readers import (
    ProblemIndex,
    read_openai_row,
    read_sn15_dialogue,
    read_sn15_envelope,
    read_upstream_rollout,
    split_think,
)
from shopdistill.corpus.trajectory import Reject, from_arrow_row, to_arrow_row, trajectory_problems
from shopdistill.core.run import ArenaFolder, TrajectoriesFolder

ROOT = Path(__file__).resolve().parents[1]
SHOPPINGBENCH = ROOT.parent / "shared" / "data" / "shoppingbench"


# ---- traces from the arena -------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def arena():
    "(envelopes with the backend's extract, the problems they ran) from chapter 02's miners on a 2,000-product sandbox."
    from shopdistill.sandbox.catalog import Catalog, generate_catalog
    from shopdistill.arena.miners import MinerAgent
    from shopdistill.sandbox.search import SearchEngine
    from shopdistill.arena.season import initial_spec
    from shopdistill.sandbox.task_synthesis import synthesize_tasks
    from shopdistill.arena.tool_client import InProcessToolClient, ProxyLog, SearchCache, SimClock
    from shopdistill.arena.validator import Limits, gate_proxy_judge, run_problem

    cat = Catalog.from_records(generate_catalog(2000, seed=0))
    cache = SearchCache(SearchEngine.build(cat))
    tasks = synthesize_tasks(cat, {"product": 3, "shop": 2, "voucher": 2}, seed=1)
    rng = random.Random(3)
    specs = [initial_spec(s, rng) for s in ["agentic"] * 6 + ["subtask"] * 4 + ["decoy"] * 4]
    envs = []
    for k, spec in enumerate(specs):
        for t in tasks:
            client = InProcessToolClient(
                cache,
                SimClock(1_774_000_000_000),
                random.Random(k * 100 + len(envs)),
                ProxyLog(2000),
                inference_failure_rate=0.05,
            )
            env, calls = run_problem(MinerAgent(spec), t, client, Limits(max_steps=40))
            q = gate_proxy_judge(t["query"], env["dialogue"], calls)["reasoning_quality"]
            env["extract"] = {
                "trace_id": f"race-001/race/val00000/v{k:06d}/{t['id']}",
                "race_id": "race-001",
                "phase": "race",
                "day": 0,
                "suite_version": None,
                "problem_seed": 7,
                "miner_hotkey": f"5Miner{k:03d}",
                "miner_uid": k,
                "agent_version_id": f"v{k:06d}",
                "validator": "val00000",
                "result": {"success": False, "reasoning_quality": q},
            }
            envs.append(env)
    return envs, tasks


def to_upstream(env: dict) -> list:
    "An envelope's dialogue as upstream ShoppingBench writes a rollout: prompts, raw text, parsed message without empty fields, obs."
    q = env["dialogue"][0]["extra_info"]["query"]
    out = []
    for i, st in enumerate(env["dialogue"]):
        m = st["completion"]["message"]
        calls = [
            {"name": c["name"], "parameters": c["parameters"], "tool_call_id": c["tool_call_id"]}
            for c in m["tool_call"]
        ]
        msg = {
            "think": m["think"],
            "tool_call": calls,
            "obs": [
                {"tool_call_id": c["tool_call_id"], "results": c["result"]} for c in m["tool_call"]
            ],
            "response": m["response"],
        }
        msg = {k: v for k, v in msg.items() if v}  # upstream drops empty fields
        out.append(
            {
                "prompt": [
                    {"role": "system", "content": "You are a shopping agent."},
                    {"role": "user", "content": f"# Dialogue Records History\n<user>{q}</user>"},
                ],
                "completion": {
                    "reasoning_content": st["completion"]["reasoning_content"],
                    "content": st["completion"]["content"],
                    "message": msg,
                },
                "extra_info": {
                    "step": i + 1,
                    "query": q,
                    "timestamp": st["extra_info"]["timestamp"],
                },
            }
        )
    return out


def to_openai(traj: dict, style: str) -> dict:
    "A canonical trajectory as an OpenAI-style row: 'nested' (dict arguments, reasoning_content) or 'flat' (JSON-text arguments, <think> in content, flat tools)."
    msgs = []
    for m in traj["messages"]:
        if m["role"] != "assistant" or style == "nested":
            msgs.append(json.loads(json.dumps(m)))
            continue
        msgs.append(
            {
                "role": "assistant",
                "content": f"<think>\n{m['reasoning_content']}\n</think>\n\n{m['content']}",
                "tool_calls": [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {
                            "name": c["function"]["name"],
                            "arguments": json.dumps(c["function"]["arguments"], ensure_ascii=False),
                        },
                    }
                    for c in m["tool_calls"]
                ],
            }
        )
    tools = (
        traj["tools"]
        if style == "nested"
        else [{"type": "function", **t["function"]} for t in traj["tools"]]
    )
    return {
        "messages": msgs,
        "tools": tools,
        "problem_id": traj["problem_id"],
        "query": traj["query"],
        "category": traj["category"],
        "miner_hotkey": (traj["meta"]["miner"] or {}).get("hotkey"),
        "reasoning_quality": traj["meta"]["scores"].get("reasoning_quality"),
    }


@pytest.fixture(scope="session")
def canon(arena):
    "Canonical trajectories of every reader: {format: [trajectory, ...]}."
    envs, tasks = arena
    index = ProblemIndex(tasks)
    out = {
        "sn15_envelope": [],
        "sn15_dialogue": [],
        "upstream_rollout": [],
        "openai_nested": [],
        "openai_flat": [],
    }
    for i, env in enumerate(envs, 1):
        raw = json.dumps(env).encode()
        try:
            t = read_sn15_envelope(env, "shard-00000.jsonl.gz", i, raw, index)
        except Reject as r:
            assert r.reason == "no_dialogue", r
            continue
        out["sn15_envelope"].append(t)
        out["sn15_dialogue"].append(
            read_sn15_dialogue(env["dialogue"], "dialogues.jsonl", i, raw, index)
        )
        up = to_upstream(env)
        out["upstream_rollout"].append(
            read_upstream_rollout(up, "rollout.jsonl", i, json.dumps(up).encode(), index)
        )
        for style in ("nested", "flat"):
            row = to_openai(t, style)
            out[f"openai_{style}"].append(
                read_openai_row(row, "rows.jsonl", i, json.dumps(row).encode(), index)
            )
    return out


FORMAT_KEYS = ("sn15_envelope", "sn15_dialogue", "upstream_rollout", "openai_nested", "openai_flat")


def test_arena_covers_the_quirks(arena, canon):
    envs, _ = arena
    assert any(e["dialogue"] is None for e in envs), "some runs should crash or time out"
    issues = {i["code"] for t in canon["sn15_envelope"] for i in t["meta"]["issues"]}
    assert "duplicate_tool_call_id" in issues  # the loop mistake repeats a search, and its id
    assert len(canon["sn15_envelope"]) >= 60


@pytest.mark.parametrize("fmt", FORMAT_KEYS)
def test_every_trajectory_is_valid(canon, fmt):
    for t in canon[fmt]:
        assert trajectory_problems(t) == [], (fmt, t["trajectory_id"], trajectory_problems(t)[:3])


def test_nothing_of_a_step_is_lost(arena, canon):
    "Every SN15 step: thinking, each call with its id and arguments, each result, the response, the proxy log."
    envs = [e for e in arena[0] if e["dialogue"]]
    for env, t in zip(envs, canon["sn15_envelope"]):
        asst = [m for m in t["messages"] if m["role"] == "assistant"]
        results = {m["tool_call_id"]: m for m in t["messages"] if m["role"] == "tool"}
        assert len(asst) == len(env["dialogue"]) == len(t["meta"]["steps"])
        for st, m, sm in zip(env["dialogue"], asst, t["meta"]["steps"]):
            src = st["completion"]["message"]
            assert m["reasoning_content"] == (src["think"] or st["completion"]["reasoning_content"])
            assert m["content"] == src["response"]
            assert sm["proxy_calls"] == st["extra_info"]["proxy_calls"]
            assert len(m["tool_calls"]) == len(src["tool_call"])
            for c, s in zip(m["tool_calls"], src["tool_call"]):
                assert c["id"].split("-")[0] == s["tool_call_id"].split("-")[0] and c[
                    "id"
                ].startswith(s["tool_call_id"])
                assert (
                    results[c["id"]]["content"] == s["result"]
                    and results[c["id"]]["name"] == s["name"]
                )
                if isinstance(s["parameters"], dict):
                    assert c["function"]["arguments"] == s["parameters"]
                else:
                    assert any(
                        i["code"] in ("unparseable_arguments", "non_object_arguments")
                        for i in t["meta"]["issues"]
                    )
        assert t["meta"]["miner"]["hotkey"] == env["extract"]["miner_hotkey"]
        assert t["meta"]["scores"] == env["extract"]["result"]
        assert t["category"] in ("product", "shop", "voucher")


def test_formats_agree_on_the_conversation(canon):
    "The same run read from any format gives the same messages (upstream and bare dialogues lack only the envelope's metadata)."
    for k in range(len(canon["sn15_envelope"])):
        ref = canon["sn15_envelope"][k]["messages"]
        for fmt in FORMAT_KEYS[1:]:
            assert canon[fmt][k]["messages"] == ref, (fmt, k)


# ---- Arrow, datasets and the chat template ---------------------------------------------------------------------------
@pytest.fixture(scope="session")
def qwen3_tokenizer(make_qwen3_tokenizer):
    "A byte-level BPE tokenizer built offline (no downloads) carrying TRL's copy of Qwen3's chat template."
    return make_qwen3_tokenizer(["find a black shirt under 300 pesos"] * 10, 300)


def render(tok, messages, tools) -> str:
    return tok.apply_chat_template(messages, tools=tools, tokenize=False)


@pytest.mark.parametrize("fmt", FORMAT_KEYS)
@pytest.mark.parametrize("storage", ["disk", "parquet"])
def test_arrow_round_trip_renders_identically(canon, qwen3_tokenizer, tmp_path, fmt, storage):
    import datasets

    trajs = canon[fmt]
    ds = datasets.Dataset.from_list([to_arrow_row(t) for t in trajs])
    if storage == "disk":
        ds.save_to_disk(str(tmp_path / "ds"))
        back = datasets.load_from_disk(str(tmp_path / "ds"))
    else:
        ds.to_parquet(str(tmp_path / "ds.parquet"))
        back = datasets.Dataset.from_parquet(str(tmp_path / "ds.parquet"))
    assert len(back) == len(trajs)
    for t, row in zip(trajs, back):
        rt = from_arrow_row(row)
        assert rt == t
        text = render(qwen3_tokenizer, t["messages"], t["tools"])
        assert render(qwen3_tokenizer, rt["messages"], rt["tools"]) == text
        assert (
            render(qwen3_tokenizer, row["messages"], json.loads(row["tools"])) == text
        )  # even undecoded rows render the same
        for m in t["messages"]:
            for c in m.get("tool_calls") or []:
                want = json.dumps(
                    {"name": c["function"]["name"], "arguments": c["function"]["arguments"]},
                    ensure_ascii=False,
                )
                assert f"<tool_call>\n{want}\n</tool_call>" in text
        assert '": null' not in text.split("</tools>")[-1] or any(
            None in c["function"]["arguments"].values()
            for m in t["messages"]
            for c in m.get("tool_calls") or []
        )


def test_naive_storage_would_render_nulls(canon, qwen3_tokenizer):
    "The gotcha the JSON-text columns avoid: dict arguments merged by Arrow render keys the model never wrote."
    import datasets

    simple = [
        x
        for x in canon[
            "sn15_envelope"
        ]  # lists among argument values would not even store: Arrow refuses to mix them
        if all(
            isinstance(v, (str, int))
            for m in x["messages"]
            for c in m.get("tool_calls") or []
            for v in c["function"]["arguments"].values()
        )
    ]
    ds = datasets.Dataset.from_list([{"messages": x["messages"]} for x in simple[:20]])
    assert (
        "null"
        in render(qwen3_tokenizer, ds[0]["messages"], simple[0]["tools"]).split("</tools>")[-1]
    )


def test_openai_rows_render_as_written(canon, qwen3_tokenizer):
    "An OpenAI row whose thinking sits in <think> tags and whose arguments are JSON text renders exactly like its canonical form."
    for t in canon["sn15_envelope"][:15]:
        row = to_openai(t, "flat")
        nested = [
            {"type": "function", "function": {k: v for k, v in x.items() if k != "type"}}
            for x in row["tools"]
        ]
        assert render(qwen3_tokenizer, row["messages"], nested) == render(
            qwen3_tokenizer, t["messages"], t["tools"]
        )


def test_split_think_matches_the_template():
    assert split_think("<think>\nplan\n</think>\n\nanswer") == ("plan", "answer")
    assert split_think("no open tag</think>rest") == ("no open tag", "rest")


# ---- reader details --------------------------------------------------------------------------------------------------
def _reject(fn, *a):
    with pytest.raises(Reject) as e:
        fn(*a)
    return e.value


def test_envelope_rejects_say_where():
    env = {
        "problem_id": "p",
        "status": "SUCCESS",
        "dialogue": [{"completion": {"message": {"think": 5}}, "extra_info": {"query": "q"}}],
    }
    r = _reject(read_sn15_envelope, env, "f", 1, b"")
    assert (r.reason, r.step) == ("wrong_type", 0) and "think" in r.detail
    assert (
        _reject(
            read_sn15_envelope,
            {"problem_id": "p", "status": "FAILED", "dialogue": None},
            "f",
            1,
            b"",
        ).reason
        == "no_dialogue"
    )
    assert (
        _reject(read_sn15_envelope, {"status": "x", "dialogue": []}, "f", 1, b"").reason
        == "missing_field"
    )
    assert _reject(read_sn15_envelope, [1], "f", 1, b"").reason == "not_a_record"
    step = {
        "completion": {"message": {"think": "t", "tool_call": [], "response": ""}},
        "extra_info": {"query": ""},
    }
    assert (
        _reject(
            read_sn15_envelope,
            {"problem_id": "p", "status": "SUCCESS", "dialogue": [step]},
            "f",
            1,
            b"",
        ).reason
        == "missing_query"
    )
    index = ProblemIndex([{"id": "p", "query": "a red bag", "category": "product"}])
    t = read_sn15_envelope(
        {"problem_id": "p", "status": "SUCCESS", "dialogue": [step]}, "f", 1, b"", index
    )
    assert (t["query"], t["category"]) == ("a red bag", "product")


def test_sn15_id_rule_and_duplicates():
    p = {"q": "bag"}
    call = lambda cid: {
        "name": "find_product",
        "parameters": p,
        "tool_call_id": cid,
        "result": "[]",
    }
    step = {
        "completion": {
            "message": {
                "think": "",
                "tool_call": [
                    call(tool_call_id("find_product", p)),
                    call(tool_call_id("find_product", p)),
                    call("XXXXXXXX"),
                ],
                "response": "",
            }
        },
        "extra_info": {"query": "bag", "step": 0},
    }
    t = read_sn15_dialogue([step], "f", 1, b"")
    ids = [c["id"] for c in t["messages"][1]["tool_calls"]]
    assert len(set(ids)) == 3 and ids[1] == ids[0] + "-2"
    assert [i["code"] for i in t["meta"]["issues"]] == [
        "duplicate_tool_call_id",
        "tool_call_id_rule",
    ]
    assert [m["tool_call_id"] for m in t["messages"][2:]] == ids


def test_upstream_pairs_by_id_then_position():
    calls = [
        {"name": "find_product", "parameters": {"q": "a"}, "tool_call_id": "A"},
        {"name": "find_product", "parameters": {"q": "b"}, "tool_call_id": "B"},
    ]
    step = {
        "prompt": [],
        "completion": {
            "content": "",
            "message": {
                "think": "x",
                "tool_call": calls,
                "obs": [
                    {"tool_call_id": "B", "results": ["b"]},
                    {"tool_call_id": "A", "results": "a"},
                ],
            },
        },
        "extra_info": {"query": "q", "step": 1},
    }
    t = read_upstream_rollout([step], "f", 1, b"")
    assert [(m["tool_call_id"], m["content"]) for m in t["messages"][2:]] == [
        ("A", "a"),
        ("B", '["b"]'),
    ]
    step["completion"]["message"]["obs"] = [
        "first",
        "second",
    ]  # observations without ids pair by position
    t = read_upstream_rollout([step], "f", 1, b"")
    assert [m["content"] for m in t["messages"][2:]] == ["first", "second"]
    step["completion"]["message"].pop("obs")
    t = read_upstream_rollout([step], "f", 1, b"")
    assert [i["code"] for i in t["meta"]["issues"]] == ["unpaired_tool_call", "unpaired_tool_call"]


def test_openai_row_variants():
    row = {
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "red "}, {"type": "text", "text": "bag"}],
            },
            {
                "role": "assistant",
                "content": None,
                "reasoning": "search",
                "tool_calls": [
                    {"id": "c", "name": "find_product", "arguments": {"q": "red bag"}},
                    {
                        "id": "c",
                        "type": "function",
                        "function": {"name": "find_product", "arguments": "[1]"},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "c", "content": "[]"},
            {"role": "tool", "tool_call_id": "c", "content": "[]", "weight": 0},
            {"role": "assistant", "content": "done", "weight": 1},
        ],
        "tools": json.dumps(
            [
                {"type": "function", "name": "find_product", "parameters": {"type": "object"}},
                {"description": "nameless"},
            ]
        ),
        "success": True,
        "uid": 4,
    }
    t = read_openai_row(row, "f", 1, b"")
    assert trajectory_problems(t) == []
    assert t["query"] == "red bag" and t["messages"][0] == {
        "role": "system",
        "content": "Be brief.",
    }
    assert [m["tool_call_id"] for m in t["messages"] if m["role"] == "tool"] == ["c", "c-2"]
    assert {i["code"] for i in t["meta"]["issues"]} == {
        "role_renamed",
        "duplicate_tool_call_id",
        "non_object_arguments",
        "invalid_tool_schema",
    }
    assert t["tools"][0]["function"]["description"] == "" and len(t["tools"]) == 1
    assert t["meta"]["scores"] == {"success": True} and t["meta"]["miner"] == {
        "hotkey": None,
        "uid": 4,
    }
    assert t["meta"]["message_extra"] == {"4": {"weight": 0}} and t["meta"]["steps"][1][
        "extra"
    ] == {"weight": 1}
    assert (
        _reject(
            read_openai_row, {"messages": [{"role": "robot", "content": "x"}]}, "f", 1, b""
        ).reason
        == "unknown_role"
    )
    assert (
        _reject(
            read_openai_row, {"messages": [{"role": "user", "content": "x"}]}, "f", 1, b""
        ).reason
        == "prompt_only"
    )  # as published SN15 rows may be
    assert (
        _reject(
            read_openai_row,
            {"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "[]"}]},
            "f",
            1,
            b"",
        ).reason
        == "no_assistant_turn"
    )
    assert _reject(read_openai_row, {"messages": "not json"}, "f", 1, b"").reason == "wrong_type"


def test_trajectory_ids_are_stable_and_distinct(canon):
    ids = [t["trajectory_id"] for t in canon["sn15_envelope"]]
    assert len(set(ids)) == len(ids)


# ---- files and streaming ---------------------------------------------------------------------------------------------
def _write_gz(path: Path, lines: list[bytes], members: int = 1):
    "Gzipped JSON lines, optionally as several gzip members (as chapter 02 writes shards)."
    path.parent.mkdir(parents=True, exist_ok=True)
    k = max(1, len(lines) // members)
    with open(path, "wb") as f:
        for i in range(0, len(lines), k):
            f.write(gzip.compress(b"".join(x + b"\n" for x in lines[i : i + k]), mtime=0))


@pytest.fixture(scope="session")
def firehose(arena, tmp_path_factory):
    "Chapter 02's layout: arena/firehose/shard-*.jsonl.gz (multi-member gzip) and arena/bank.jsonl."
    envs, tasks = arena
    root = tmp_path_factory.mktemp("arena")
    lines = [json.dumps(e, ensure_ascii=False).encode() for e in envs]
    folder = ArenaFolder(root)
    for s in range(3):
        _write_gz(folder.firehose / f"shard-{s:05d}.jsonl.gz", lines[s::3], members=3)
    with open(folder.bank, "w") as f:
        for t in tasks:
            f.write(json.dumps({**t, "pool": "held_out", "cluster": 0}) + "\n")
    return (
        folder.firehose,
        len(envs),
        sum(e["dialogue"] is None or e["dialogue"] == [] for e in envs),
    )


def test_normalise_traces_end_to_end(firehose, tmp_path):
    src, n, n_empty = firehose
    s = normalise_traces(src, tmp_path / "out", judge="proxy", workers=2, progress=False)
    assert (s["inputs"], s["outputs"], s["rejects"]) == (n, n - n_empty, n_empty)
    assert s["reasons"] == ({"no_dialogue": n_empty} if n_empty else {})
    assert check_accounts(tmp_path / "out", recount_inputs=True) == {
        "inputs": n,
        "outputs": n - n_empty,
        "rejects": n_empty,
    }
    trajs = [t for p in sorted((tmp_path / "out").glob("shard-*.jsonl.gz")) for t in read_shard(p)]
    assert all(trajectory_problems(t) == [] for t in trajs)
    assert all(t["category"] for t in trajs)  # found through bank.jsonl next to the firehose
    assert all(
        t["meta"]["judge"]["reasoning_quality"] == t["meta"]["scores"]["reasoning_quality"]
        for t in trajs
    )  # = the validators
    ledger = [
        json.loads(x) for x in TrajectoriesFolder(tmp_path / "out").ledger.read_text().splitlines()
    ]
    assert all(e["source"].endswith(".jsonl.gz") and e["line"] >= 1 for e in ledger)


def test_output_does_not_depend_on_workers(firehose, tmp_path):
    src, _, _ = firehose
    a = normalise_traces(src, tmp_path / "a", workers=1, progress=False)
    normalise_traces(src, tmp_path / "b", workers=2, progress=False)
    for r in a["files"]:
        assert (tmp_path / "a" / r["shard"]).read_bytes() == (
            tmp_path / "b" / r["shard"]
        ).read_bytes()
    assert (
        TrajectoriesFolder(tmp_path / "a").ledger.read_bytes()
        == TrajectoriesFolder(tmp_path / "b").ledger.read_bytes()
    )


def test_every_input_layout(canon, arena, tmp_path):
    "JSON lines, a .json dialogue document, a .json array of rows, a parquet table, a forced format, a mismatched record."
    import pyarrow as pa, pyarrow.parquet as pq

    env = next(e for e in arena[0] if e["dialogue"])
    (tmp_path / "dialogue.json").write_text(json.dumps(env["dialogue"]))
    rows = [to_openai(t, "flat") for t in canon["sn15_envelope"][:5]]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    pq.write_table(
        pa.Table.from_pylist(
            [
                {**r, "messages": json.dumps(r["messages"]), "tools": json.dumps(r["tools"])}
                for r in rows
            ]
        ),
        tmp_path / "rows.parquet",
    )
    (tmp_path / "mixed.jsonl").write_text(
        "\n".join(json.dumps(x) for x in [env, env, rows[0]]) + "\n"
    )
    s = normalise_traces(tmp_path, tmp_path / "out", progress=False, problems=None)
    by = {Path(r["file"]).name: r for r in s["files"]}
    assert by["dialogue.json"]["format"] == "sn15_dialogue" and by["dialogue.json"]["outputs"] == 1
    assert by["rows.json"]["outputs"] == 5 and by["rows.parquet"]["outputs"] == 5
    assert (by["mixed.jsonl"]["outputs"], by["mixed.jsonl"]["reasons"]) == (
        2,
        {"format_mismatch": 1},
    )
    pq_trajs = list(read_shard(tmp_path / "out" / by["rows.parquet"]["shard"]))
    assert [t["messages"] for t in pq_trajs] == [t["messages"] for t in canon["sn15_envelope"][:5]]
    forced = normalise_file(
        tmp_path / "mixed.jsonl", tmp_path / "forced.jsonl.gz", fmt="openai_messages"
    )
    assert (forced["outputs"], forced["format"]) == (1, "openai_messages")
    with pytest.raises(ValueError, match="unknown format"):
        normalise_file(tmp_path / "mixed.jsonl", tmp_path / "x.gz", fmt="csv")


def test_missing_inputs_are_loud(tmp_path):
    with pytest.raises(FileNotFoundError, match="no trace files"):
        normalise_traces(str(tmp_path / "*.jsonl.gz"), tmp_path / "o", progress=False)
    with pytest.raises(FileNotFoundError, match="no trace file or folder"):
        normalise_traces(tmp_path / "absent", tmp_path / "o", progress=False)


def test_reuse_and_refresh(firehose, tmp_path):
    src, _, _ = firehose
    assert "reused" not in normalise_traces(src, tmp_path / "o", progress=False)
    assert normalise_traces(src, tmp_path / "o", progress=False)["reused"] is True
    assert "reused" not in normalise_traces(
        src, tmp_path / "o", progress=False, judge="none"
    )  # other settings: redone


def test_accounts_catch_a_shard_changed_after_it_was_written(firehose, tmp_path):
    "The recorded line count holds only for the bytes it was made with: a shard cut or replaced afterwards is caught."
    src, n, n_empty = firehose
    s = normalise_traces(src, tmp_path / "out", workers=1, progress=False)
    assert all(r["shard_check"]["lines"] == r["outputs"] for r in s["files"])
    want = {"inputs": n, "outputs": n - n_empty, "rejects": n_empty}
    assert (
        check_accounts(tmp_path / "out")
        == want
        == check_accounts(tmp_path / "out", recount_outputs=True)
    )
    shard = tmp_path / "out" / s["files"][0]["shard"]
    lines = gzip.decompress(shard.read_bytes()).splitlines(keepends=True)
    shard.write_bytes(gzip.compress(b"".join(lines[:-1]), mtime=0))  # one trajectory lost
    with pytest.raises(AccountingError, match="not the shard that was written"):
        check_accounts(tmp_path / "out")
    with pytest.raises(AccountingError, match="1 rejects out|trajectories"):
        check_accounts(tmp_path / "out", recount_outputs=True)


def test_orjson_reads_and_writes_exactly_as_json(arena, tmp_path):
    "Records orjson would read differently go to `json`: big integers, infinities, lone surrogates, a byte-order mark."
    env = next(e for e in arena[0] if e["dialogue"])
    base = json.dumps(env, ensure_ascii=False)
    lines = [
        base.encode(),
        base.replace(
            '"status":',
            '"big": 123456789012345678901234567890, "neg": -98765432109876543210, "status":',
            1,
        ).encode(),
        base.replace('"status":', '"inf": 1e400, "tiny": 1e-07, "status":', 1).encode(),
        base.replace('"status":', '"bad": "\\ud800", "status":', 1).encode(),
        b"\xef\xbb\xbf" + base.encode(),
        b"NaN",
        b'{"x": NaN}',
    ]
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    want = [
        (n, raw, v.reason if isinstance(v := decode_record(raw), Reject) else v)
        for n, raw in enumerate(lines, 1)
    ]
    got = [
        (n, raw, v if not isinstance(v, Reject) else v.reason) for n, raw, v in iter_records(src)
    ]
    assert (
        got == want
    )  # orjson's fast path decodes exactly what `json` decodes, and rejects the same way
    assert type(got[1][2]["big"]) is int and got[1][2]["big"] == 123456789012345678901234567890
    rep = normalise_file(src, tmp_path / "out.jsonl.gz")
    assert [r["reason"] for r in rep["rejects"]] == [
        "invalid_unicode",
        "invalid_json",
        "invalid_json",
    ]
    trajs = list(read_shard(tmp_path / "out.jsonl.gz"))
    assert (
        trajs[1]["meta"]["extra"]["big"] == 123456789012345678901234567890
        and trajs[1]["meta"]["extra"]["neg"] == -98765432109876543210
    )
    assert (
        trajs[2]["meta"]["extra"]["inf"] == float("inf")
        and trajs[2]["meta"]["extra"]["tiny"] == 1e-07
    )
    assert [t["messages"] for t in trajs] == [trajs[0]["messages"]] * 4


def test_count_records_matches_reader(tmp_path):
    p = tmp_path / "x.jsonl.gz"
    _write_gz(p, [b"{}", b"", b"not json", b"[1]"], members=2)
    assert count_records(p) == 3 == sum(1 for _ in iter_records(p))


def test_real_shoppingbench_tasks_label_upstream_rollouts():
    "A rollout on a real ShoppingBench query finds its problem id and category through chapter 01's task loader."
    f = SHOPPINGBENCH / "synthesize_voucher_test.jsonl"
    if not f.exists():
        pytest.skip(f"real ShoppingBench tasks not found at {f}")
    index = ProblemIndex.from_file(f)
    q = json.loads(f.read_text().splitlines()[0])["query"]
    step = {
        "prompt": [],
        "completion": {"content": "", "message": {"think": "x"}},
        "extra_info": {"query": q, "step": 1},
    }
    t = read_upstream_rollout([step], "f", 1, b"", index)
    assert t["category"] == "voucher" and t["problem_id"].startswith("voucher-")
    assert detect_format([step]) == "upstream_rollout"


def test_canonical_schema_is_as_documented(canon):
    "The exact keys chapter 04 relies on, for every reader."
    from shopdistill.corpus.trajectory import MESSAGE_KEYS, META_KEYS, TRAJECTORY_KEYS

    assert TRAJECTORY_KEYS == (
        "trajectory_id",
        "problem_id",
        "query",
        "category",
        "messages",
        "tools",
        "meta",
    )
    assert META_KEYS == (
        "source",
        "miner",
        "agent_version_id",
        "race_id",
        "status",
        "scores",
        "judge",
        "steps",
        "issues",
        "extra",
    )
    for fmt in FORMAT_KEYS:
        for t in canon[fmt]:
            assert tuple(t) == TRAJECTORY_KEYS and set(META_KEYS) <= set(t["meta"])
            assert (
                set(t["meta"]["source"]) == {"format", "file", "line", "step"}
                and t["meta"]["source"]["step"] is None
            )
            for m in t["messages"]:
                assert tuple(m) == MESSAGE_KEYS[m["role"]]
            for s in t["meta"]["steps"]:
                assert t["messages"][s["message_index"]]["role"] == "assistant"
            for tool in t["tools"]:
                assert set(tool) == {"type", "function"} and {
                    "name",
                    "description",
                    "parameters",
                } <= set(tool["function"])
            assert tuple(to_arrow_row(t)) == TRAJECTORY_KEYS
