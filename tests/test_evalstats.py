"Evaluation statistics: pass@k against exact enumeration, Wilson against scipy, the paired bootstrap, stage rows."

import itertools, math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from shopdistill.training.evalstats import (
    _resampled_means,
    pass_at_k,
    paired_bootstrap,
    stage_row,
    success_by_problem,
    wilson,
)


def enumerated_pass_at_k(n: int, c: int, k: int) -> float:
    "Share of the k-subsets of n samples (the first c successes) that hold at least one success."
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 11))
def test_pass_at_k_matches_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(enumerated_pass_at_k(n, c, k), abs=1e-12), (
                n,
                c,
                k,
            )


def test_pass_at_k_large_n_is_stable():
    # the binomial form would overflow a float; the product stays exact to rounding
    for n, c, k in [(200, 3, 100), (500, 1, 8), (1000, 999, 8), (300, 0, 50)]:
        exact = 1 - math.comb(n - c, k) / math.comb(n, k)
        assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-9, abs=1e-12)


def test_pass_at_k_edges():
    assert pass_at_k(8, 0, 8) == 0.0
    assert pass_at_k(8, 1, 8) == 1.0  # n - c < k
    assert pass_at_k(5, 5, 1) == 1.0
    for bad in [(4, 5, 1), (4, 1, 5), (4, 1, 0), (4, -1, 1)]:
        with pytest.raises(ValueError):
            pass_at_k(*bad)


