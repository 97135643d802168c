"Shared test fixtures."
import pytest

TINY_SEASON = """seed: 0
catalog: {n_products: 3000, seed: 0}
tasks: {n: {product: 20, shop: 20, voucher: 20}, seed: 0}
scoring: {similarity: offline}
arena:
  pools: {fractions: {open: 0.5, held_out: 0.4, never_touch: 0.1}, seed: 0, suite_per_category: 3, suite_versions: 2, race_problems: 6}
arena_traces: {days: 3, miners: {subtask: 3, agentic: 3, decoy: 2}, validators: 2, eligible_runs: 2, workers: 2, shard_size: 200}
judge: {backend: proxy}
"""


@pytest.fixture(scope="session")
def tiny_season_yaml() -> str:
    "The profile of the tiny season (chapter 04's tests add their own filter/corpus lines to it)."
    return TINY_SEASON


@pytest.fixture(scope="session")
def tiny_season(tmp_path_factory):
    "A three-day season of eight miners (about 500 traces), simulated once per pytest session."
    import os
    from shopdistill.season import simulate_season
    base = tmp_path_factory.getbasetemp() / "tiny-season-04"
    if not (base / "arena" / "season.json").exists():
        base.mkdir(exist_ok=True)
        (base / "season.yaml").write_text(TINY_SEASON)
        old = os.environ.get("SHOPDISTILL_RUNS")
        os.environ["SHOPDISTILL_RUNS"] = str(tmp_path_factory.getbasetemp() / "runs")  # its sandbox goes there, not into runs/
        try: simulate_season(base / "season.yaml", out_dir=base / "arena", workers=2, progress=False)
        finally:
            if old is None: os.environ.pop("SHOPDISTILL_RUNS", None)
            else: os.environ["SHOPDISTILL_RUNS"] = old
    return base
