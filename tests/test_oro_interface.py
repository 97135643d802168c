"""ORO's agent interface (ORO-AI/oro, src/agent/agent_interface.py at commit a6b1cf3), offered whole to agent files as
`src.agent.agent_interface`: tests/fixtures/oro_interface_agent.py uses every name of it, runs through
`shopdistill arena run-agent` (in the sandbox where it can be set up, and with --no-isolation), and what each piece did is
checked here against this file's own expectations. ORO's own agent once failed every problem because the shim lacked one
of these names (`_TOOL_REGISTRY`); the last test shows that such a gap fails the run."""

import ast
import base64
import hashlib
import json
import os
from pathlib import Path

import pytest

from shopdistill.arena.envelope import envelope_problems
from shopdistill.arena.isolation import isolation_problem
from shopdistill.arena.run_agent import run_agent_file
from shopdistill.arena.sn15_api import AGENT_INTERFACE, SN15_SHIMS
from shopdistill.sandbox.catalog import Catalog, generate_catalog
from shopdistill.sandbox.search import SearchEngine
from shopdistill.sandbox.task_synthesis import synthesize_tasks

AGENT = Path(__file__).parent / "fixtures" / "oro_interface_agent.py"
SHIM = "src/agent/agent_interface.py"
# every name ORO's agent_interface.py defines (its module-level imports of json, time, typing aside)
ORO_NAMES = {
    "ToolCallResult",
    "_TOOL_REGISTRY",
    "register_tool",
    "Tool",
    "get_tool",
    "generate_tool_call_id",
    "format_content",
    "create_dialogue_step",
    "execute_tool_call",
}
WHY_NOT = isolation_problem()


def _imported(source: str, module: str) -> set:
    return {
        a.name
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.ImportFrom) and n.module == module
        for a in n.names
    }


def test_the_shim_offers_every_name_of_oros_interface():
    assert set(AGENT_INTERFACE) == ORO_NAMES and len(AGENT_INTERFACE) == len(ORO_NAMES)
    assert _imported(SN15_SHIMS[SHIM], "shopdistill.arena.sn15_api") == ORO_NAMES


def test_the_test_agent_uses_the_whole_interface():
    src = AGENT.read_text()
    assert _imported(src, "src.agent.agent_interface") == ORO_NAMES
    assert _imported(src, "src.agent.proxy_client") == {"ProxyClient"}
    tree = ast.parse(src)
    used = {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
    }  # an import is an alias, not a Name: these are the uses
    assert ORO_NAMES <= used  # each name is used, not only imported
    decorators = [
        ast.unparse(d)
        for n in tree.body
        if isinstance(n, ast.FunctionDef)
        for d in n.decorator_list
    ]
    assert {"Tool", "Tool()", "Tool('recommend_product')"} <= set(
        decorators
    )  # the decorator's three forms


def _oro_id(name: str, parameters, length: int = 8) -> str:
    "ORO's rule, written out here: md5 of name, newline, the parameters as Python prints them; URL-safe base64, '=+/' dropped."
    text = base64.urlsafe_b64encode(hashlib.md5(f"{name}\n{parameters}".encode()).digest()).decode()
    return text.replace("=", "").replace("+", "").replace("/", "")[:length]


def _tagged(think: str, calls: list, response: str) -> str:
    "The content a step must carry: only the parts it has, one a line; the calls as a JSON list of name and parameters."
    parts = [f"<think>{think}</think>"] if think else []
    if calls:
        parts.append(
            "<tool_call>"
            + json.dumps([{"name": c["name"], "parameters": c["parameters"]} for c in calls])
            + "</tool_call>"
        )
    return "\n".join(parts + ([f"<response>{response}</response>"] if response else []))


