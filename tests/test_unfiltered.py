"""Chapter 04's unfiltered split (issue 38, substrate arm (b)): the same pipeline without the structural filter, decided by
`apply_stages(..., structural=False)` on the scan's own features and written beside the corpus behind `corpus.unfiltered`:
sub-task trajectories as recorded, the corpus's leak-cluster split, and the filtered corpus byte for byte the same with the
setting off."""

import gzip
import json
import shutil
from dataclasses import replace

import datasets
import pandas as pd
import pytest

from shopdistill.core.run import ArenaFolder, CorpusFolder
from shopdistill.corpus.build import (
    LIFTED_SPLITS,
    UNFILTERED_COLUMNS,
    ShardScan,
    build_corpus,
    decide_unfiltered,
)
from shopdistill.corpus.checks import TOY_QUERY, TOY_TURNS, FilterSettings, toy_trajectory
from shopdistill.corpus.dedup import assistant_shingles, minhash_signature
from shopdistill.corpus.filter import apply_stages, trajectory_features
from shopdistill.corpus.lift import toy_subtask
from shopdistill.corpus.normalise import read_shard
from shopdistill.corpus.tokens import load_counter
from shopdistill.corpus.trajectory import from_arrow_row
from shopdistill.reproduce.settings import load_config

# a floor the toy loop's structural score (0.4) is under and the others' (0.7) above: the structural gate has work to do
FLOOR = replace(FilterSettings(), min_score=0.5)


def toys() -> dict:
    "A good trace, a harness (Axis B by its proxy log), the good trace looping (a lower structural score), a bad recommend call."
    out = {
        "good": toy_trajectory(TOY_QUERY, TOY_TURNS),
        "harness": toy_subtask(line=2),
        "loop": toy_trajectory(TOY_QUERY, [TOY_TURNS[0]] * 4 + TOY_TURNS[2:], line=3),
        "bad format": toy_trajectory(
            TOY_QUERY,
            [
                TOY_TURNS[0],
                ("r", [("recommend_product", {"product_ids": ["1000000001"]}, "ok")], ""),
                TOY_TURNS[-1],
            ],
            line=4,
        ),
    }
    for k, (name, t) in enumerate(out.items()):
        t["trajectory_id"], t["meta"]["agent_version_id"] = f"t{k}", name
    return out


def decided_toys(s: FilterSettings, structural: bool, extra: dict | None = None):
    "The toys (plus `extra`) decided with or without the structural filter, every one token-counted and signed."
    ts = {**toys(), **(extra or {})}
    counter = load_counter("chars/4")
    df = pd.DataFrame(
        [
            {**trajectory_features(t, s), "n_tokens": counter.count_chat(t["messages"], t["tools"])}
            for t in ts.values()
        ],
        index=list(ts),
    )
    sigs = {
        t["trajectory_id"]: minhash_signature(
            assistant_shingles(t, s.near_ngram), s.num_perm, s.minhash_seed
        )
        for t in ts.values()
    }
    before = df.copy()
    out = apply_stages(df, s, sigs, structural=structural)
    pd.testing.assert_frame_equal(df, before)  # the caller's rows are not changed
    return out


def test_without_the_structural_filter_what_only_it_drops_is_kept_and_a_bad_format_is_not():
    filtered, unfiltered = (
        decided_toys(FLOOR, True)["stage"].to_dict(),
        decided_toys(FLOOR, False)["stage"].to_dict(),
    )
    assert filtered == {
        "good": "kept",
        "harness": "axis_b",
        "loop": "structural_score",
        "bad format": "format",
    }
    assert unfiltered == {"good": "kept", "harness": "kept", "loop": "kept", "bad format": "format"}
    # the other stages stand as they are: an exact copy, the token budget, the cap per problem
    copy = toy_subtask(line=5)
    copy["trajectory_id"] = "t9"
    assert decided_toys(FLOOR, False, {"copy": copy}).at["copy", "stage"] == "exact_duplicate"
    assert set(decided_toys(replace(FLOOR, max_tokens=10), False)["stage"]) == {
        "over_budget",
        "format",
    }
    assert sorted(decided_toys(replace(FLOOR, max_per_problem=1), False)["stage"]) == [
        "format",
        "kept",
        "problem_cap",
        "problem_cap",
    ]


