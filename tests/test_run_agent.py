"""`shopdistill arena run-agent`: static checks naming rule and line, agent files run in a bubblewrap sandbox, crashing,
hanging, garbage-printing agents turned into FAILED / TIMED_OUT envelopes while the run goes on, the hostile suite
(tests/hostile_agents/) contained, SN15's agent shape accepted and scored, and the refusal where no namespaces can be made.

Where the sandbox cannot be set up the isolated tests are skipped, unless SHOPDISTILL_REQUIRE_SANDBOX=1 (CI sets it), which
makes them fail instead."""

import hashlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from shopdistill.sandbox.catalog import Catalog, generate_catalog
from shopdistill.core.run import repo_root
from shopdistill.arena.envelope import envelope_problems
from shopdistill.arena.agent_checks import ProblemPhrases, static_check
from shopdistill.arena.isolation import SandboxLimits, isolation_problem
from shopdistill.arena.run_agent import run_agent_file
from shopdistill.sandbox.search import SearchEngine
from shopdistill.sandbox.task_synthesis import synthesize_tasks

REFERENCE = repo_root() / "examples" / "reference_agent.py"
SN15_SHAPE = repo_root() / "examples" / "sn15_shape_agent.py"
HOSTILE = sorted((Path(__file__).parent / "hostile_agents").glob("*.py"))
WHY_NOT = isolation_problem()
ISO = WHY_NOT is None  # the runs below are isolated wherever the sandbox can be set up


@pytest.fixture
def sandboxed():
    "Skip a test that needs the sandbox where it cannot be set up; fail instead when SHOPDISTILL_REQUIRE_SANDBOX=1 (CI)."
    if WHY_NOT is not None:
        if os.environ.get("SHOPDISTILL_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"the sandbox is required here: {WHY_NOT}")
        pytest.skip(WHY_NOT)


PROBLEMS = [
    {
        "query": "Find a stainless steel water bottle with a bamboo lid under 500 pesos, with free shipping."
    },
    {
        "query": "I want a ceramic coffee mug in navy blue that holds 350 ml, from an official store."
    },
]


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
    "verbatim_problem_phrase": (
        "def agent_main(problem):\n    if 'water bottle with a bamboo lid under 500' in problem['query']:\n        return []\n    return []\n",
        2,
    ),
    "problem_term_dictionary": (
        "def agent_main(problem):\n    return []\n\nLOOKUP = {'stainless': 1, 'bottle': 2, 'bamboo': 3, 'ceramic': 4,\n"
        "          'coffee': 5, 'navy': 6, 'holds': 7, 'steel': 8}\n",
        4,
    ),
    "dynamic_code": ("def agent_main(problem):\n    return __import__('json').loads('[]')\n", 2),
    "forbidden_import": (
        "import json\nfrom urllib.request import urlopen\ndef agent_main(problem):\n    return []\n",
        2,
    ),
    "process_spawn": (
        "import os\ndef agent_main(problem):\n    os.popen('ls')\n    return []\n",
        3,
    ),
    "file_write": (
        "from pathlib import Path\ndef agent_main(problem):\n    Path('cache.json').write_text('{}')\n    return []\n",
        3,
    ),
}


@pytest.mark.parametrize("rule", sorted(BAD))
def test_each_static_rule_rejects_with_rule_and_line(rule):
    src, line = BAD[rule]
    found = static_check(src, PROBLEMS, "agent.py")
    hits = [r for r in found if r.rule == rule]
    assert hits, found
    assert hits[0].line == line
    assert str(hits[0]).startswith(f"{rule} (line {line}): ")


@pytest.mark.parametrize(
    "src",
    [
        "import subprocess\ndef agent_main(p):\n    return []\n",
        "import socket\ndef agent_main(p):\n    return []\n",
        "from shopdistill import server\ndef agent_main(p):\n    return []\n",
        "def agent_main(p):\n    open('x', 'a')\n    return []\n",
        "def agent_main(p):\n    exec('x = 1')\n    return []\n",
    ],
)
def test_more_forbidden_things(src):
    assert static_check(src, PROBLEMS)


def test_clean_files_pass():
    assert static_check(REFERENCE.read_text(), PROBLEMS) == []
    ok = "import json, re\nfrom shopdistill.arena.tool_client import current_client\ndef agent_main(problem):\n    return []\n"
    assert static_check(ok, PROBLEMS) == []


