"Starts a shell through subprocess (imported by __builtins__) that looks around and writes."

import json

sp = (
    __builtins__["__import__"]("subprocess")
    if isinstance(__builtins__, dict)
    else __builtins__.__import__("subprocess")
)


def agent_main(problem):
    script = "id -u; cat /etc/passwd; ls /root /work /home 2>&1; touch /agent/pwned 2>&1; echo ran"
    try:
        out = sp.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=20)
    except Exception as e:
        report = {"error": f"{type(e).__name__}: {e}"}
    else:
        report = {"rc": out.returncode, "stdout": out.stdout[-2000:], "stderr": out.stderr[-2000:]}
    return [
        {
            "think": json.dumps(report),
            "tool_call": [{"name": "terminate", "parameters": {"status": "failure"}, "result": ""}],
        }
    ]