def test_the_scan_for_the_unfiltered_split_leaves_the_filtered_corpus_s_columns_and_candidates_as_they_are(
    tmp_path,
):
    counter, frames = load_counter("chars/4"), {}
    for on in (False, True):
        (tmp_path / str(on)).mkdir()
        scan = ShardScan(
            tmp_path / str(on) / "candidates-shard-00000.jsonl.gz",
            FLOOR,
            None,
            counter,
            unfiltered=on,
        )
        for t in toys().values():
            scan.add(t)
        frames[on], sigs = scan.close()
    pd.testing.assert_frame_equal(
        frames[True].drop(columns=list(UNFILTERED_COLUMNS)), frames[False]
    )
    assert gzip.decompress(
        (tmp_path / "True" / "candidates-shard-00000.jsonl.gz").read_bytes()
    ) == gzip.decompress((tmp_path / "False" / "candidates-shard-00000.jsonl.gz").read_bytes())
    # what only the unfiltered split might keep: the harness and the loop, with their tokens and their own candidate file
    extra = [
        json.loads(line)["trajectory_id"]
        for line in gzip.open(tmp_path / "True" / "unfiltered-candidates-shard-00000.jsonl.gz")
    ]
    assert (
        extra == ["t1", "t2"]
        and not (tmp_path / "False" / "unfiltered-candidates-shard-00000.jsonl.gz").exists()
    )
    assert frames[True]["unfiltered_tokens"].notna().tolist() == [False, True, True, False]
    assert list(decide_unfiltered(frames[True], FLOOR, sigs)["stage"]) == [
        "kept",
        "kept",
        "kept",
        "format",
    ]
    with pytest.raises(ValueError, match="scan without `unfiltered`"):
        decide_unfiltered(frames[False], FLOOR, sigs)


# ---- the corpus build with the unfiltered split, on the tiny season of conftest ----


OPEN_GATE = lambda fs: replace(
    fs, min_quality=0.1
)  # the gate proxy scores every harness of the tiny season 0.1 (see test_lift)


