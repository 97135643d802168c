"""`shopdistill doctor`: the preflight of a profile, every problem at once. In CI it passes on a copy of the full profile
(full.yaml with a local tiny model and small files at the paths the full profile names, GPU declared not required), and on a
machine without a GPU it lists what the full profile lacks; `reproduce` and `train --stage` refuse to start such a profile."""

import pytest
import yaml

from shopdistill.core.run import repo_root
from shopdistill.reproduce.cli import main
from shopdistill.reproduce.driver import ReproduceError, profile_checks, require_ready
from shopdistill.reproduce.settings import load_config

ROWS = repo_root() / "tests" / "fixtures" / "sn15_corpus_rows.jsonl"


@pytest.fixture(scope="module")
def full_here(tmp_path_factory):
    "full.yaml with every path and model swapped for something that exists here; the GPU declared not required."
    from shopdistill.sandbox.catalog import Catalog, generate_catalog, write_catalog
    from shopdistill.sandbox.task_synthesis import synthesize_tasks
    from shopdistill.sandbox.tasks import save_tasks
    from shopdistill.training.policy import load_policy, save_policy
    from shopdistill.training.settings import TinySettings, TrainSettings

    d = tmp_path_factory.mktemp("full-here")
    cat = Catalog.from_records(list(generate_catalog(300, seed=0)))
    write_catalog(cat, d / "documents.jsonl.gz")
    save_tasks(
        synthesize_tasks(cat, {"product": 3}, seed=0), d / "tasks" / "synthesize_product_test.jsonl"
    )
    save_policy(
        *load_policy(
            "tiny",
            TrainSettings(
                tiny=TinySettings(
                    hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64, bpe_vocab=400
                )
            ),
        ),
        d / "model",
    )
    cfg = yaml.safe_load((repo_root() / "configs" / "full.yaml").read_text())
    cfg["catalog"]["path"], cfg["tasks"]["path"], cfg["normalise"]["traces_path"] = (
        str(d / "documents.jsonl.gz"),
        str(d / "tasks"),
        str(ROWS),
    )
    cfg["train"]["base"] = cfg["filter"]["tokenizer"] = str(d / "model")
    cfg["scoring"]["similarity"], cfg["judge"]["backend"] = "offline", "proxy"
    cfg["train"]["rollout"]["backend"], cfg["grpo"]["use_vllm"] = "transformers", False
    cfg["preflight"] = {"gpu": "not_required", "min_gpus": 1, "min_free_gb": 1}
    (d / "full_here.yaml").write_text(yaml.safe_dump(cfg))
    return d / "full_here.yaml"


def test_the_preflight_passes_on_a_copy_of_the_full_profile_made_here(full_here, capsys):
    assert main(["doctor", "--profile", str(full_here)]) == 0
    out = capsys.readouterr().out
    assert "skipped  GPU: not required by this profile" in out and out.rstrip().endswith(
        "profile full_here: ready"
    )
    assert [r["check"] for r in profile_checks(load_config(full_here)) if r["ok"] is False] == []


def test_the_full_profile_dry_run_passes_here(capsys):
    assert main(["train", "--profile", "full", "--dry-run"]) == 0
    assert "4 trainers built, nothing trained" in capsys.readouterr().out


def test_every_problem_of_the_full_profile_is_listed_at_once(capsys, tmp_path, monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU machine: the full profile's GPU check may pass here")
    monkeypatch.setenv("SHOPDISTILL_RUNS", str(tmp_path))
    assert main(["doctor", "--profile", "full"]) == 1
    out = capsys.readouterr().out
    missing = [
        l.split(":")[0].split(None, 1)[1] for l in out.splitlines() if l.startswith("MISSING")
    ]
    assert {"GPU", "catalog", "traces"} <= set(missing), (
        out
    )  # the GPU, the ShoppingBench catalog, the SN15 traces: all at once
    assert out.count("   fix: ") == len(missing)
    with pytest.raises(ReproduceError, match="MISSING  GPU"):
        require_ready(load_config("full"))
    assert (
        main(["train", "--profile", "full", "--stage", "sft"]) == 1
    )  # refused before any work: no run folder is made
    assert not (tmp_path / "full").exists()
