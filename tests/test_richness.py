"""Chapter 00's agentic-richness rule (ORO, issue 38): the share of a trace's catalogue calls that the model's own
preceding output requested, read from the proxy log alone, and the score multiplier 0.3 + 0.7 x richness."""

import json

import pytest

from shopdistill.mechanics.rules import (
    call_origins,
    requested_calls,
    richness,
    richness_multiplier,
    run_richness,
)


def model(text: str = "", status: int = 200, **message) -> dict:
    "A logged model call whose completion was `text`."
    return {
        "kind": "inference",
        "method": "POST",
        "path": "/inference/chat/completions",
        "status_code": status,
        "params": None,
        "json_data": {"messages": [{"role": "user", "content": "..."}]},
        "response": {
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, **message}}],
            "usage": {"completion_tokens": max(1, len(text) // 4)},
        },
        "result_product_ids": [],
    }


def asks(*calls) -> str:
    "A completion in SN15's tagged format requesting `calls` ((tool, parameters) pairs)."
    block = json.dumps([{"name": n, "parameters": p} for n, p in calls])
    return f"<think>I will look this up.</think>\n<tool_call>{block}</tool_call>\n<response></response>"


def search(tool: str, **params) -> dict:
    return {
        "kind": "search",
        "method": "GET",
        "path": "/" + tool,
        "status_code": 200,
        "params": params,
        "json_data": None,
        "response": [],
        "result_product_ids": [],
    }


def envelope(*steps, content: str = "") -> dict:
    "An SN15 envelope whose steps hold the given proxy logs (and, if given, `content` as each step's own text)."
    return {
        "problem_id": "p0",
        "status": "SUCCESS",
        "dialogue": [
            {
                "completion": {
                    "reasoning_content": "",
                    "content": content,
                    "message": {"think": "", "tool_call": [], "response": ""},
                },
                "extra_info": {"step": i, "proxy_calls": list(s)},
            }
            for i, s in enumerate(steps)
        ],
    }


FIND = ("find_product", {"q": "black cotton shirt"})
VIEW = ("view_product_information", {"product_ids": "1000000001"})


def test_a_trace_in_which_a_script_issues_half_the_calls_has_richness_one_half():
    trace = envelope(
        [model(asks(FIND)), search("find_product", q="black cotton shirt", page=1)],
        [model("yes"), search("view_product_information", product_ids="1000000001")],
    )
    assert call_origins(trace) == [True, False]
    assert richness(trace) == 0.5
    assert richness_multiplier(richness(trace)) == pytest.approx(0.65)


def test_an_all_agentic_trace_has_richness_one():
    trace = envelope(
        [model(asks(FIND)), search("find_product", q="black cotton shirt", page=1)],
        [model(asks(VIEW)), search("view_product_information", product_ids="1000000001")],
        [model(asks(("recommend_product", {"product_ids": "1000000001"})))],
    )
    assert richness(trace) == 1.0 and richness(trace["dialogue"]) == 1.0
    assert richness_multiplier(1.0) == 1.0


def test_a_trace_without_catalogue_calls_has_richness_zero():
    assert richness(envelope([model(asks(("recommend_product", {"product_ids": "1"})))])) == 0.0
    assert richness({"problem_id": "p0", "status": "TIMED_OUT", "dialogue": None}) == 0.0
    assert richness([]) == 0.0
    assert richness_multiplier(0.0) == 0.3


def test_only_the_proxy_log_counts_not_what_the_agent_wrote_in_its_dialogue():
    # a script writes a tool-call block into its own steps; the model was asked only for keywords
    trace = envelope(
        [model("black cotton shirt"), search("find_product", q="black cotton shirt")],
        content=asks(FIND),
    )
    assert richness(trace) == 0.0


