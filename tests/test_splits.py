"""Leak-cluster-guarded splits (chapter 04): the split deals whole clusters, deterministically and near the eval fraction;
the audits find clusters, gold and answer products that cross splits; and a planted leak (a paraphrased held-out
problem placed in the raw traces under a new id, with no gold and no category) is caught end to end."""

import copy
import gzip
import json
import shutil
from collections import Counter

import pandas as pd
import pytest

from shopdistill.corpus.build import build_corpus
from shopdistill.corpus.splits import (
    ngram_overlap,
    ngrams,
    paraphrase,
    problem_clusters,
    split_audit,
    split_clusters,
)
from shopdistill.reproduce.settings import load_config
from shopdistill.core.run import ArenaFolder, CorpusFolder


# ---- the split ---------------------------------------------------------------------------------------------------------
def test_split_deals_whole_clusters_near_the_fraction_and_is_seeded():
    sizes = {c: 1 + (c * 7) % 5 for c in range(200)}
    a = split_clusters(sizes, 0.15, seed=0)
    assert a == split_clusters(
        dict(reversed(list(sizes.items()))), 0.15, seed=0
    )  # order of the input does not matter
    assert a != split_clusters(sizes, 0.15, seed=1)
    n_eval = sum(sizes[c] for c, s in a.items() if s == "eval")
    assert abs(n_eval / sum(sizes.values()) - 0.15) < 0.01
    assert set(a.values()) == {"train", "eval"} and set(a) == set(sizes)


@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.5])
def test_split_fraction(fraction):
    sizes = {c: 3 for c in range(100)}
    got = Counter(split_clusters(sizes, fraction, seed=4).values())
    assert got["eval"] == round(fraction * 100)


def test_split_rejects_a_bad_fraction():
    with pytest.raises(ValueError, match="eval_fraction"):
        split_clusters({0: 1}, 1.0)


# ---- the audits --------------------------------------------------------------------------------------------------------
BANK = {
    "p1": {"id": "p1", "reward": {"product_id": "1000000001"}},
    "p2": {"id": "p2", "reward": {"product_id": "1000000002"}},
    "p3": {"id": "p3", "reward": [{"product_id": "1000000001"}, {"product_id": "1000000003"}]},
}


def _row(pid, split, cluster, success=False, rec=None, query=None):
    return {
        "problem_id": pid,
        "query": query or f"query of {pid}",
        "split": split,
        "cluster": cluster,
        "success": success,
        "recommended": rec,
    }


@pytest.mark.parametrize(
    "rows,kinds",
    [
        ([_row("p1", "train", 0), _row("p2", "eval", 1)], []),
        ([_row("p1", "train", 0), _row("p1", "eval", 0)], ["cluster", "gold_product"]),
        ([_row("p1", "train", 0), _row("p3", "eval", 2)], ["gold_product"]),
        (
            [_row("p2", "train", 1, True, "1000000009"), _row(None, "eval", 5, True, "1000000009")],
            ["answer_product"],
        ),
        (
            [
                _row("p2", "train", 1, False, "1000000009"),
                _row(None, "eval", 5, True, "1000000009"),
            ],
            [],
        ),  # a failed trace answers nothing
    ],
)
def test_split_audit(rows, kinds):
    assert sorted({f["kind"] for f in split_audit(rows, BANK)}) == kinds


def test_ngram_overlap_report():
    assert ngrams("One two three", 8) == {"one two three"}
    rep = ngram_overlap(
        ["I want a red lubel blouse under 495 pesos today"],
        [
            "I want a red Lubel blouse under 495 PHP today",
            "a green hat",
            "I want a red lubel blouse under 600 pesos now",
        ],
        n=3,
    )
    by = dict(zip(rep["eval_query"], rep["containment"]))
    assert (
        by["I want a red Lubel blouse under 495 PHP today"] == 1.0
    )  # case and currency words are normalised away
    assert (
        by["a green hat"] == 0.0 and 0.5 < by["I want a red lubel blouse under 600 pesos now"] < 1.0
    )


def test_clusters_join_reworded_and_answer_sharing_problems():
    probs = [
        {
            "id": "a",
            "query": "Some Migan food containers on flash sale, pricier than 120 pesos.",
            "category": "product",
            "reward": None,
            "voucher": None,
        },
        {
            "id": "b",
            "query": "Please find Migan food containers on flash sale, pricier than 120 PHP.",
            "category": None,
            "reward": None,
            "voucher": None,
        },
        {
            "id": "c",
            "query": "A Tagan toner with free shipping under 300 pesos.",
            "category": "product",
            "reward": None,
            "voucher": None,
        },
        {
            "id": "d",
            "query": "Wireless earbuds from Kiyo, black, below 900 pesos.",
            "category": "product",
            "reward": None,
            "voucher": None,
        },
    ]
    cl = problem_clusters(probs)
    assert cl["a"] == cl["b"] and len({cl["a"], cl["c"], cl["d"]}) == 3
    cl = problem_clusters(probs, answers={"c": {"1000000005"}, "d": {"1000000005"}})
    assert cl["c"] == cl["d"]