@pytest.fixture(scope="module")
def season_builds(tmp_path_factory, tiny_corpus):
    """(the tiny season's folder, {unfiltered: the build's summary}): the corpus built from conftest's `tiny_corpus`
    trajectories with `corpus.unfiltered` on, then with it off over a copy of that folder (so the second build also shows
    that an earlier unfiltered split is removed). Lifting is off in both, as it does not touch this split."""
    d, _ = tiny_corpus
    on_dir, off_dir = (
        tmp_path_factory.mktemp("unfiltered-on"),
        tmp_path_factory.getbasetemp() / "unfiltered-off",
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SHOPDISTILL_RUNS", str(tmp_path_factory.getbasetemp() / "runs"))
        cfg = load_config(d / "tiny.yaml")
        build = lambda on, out: build_corpus(
            cfg.run,
            OPEN_GATE(cfg.filter),
            replace(cfg.corpus, lift=False, unfiltered=on),
            cfg.normalise,
            cfg.judge,
            cfg.arena.clusters,
            cfg.catalog,
            None,
            out,
            trajectories_dir=CorpusFolder(d / "corpus").trajectories,
            workers=1,
            progress=False,
        )
        built = {True: build(True, on_dir)}
        shutil.copytree(on_dir, off_dir)
        built[False] = build(False, off_dir)
    return d, built


def parts(out: CorpusFolder) -> dict:
    "Part -> the unfiltered split's rows of that part (an empty frame where the build wrote no file)."
    return {
        p: pd.read_parquet(out.split_file(p, "unfiltered"))
        if out.split_file(p, "unfiltered").exists()
        else pd.DataFrame(
            columns=["trajectory_id", "problem_id", "cluster", "axis", "split", "n_tokens"]
        )
        for p in LIFTED_SPLITS
    }


def test_the_unfiltered_split_holds_the_corpus_and_the_subtask_trajectories_as_recorded(
    season_builds,
):
    d, built = season_builds
    s, out = built[True], CorpusFolder(built[True]["out_dir"])
    u = parts(out)
    rows = pd.concat([f for f in u.values() if len(f)], ignore_index=True)
    corpus = pd.concat(
        [pd.read_parquet(out.split_file(p)) for p in ("train", "eval")], ignore_index=True
    )
    decisions = pd.read_parquet(out.decisions)
    # every trajectory the filtered corpus keeps (all Axis A), in the same part and as the same row, plus Axis-B ones;
    # except where the cap per problem, now shared with the Axis-B traces, ranks others first: their problem is full
    assert (corpus["axis"] == "A").all()
    both = corpus[corpus["trajectory_id"].isin(rows["trajectory_id"])].reset_index(drop=True)
    full = rows["problem_id"].value_counts()
    cap = OPEN_GATE(load_config(d / "tiny.yaml").filter).max_per_problem
    assert all(
        full.get(p, 0) == cap
        for p in corpus.loc[~corpus["trajectory_id"].isin(rows["trajectory_id"]), "problem_id"]
    )
    assert len(both) and s["unfiltered"]["from_stages"]["kept"] == len(both)
    same = (
        rows.set_index("trajectory_id")
        .loc[both["trajectory_id"]]
        .reset_index()[list(corpus.columns)]
    )
    pd.testing.assert_frame_equal(same, both)
    subtask = rows[rows["axis"] == "B"]
    assert (
        len(subtask)
        and {p: int((f["axis"] == "B").sum()) for p, f in u.items()} == s["unfiltered"]["axis_b"]
    )
    # the Axis-B rows are the ones the filter took out at its Axis stage, nothing it dropped earlier
    stage = decisions.set_index("trajectory_id")["stage"]
    assert set(stage[subtask["trajectory_id"]]) == {"axis_b"}
    assert s["unfiltered"]["from_stages"] == {
        k: int(v) for k, v in stage[rows["trajectory_id"]].value_counts().items()
    }
    assert s["unfiltered"]["splits"] == {p: len(f) for p, f in u.items()} and s["unfiltered"][
        "rows"
    ] == len(rows)
    assert s["unfiltered"]["tokens"] == {p: int(f["n_tokens"].sum()) for p, f in u.items()}
    assert s["unfiltered"]["problems"] == {p: int(f["problem_id"].nunique()) for p, f in u.items()}
    # sub-task trajectories enter as chapter 03 left them: their messages and tools as recorded
    originals = {
        t["trajectory_id"]: t
        for p in sorted(CorpusFolder(d / "corpus").trajectories.glob("shard-*.jsonl.gz"))
        for t in read_shard(p)
        if t["trajectory_id"] in set(subtask["trajectory_id"])
    }
    stored = datasets.load_from_disk(str(out.unfiltered))["train"]
    for i in [i for i, a in enumerate(stored["axis"]) if a == "B"][:10]:
        back, want = from_arrow_row(stored[i]), originals[stored[i]["trajectory_id"]]
        assert back["messages"] == want["messages"] and back["tools"] == want["tools"]
    assert set(s["unfiltered"]["seconds"]) == {"decide", "write"}


def test_no_unfiltered_train_row_is_near_the_corpus_eval_split_or_the_held_out_evaluation(
    season_builds,
):
    from shopdistill.training.evaluation import corpus_clusters, heldout_problems

    d, built = season_builds
    s, out = built[True], CorpusFolder(built[True]["out_dir"])
    train, ev = (pd.read_parquet(out.split_file(p)) for p in ("train", "eval"))
    u = parts(out)
    assert len(u["train"]) and len(u["eval"])
    assert set(u["train"]["cluster"]) <= set(train["cluster"]) and not set(
        u["train"]["cluster"]
    ) & set(ev["cluster"])
    assert set(u["eval"]["cluster"]) <= set(ev["cluster"])
    assert s["unfiltered"]["audit"] == [] == s["audit"]
    # chapter 05's held-out evaluation, drawn from the corpus as it draws it: no unfiltered train problem shares a bank cluster with it
    bank = [json.loads(line) for line in open(ArenaFolder(d / "arena").bank)]
    cluster = {p["id"]: p["cluster"] for p in bank}
    held_out = heldout_problems(
        bank,
        ["product", "shop", "voucher"],
        10**6,
        exclude_clusters=corpus_clusters(bank, set(train["problem_id"]) | set(ev["problem_id"])),
    )
    assert held_out and not {p["cluster"] for p in held_out} & {
        cluster.get(p) for p in u["train"]["problem_id"]
    }
    assert not {p["id"] for p in held_out} & set(u["train"]["problem_id"])


def test_with_the_setting_off_nothing_is_written_and_the_filtered_corpus_is_byte_identical(
    season_builds,
):
    _, built = season_builds
    on, off = CorpusFolder(built[True]["out_dir"]), CorpusFolder(built[False]["out_dir"])
    assert built[False]["unfiltered"] is None and built[True]["unfiltered"]["rows"] > 0
    # the build over the folder that held an unfiltered split removed it
    assert not off.unfiltered.exists() and not list(off.parquet.glob("unfiltered-*"))
    assert (
        "## The unfiltered split" in on.card.read_text()
        and "## The unfiltered split" not in off.card.read_text()
    )
    files = [
        p.relative_to(on.path)
        for p in sorted(on.path.rglob("*"))
        if p.is_file()
        and (
            p.parent == on.parquet
            and not p.name.startswith("unfiltered-")
            or p.suffix == ".arrow"
            and "unfiltered" not in p.parts
        )
    ]
    assert len(files) >= 8
    for rel in files + [
        on.decisions.relative_to(on.path),
        on.problems.relative_to(on.path),
        on.funnel.relative_to(on.path),
        on.audits.relative_to(on.path),
    ]:
        assert (on.path / rel).read_bytes() == (off.path / rel).read_bytes(), rel
    assert (
        built[True]["funnel"] == built[False]["funnel"]
        and built[True]["splits"] == built[False]["splits"]
    )
    # what the split cost (pytest -rP shows it): its own steps, and the scan's extra measurements (on minus off)
    u = built[True]["unfiltered"]
    print(
        f"unfiltered split: {u['splits']}, Axis B {u['axis_b']}, filtered stages {u['from_stages']}; corpus {built[True]['splits']}"
    )
    print(
        f"unfiltered split: {u['seconds']} s; scan {built[True]['seconds']['scan']} s with it, "
        f"{built[False]['seconds']['scan']} s without; total {built[True]['seconds']['total']} s vs {built[False]['seconds']['total']} s"
    )


def test_the_card_describes_the_unfiltered_split_and_names_its_files(season_builds):
    from huggingface_hub import DatasetCard

    _, built = season_builds
    s, out = built[True], CorpusFolder(built[True]["out_dir"])
    card = DatasetCard.load(out.card)
    config = [c for c in card.data.to_dict()["configs"] if c["config_name"] == "unfiltered"][0]
    assert [f["path"] for f in config["data_files"]] == [
        f"parquet/unfiltered-{p}.parquet" for p, n in s["unfiltered"]["splits"].items() if n
    ]
    assert all((out.path / f["path"]).is_file() for f in config["data_files"])
    prose = " ".join(card.text.split())
    assert (
        "no structural-score floor and no Axis-B rejection" in prose
        and "No stage of the recipe trains on the unfiltered split" in prose
    )
    assert (
        f"| train | {s['unfiltered']['splits']['train']:,} | {s['unfiltered']['axis_b']['train']:,} |"
        in card.text
    )
