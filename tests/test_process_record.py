"""Chapter 07's process record, held-out per-step score, pass@k from like samples, and the stages figure's title."""

import json

import numpy as np
import pytest

from shopdistill.results.collect import (
    heldout_steps,
    pass_at_k_curve,
    process_record,
    step_results,
    step_scores,
    stage_results,
)
from shopdistill.training.grpo import END_OF_TURN
from shopdistill.training.rewards import REWARD_RANGE, message_text


@pytest.fixture(scope="module")
def states():
    "Held-out states of a small sandbox, rendered as stage 5 renders them (a tiny tokenizer: no model is run)."
    from shopdistill.sandbox.catalog import Catalog, generate_catalog
    from shopdistill.sandbox.search import SearchEngine
    from shopdistill.sandbox.task_synthesis import synthesize_tasks
    from shopdistill.training.grpo import state_rows
    from shopdistill.training.policy import load_tokenizer
    from shopdistill.training.settings import TrainSettings

    cat = Catalog.from_records(generate_catalog(1500, seed=3))
    engine = SearchEngine.build(cat)
    steps = heldout_steps(
        synthesize_tasks(cat, {"product": 3, "shop": 2, "voucher": 2}, seed=3), engine, limit=0
    )
    tok = load_tokenizer(
        "tiny", TrainSettings(), texts=[m.get("content") or "" for r in steps for m in r["prompt"]]
    )
    rows, rep = state_rows(steps, tok)
    assert (
        len(rows) == len(steps) - rep["other_tools"] > 10
    )  # a teacher's call on a tool the policy is never shown: skipped
    return rows


def test_a_policy_that_copies_the_teacher_scores_the_top_of_the_range(states):
    copy = step_scores(
        [message_text(json.loads(s["teacher_action"])) + END_OF_TURN for s in states], states
    )
    assert {v["reward"] for v in copy.values()} == {REWARD_RANGE[1]}
    assert {(v["format"], v["tool_name"], v["match"], v["ended"]) for v in copy.values()} == {
        (1.0, 1.0, 1.0, 1.0)
    }
    res = step_results({"base": copy}, n_boot=200)
    assert res["stage.base.step_score"] == res["stage.base.step_score.lo"] == REWARD_RANGE[1]


def test_a_policy_that_writes_nothing_or_broken_calls_scores_the_bottom(states):
    "A turn that says nothing, a broken call, and the teacher's own turn cut before its end all score the minimum."
    lo, hi = REWARD_RANGE
    empty = step_scores([END_OF_TURN] * len(states), states)
    assert {v["reward"] for v in empty.values()} == {lo}
    broken = step_scores(["<tool_call>{not json</tool_call>" + END_OF_TURN] * len(states), states)
    assert {v["reward"] for v in broken.values()} == {lo}
    cut = step_scores([message_text(json.loads(s["teacher_action"])) for s in states], states)
    assert {(v["reward"], v["ended"]) for v in cut.values()} == {(lo, 0.0)}
    half = step_scores(
        [
            message_text(json.loads(s["teacher_action"])) + END_OF_TURN * (i % 2)
            for i, s in enumerate(states)
        ],
        states,
    )
    res = step_results({"base": empty, "dr_grpo": half}, n_boot=200)
    assert res["stage.dr_grpo.step_score.vs_prev.lo"] > 0  # paired by state


def test_step_scores_refuses_a_turn_count_that_does_not_match(states):
    with pytest.raises(ValueError):
        step_scores([""], states)


def _episodes(rng, n_problems=12, n_like=8):
    return [
        {"problem_id": f"p{i}", "sample": j, "success": bool(rng.random() < 0.3 + 0.04 * i)}
        for i in range(n_problems)
        for j in range(n_like + 1)
    ]


@pytest.mark.parametrize("seed", range(20))
def test_pass_at_k_is_non_decreasing_in_k(seed):
    rng = np.random.default_rng(seed)
    curve = pass_at_k_curve(_episodes(rng), (1, 2, 3, 4, 6, 8))
    assert all(b >= a - 1e-12 for a, b in zip(curve, curve[1:])), curve


@pytest.mark.parametrize("seed", range(5))
def test_the_greedy_sample_never_enters_pass_at_k(seed):
    eps = _episodes(np.random.default_rng(seed))
    flipped = [{**e, "success": not e["success"]} if e["sample"] == 0 else e for e in eps]
    assert pass_at_k_curve(flipped, (1, 4, 8)) == pass_at_k_curve(eps, (1, 4, 8))
    a, b = (
        stage_results({"s": eps}, {}, ks=(1, 8), n_boot=10),
        stage_results({"s": flipped}, {}, ks=(1, 8), n_boot=10),
    )
    assert (a["stage.s.pass@1"], a["stage.s.pass@8"]) == (b["stage.s.pass@1"], b["stage.s.pass@8"])
    assert b["stage.s.asr"] == pytest.approx(1 - a["stage.s.asr"])  # the greedy sample is the ASR's
    assert np.isnan(pass_at_k_curve(eps, (9,))[0])  # k goes up to the like samples a problem has


def test_process_record_counts_episodes_and_calls():
    eps = [
        {
            "sample": 0,
            "end": "terminate",
            "recommended": ["a"],
            "recommended_exist": False,
            "n_calls": 4,
            "valid_calls": 3,
            "messages": [{"role": "assistant"}] * 2,
            "meta": {"extra": {"generated_tokens": 10}},
        },
        {
            "sample": 0,
            "end": "step_cap",
            "recommended": [],
            "recommended_exist": False,
            "n_calls": 4,
            "valid_calls": 4,
            "messages": [{"role": "assistant"}] * 4,
            "meta": {"extra": {"generated_tokens": 30}},
        },
    ]
    r = process_record(eps)
    assert (r["valid_call_rate"], r["hallucinated_id_rate"], r["finish_rate"], r["cut_rate"]) == (
        7 / 8,
        0.5,
        0.5,
        0.5,
    )
    assert (r["mean_turns"], r["mean_generated_tokens"]) == (3.0, 20.0)
    assert r["cut_rate.lo"] < 0.5 < r["cut_rate.hi"]


def test_the_stages_figure_is_titled_with_the_runs_label():
    "The published lines' names must not overwrite the run's label (the left panel of figures/07_stages)."
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from shopdistill.results.figures import stages_figure

    res = {"stage.base.asr": 0.2, "stage.base.asr_lo": 0.1, "stage.base.asr_hi": 0.3}
    ax = stages_figure(
        res, ["base"], {"Qwen3-4B base, this paper (published)": 18.0}, label="SmolLM2-135M, ci"
    )
    assert ax.get_title().splitlines()[-1] == "SmolLM2-135M, ci"
    plt.close(ax.figure)