def test_template_phrases_shared_by_many_problems_are_not_copies():
    many = [
        {"query": f"Find a shop that offers these items: item {i} and thing {i * 7}."}
        for i in range(40)
    ]
    idx = ProblemPhrases(many)
    assert (
        idx.copied_phrase("Find a shop that offers these items:") is None
    )  # template wording, in every problem
    assert (
        idx.copied_phrase("these items: item 17 and thing 119") is not None
    )  # one problem's own words


# ---- running files -------------------------------------------------------------------------------
def test_reference_agent_file_runs(sandbox):
    engine, tasks = sandbox
    res = run_agent_file(
        REFERENCE, tasks[:3], engine, timeout_problem=60, timeout_suite=300, isolation=ISO
    )
    assert res["accepted"] and [r["status"] for r in res["rows"]] == ["SUCCESS"] * 3
    for e in res["envelopes"]:
        assert envelope_problems(e) == []
        assert any(
            p["kind"] == "search" for s in e["dialogue"] for p in s["extra_info"]["proxy_calls"]
        )
    assert 0 <= res["score"]["final_score"] <= 1


def test_misbehaving_agents_become_envelopes_and_the_run_goes_on(sandbox, tmp_path):
    engine, tasks = sandbox
    ids = [t["id"] for t in tasks[:5]]
    f = _file(
        tmp_path,
        "moody",
        f"""
        import sys, time
        from shopdistill.arena.tool_client import current_client, episode_env
        from shopdistill.sandbox.tools import call_tool
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
    """,
    )
    res = run_agent_file(f, tasks[:5], engine, timeout_problem=4, timeout_suite=60, isolation=ISO)
    assert res["accepted"], res["rejections"]
    got = [(r["status"], r["error"]) for r in res["rows"]]
    assert got == [
        ("FAILED", "RuntimeError"),
        ("TIMED_OUT", "TimeoutError"),
        ("FAILED", "InvalidOutput"),
        ("FAILED", "NoResult"),
        ("SUCCESS", None),
    ]
    assert (
        res["rows"][2]["printed_bytes"] > 100_000
    )  # it printed, the harness kept only a little of it
    for e in res["envelopes"]:
        assert envelope_problems(e) == []
    last = res["envelopes"][-1]
    assert last["inference_total"] == 1
    assert [len(s["extra_info"]["proxy_calls"]) for s in last["dialogue"]] == [
        1,
        1,
    ]  # the search, then the model call


def test_suite_limit_times_out_the_rest(sandbox, tmp_path):
    engine, tasks = sandbox
    f = _file(
        tmp_path,
        "slow",
        "import time\ndef agent_main(problem):\n    time.sleep(10)\n    return []\n",
    )
    res = run_agent_file(
        f, tasks[:3], engine, timeout_problem=1.5, timeout_suite=2.0, isolation=ISO
    )
    assert [r["status"] for r in res["rows"]] == ["TIMED_OUT"] * 3
    assert [r["error"] for r in res["rows"]][-1] == "SuiteTimeout"


def _sneaky_files(tmp_path):
    net = _file(
        tmp_path,
        "sneaky",
        """
        from shopdistill.arena.tool_client import HttpToolClient
        def agent_main(problem):
            HttpToolClient("http://example.com").find_product("exfiltrate")
            return []
    """,
    )
    wr = _file(
        tmp_path,
        "writer",
        """
        def agent_main(problem):
            m = "w"
            open("stolen.txt", m)
            return []
    """,
    )
    return net, wr


def test_no_isolation_keeps_the_audit_hook_as_a_seatbelt(sandbox, tmp_path):
    engine, tasks = sandbox
    f, g = _sneaky_files(tmp_path)
    net = run_agent_file(f, tasks[:1], engine, timeout_problem=20, isolation=False)
    assert net["isolation"].startswith("NONE (--no-isolation)")
    assert (
        net["rows"][0]["status"] == "FAILED"
        and "network access refused" in net["envelopes"][0]["error"]["message"]
    )
    wr = run_agent_file(g, tasks[:1], engine, timeout_problem=20, isolation=False)
    assert wr["rows"][0]["error"] == "PermissionError" and not (tmp_path / "stolen.txt").exists()