def test_each_request_answers_one_call_and_a_new_output_replaces_the_last():
    repeated = envelope([model(asks(FIND))] + [search("find_product", q="black cotton shirt")] * 4)
    assert call_origins(repeated) == [True, False, False, False]
    other_query = envelope([model(asks(FIND)), search("find_product", q="white shirt")])
    assert richness(other_query) == 0.0
    replaced = envelope(
        [model(asks(FIND)), model("yes"), search("find_product", q="black cotton shirt")]
    )
    assert richness(replaced) == 0.0
    failed_retry = envelope(
        [model(asks(FIND)), model(status=503), search("find_product", q="black cotton shirt")]
    )
    assert (
        richness(failed_retry) == 1.0
    )  # a failed call wrote nothing: the last output still stands


def test_native_tool_calls_and_cut_responses_are_read():
    native = model(
        "",
        tool_calls=[
            {
                "id": "c1",
                "type": "function",
                "function": {
                    "name": "view_product_information",
                    "arguments": json.dumps({"product_ids": ["1000000001", "1000000002"]}),
                },
            }
        ],
    )
    assert requested_calls(native) == [("view_product_information", "1000000001,1000000002")]
    assert (
        richness(
            envelope(
                [native, search("view_product_information", product_ids="1000000001,1000000002")]
            )
        )
        == 1.0
    )
    whole = model(asks(FIND))
    text = json.dumps(whole.pop("response"))
    cut = {**whole, "response_truncated": text}
    assert requested_calls(cut) == [("find_product", "black cotton shirt")]
    assert (
        requested_calls({**whole, "response_truncated": text[:70]}) == []
    )  # the cut fell inside the completion
    assert (
        richness(
            envelope(
                [
                    cut,
                    {
                        **search("find_product", q="black cotton shirt"),
                        "path": "/search/find_product",
                    },
                ]
            )
        )
        == 1.0
    )


def test_a_run_pools_its_traces_calls_and_the_multiplier_is_bounded():
    agentic = envelope([model(asks(FIND)), search("find_product", q="black cotton shirt")])
    script = envelope(
        [
            model("2"),
            search("find_product", q="a"),
            search("find_product", q="b"),
            search("find_product", q="c"),
        ]
    )
    assert run_richness([agentic, script]) == 0.25
    assert run_richness([]) == 0.0
    with pytest.raises(ValueError):
        richness_multiplier(-0.1)


def test_chapter_02s_miners_measured_from_their_traces():
    "The simulated arena's traces as the validator writes them: the tool-calling model is fully agentic, harnesses and decoys not at all."
    import random
    from shopdistill.arena.miners import MinerAgent, MinerSpec
    from shopdistill.arena.tool_client import InProcessToolClient, SearchCache, SimClock
    from shopdistill.arena.validator import run_problem
    from shopdistill.sandbox.catalog import Catalog, generate_catalog
    from shopdistill.sandbox.search import SearchEngine
    from shopdistill.sandbox.task_synthesis import synthesize_tasks

    cat = Catalog.from_records(generate_catalog(2000, seed=0))
    cache = SearchCache(SearchEngine.build(cat))
    tasks = synthesize_tasks(cat, {"product": 2, "shop": 2, "voucher": 2}, seed=3)
    specs = {
        1.0: [
            MinerSpec.make("agentic", "tool_caller", mistakes=0.0),
            MinerSpec.make("agentic", "tool_caller", mistakes=0.9),
        ],
        0.0: [
            MinerSpec.make("subtask", "keywords"),
            MinerSpec.make("subtask", "narrator", narrate_detail=1.0),
            MinerSpec.make("subtask", "classifier", yes_no=2),
            MinerSpec.make("decoy", "first_hit"),
        ],
    }
    for want, group in specs.items():
        for spec in group:
            envs = [
                run_problem(
                    MinerAgent(spec),
                    t,
                    InProcessToolClient(cache, SimClock(1_774_000_000_000), random.Random(i)),
                )[0]
                for i, t in enumerate(tasks)
            ]
            assert [richness(e) for e in envs] == [want] * len(tasks), spec
            assert all(
                call_origins(e) for e in envs
            )  # every trace made catalogue calls: the share is not the empty case
