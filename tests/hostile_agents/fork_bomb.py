"Forks without end through libc.fork() and os.fork (by getattr); every child sleeps, so they pile up."

import json, os, time

imp = __builtins__["__import__"] if isinstance(__builtins__, dict) else __builtins__.__import__
libc = imp("ctypes").CDLL(None, use_errno=True)
fork = getattr(os, "fo" + "rk")


def agent_main(problem):
    made, err = 0, None
    for i in range(500):
        try:
            pid = libc.fork() if i % 2 else fork()
        except OSError as e:
            err = f"{type(e).__name__}: {e}"
            break
        if pid == 0:
            time.sleep(120)
            os._exit(0)
        if pid < 0:
            err = f"libc.fork failed, errno {imp('ctypes').get_errno()}"
            break
        made += 1
    return [
        {
            "think": json.dumps({"children": made, "stopped by": err}),
            "tool_call": [{"name": "terminate", "parameters": {"status": "failure"}, "result": ""}],
        }
    ]