def test_the_sandbox_blocks_what_the_static_checks_miss(sandboxed, sandbox, tmp_path):
    engine, tasks = sandbox
    f, g = _sneaky_files(tmp_path)
    net = run_agent_file(f, tasks[:1], engine, timeout_problem=20)
    assert net["isolation"].startswith("bubblewrap sandbox")
    assert (
        net["rows"][0]["status"] == "FAILED" and net["envelopes"][0]["error"]["type"] == "URLError"
    )  # no name server, no route
    wr = run_agent_file(g, tasks[:1], engine, timeout_problem=20)
    assert (
        "Read-only file system" in wr["envelopes"][0]["error"]["message"]
        and not (tmp_path / "stolen.txt").exists()
    )


def test_rejected_file_never_runs(sandbox, tmp_path):
    engine, tasks = sandbox
    f = _file(tmp_path, "cheater", "import requests\ndef agent_main(problem):\n    return []\n")
    res = run_agent_file(f, tasks[:2], engine)
    assert (
        not res["accepted"]
        and res["envelopes"] == []
        and res["rejections"][0].rule == "forbidden_import"
    )


def test_cli_check_and_run(tmp_path, monkeypatch, capsys):
    from shopdistill.reproduce.cli import main

    bad = _file(tmp_path, "bad", "import socket\ndef agent_main(problem):\n    return []\n")
    assert main(["arena", "check", str(bad)]) == 1
    assert "forbidden_import (line 1)" in capsys.readouterr().out
    assert main(["arena", "check", str(REFERENCE)]) == 0
    prof = tmp_path / "cli.yaml"
    prof.write_text(
        "catalog: {n_products: 2000, seed: 0}\ntasks: {n: {product: 3, shop: 3, voucher: 3}, seed: 0}\n"
    )
    monkeypatch.setenv("SHOPDISTILL_RUNS", str(tmp_path / "runs"))
    out = tmp_path / "out"
    assert (
        main(
            [
                "arena",
                "run-agent",
                str(REFERENCE),
                "--profile",
                str(prof),
                "--n",
                "1",
                "--out",
                str(out),
                "--timeout-problem",
                "60",
            ]
            + ([] if ISO else ["--no-isolation"])
        )
        == 0
    )
    lines = (out / "output.jsonl").read_text().splitlines()
    assert len(lines) == 3 and all(envelope_problems(json.loads(x)) == [] for x in lines)
    assert main(["arena", "run-agent", str(bad), "--profile", str(prof)]) == 1


# ---- isolation: a well-behaved agent scores the same, SN15's shape runs, the model route can be real ---------------------
_COLS = ("problem_id", "status", "success", "reasoning_quality", "steps", "error")


def test_isolation_changes_nothing_for_a_well_behaved_agent(sandboxed, sandbox):
    engine, tasks = sandbox
    inside = run_agent_file(REFERENCE, tasks, engine, timeout_problem=60)
    outside = run_agent_file(REFERENCE, tasks, engine, timeout_problem=60, isolation=False)
    assert [[r[c] for c in _COLS] for r in inside["rows"]] == [
        [r[c] for c in _COLS] for r in outside["rows"]
    ]
    assert inside["score"] == outside["score"] and inside["score"]["success_rate"] > 0


def test_sn15_shaped_agent_is_accepted_and_scored(sandboxed, sandbox):
    engine, tasks = sandbox
    assert static_check(SN15_SHAPE.read_text(), tasks) == []
    res = run_agent_file(SN15_SHAPE, tasks[:3], engine, timeout_problem=60)
    assert [r["status"] for r in res["rows"]] == ["SUCCESS"] * 3 and res["score"][
        "final_score"
    ] is not None
    for e in res["envelopes"]:
        assert envelope_problems(e) == [] and e["inference_total"] == 1
        paths = [c["path"] for s in e["dialogue"] for c in s["extra_info"]["proxy_calls"]]
        assert (
            "/find_product" in paths and "/view_product_information" in paths
        )  # SN15's /search/ routes, logged as the project's


