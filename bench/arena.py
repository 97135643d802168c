"""Throughput and memory of the simulated arena at the paper's extract size (146,000 traces).

Runs a season on the smoke profile's sandbox (20,000 products) with a population sized so that one day yields a few
thousand traces, until the firehose holds `--traces` envelopes (146,000 by default: the paper's race-window extract),
and prints a table: traces, days, seconds, traces per second, peak resident memory of the parent and of the largest
worker process, and the firehose's size. Usage:

    python bench/arena.py [--traces 146000] [--workers 2] [--out DIR] [--profile smoke]

Without --out the season goes to a temporary folder that is deleted afterwards.
"""

import argparse
import json
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from shopdistill.reproduce.settings import load_config
from shopdistill.arena.season import simulate_season


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", type=int, default=146_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--profile", default="smoke")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    cfg = load_config(args.profile)
    # 32 hotkeys x 3 validators x 30 suite problems a day, plus the race: about 3,500 traces a day, so ~42 days
    st = replace(
        cfg.arena_traces,
        days=80,
        miners={"subtask": 14, "agentic": 12, "decoy": 6},
        validators=3,
        eligible_runs=2,
        workers=args.workers,
    )
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="arena-bench-"))
    t0 = time.time()
    try:
        s = simulate_season(
            cfg.run,
            st,
            cfg.arena,
            cfg.catalog,
            cfg.search,
            cfg.tasks,
            cfg.scoring,
            out_dir=out,
            workers=args.workers,
            stop_at_traces=args.traces,
            progress=True,
        )
    finally:
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)
    wall = time.time() - t0
    rows = [
        ("traces", f"{s['traces']:,}"),
        ("days simulated", len(s["days"])),
        ("agent versions", s["versions"]),
        ("worker processes", s["workers"]),
        ("wall seconds (with setup)", f"{wall:.0f}"),
        ("setup seconds", s["seconds"]["setup"]),
        ("traces / second (season)", f"{s['traces_per_second']:.0f}"),
        ("peak RSS parent (MB)", s["peak_rss_mb"]["parent"]),
        ("peak RSS largest worker (MB)", s["peak_rss_mb"]["largest_worker"]),
        ("firehose (MB, gzip)", f"{s['firehose_bytes'] / 1e6:.0f}"),
        ("bytes / trace (gzip)", f"{s['firehose_bytes'] / max(1, s['traces']):.0f}"),
        ("shards", len(s["shards"])),
    ]
    w = max(len(k) for k, _ in rows)
    print("\narena season benchmark")
    for k, v in rows:
        print(f"  {k:<{w}}  {v}")
    print(json.dumps({k: v for k, v in rows}))


if __name__ == "__main__":
    main()
