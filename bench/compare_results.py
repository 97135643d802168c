"""Do two runs' `results.json` give the same numbers? A refactor that means to move nothing is checked with this:
`python bench/compare_results.py BEFORE/results.json AFTER/results.json` prints every key that differs, was added or
went missing, and exits 1 if any number moved. Timings (keys naming seconds or minutes) and provenance are ignored;
a key only one side has is listed, and counts as a difference unless `--allow-new PREFIX` names it (a new kind of
result, e.g. `stage.dr_grpo.seed.`)."""

import argparse
import json
import math
import sys
from pathlib import Path

IGNORED = (
    "seconds",
    "minutes",
    "provenance",
    "machine",
    "commit",
)  # a key holding one of these is not a result


def ignored(key: str) -> bool:
    return any(w in key for w in IGNORED)


def same(a, b, rel: float) -> bool:
    "Equal values; floats within `rel` relative tolerance (0: exactly), NaN equal to NaN."
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b if rel == 0 else math.isclose(a, b, rel_tol=rel, abs_tol=rel)
    return a == b


def compare(before: dict, after: dict, rel: float = 0.0, allow_new=()) -> dict:
    "The keys that `after` changed, added and dropped relative to `before`, timings and provenance left out."
    keys = lambda d: {k for k in d if not ignored(k)}
    kb, ka = keys(before), keys(after)
    return {
        "changed": sorted(k for k in kb & ka if not same(before[k], after[k], rel)),
        "added": sorted(k for k in ka - kb if not k.startswith(tuple(allow_new))),
        "dropped": sorted(kb - ka),
        "compared": len(kb & ka),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument(
        "--rel",
        type=float,
        default=0.0,
        help="relative tolerance for floats (default 0: exactly equal)",
    )
    ap.add_argument("--allow-new", action="append", default=[], metavar="PREFIX")
    a = ap.parse_args(argv)
    before, after = (json.loads(p.read_text()) for p in (a.before, a.after))
    diff = compare(before, after, a.rel, a.allow_new)
    for k in diff["changed"]:
        print(f"changed  {k}: {before[k]!r} -> {after[k]!r}")
    for k in diff["added"]:
        print(f"added    {k}: {after[k]!r}")
    for k in diff["dropped"]:
        print(f"dropped  {k}: {before[k]!r}")
    bad = len(diff["changed"]) + len(diff["added"]) + len(diff["dropped"])
    print(f"{diff['compared']} numbers compared, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