def test_model_url_puts_a_real_endpoint_behind_the_model_route(sandboxed, sandbox):
    from shopdistill.corpus.judge import ScriptedChatServer

    engine, tasks = sandbox
    with ScriptedChatServer(lambda body: (200, "stainless bottle", 0.0)) as chat:
        res = run_agent_file(
            SN15_SHAPE,
            tasks[:1],
            engine,
            timeout_problem=60,
            model_url=chat.url,
            model="served-model",
        )
    assert (
        chat.requests and chat.requests[0]["model"] == "served-model"
    )  # the validator, not the agent, reached the endpoint
    calls = [c for s in res["envelopes"][0]["dialogue"] for c in s["extra_info"]["proxy_calls"]]
    assert (
        calls[0]["kind"] == "inference"
        and calls[0]["response"]["choices"][0]["message"]["content"] == "stainless bottle"
    )
    assert (
        calls[1]["params"]["q"] == "stainless+bottle"
    )  # the agent searched for what the real model said (quote_plus, as SN15's does)


def test_cpu_limit_kills_a_spinning_agent_before_the_time_limit(sandboxed, sandbox):
    engine, tasks = sandbox
    res = run_agent_file(
        repo_root() / "tests" / "hostile_agents" / "cpu_burn.py",
        tasks[:1],
        engine,
        timeout_problem=60,
        limits=SandboxLimits(cpu_s=1),
    )
    assert (
        res["rows"][0]["status"] == "FAILED"
        and "SIGXCPU" in res["envelopes"][0]["error"]["message"]
    )
    assert res["rows"][0]["seconds"] < 30


def test_refuses_where_no_tool_can_isolate():
    why = isolation_problem(bwrap="no-such-bwrap")
    assert (
        "no-such-bwrap" in why
        and "not found on PATH" in why
        and "apt-get install bubblewrap" in why
        and "--no-isolation" in why
    )


def test_an_interpreter_under_tmp_is_not_hidden_by_the_sandbox_scratch(sandboxed):
    """A clone in /tmp puts its .venv under /tmp, where the sandbox mounts its own scratch tmpfs; the interpreter must still be
    seen inside (a clean clone once failed here with `bwrap: execvp .../.venv/bin/python3.11: No such file or directory`)."""
    import tempfile

    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        venv = Path(d) / "clone" / ".venv"
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(venv)],
            check=True,
            capture_output=True,
        )
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        code = "from shopdistill.arena.isolation import isolation_problem; import sys; print(sys.prefix); print(isolation_problem())"
        out = subprocess.run(
            [str(venv / "bin" / "python"), "-c", code],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        prefix, why = out.stdout.strip().splitlines()
        assert prefix == str(venv)  # the test is real: the interpreter's own prefix is under /tmp
        assert why == "None", why


def test_refuses_on_a_kernel_without_namespaces(sandboxed, tmp_path):
    """A machine whose kernel makes no new namespaces, simulated for real: the CLI runs as an unprivileged uid inside a user
    namespace where `bwrap --disable-userns` has made the kernel refuse any further one (ENOSPC)."""
    prof = tmp_path / "cli.yaml"
    prof.write_text(
        "catalog: {n_products: 500, seed: 0}\ntasks: {n: {product: 1, shop: 1, voucher: 1}, seed: 0}\n"
    )
    env = dict(
        os.environ, SHOPDISTILL_RUNS=str(tmp_path / "runs"), PYTHONPATH=os.pathsep.join(sys.path)
    )

    def cli(*extra):
        code = (
            f"import sys; from shopdistill.reproduce.cli import main; sys.exit(main(['arena', 'run-agent', {str(REFERENCE)!r}, '--profile', "
            f"{str(prof)!r}, '--n', '1', '--out', {str(tmp_path / 'out')!r}] + {list(extra)!r}))"
        )
        return subprocess.run(
            [
                "bwrap",
                "--unshare-user",
                "--disable-userns",
                "--uid",
                "1000",
                "--gid",
                "1000",
                "--bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--",
                sys.executable,
                "-c",
                code,
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )

    no_ns = subprocess.run(
        [
            "bwrap",
            "--unshare-user",
            "--disable-userns",
            "--uid",
            "1000",
            "--bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--",
            "unshare",
            "--user",
            "true",
        ],
        capture_output=True,
        text=True,
    )
    assert (
        no_ns.returncode != 0 and "No space left" in no_ns.stderr
    )  # the simulation is real: the kernel refuses a new user namespace
    refused = cli()
    assert refused.returncode == 2, refused.stdout + refused.stderr
    msg = refused.stderr
    assert "cannot isolate the agent" in msg and "namespace" in msg and "--no-isolation" in msg, msg
    assert not (tmp_path / "out" / "output.jsonl").exists()
    trusted = cli("--no-isolation")
    assert trusted.returncode == 0, trusted.stdout + trusted.stderr
    assert "isolation: NONE (--no-isolation)" in trusted.stdout and "NOT ISOLATED" in trusted.stdout
    assert len((tmp_path / "out" / "output.jsonl").read_text().splitlines()) == 3


# ---- the hostile suite: every file contained, the validator finishing with an envelope per problem ------------------------
def _sha(paths) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p).encode() + b"\0" + Path(p).read_bytes())
    return h.hexdigest()


