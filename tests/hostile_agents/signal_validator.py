"Signals its parent (SIGTERM), then every process it can name: each pid in turn with SIGKILL, and kill(-1, SIGKILL)."

import json, os, signal


def agent_main(problem):
    r = {
        "ppid": os.getppid(),
        "pids visible": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    }
    try:
        os.kill(os.getppid(), signal.SIGTERM)
        r["parent"] = "sent"
    except OSError as e:
        r["parent"] = type(e).__name__
    hit, mine = (
        [],
        {int(t) for t in os.listdir("/proc/self/task")},
    )  # its own threads' ids would kill itself
    for pid in range(2, 1 << 15):
        if pid in mine:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            hit.append(pid)
        except OSError:
            pass
    r["pids signalled"] = hit
    try:
        os.kill(-1, signal.SIGKILL)
        r["kill -1"] = "sent"
    except OSError as e:
        r["kill -1"] = type(e).__name__
    return [
        {
            "think": json.dumps(r),
            "tool_call": [{"name": "terminate", "parameters": {"status": "failure"}, "result": ""}],
        }
    ]
