"""Throughput and memory of the corpus pipeline (chapters 03 + 04) at the paper's extract size (146,000 traces).

read -> normalise -> judge (gate proxy) -> filter -> split -> write, as `shopdistill corpus build` runs it (the filter scan riding along
chapter 03's workers, one pass over the data), on a synthetic
firehose, side by side with the naive way on the same files: one process, one record at a time, `json.loads` on each line,
the same reader, judge and stages, everything kept in memory until the end. Prints a table and the ratios.

The firehose comes from chapter 02's season engine (`simulate_season(..., stop_at_traces=N)` on the smoke sandbox with a
larger population, as bench/arena.py runs it) and is cached in runs/bench/arena/ (generation is not timed). With
`--source replicate` it is instead made by copying the smoke firehose's envelopes until N, each copy with fresh trace and
problem ids (faster, but every copy after the first is a duplicate the filter removes). Usage:

    python bench/pipeline.py [--traces 146000] [--workers 2] [--source season|replicate] [--firehose DIR] [--naive-limit N]

Goal (issue 4): all 146,000 in under 2 minutes on 2 cores, peak memory under 4 GB.
"""

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shopdistill.core.run import ArenaFolder, Run, runs_root

REPO = Path(__file__).resolve().parent.parent


def count_traces(firehose: Path) -> int:
    return sum(1 for p in sorted(firehose.glob("shard-*.jsonl.gz")) for _ in gzip.open(p, "rb"))


def trimmed(src: Path, n: int) -> Path:
    "The first `n` envelopes of firehose `src`, as a firehose next to it (whole shards are linked, the last one cut)."
    dst = src.parent / f"firehose-{n}"
    if dst.is_dir() and count_traces(dst) == n:
        return dst
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir()
    left = n
    for p in sorted(src.glob("shard-*.jsonl.gz")):
        if left <= 0:
            break
        lines = gzip.open(p, "rb").read().splitlines(keepends=True)
        if len(lines) <= left:
            os.link(p, dst / p.name)
        else:
            with gzip.open(dst / p.name, "wb", compresslevel=6) as f:
                f.writelines(lines[:left])
        left -= min(left, len(lines))
    bank = ArenaFolder(src.parent).bank  # chapter 03 finds the bank one folder up
    if bank.exists() and not ArenaFolder(dst.parent).bank.exists():
        shutil.copy(bank, ArenaFolder(dst.parent).bank)
    return dst


def season_firehose(n: int, workers: int, out: Path, profile: str) -> Path:
    "Chapter 02's season engine until the firehose holds at least `n` traces (cached in `out`); then exactly the first `n`."
    from dataclasses import replace
    from shopdistill.reproduce.settings import load_config
    from shopdistill.arena.season import simulate_season

    arena = ArenaFolder(out)
    if arena.season.is_file() and json.loads(arena.season.read_text())["traces"] >= n:
        return trimmed(arena.firehose, n)
    cfg = load_config(profile)
    st = replace(
        cfg.arena_traces,
        days=80,
        miners={"subtask": 14, "agentic": 12, "decoy": 6},
        validators=3,
        eligible_runs=2,
        workers=workers,
    )
    t0 = time.time()
    s = simulate_season(
        cfg.run,
        st,
        cfg.arena,
        cfg.catalog,
        cfg.search,
        cfg.tasks,
        cfg.scoring,
        out_dir=out,
        workers=workers,
        stop_at_traces=n,
        progress=True,
    )
    print(
        f"generated {s['traces']:,} traces with the season engine in {time.time() - t0:.0f} s -> {out}"
    )
    return trimmed(arena.firehose, n)


def replicated_firehose(n: int, src: Path, out: Path, shard_size: int = 5000) -> Path:
    "The smoke firehose's envelopes copied until `n`, each copy with fresh trace and problem ids (cached in `out`)."
    fh = ArenaFolder(out).firehose
    if fh.is_dir() and count_traces(fh) >= n:
        return fh
    fh.mkdir(parents=True, exist_ok=True)
    shutil.copy(ArenaFolder(src.parent).bank, ArenaFolder(out).bank)
    envs = [
        line
        for p in sorted(src.glob("shard-*.jsonl.gz"))
        for line in gzip.open(p, "rt", encoding="utf-8")
    ]
    k, f = 0, None
    while k < n:
        e = json.loads(envs[k % len(envs)])
        copy = k // len(envs)
        if copy:
            e["problem_id"] = f"{e['problem_id']}-r{copy}"
            for st in e.get("dialogue") or []:
                st["extra_info"]["problem_id"] = e["problem_id"]
            e["extract"]["trace_id"] = f"{e['extract']['trace_id']}/r{copy}"
        if k % shard_size == 0:
            if f:
                f.close()
            f = gzip.open(
                fh / f"shard-{k // shard_size:05d}.jsonl.gz",
                "wt",
                encoding="utf-8",
                compresslevel=6,
            )
        f.write(json.dumps(e, ensure_ascii=False) + "\n")
        k += 1
    f.close()
    return fh