def _alive_with(marker: str) -> list[int]:
    "Host processes whose command line holds `marker`."
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and d.name != str(os.getpid()):
            try:
                if marker.encode() in (d / "cmdline").read_bytes():
                    out.append(int(d.name))
            except OSError:
                pass
    return out


class _Canaries:
    "What an escaped agent would touch on the host: a loopback TCP port, an abstract Unix socket, a process of the sandbox's uid."

    def __init__(self):
        self.hits = []
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.abstract.bind("\0shopdistill-hostile-canary")
        self.abstract.listen(8)
        for s in (self.tcp, self.abstract):
            threading.Thread(target=self._accept, args=(s,), daemon=True).start()
        drop = (
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
            if os.geteuid() == 0
            else []
        )
        self.proc = subprocess.Popen(drop + ["sleep", "900"])

    def _accept(self, s):
        while True:
            try:
                c, _ = s.accept()
            except OSError:
                return
            self.hits.append(s.getsockname())
            c.close()

    def close(self):
        self.proc.kill()
        self.proc.wait()
        self.tcp.close()
        self.abstract.close()


@pytest.fixture(scope="module")
def hostile_project(tmp_path_factory):
    "A project folder as a new user has it: a profile, its runs/ with the gold tasks file, the agent files beside them."
    from shopdistill.reproduce.settings import load_config
    from shopdistill.sandbox.profile import load_sandbox

    proj = tmp_path_factory.mktemp("project")
    prof = proj / "hostile.yaml"
    prof.write_text(
        "catalog: {n_products: 2000, seed: 0}\ntasks: {n: {product: 2, shop: 2, voucher: 2}, seed: 0}\n"
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SHOPDISTILL_RUNS", str(proj / "runs"))
        cfg = load_config(prof)
        _, _, tasks = load_sandbox(cfg.run, cfg.catalog, cfg.search, cfg.tasks)
        box = cfg.run.sandbox().make()
        box.tasks.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    (proj / "out").mkdir()
    canaries = _Canaries()
    yield proj, prof, box.tasks, canaries
    canaries.close()


def _report(env) -> dict | None:
    return (
        json.loads(env["dialogue"][0]["completion"]["message"]["think"])
        if env["dialogue"]
        else None
    )


def _no_write_done(r):
    return all(v != "done" for k, v in r.items() if k != "write /tmp") and r["write /tmp"] == "done"


# what each file must have seen from inside (its report), on top of the checks every file gets
CONTAINED = {
    "read_outside": lambda r, proj: (
        r["gold files"] == []
        and r["/etc/passwd"] == "FileNotFoundError"
        and proj.name not in json.dumps(r)
    ),
    "write_anywhere": lambda r, proj: _no_write_done(r),
    "spawn_shell": lambda r, proj: (
        r["stdout"].startswith("65534\n")
        and "Read-only file system" in r["stdout"]
        and "/etc/passwd: No such file" in r["stderr"]
        and proj.name not in r["stdout"]
    ),
    "ctypes_root": lambda r, proj: (
        r["system saw"].startswith("65534\n")
        and "No such file" in r["system saw"]
        and all(r[k][0] == -1 for k in ("setuid0", "unshare_user", "mount_tmpfs"))
    ),
    "fork_bomb": lambda r, proj: (
        0 < r["children"] < SandboxLimits().processes and "11" in (r["stopped by"] or "")
    ),  # EAGAIN
    "memory_hog": lambda r, proj: (
        r["1.5 GB"] == "MemoryError"
        and r["4 GB map"] != "mapped"
        and r["grown MB"] < SandboxLimits().address_space_mb
    ),
    "file_limits": lambda r, proj: (
        r["200 MB file"].startswith("OSError at 64")
        and r["scratch filled MB"] <= 64
        and r["open files"] < 256
    ),
    "signal_validator": lambda r, proj: (
        r["pids signalled"] == [] and set(r["pids visible"]) <= {1, 2} and r["ppid"] == 1
    ),
    "network_escape": lambda r, proj: (
        r["dns"] == "gaierror"
        and "connected" not in {r["1.1.1.1:53"], r["8.8.8.8:443"], r["10.0.0.1:80"]}
        and r["udp"] != "sent"
        and r["loopback ports open"] == []
        and r["abstract canary"] != "connected"
        and r["proxy results"] > 0
    ),
    "fd_escape": lambda r, proj: "etc" not in json.dumps(r) and proj.name not in json.dumps(r),
    "escape_group": None,  # it never reports: it hangs until the time limit; the checks below are what matter
    "cpu_burn": None,
}
TIMEOUTS = {"escape_group": 3, "cpu_burn": 3, "network_escape": 30, "read_outside": 30}


@pytest.mark.parametrize("path", HOSTILE, ids=[p.stem for p in HOSTILE])
def test_hostile_agent_is_contained(sandboxed, hostile_project, path, monkeypatch, capsys):
    from shopdistill.reproduce.cli import main
    from shopdistill.arena.envelope import STATUSES

    proj, prof, gold, canaries = hostile_project
    assert path.stem in CONTAINED, f"{path.name} has no containment check"
    agent = proj / path.name
    agent.write_text(
        path.read_text()
    )  # beside the project's runs/, where a new user keeps the file
    before = {
        "agent": _sha([agent]),
        "gold": _sha([gold]),
        "library": _sha(Path(repo_root() / "shopdistill").rglob("*.py")),
        "folder": sorted(p.name for p in proj.iterdir()),
    }
    monkeypatch.setenv("SHOPDISTILL_RUNS", str(proj / "runs"))
    out = proj / "out" / path.stem
    t0 = time.time()
    rc = main(
        [
            "arena",
            "run-agent",
            str(agent),
            "--profile",
            str(prof),
            "--n",
            "1",
            "--out",
            str(out),
            "--timeout-problem",
            str(TIMEOUTS.get(path.stem, 20)),
        ]
    )
    printed = capsys.readouterr().out
    assert rc == 0, printed  # the validator finished
    envs = [json.loads(x) for x in (out / "output.jsonl").read_text().splitlines()]
    assert len(envs) == 3 and all(
        e["status"] in STATUSES and envelope_problems(e) == [] for e in envs
    ), printed
    assert "success True" not in printed  # no gold reached the agent
    deadline = time.time() + 5
    while (
        _alive_with(f"/agent/{path.name}") or _alive_with("hostile-escape-marker")
    ) and time.time() < deadline:
        time.sleep(0.1)
    assert (
        _alive_with(f"/agent/{path.name}") == [] and _alive_with("hostile-escape-marker") == []
    )  # the whole tree ended
    assert (
        canaries.proc.poll() is None and canaries.hits == []
    )  # no host process signalled, no host socket reached
    after = {
        "agent": _sha([agent]),
        "gold": _sha([gold]),
        "library": _sha(Path(repo_root() / "shopdistill").rglob("*.py")),
        "folder": sorted(p.name for p in proj.iterdir()),
    }
    assert (
        after == before
    )  # nothing outside the sandbox changed (the CLI's out/ folder was made before)
    check = CONTAINED[path.stem]
    if check is None:
        assert {e["status"] for e in envs} <= {"TIMED_OUT", "FAILED"}
    else:
        reports = [_report(e) for e in envs]
        assert all(r is not None for r in reports), [e["error"] for e in envs]
        for r in reports:
            assert check(r, proj), json.dumps(r)[:3000]
    print(
        f"{path.stem}: contained in {time.time() - t0:.1f}s, statuses {[e['status'] for e in envs]}"
    )
