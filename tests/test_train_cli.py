"""`shopdistill train --dry-run`: the full profile's trainers are built (on the tiny model) in CI, so a broken
full configuration fails here rather than on a GPU node."""

import re
from pathlib import Path

import pytest
import yaml

from shopdistill.reproduce.settings import load_config
from shopdistill.training.cli import dry_run

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def full_rows():
    cfg = load_config("full")
    return dry_run(cfg.train, cfg.kto, cfg.grpo)


def test_full_profile_builds_every_trainer(full_rows):
    "One row per trainer, each naming the stages it serves from the recipe's list (`core.run.RECIPE`)."
    built = {r["stages"]: r for r in full_rows if r["trainer"] != "note"}
    assert set(built) == {
        "S1 SFT, S2 rejection re-SFT, S3 teacher-SFT",
        "S4 KTO",
        "S5 Dr. GRPO",
        "S5 outcome GRPO",
    }
    sft = built["S1 SFT, S2 rejection re-SFT, S3 teacher-SFT"]
    assert sft["lora"] is True and sft["max_length"] == 14_336
    assert built["S4 KTO"]["beta"] == pytest.approx(0.02)
    g = built["S5 Dr. GRPO"]
    assert (g["loss_type"], g["scale_rewards"], g["beta"]) == ("dr_grpo", "none", 0.0)
    assert g["lr"] == pytest.approx(1e-6) and g["num_generations"] == 8


def test_a_broken_full_profile_is_caught(tmp_path):
    cfg = yaml.safe_load((ROOT / "configs" / "full.yaml").read_text())
    cfg["grpo"]["batch_size"], cfg["grpo"]["grad_accum"], cfg["grpo"]["num_generations"] = 3, 1, 8
    bad = tmp_path / "broken.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    with pytest.raises(Exception, match=re.compile("num_generations|multiple", re.I)):
        cfg = load_config(str(bad))
        dry_run(cfg.train, cfg.kto, cfg.grpo)


def test_cli_dry_run_prints_a_summary(capsys):
    from shopdistill.reproduce.cli import main

    assert main(["train", "--profile", "smoke", "--dry-run"]) == 0
    assert "trainers built, nothing trained" in capsys.readouterr().out


def test_train_reads_its_profile_once(monkeypatch, capsys):
    "`shopdistill train` hands the settings it checked to the driver instead of the driver reading the YAML again."
    import shopdistill.reproduce.cli as cli
    import shopdistill.reproduce.driver as driver

    reads = []
    counted = lambda load: lambda *a, **k: reads.append(a[0]) or load(*a, **k)
    monkeypatch.setattr(cli, "load_config", counted(cli.load_config))
    monkeypatch.setattr(driver, "load_config", counted(driver.load_config))
    monkeypatch.setattr(driver, "find_chapters", lambda nbs: [])  # stop before any notebook runs
    assert cli.main(["train", "--profile", "ci", "--no-preflight"]) == 1
    assert "no chapter notebooks" in capsys.readouterr().err
    assert reads == ["ci"]