RUN_PIPELINE = r"""
import json, resource, sys, time
from shopdistill.corpus.build import build_corpus
from shopdistill.reproduce.settings import load_config
t0 = time.time()
cfg = load_config(sys.argv[3])
s = build_corpus(cfg.run, cfg.filter, cfg.corpus, cfg.normalise, cfg.judge, cfg.arena.clusters, cfg.catalog, sys.argv[1], sys.argv[2],
                 workers=int(sys.argv[4]), progress=False, reuse=False)
wall = time.time() - t0
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall": wall, "summary": {k: s[k] for k in ("inputs", "trajectories", "funnel", "seconds", "splits")},
                  "cpu": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
                  "rss_self_mb": me.ru_maxrss / 1024, "rss_child_mb": kids.ru_maxrss / 1024}))
"""

RUN_NAIVE = r"""
import gzip, json, resource, sys, time
from pathlib import Path
import pandas as pd
from shopdistill.reproduce.settings import load_config
from shopdistill.corpus.build import catalog_ids, profile_catalog, slim_meta
from shopdistill.corpus.chat import render_chat
from shopdistill.corpus.dedup import assistant_shingles, minhash_signature
from shopdistill.corpus.filter import apply_stages, passes_checks, trajectory_features
from shopdistill.corpus.judge import GateProxyJudge
from shopdistill.corpus.normalise import find_problems, resolve_inputs
from shopdistill.corpus.readers import read_sn15_envelope
from shopdistill.corpus.tokens import TokenCounter, load_counter, train_bpe
from shopdistill.corpus.trajectory import Reject
firehose, out, profile, limit = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
t0 = time.time()
cfg = load_config(profile); s = cfg.filter
files = resolve_inputs(firehose); index = find_problems(files); judge = GateProxyJudge(); known = catalog_ids(s.catalog, profile_catalog(cfg.run, cfg.catalog))
rows, sigs, trajs, pending, counter, n = [], {}, {}, [], None, 0

def process(t):
    r = trajectory_features(t, s, known, counter)
    if passes_checks(r, s): sigs[r["trajectory_id"]] = minhash_signature(assistant_shingles(t, s.near_ngram), s.num_perm, s.minhash_seed)
    if r["n_tokens"] is not None: trajs[r["trajectory_id"]] = t  # kept in memory until the end
    rows.append(r)

for path in files:
    for line_no, line in enumerate(gzip.open(path, "rt", encoding="utf-8"), 1):  # one record at a time, plain json
        if n >= limit: break
        n += 1
        try: t = read_sn15_envelope(json.loads(line), path, line_no, line.encode(), index)
        except Reject: continue
        t["meta"]["judge"] = judge.judge(t)
        if counter is None:  # the first bpe_sample trajectories train the tokenizer, as the pipeline's do
            pending.append(t)
            if len(pending) < s.bpe_sample and s.tokenizer == "bpe": continue
            counter = TokenCounter(train_bpe([render_chat(x["messages"], x["tools"]) for x in pending], s.bpe_vocab), "bpe") if s.tokenizer == "bpe" else load_counter(s.tokenizer)
            for x in pending: process(x)
            pending = []
        else: process(t)
df = apply_stages(pd.DataFrame(rows), s, sigs)
kept = df[df["stage"] == "kept"]
out.mkdir(parents=True, exist_ok=True)
with open(out / "kept.jsonl", "w", encoding="utf-8") as f:
    for r in kept.to_dict("records"):
        f.write(json.dumps({**trajs[r["trajectory_id"]], "meta": slim_meta(trajs[r["trajectory_id"]]["meta"])}, ensure_ascii=False) + "\n")
me = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall": time.time() - t0, "records": n, "kept": len(kept), "cpu": me.ru_utime + me.ru_stime, "rss_self_mb": me.ru_maxrss / 1024}))
"""

