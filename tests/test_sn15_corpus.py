"""Real SN15 traces by path: rows of the published corpus's shape (`{"id", "messages", "tools", "source"}`, OpenAI-style messages,
flat tool schemas) become trajectories or ledger entries naming the row's id and the reason; prompt-only rows are never lost.
The rows are `tests/fixtures/sn15_corpus_rows.jsonl`, written for these tests by `tests/fixtures/make_sn15_corpus_rows.py`."""

import gzip
import json
from pathlib import Path

import pytest

from shopdistill.core.run import CorpusFolder, TrajectoriesFolder
from shopdistill.corpus.normalise import check_accounts, normalise_traces, read_shard
from shopdistill.reproduce.cli import main

ROWS = Path(__file__).with_name("fixtures") / "sn15_corpus_rows.jsonl"
LEDGERED = {
    "sn15-00100": "prompt_only",
    "sn15-00101": "prompt_only",
    "sn15-00102": "prompt_only",
    "sn15-00103": "unknown_format",
}


@pytest.fixture(scope="module")
def catalog_file(tmp_path_factory):
    "The 300-product catalog the rows were written on (seed 0), as a ShoppingBench documents file."
    from shopdistill.sandbox.catalog import Catalog, generate_catalog, write_catalog

    path = tmp_path_factory.mktemp("sn15-catalog") / "documents.jsonl.gz"
    write_catalog(Catalog.from_records(list(generate_catalog(300, seed=0))), path)
    return path


def ledger_of(folder) -> list[dict]:
    return [json.loads(l) for l in open(TrajectoriesFolder(folder).ledger)]


def test_published_rows_are_read_and_prompt_only_rows_ledgered_by_id(tmp_path):
    s = normalise_traces(ROWS, tmp_path, judge="proxy", workers=1, progress=False)
    assert (s["inputs"], s["outputs"], s["rejects"]) == (12, 8, 4) and s["formats"] == {
        "openai_messages": 1
    }
    assert {e["id"]: e["reason"] for e in ledger_of(tmp_path)} == LEDGERED
    assert check_accounts(tmp_path) == {"inputs": 12, "outputs": 8, "rejects": 4}
    trajs = [t for shard in sorted(tmp_path.glob("shard-*.jsonl.gz")) for t in read_shard(shard)]
    assert {t["meta"]["extra"]["id"] for t in trajs} == {
        f"sn15-{i:05d}" for i in range(8)
    }  # each kept row keeps its id and source
    assert {t["meta"]["extra"]["source"] for t in trajs} == {"sn15-race"}
    for t in trajs:  # flat tool schemas read as the nested form; thinking recovered from the field or from <think> tags alike
        assert {x["function"]["name"] for x in t["tools"]} >= {"find_product", "recommend_product"}
        turns = [m for m in t["messages"] if m["role"] == "assistant"]
        assert turns[0]["reasoning_content"] and not turns[0]["content"].startswith("<think>")
        assert any(
            c["function"]["name"] == "recommend_product" for m in turns for c in m["tool_calls"]
        )


def test_corpus_build_on_published_rows(tmp_path, catalog_file, capsys):
    out = tmp_path / "built"
    assert (
        main(
            [
                "corpus",
                "build",
                "--traces",
                str(ROWS),
                "--out",
                str(out),
                "--catalog",
                str(catalog_file),
                "--workers",
                "1",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert (
        "12 records -> 8 trajectories" in printed and "prompt_only 3, unknown_format 1" in printed
    )
    summary = json.loads(CorpusFolder(out).summary.read_text())
    assert (
        summary["funnel"]["train"] + summary["funnel"]["eval"] == 8
        and summary["funnel"]["train"] > 0
    )
    assert {e["id"] for e in ledger_of(CorpusFolder(out).trajectories)} == set(LEDGERED)


def test_nothing_kept_is_one_clear_error_naming_the_ledger(tmp_path, capsys):
    only = tmp_path / "prompts.jsonl"
    only.write_text(
        "".join(
            l for l in ROWS.read_text().splitlines(keepends=True) if json.loads(l)["id"] in LEDGERED
        )
    )
    assert (
        main(
            [
                "corpus",
                "build",
                "--traces",
                str(only),
                "--out",
                str(tmp_path / "built"),
                "--workers",
                "1",
            ]
        )
        == 1
    )
    err = [
        l for l in capsys.readouterr().err.splitlines() if l.startswith("shopdistill corpus:")
    ]  # the rest: progress bars
    assert (
        len(err) == 1
        and "0 trajectories kept: all 4 records rejected" in err[0]
        and "prompt_only 3" in err[0]
        and "ledger" in err[0]
    ), err


def test_a_folder_mixes_published_rows_envelopes_and_upstream_rollouts(tmp_path):
    "SN15 envelopes and upstream ShoppingBench rollouts beside the published rows: one folder, every format read."
    call = {"name": "find_product", "parameters": {"q": "red flash drive"}}
    step = {
        "completion": {
            "reasoning_content": "Search first.",
            "content": "",
            "message": {
                "think": "Search first.",
                "tool_call": [{**call, "result": "[]"}],
                "response": "",
            },
        },
        "extra_info": {"step": 0, "query": "a red flash drive", "timestamp": 0},
    }
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "rows.jsonl").write_text(ROWS.read_text())
    with gzip.open(tmp_path / "in" / "output.jsonl.gz", "wt") as f:
        f.write(
            json.dumps(
                {
                    "problem_id": "p1",
                    "status": "FAILED",
                    "execution_time": 1.0,
                    "inference_failure_count": 0,
                    "inference_total": 1,
                    "error": None,
                    "dialogue": [step],
                }
            )
            + "\n"
        )
    rollout = [
        {
            "prompt": [
                {"role": "system", "content": "shop"},
                {"role": "user", "content": "a red flash drive"},
            ],
            "completion": {
                "reasoning_content": "",
                "content": "",
                "message": {
                    "think": "Search first.",
                    "tool_call": [call],
                    "obs": ["[]"],
                    "response": "",
                },
            },
            "extra_info": {"step": 0, "query": "a red flash drive", "timestamp": 0},
        }
    ]
    (tmp_path / "in" / "rollout.json").write_text(json.dumps(rollout))
    s = normalise_traces(
        tmp_path / "in", tmp_path / "out", judge="proxy", workers=1, progress=False
    )
    assert s["formats"] == {"openai_messages": 1, "sn15_envelope": 1, "upstream_rollout": 1}
    assert (s["inputs"], s["outputs"], s["rejects"]) == (14, 10, 4)


def test_a_profile_names_its_traces_by_path(tmp_path):
    "`normalise.traces_path` (chapters 03-04 read it instead of the simulated firehose) is typed and, when relative, taken from the repository root."
    from shopdistill.core.run import repo_root
    from shopdistill.reproduce.settings import load_config

    p = tmp_path / "real.yaml"
    p.write_text("normalise: {traces_path: data/sn15}\n")
    assert load_config(p).normalise.traces_path == str(repo_root() / "data" / "sn15")
    assert load_config("full").normalise.traces_path == str(repo_root() / "data" / "sn15")
    assert load_config("smoke").normalise.traces_path is None
