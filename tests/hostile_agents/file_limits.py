"Writes a 200 MB file, fills the scratch folder with many files, and opens files until something stops it."

import json, os
from pathlib import Path

MODE = "w"


def agent_main(problem):
    r = {}
    chunk = b"x" * (1 << 20)
    try:
        with open("/tmp/big", MODE + "b") as f:
            for _ in range(200):
                f.write(chunk)
        r["200 MB file"] = "written"
    except OSError as e:
        r["200 MB file"] = f"{type(e).__name__} at {os.path.getsize('/tmp/big') >> 20} MB"
    Path("/tmp/big").unlink(missing_ok=True)
    total = 0
    try:
        for i in range(100):
            with open(f"/tmp/fill{i}", MODE + "b") as f:
                for _ in range(32):
                    f.write(chunk)
                    total += 1
    except OSError as e:
        r["scratch filled MB"] = total
        r["scratch stopped by"] = type(e).__name__
    held = []
    try:
        while len(held) < 100000:
            held.append(open("/dev/null"))
    except OSError as e:
        r["open files"] = len(held)
        r["open stopped by"] = type(e).__name__
    for f in held:
        f.close()
    return [
        {
            "think": json.dumps(r),
            "tool_call": [{"name": "terminate", "parameters": {"status": "failure"}, "result": ""}],
        }
    ]