def test_wilson_matches_scipy():
    from scipy.stats import binomtest

    for n in [1, 2, 5, 10, 30, 75, 200, 1000]:
        for s in sorted({0, 1, n // 3, n // 2, n - 1, n}):
            if not 0 <= s <= n:
                continue
            ci = binomtest(s, n).proportion_ci(confidence_level=0.95, method="wilson")
            lo, hi = wilson(s, n, z=1.959963984540054)
            assert (lo, hi) == (
                pytest.approx(ci.low, abs=1e-12),
                pytest.approx(ci.high, abs=1e-12),
            ), (s, n)


def test_wilson_edges():
    assert wilson(0, 0) == (0.0, 1.0)
    lo, hi = wilson(0, 75)
    assert lo == 0.0 and 0.03 < hi < 0.06
    with pytest.raises(ValueError):
        wilson(5, 4)


def test_paired_bootstrap_deterministic_and_sensible():
    rng = np.random.default_rng(1)
    a = rng.random(60) < 0.3
    b = a | (rng.random(60) < 0.3)  # b solves everything a solves and more
    r1, r2 = (
        paired_bootstrap(a, b, n_boot=2000, seed=7),
        paired_bootstrap(a, b, n_boot=2000, seed=7),
    )
    assert r1 == r2
    assert r1["diff"] == pytest.approx(b.mean() - a.mean())
    assert 0 < r1["lo"] <= r1["diff"] <= r1["hi"]
    assert paired_bootstrap(a, b, n_boot=2000, seed=8) != r1  # the seed is used
    same = paired_bootstrap(a, a, n_boot=500)
    assert same["diff"] == same["lo"] == same["hi"] == 0.0


def test_paired_bootstrap_resamples_as_scipy():
    # scipy.stats.bootstrap(paired=True) draws the same resamples from the same seed; only its interval's last bits differ
    from scipy.stats import bootstrap

    rng = np.random.default_rng(3)
    for n, seed in [(2, 0), (17, 5), (75, 123)]:
        a, b = (rng.random(n) < 0.4).astype(float), (rng.random(n) < 0.6).astype(float)
        r = bootstrap(
            (a, b),
            lambda x, y, axis: (y - x).mean(axis=axis),
            paired=True,
            method="percentile",
            n_resamples=500,
            rng=np.random.default_rng(seed),
        )
        assert np.array_equal(r.bootstrap_distribution, _resampled_means(b - a, 500, seed))
        assert paired_bootstrap(a, b, n_boot=500, seed=seed)["p_not_better"] == float(
            (r.bootstrap_distribution <= 0).mean()
        )


def test_paired_bootstrap_mappings_align_by_problem():
    a = {"p1": 0.0, "p2": 1.0, "p3": 0.5}
    b = {"p3": 0.5, "p1": 1.0, "p2": 1.0}  # other order, same problems
    assert paired_bootstrap(a, b, n_boot=100)["diff"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="different problems"):
        paired_bootstrap(a, {"p1": 1.0}, n_boot=10)
    with pytest.raises(ValueError):
        paired_bootstrap([1, 0], [1], n_boot=10)


def _episodes(successes: dict[str, list[bool]], **extra) -> list[dict]:
    return [
        {
            "problem_id": p,
            "sample": i,
            "success": s,
            "n_calls": 3,
            "valid_calls": 2,
            "recommended": ["42"],
            "recommended_exist": True,
            **extra,
        }
        for p, ss in successes.items()
        for i, s in enumerate(ss)
    ]


def test_stage_row():
    "Sample 0 is the greedy attempt (the ASR); samples 1-8 are drawn alike (pass@k); a greedy success is no draw."
    eps = _episodes(
        {
            "a": [True] + [False] * 8,
            "b": [False] * 9,
            "c": [False, True] + [False] * 7,
            "d": [True] * 9,
        }
    )
    row = stage_row("sft", eps[::-1])  # order of episodes does not matter
    assert row["stage"] == "sft" and row["n_problems"] == 4 and row["n_samples"] == 36
    assert row["asr"] == 0.5  # sample 0 succeeded on a and d
    assert (row["asr_lo"], row["asr_hi"]) == pytest.approx(wilson(2, 4))
    assert row["pass@1"] == pytest.approx((0 + 0 + 1 + 8) / 32)
    assert row["pass@8"] == pytest.approx(2 / 4)  # c and d: a's only success was its greedy attempt
    assert row["valid_call_rate"] == pytest.approx(2 / 3)
    assert row["existing_id_rate"] == 1.0
    assert success_by_problem(eps) == {"a": 1 / 9, "b": 0.0, "c": 1 / 9, "d": 1.0}


def test_stage_row_one_sample_and_missing_recommendations():
    "A stage measured greedily only has an ASR and no pass@k: a greedy attempt is not a draw."
    eps = _episodes({"a": [True], "b": [False], "c": [False]})
    eps[1]["recommended"] = []  # recommended nothing: all([]) must not count as an existing id
    eps[2]["recommended_exist"] = False
    row = stage_row("base", eps)
    assert row["asr"] == pytest.approx(1 / 3) and row["pass_problems"] == 0
    assert math.isnan(row["pass@1"]) and math.isnan(row["pass@8"])
    assert row["existing_id_rate"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        stage_row("empty", [])


def test_stage_row_rates_count_the_greedy_episodes_only():
    "A sampled stage and a greedy one are compared on the same attempts: the draws never enter the call and id rates."
    eps = _episodes({"a": [True], "b": [True]})
    draws = [
        {**e, "sample": i, "valid_calls": 0, "recommended_exist": False}
        for e in eps
        for i in range(1, 9)
    ]
    row = stage_row("kto", eps + draws)
    assert (row["valid_call_rate"], row["existing_id_rate"]) == (pytest.approx(2 / 3), 1.0)


@given(st.lists(st.lists(st.booleans(), min_size=9, max_size=9), min_size=1, max_size=12))
@settings(max_examples=60, deadline=None)
def test_pass_at_k_never_falls_as_k_grows(runs):
    "pass@k from samples drawn alike cannot fall with k, whatever the greedy attempt did."
    row = stage_row("x", _episodes({f"p{i}": r for i, r in enumerate(runs)}), ks=range(1, 9))
    curve = [row[f"pass@{k}"] for k in range(1, 9)]
    assert all(b >= a - 1e-12 for a, b in zip(curve, curve[1:])), curve


def test_stage_row_pass_at_k_on_the_sampled_subset():
    "eval.sampled_problems: draws on some problems, the greedy attempt on all; ASR on all, pass@k on the sampled ones."
    eps = _episodes(
        {"a": [True] + [False] * 8, "b": [False] * 8 + [True], "c": [True], "d": [False]}
    )
    row = stage_row("kto", eps)
    assert (row["n_problems"], row["pass_problems"], row["n_samples"]) == (4, 2, 20)
    assert row["asr"] == 0.5  # sample 0 of a and c
    assert row["pass@1"] == pytest.approx(1 / 16) and row["pass@8"] == pytest.approx(
        0.5
    )  # b's draw; not a's greedy win
