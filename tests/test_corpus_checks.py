"""Chapter 04's corpus-level checks, moved out of its `#| reproduce` cells so that `make test` runs them, on the corpus of the tiny
season (conftest's `tiny_corpus`, built once per session): the split audit is empty, no leak cluster is in both train and eval,
a planted paraphrase of an eval problem joins its original's cluster, and the Axis-A selection meets the chapter's precision and
recall against the season's hidden labels (the generating style of each trace, which no stage reads)."""

import json

import pandas as pd
import pytest
from shopdistill.core.run import ArenaFolder, CorpusFolder

# the chapter's Done-when (precision: what it calls agentic is agentic; recall: it finds the agentic traces); the tiny season reaches 1.0 and 1.0
MIN_PRECISION, MIN_RECALL = 0.95, 0.90
SPLIT_COLUMNS = [
    "trajectory_id",
    "problem_id",
    "query",
    "category",
    "cluster",
    "success",
    "recommended",
    "split",
]


@pytest.fixture(scope="module")
def corpus(tiny_corpus):
    "(folder, summary, decisions joined to the hidden labels, the train and eval rows)."
    d, s = tiny_corpus
    out = CorpusFolder(d / "corpus")
    labels = pd.read_parquet(ArenaFolder(d / "arena").trace_labels, columns=["trace_id", "style"])
    decisions = pd.read_parquet(out.decisions).merge(labels, on="trace_id", how="left")
    rows = pd.concat(
        [pd.read_parquet(out.split_file(x), columns=SPLIT_COLUMNS) for x in ("train", "eval")],
        ignore_index=True,
    )
    return out, s, decisions, rows


def axis_scores(pred: pd.Series, truth: pd.Series) -> dict:
    "Precision and recall of Axis A against the agentic style."
    tp = int(((pred == "A") & (truth == "agentic")).sum())
    return {
        "precision": tp / max(1, int((pred == "A").sum())),
        "recall": tp / max(1, int((truth == "agentic").sum())),
    }


def test_every_trace_is_labelled(corpus):
    _, s, decisions, _ = corpus
    assert decisions["style"].notna().all() and len(decisions) == s["trajectories"]
    assert set(decisions["style"]) == {
        "agentic",
        "subtask",
        "decoy",
    }  # the season has all three kinds, so the checks below can fail


def test_audit_is_empty(corpus):
    out, s, _, rows = corpus
    from shopdistill.corpus.splits import load_bank, split_audit

    assert s["audit"] == [] and json.loads(out.audits.read_text())["audit"] == []
    # recomputed from the released rows, not taken from the builder's word
    assert split_audit(rows.to_dict("records"), load_bank(s["bank"])) == []


def test_no_leak_cluster_in_both_splits(corpus):
    out, s, _, rows = corpus
    train, ev = (set(rows.loc[rows["split"] == x, "cluster"]) for x in ("train", "eval"))
    assert train and ev and not train & ev
    # the stored cluster column agrees with chapter 00's clustering rerun on the problems present (with the builder's answer edges)
    problems = pd.read_parquet(out.problems)
    of = dict(zip(problems["problem"], problems["cluster"]))
    assert all(of[p] == c for p, c in zip(rows["problem_id"], rows["cluster"]))
    assert set(problems.loc[problems["cluster"].isin(train), "split"]) == {"train"} and set(
        problems.loc[problems["cluster"].isin(ev), "split"]
    ) == {"eval"}


def test_planted_paraphrase_joins_its_cluster(corpus, tiny_corpus):
    "A held-out problem re-entering under another name (a paraphrase, no id, no gold) lands in its original's cluster."
    out, s, decisions, rows = corpus
    from shopdistill.reproduce.settings import load_config
    from shopdistill.corpus.splits import (
        load_bank,
        paraphrase,
        problem_clusters,
        problem_key,
        problems_present,
    )

    d, _ = tiny_corpus
    bank = load_bank(s["bank"])
    ev = rows[rows["split"] == "eval"]
    assert ev["problem_id"].isin(bank).any()
    ev = ev[ev["problem_id"].isin(bank)]
    target = ev["problem_id"].value_counts().index[0]
    planted = paraphrase(bank[target], seed=7)
    present = decisions[["problem_id", "query", "category", "success", "recommended"]].to_dict(
        "records"
    )
    row = {
        "problem_id": None,
        "query": planted,
        "category": None,
        "success": False,
        "recommended": None,
    }
    cl = problem_clusters(
        problems_present(present + [row], bank), load_config(d / "tiny.yaml").arena.clusters
    )
    assert cl[problem_key(None, planted)] == cl[problem_key(target, bank[target]["query"])]


def test_axis_a_precision_and_recall(corpus):
    _, _, decisions, _ = corpus
    q = axis_scores(decisions["axis"], decisions["style"])
    assert q["precision"] >= MIN_PRECISION and q["recall"] >= MIN_RECALL, q


def test_only_agentic_traces_are_kept(corpus):
    _, s, decisions, rows = corpus
    kept = decisions[decisions["stage"] == "kept"]
    assert (
        set(kept["style"]) == {"agentic"}
        and len(kept) == len(rows) == s["funnel"]["train"] + s["funnel"]["eval"]
    )
    # the sub-task and decoy traces each meet a stage that drops them
    assert (decisions.loc[decisions["style"] != "agentic", "stage"] != "kept").all()
