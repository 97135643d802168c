"""Leak clustering at growing bank sizes: time, and pairwise precision / recall / F1 against the planted clusters.

Usage: python bench/leak_clusters.py [--sizes 100,300,1000,3000]   (sizes = base tasks; each gets ~8 variants)
Prints one row per size: problems, seconds to build the bank and to cluster it (with gold, and text only on
problems stripped of their gold), the scores, and the clustering time per 1,000 problems.
"""

import argparse, time

import pandas as pd
import psutil

from shopdistill.sandbox.catalog import Catalog, generate_catalog
from shopdistill.mechanics.bank import build_bank, planted_clusters
from shopdistill.mechanics.clusters import leak_clusters, pairwise_scores, strip_gold
from shopdistill.sandbox.task_synthesis import synthesize_tasks


def run(n_tasks: int, seed: int = 0) -> dict:
    "One bank of about 8·n_tasks problems: build it, cluster it twice, score both."
    t0 = time.perf_counter()
    cat = Catalog.from_records(generate_catalog(max(6000, 25 * n_tasks), seed=seed))
    per = {"product": n_tasks * 11 // 31, "shop": n_tasks * 10 // 31}
    per["voucher"] = n_tasks - sum(per.values())
    bank = build_bank(synthesize_tasks(cat, per, seed=seed), cat, seed=seed, sibling_fraction=0.4)
    t1 = time.perf_counter()
    truth = planted_clusters(bank)
    full = pairwise_scores(leak_clusters(bank), truth)
    t2 = time.perf_counter()
    text = pairwise_scores(leak_clusters([strip_gold(p) for p in bank]), truth)
    t3 = time.perf_counter()
    return {
        "base tasks": n_tasks,
        "problems": len(bank),
        "build s": round(t1 - t0, 2),
        "cluster s": round(t2 - t1, 2),
        "P": round(full["precision"], 4),
        "R": round(full["recall"], 4),
        "F1": round(full["f1"], 4),
        "text-only s": round(t3 - t2, 2),
        "text-only F1": round(text["f1"], 4),
        "cluster s / 1k problems": round(1000 * (t2 - t1) / len(bank), 3),
        "rss MiB": round(psutil.Process().memory_info().rss / 2**20),
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,300,1000,3000")
    args = ap.parse_args()
    rows = [run(int(n)) for n in args.sizes.split(",")]
    print(pd.DataFrame(rows).to_string(index=False))
