"""The engineered arena (chapter 02's `05a_an_engineered_arena`): ORO's richness rule as the setting `arena.score_rule`,
whose default leaves today's season byte for byte as it was, and the same tiny season run under each rule, day by day."""

import hashlib
from dataclasses import replace

import pandas as pd
import pytest

from shopdistill.arena.engineered import compare_rules, population_shift
from shopdistill.arena.firehose import iter_envelopes
from shopdistill.arena.season import ArenaTracesSettings, Season
from shopdistill.mechanics.rules import ArenaSettings, final_score, rule_score, run_richness
from shopdistill.reproduce.settings import load_config

# The conftest's tiny season as the code before `arena.score_rule` existed wrote it (commit 01d8e53): the sha256 of each
# firehose shard, and of each table's content (`frame_digest`). Update them only in a change that means to move the season.
TODAY = {
    "shards": [
        "c6f958c43a49353d2bd1d3cf6936e68671d9afa3b198cb5a8f2307a39fbb1a60",
        "f32dbba56ab87f11b94bdbd9a9154a6d78c881d7b07ee577e96bffbfa4d83bdc",
        "e35a3defb13bcd36bd8f3b93e9750b07c48326ed0a1f96f90ba6f14279e9e03a",
    ],
    "races": "8b5e13cf6930bf42",
    "weights": "74cce58f12519671",
    "trace_labels": "2424b743bc55b04a",
    "version_labels": "ac91ce1e9c00640d",
}

COLUMNS = [
    "rule",
    "day",
    "traces",
    "agentic_share",
    "agentic_miners",
    "winner",
    "winner_style",
    "kept",
    "corpus",
]


def frame_digest(path) -> str:
    return hashlib.sha256(pd.read_parquet(path).to_json(orient="split").encode()).hexdigest()[:16]


@pytest.fixture(scope="module")
def compared(tmp_path_factory, tiny_season_yaml):
    "(run, the two seasons' folders, the day-by-day rows) of the tiny season under each score rule, on one process."
    d = tmp_path_factory.mktemp("rules")
    (d / "tiny.yaml").write_text(tiny_season_yaml)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SHOPDISTILL_RUNS", str(d / "runs"))
        cfg = load_config(d / "tiny.yaml")
        days = compare_rules(
            cfg.run,
            cfg.arena_traces,
            cfg.arena,
            cfg.catalog,
            cfg.search,
            cfg.tasks,
            cfg.scoring,
            workers=1,
            progress=False,
        )
        arena = cfg.run.arena()  # the run's folder follows $SHOPDISTILL_RUNS
    return cfg, {"judge": arena, "richness": arena.under_rule("richness")}, days


def test_the_default_rule_reproduces_todays_season_exactly(compared):
    cfg, seasons, _ = compared
    assert cfg.arena.score_rule == "judge"
    today = seasons["judge"]
    assert [
        hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(today.firehose.glob("shard-*.jsonl.gz"))
    ] == TODAY["shards"]
    for name in ("races", "weights", "trace_labels", "version_labels"):
        assert frame_digest(getattr(today, name)) == TODAY[name], name


def test_under_the_richness_rule_a_subtask_miners_score_is_lowered_by_the_multiplier(compared):
    _, seasons, _ = compared
    styles = pd.read_parquet(seasons["richness"].version_labels)[["agent_version_id", "style"]]
    races = pd.read_parquet(seasons["richness"].races).merge(styles, on="agent_version_id")
    sub, agentic = races[races["style"] == "subtask"], races[races["style"] == "agentic"]
    assert len(sub) and len(agentic) and (sub["judge_score"] > 0).any()
    # a harness's model asked for none of its catalogue calls: richness 0, the floor multiplier 0.3
    assert (sub["richness"] == 0).all()
    assert sub["score"].to_numpy() == pytest.approx(0.3 * sub["judge_score"].to_numpy(), abs=1e-4)
    assert (agentic["richness"] == 1).all() and (agentic["score"] == agentic["judge_score"]).all()
    assert rule_score(0.8, [0.9], "richness", 0.0) == round(0.3 * final_score(0.8, [0.9]), 4)


def test_a_versions_richness_is_run_richness_of_its_own_traces(compared):
    "The race log's richness is ORO's, measured on the envelopes of that version in that phase of that day."
    _, seasons, _ = compared
    traces = {}
    for env in iter_envelopes(seasons["richness"].firehose):
        x = env["extract"]
        traces.setdefault((x["day"], x["phase"], x["agent_version_id"]), []).append(env)
    races = pd.read_parquet(seasons["richness"].races)
    assert len(races) == len(traces)
    for r in races.itertuples():
        assert r.richness == round(run_richness(traces[(r.day, r.phase, r.agent_version_id)]), 4)


def test_the_comparison_has_one_row_per_day_per_rule_with_the_stated_columns(compared):
    cfg, seasons, days = compared
    assert list(days.columns) == COLUMNS
    assert sorted(zip(days["rule"], days["day"])) == [
        (r, d) for r in ("judge", "richness") for d in range(cfg.arena_traces.days)
    ]
    assert pd.read_parquet(seasons["judge"].rules_compared).equals(days)
    for rule, d in days.groupby("rule"):
        labels = pd.read_parquet(seasons[rule].trace_labels)
        assert d["traces"].tolist() == labels.groupby("day").size().tolist()
        assert (
            d["agentic_share"].tolist()
            == labels.groupby("day")["style"]
            .apply(lambda s: round((s == "agentic").mean(), 4))
            .tolist()
        )
        assert set(d["winner_style"]) <= {"agentic", "subtask", "decoy", None}
        assert d["corpus"].is_monotonic_increasing and d["corpus"].iloc[-1] <= d["kept"].sum()
    shift = population_shift(days)
    assert list(shift.index) == ["judge", "richness"]
    assert (
        shift[["agentic_wins", "subtask_wins", "decoy_wins"]].sum(axis=1) <= cfg.arena_traces.days
    ).all()


def test_an_unknown_score_rule_is_refused():
    with pytest.raises(ValueError, match="unknown arena.score_rule 'pass'"):
        Season(ArenaTracesSettings(), replace(ArenaSettings(), score_rule="pass"), [], [], [], [])
    with pytest.raises(ValueError, match="unknown rule"):
        rule_score(0.5, [0.5], "pass")
    with pytest.raises(ValueError, match="needs the run's richness"):
        rule_score(0.5, [0.5], "richness")
