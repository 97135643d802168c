"Allocates 1.5 GB at once, then maps 4 GB, then grows a list until something stops it."

import json, mmap


def agent_main(problem):
    r = {}
    try:
        big = bytearray(1536 << 20)
        r["1.5 GB"] = f"allocated {len(big)}"
    except MemoryError:
        r["1.5 GB"] = "MemoryError"
    try:
        _held = mmap.mmap(-1, 4 << 30)  # kept, so the mapping lives while the agent reports
        r["4 GB map"] = "mapped"
    except (OSError, MemoryError) as e:
        r["4 GB map"] = type(e).__name__
    grow = []
    try:
        while True:
            grow.append(bytearray(50 << 20))
    except MemoryError:
        r["grown MB"] = 50 * len(grow)
    grow.clear()
    return [
        {
            "think": json.dumps(r),
            "tool_call": [{"name": "terminate", "parameters": {"status": "failure"}, "result": ""}],
        }
    ]