def check_interface(env: dict):
    "What each piece of the interface did in one problem's run, from the envelope and the agent's report in its last step."
    steps = env["dialogue"]
    report = json.loads(steps[-1]["completion"]["message"]["think"])
    # Tool (@Tool, @Tool(), @Tool('name')) and register_tool fill _TOOL_REGISTRY in order; the agent lists it as ORO's does
    assert report["registry"] == [
        "find_product",
        "view_product_information",
        "recommend_product",
        "terminate",
    ]
    assert report["signatures"] == [
        "find_product(q: str, page: int = 1) -> list",
        "view_product_information(product_ids: str) -> list",
        "recommend_product(product_ids: str) -> str",
        "terminate(status: str = 'success') -> str",
    ]
    # get_tool: the registered function itself; an unknown name is a ValueError naming the registered tools
    assert report["get_tool_gives_the_function"] is True
    kind, msg = report["unknown_tool"]
    assert (
        kind == "ValueError" and "no_such_tool" in msg and all(n in msg for n in report["registry"])
    )
    # execute_tool_call returns a ToolCallResult: its four fields, the tool's result as it returned it
    assert (
        report["result_fields"]
        == report["executed"]["keys"]
        == ["name", "parameters", "tool_call_id", "result"]
    )
    assert report["executed"]["result_type"] == "list"
    # generate_tool_call_id (and execute_tool_call's id) follow ORO's rule, recomputed here from the logged parameters
    search = steps[0]["completion"]["message"]["tool_call"][0]
    assert search["name"] == "find_product" and set(search["parameters"]) == {"q"}
    assert report["ids"] == [_oro_id("find_product", search["parameters"])] * 2 + [
        _oro_id("find_product", search["parameters"], 12)
    ]
    # format_content and create_dialogue_step: the envelope keeps the content each step was created with
    assert report["format_content"] == ["<response>done</response>", _tagged("look", [search], "")]
    for s in steps:
        m = s["completion"]["message"]
        assert s["completion"]["content"] == _tagged(m["think"], m["tool_call"], m["response"]), s[
            "completion"
        ]["content"][:300]
    assert all(
        keys == ["think", "tool_call"] for keys in report["message_keys"]
    )  # the empty response is left out of the message
    assert report["timestamps"] == [s["extra_info"]["timestamp"] for s in steps[:-1]] and all(
        t > 1e12 for t in report["timestamps"]
    )
    # ProxyClient reached the proxy: the model once, then the search (and the reading of its results)
    paths = [c["path"] for s in steps for c in s["extra_info"]["proxy_calls"]]
    assert env["inference_total"] == 1 and "/find_product" in paths
    names = [c["name"] for s in steps for c in s["completion"]["message"]["tool_call"]]
    assert names[-1] == "terminate" and ("recommend_product" in names) == (
        "view_product_information" in names
    )


@pytest.mark.parametrize("isolated", [True, False], ids=["sandbox", "no-isolation"])
def test_oro_interface_agent_runs_through_run_agent(isolated, tmp_path, monkeypatch, capsys):
    from shopdistill.reproduce.cli import main

    if isolated and WHY_NOT is not None:
        if os.environ.get("SHOPDISTILL_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"the sandbox is required here: {WHY_NOT}")
        pytest.skip(WHY_NOT)
    prof = tmp_path / "smoke3.yaml"
    prof.write_text(
        "catalog: {n_products: 2000, seed: 0}\ntasks: {n: {product: 1, shop: 1, voucher: 1}, seed: 0}\n"
    )
    monkeypatch.setenv("SHOPDISTILL_RUNS", str(tmp_path / "runs"))
    out = tmp_path / "out"
    rc = main(
        [
            "arena",
            "run-agent",
            str(AGENT),
            "--profile",
            str(prof),
            "--n",
            "1",
            "--out",
            str(out),
            "--timeout-problem",
            "60",
        ]
        + ([] if isolated else ["--no-isolation"])
    )
    printed = capsys.readouterr().out
    assert rc == 0, printed
    envs = [json.loads(x) for x in (out / "output.jsonl").read_text().splitlines()]
    assert [e["status"] for e in envs] == ["SUCCESS"] * 3, [e["error"] for e in envs]
    assert any(
        "recommend_product" in json.dumps(e["dialogue"]) for e in envs
    )  # at least one episode got as far as recommending
    for e in envs:
        assert envelope_problems(e) == []
        check_interface(e)


def test_a_name_missing_from_the_shim_fails_the_run(tmp_path, monkeypatch):
    "The failure ORO's agent met, recreated: without `_TOOL_REGISTRY` in the shim every problem is FAILED with ImportError."
    cat = Catalog.from_records(generate_catalog(500, seed=0))
    tasks = synthesize_tasks(cat, {"product": 1, "shop": 0, "voucher": 0}, seed=5)
    lacking = ", ".join(n for n in AGENT_INTERFACE if n != "_TOOL_REGISTRY")
    monkeypatch.setitem(SN15_SHIMS, SHIM, f"from shopdistill.arena.sn15_api import {lacking}\n")
    res = run_agent_file(AGENT, tasks, SearchEngine.build(cat), timeout_problem=60, isolation=False)
    assert [r["status"] for r in res["rows"]] == ["FAILED"] and res["rows"][0][
        "error"
    ] == "ImportError"
    assert "_TOOL_REGISTRY" in res["envelopes"][0]["error"]["message"]
