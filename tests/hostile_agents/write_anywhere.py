"Changes files: appends to its own file, renames and truncates it, unlinks a shopdistill module, makes folders, opens a sqlite database, writes into every visible folder."

import json, os, sqlite3
from pathlib import Path

import shopdistill.sandbox.tools

MODE = "a"


def _try(report, what, fn):
    try:
        fn()
        report[what] = "done"
    except Exception as e:
        report[what] = f"{type(e).__name__}: {e}"


def agent_main(problem):
    r, me, lib = {}, Path(__file__), Path(shopdistill.sandbox.tools.__file__)
    _try(r, "append own file", lambda: open(me, MODE).write("# pwned\n"))
    _try(r, "rename own file", lambda: getattr(os, "ren" + "ame")(me, me.with_suffix(".bak")))
    _try(r, "truncate own file", lambda: getattr(os, "trun" + "cate")(me, 0))
    _try(r, "unlink shopdistill.sandbox.tools", lambda: lib.unlink())
    _try(r, "mkdir beside", lambda: getattr(os, "mk" + "dir")(me.parent / "loot"))
    _try(
        r,
        "sqlite beside",
        lambda: sqlite3.connect(str(me.parent / "loot.db")).execute("create table t (x)"),
    )
    _try(r, "chmod library", lambda: getattr(os, "ch" + "mod")(lib, 0o777))
    for d in [
        "/",
        "/usr",
        "/usr/lib",
        "/sandbox",
        "/sandbox/run",
        "/agent",
        "/proc",
        "/dev",
        "/tmp",
    ]:
        _try(
            r,
            f"write {d}",
            lambda d=d: open(os.path.join(d, "pwned.txt"), "w" if MODE else "r").write("x"),
        )
    return [
        {
            "think": json.dumps(r),
            "tool_call": [{"name": "terminate", "parameters": {"status": "failure"}, "result": ""}],
        }
    ]