def test_paraphrase_keeps_constraint_values():
    p = {
        "id": "x",
        "query": "I want a Lubel blouse in army green, long sleeve, under 495 pesos.",
        "category": "product",
        "reward": {
            "product_id": "1",
            "attributes": [{"brand": ["lubel"]}],
            "sku_options": [{"color": "army green"}],
        },
        "voucher": None,
    }
    q = paraphrase(p, seed=1)
    assert q != p["query"] and "army green" in q and "495" in q and q == paraphrase(p, seed=1)


# ---- a planted leak, end to end ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def arena(tmp_path_factory, arena_copy):
    "A folder with the tiny season's raw traces and bank, a profile for the corpus, and SHOPDISTILL_RUNS pointing into the session's temporary folder."
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SHOPDISTILL_RUNS", str(tmp_path_factory.getbasetemp() / "runs"))
        yield arena_copy("splits04", "filter: {tokenizer: chars/4}\ncorpus: {eval_fraction: 0.3}\n")


def _build(profile, traces, out, **kw) -> dict:
    "Chapter 04's corpus of `traces` in `out`, with the sections of the profile file `profile`."
    cfg = load_config(profile)
    return build_corpus(
        cfg.run,
        cfg.filter,
        cfg.corpus,
        cfg.normalise,
        cfg.judge,
        cfg.arena.clusters,
        cfg.catalog,
        traces,
        out,
        **kw,
    )


def _envelope_of(source_file, line):
    with gzip.open(source_file, "rt", encoding="utf-8") as f:
        for n, text in enumerate(f, 1):
            if n == line:
                return json.loads(text)
    raise AssertionError(f"no line {line} in {source_file}")


def test_planted_leak_is_caught(arena):
    from shopdistill.corpus.splits import load_bank

    season, clean_out = ArenaFolder(arena / "arena"), CorpusFolder(arena / "clean")
    clean = _build(arena / "tiny.yaml", season.firehose, clean_out.path, workers=2, progress=False)
    assert clean["audit"] == [] and clean["splits"].get("eval", 0) > 0
    ev = pd.read_parquet(
        clean_out.split_file("eval"),
        columns=["problem_id", "source_file", "source_line", "trajectory_id"],
    )
    target = ev.iloc[0]
    bank = load_bank(season.bank)
    env = _envelope_of(
        season.firehose / target["source_file"], int(target["source_line"])
    )  # relative to the traces folder
    planted_query = paraphrase(bank[target["problem_id"]], seed=11)
    assert planted_query != bank[target["problem_id"]]["query"]
    plant = copy.deepcopy(
        env
    )  # the same agent's run, arriving from outside under a new id with the reworded request
    plant["problem_id"] = "outside-0001"
    for st in plant["dialogue"]:
        st["extra_info"].update(query=planted_query, problem_id="outside-0001")
    plant["extract"] = {
        **plant["extract"],
        "trace_id": plant["extract"]["trace_id"] + "/planted",
        "result": {"success": False},
    }
    raw = arena / "raw"
    shutil.copytree(season.firehose, raw)
    shutil.copy(season.bank, raw / season.bank.name)  # chapter 03 finds the bank beside the traces
    with gzip.open(raw / "planted.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(json.dumps(plant) + "\n")
    leaky = CorpusFolder(arena / "leaky")
    s = _build(arena / "tiny.yaml", raw, leaky.path, workers=2, progress=False)
    problems = pd.read_parquet(leaky.problems).set_index("problem")
    assert (
        pd.isna(problems.at["outside-0001", "category"]) and not problems.at["outside-0001", "gold"]
    )
    # caught: the paraphrase joins its original's cluster by text alone, so it can only go where the original goes
    assert problems.at["outside-0001", "cluster"] == problems.at[target["problem_id"], "cluster"]
    assert problems.at[target["problem_id"], "split"] == "eval"
    assert s["audit"] == []
    rows = pd.concat([pd.read_parquet(leaky.split_file(x)) for x in ("train", "eval")])
    planted_rows = rows[rows["problem_id"] == "outside-0001"]
    assert (planted_rows["split"] == "eval").all()
    # and a split that ignored clusters (the planted problem in train) is caught by the audit
    recs = rows[["problem_id", "query", "split", "cluster", "success", "recommended"]].to_dict(
        "records"
    )
    leak = {
        "problem_id": "outside-0001",
        "query": planted_query,
        "split": "train",
        "success": False,
        "recommended": None,
        "cluster": int(problems.at["outside-0001", "cluster"]),
    }
    found = split_audit([r for r in recs if r["problem_id"] != "outside-0001"] + [leak], bank)
    assert [f["kind"] for f in found] == ["cluster"] and "outside-0001" in found[0]["problems"]