RUN_JSON = r"""
import gzip, json, resource, sys, time
from pathlib import Path
t0, n = time.time(), 0
for p in sorted(Path(sys.argv[1]).glob("shard-*.jsonl.gz")):
    for line in gzip.open(p, "rt", encoding="utf-8"):
        json.loads(line); n += 1
print(json.dumps({"wall": time.time() - t0, "records": n, "rss_self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(code: str, *args) -> dict:
    "Run `code` in a fresh interpreter (so its memory is its own) and return the JSON it prints last."
    p = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, cwd=REPO
    )
    if p.returncode:
        raise RuntimeError(f"benchmark step failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", type=int, default=146_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--profile", default="smoke")
    ap.add_argument("--source", choices=["season", "replicate"], default="season")
    ap.add_argument(
        "--firehose",
        default=None,
        help="an existing firehose folder to use instead of generating one",
    )
    ap.add_argument(
        "--cache", default=str(runs_root() / "bench"), help="where generated firehoses are kept"
    )
    ap.add_argument(
        "--naive-limit", type=int, default=None, help="records the naive loop reads (default: all)"
    )
    ap.add_argument("--skip-naive", action="store_true")
    args = ap.parse_args(argv)
    cache = Path(args.cache)
    if args.firehose:
        fh = Path(args.firehose)
    elif args.source == "season":
        fh = season_firehose(
            args.traces,
            max(args.workers, os.cpu_count() or 1),
            cache / f"season-{args.traces}",
            args.profile,
        )
    else:
        fh = replicated_firehose(
            args.traces, Run.of(args.profile).arena().firehose, cache / f"replicate-{args.traces}"
        )
    n = count_traces(fh)
    print(
        f"firehose: {fh} ({n:,} traces, {sum(p.stat().st_size for p in fh.glob('*.gz')) / 1e6:.0f} MB gzip, source: {args.source if not args.firehose else 'given'})"
    )
    tmp = Path(tempfile.mkdtemp(prefix="pipeline-bench-"))
    try:
        load_before = os.getloadavg()[
            0
        ]  # other work on the machine shows in the wall time, not in the CPU time
        pipe = run(RUN_PIPELINE, fh, tmp / "corpus", args.profile, args.workers)
        load_after = os.getloadavg()[0]
        peak = pipe["rss_self_mb"] + args.workers * pipe["rss_child_mb"]
        sec = pipe["summary"]["seconds"]
        rows = [
            ("traces", f"{n:,}"),
            ("pipeline wall s", f"{pipe['wall']:.1f}"),
            (
                "  ch. 03 workers: normalise + judge + filter scan (one pass) s",
                f"{sec['normalise']:.1f}",
            ),
            ("  filter scan of stored shards s (0 unless ch. 03 was reused)", f"{sec['scan']:.1f}"),
            ("  decide + split + write s", f"{pipe['wall'] - sec['scan'] - sec['normalise']:.1f}"),
            (
                "pipeline CPU s (parent + workers; wall above depends on what else runs)",
                f"{pipe['cpu']:.1f}",
            ),
            ("pipeline traces/s", f"{n / pipe['wall']:.0f}"),
            ("pipeline peak RSS parent MB", f"{pipe['rss_self_mb']:.0f}"),
            ("pipeline peak RSS largest worker MB", f"{pipe['rss_child_mb']:.0f}"),
            (f"pipeline peak memory bound MB (parent + {args.workers} workers)", f"{peak:.0f}"),
            ("corpus", f"{pipe['summary']['splits']}"),
            (
                "load average (1 min) before the run / at its end (the end includes the run itself)",
                f"{load_before:.2f} / {load_after:.2f}",
            ),
            (
                "goal: < 120 s and < 4096 MB",
                (
                    "met"
                    if pipe["wall"] < 120 and peak < 4096
                    else f"NOT met ({'time' if pipe['wall'] >= 120 else ''}{' and ' if pipe['wall'] >= 120 and peak >= 4096 else ''}{'memory' if peak >= 4096 else ''})"
                ),
            ),
        ]
        res = {"pipeline": pipe}
        if not args.skip_naive:
            js = run(RUN_JSON, fh)
            rows += [
                ("naive json.loads loop s (parse only)", f"{js['wall']:.1f}"),
                ("naive json traces/s", f"{js['records'] / js['wall']:.0f}"),
            ]
            limit = args.naive_limit or n
            nv = run(RUN_NAIVE, fh, tmp / "naive", args.profile, limit)
            rows += [
                (
                    f"naive pipeline s ({nv['records']:,} records, 1 process, in memory)",
                    f"{nv['wall']:.1f}",
                ),
                ("naive pipeline CPU s", f"{nv['cpu']:.1f}"),
                ("naive pipeline traces/s", f"{nv['records'] / nv['wall']:.0f}"),
                ("naive pipeline peak RSS MB", f"{nv['rss_self_mb']:.0f}"),
                (
                    "ratio: pipeline / naive pipeline throughput",
                    f"{(n / pipe['wall']) / (nv['records'] / nv['wall']):.2f}x",
                ),
                (
                    "ratio: naive pipeline / pipeline CPU per trace",
                    f"{(nv['cpu'] / nv['records']) / (pipe['cpu'] / n):.2f}x",
                ),
                (
                    "ratio: naive pipeline / pipeline peak memory (per 1k traces)",
                    f"{(nv['rss_self_mb'] / nv['records']) / (peak / n):.2f}x",
                ),
                (
                    "ratio: pipeline / naive json parse throughput",
                    f"{(n / pipe['wall']) / (js['records'] / js['wall']):.2f}x",
                ),
            ]
            res.update(naive=nv, json=js)
        w = max(len(k) for k, _ in rows)
        print("\ncorpus pipeline benchmark")
        for k, v in rows:
            print(f"  {k:<{w}}  {v}")
        print(json.dumps({k: v for k, v in rows}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
