"The arena's rules (chapter 00): weights, tie-break, judge coefficient, qualifying, challenge margin, Yuma, emission."

import math

import numpy as np
import pytest

from shopdistill.mechanics.rules import (
    U16_MAX,
    Entry,
    MarginSettings,
    best_per_hotkey,
    challenge_margin,
    consensus_weight,
    emission_split,
    final_score,
    judge_coefficient,
    miner_emission,
    qualifiers,
    race_standings,
    race_winner,
    rank_race,
    u16_weights,
    weight_vector,
    yuma_epoch,
)
from shopdistill.reproduce.settings import load_config


# ---- weights (validator code, May 2026) ----


def test_worked_example_ten_finishers():
    "10 finishers -> burn, winner, tail: [65535, 21848, 4, 3, 2, 1, 0, ...]."
    w = u16_weights(list(range(1, 11)))
    assert weight_vector(w, 11) == [65535, 21848, 4, 3, 2, 1, 0, 0, 0, 0, 0]


def test_weights_follow_ranking_not_uid_order():
    w = u16_weights([7, 3, 9, 1])  # K = 2: only rank 2 gets a tail weight
    assert w == {0: U16_MAX, 7: round(0.25 * (U16_MAX + 1) / 0.75), 3: 1, 9: 0, 1: 0}


@pytest.mark.parametrize("n", range(0, 40))
def test_weight_rule_arithmetic(n):
    uids = list(range(1, n + 1))
    w = u16_weights(uids)
    assert w[0] == U16_MAX
    assert all(0 <= v <= U16_MAX and isinstance(v, int) for v in w.values())
    if n == 0:
        assert w == {0: U16_MAX}
        return
    k = n // 2
    tail = [w[u] for u in uids[1:]]
    assert tail == [k + 1 - r if 2 <= r <= k else 0 for r in range(2, n + 1)]
    total = (U16_MAX + sum(tail)) / 0.75
    assert w[1] == round(0.25 * total)
    assert abs(w[1] / sum(w.values()) - 0.25) < 1e-5  # the winner's share is a quarter, whatever N


def test_winner_take_all_rule():
    w = u16_weights(list(range(1, 11)), rule="winner_take_all")
    assert weight_vector(w, 11) == [65535, 21845] + [0] * 9
    assert abs(21845 / (65535 + 21845) - 0.25) < 1e-5


def test_weight_rule_errors():
    with pytest.raises(ValueError, match="twice"):
        u16_weights([1, 2, 1])
    with pytest.raises(ValueError, match="burn uid"):
        u16_weights([0, 1])
    with pytest.raises(ValueError, match="unknown rule"):
        u16_weights([1], rule="linear")
    with pytest.raises(ValueError, match="winner_share"):
        u16_weights([1], winner_share=0.6)
    with pytest.raises(ValueError, match="outside"):
        weight_vector({5: 1}, 3)


# ---- ranking and tie-break ----


def test_race_ranking_tie_break_by_version_id():
    es = [
        Entry("a", "v-0009", 0.5),
        Entry("b", "v-0002", 0.5),
        Entry("c", "v-0005", 0.6),
        Entry("d", "v-0001", 0.4),
    ]
    assert [e.version_id for e in rank_race(es)] == ["v-0005", "v-0002", "v-0009", "v-0001"]
    assert [e.version_id for e in rank_race(reversed(es))] == [
        "v-0005",
        "v-0002",
        "v-0009",
        "v-0001",
    ]


def test_best_version_per_hotkey():
    es = [
        Entry("a", "v3", 0.7),
        Entry("a", "v1", 0.8),
        Entry("a", "v2", 0.8),
        Entry("b", "v4", 0.1),
    ]
    assert [e.version_id for e in best_per_hotkey(es)] == ["v1", "v4"]


# ---- judge coefficient ----


def test_judge_coefficient():
    assert round(judge_coefficient(0.5), 4) == 0.7375
    assert (
        judge_coefficient(0.8) == 1.0
        and judge_coefficient(0.9) == 1.0
        and judge_coefficient(1.0) == 1.0
    )
    assert math.isclose(judge_coefficient(0.0), 0.3)
    assert math.isclose(judge_coefficient(0.8 - 1e-12), 1.0, abs_tol=1e-9)  # continuous at the knee
    qs = np.linspace(0, 0.8, 50)
    assert all(np.diff([judge_coefficient(q) for q in qs]) > 0)
    with pytest.raises(ValueError):
        judge_coefficient(1.2)


def test_final_score_blend():
    assert final_score(1.0, [0.5]) == 0.7375
    assert final_score(0.5, [0.9, 0.7]) == 0.5  # q̄ = 0.8: full credit
    assert final_score(0.6, [0.1, 0.1]) == round(0.6 * (0.3 + 0.1 * 0.7 / 0.8), 4)
    assert final_score(0.3333333, [0.3]) == round(0.3333333 * (0.3 + 0.3 * 0.875), 4)
    with pytest.raises(ValueError, match="no reasoning"):
        final_score(0.5, [])
    with pytest.raises(ValueError):
        final_score(1.5, [0.9])


# ---- qualifying ----


def test_qualifying_threshold_is_a_fraction_of_the_leader():
    es = [Entry("a", "va", 0.80), Entry("b", "vb", 0.76), Entry("c", "vc", 0.7599)]
    assert [e.hotkey for e in qualifiers(es)] == ["a", "b"]  # 0.95 x 0.80 = 0.76 exactly qualifies
    assert [e.hotkey for e in qualifiers(es, fraction=0.9)] == ["a", "b", "c"]
    assert [e.hotkey for e in qualifiers(es, fraction=1.0)] == ["a"]


def test_incumbent_auto_qualifies_and_holds_its_hotkey_slot():
    es = [Entry("a", "va", 0.80), Entry("z", "vz-old", 0.30), Entry("z", "vz-new", 0.79)]
    q = qualifiers(es, incumbent="vz-old")
    assert [e.version_id for e in q] == [
        "va",
        "vz-old",
    ]  # one active qualifier per hotkey: the incumbent version
    assert [e.version_id for e in qualifiers(es)] == [
        "va",
        "vz-new",
    ]  # without a crown, the best version
    with pytest.raises(ValueError, match="incumbent"):
        qualifiers(es, incumbent="nope")


def test_qualifying_with_no_entries():
    assert qualifiers([]) == []


# ---- challenge margin ----


def test_margin_law_exponential():
    m = MarginSettings()
    assert (m.law, m.start, m.half_life_h) == ("exponential", 0.03, 24.0)
    assert math.isclose(challenge_margin(0), 0.03)
    for h in (0, 5, 24, 60):
        assert math.isclose(
            challenge_margin(h + 24), challenge_margin(h) / 2
        )  # halves every half-life
    hs = np.linspace(0, 200, 100)
    assert all(np.diff([challenge_margin(h) for h in hs]) < 0)
    assert math.isclose(challenge_margin(12, half_life_h=12, start=0.1), 0.05)


def test_margin_other_laws():
    assert math.isclose(challenge_margin(6, law="linear", window_h=24), 0.03 * 0.75)
    assert challenge_margin(24, law="linear") == 0.0 and challenge_margin(100, law="linear") == 0.0
    assert challenge_margin(1000, law="constant") == 0.03
    assert challenge_margin(0, law="none") == 0.0
    with pytest.raises(ValueError, match="unknown law"):
        challenge_margin(1, law="cubic")
    with pytest.raises(ValueError, match=">= 0"):
        challenge_margin(-1)
    with pytest.raises(ValueError):
        challenge_margin(1, half_life_h=0)


def test_dethroning_needs_the_margin():
    inc = Entry("i", "v-inc", 0.80)
    for hours in (0, 24, 48, 240):
        need = 0.80 * (1 + challenge_margin(hours))
        below = [inc, Entry("c", "v-c", need - 1e-6)]
        above = [inc, Entry("c", "v-c", need + 1e-6)]
        assert race_winner(below, "v-inc", hours) == (inc, False)
        w, dethroned = race_winner(above, "v-inc", hours)
        assert (w.version_id, dethroned) == ("v-c", True)
    # margins from settings objects or dicts, and the constant law never decays
    assert (
        race_winner(
            [inc, Entry("c", "v-c", 0.82)], "v-inc", 1000, {"law": "constant", "start": 0.03}
        )[1]
        is False
    )
    assert (
        race_winner([inc, Entry("c", "v-c", 0.82)], "v-inc", 1000, MarginSettings(law="none"))[1]
        is True
    )


def test_race_winner_without_incumbent_and_standings():
    race = [Entry("a", "v2", 0.5), Entry("b", "v1", 0.5), Entry("c", "v3", 0.4)]
    assert race_winner(race)[0].version_id == "v1"  # tie-break
    w, changed = race_winner(
        race, incumbent="gone"
    )  # the incumbent did not finish: the top spot changes hands
    assert w.version_id == "v1" and changed
    assert race_winner([Entry("a", "v2", 0.1)], incumbent="v2") == (Entry("a", "v2", 0.1), False)
    assert [e.version_id for e in race_standings(race, "v3")] == ["v3", "v1", "v2"]
    with pytest.raises(ValueError):
        race_standings(race, "v9")
    with pytest.raises(ValueError):
        race_winner([])


# ---- Yuma consensus ----


def _vectors(rankings, n_uids, rule="tail"):
    return [weight_vector(u16_weights(r, rule=rule), n_uids) for r in rankings]


def test_yuma_validators_agree_winner_keeps_its_quarter():
    y = yuma_epoch(_vectors([[1, 2, 3, 4]] * 3, 5), [0.4, 0.35, 0.25])
    assert math.isclose(y["incentive"].sum(), 1.0)
    assert abs(y["incentive"][1] - 0.25) < 1e-4 and y["incentive"][2] > 0  # winner and tail kept
    assert np.allclose(y["trust"], 1.0)


def test_yuma_validators_disagree_winner_clipped_to_zero():
    stake = [0.4, 0.35, 0.25]
    y = yuma_epoch(_vectors([[1, 2, 3], [2, 1, 3], [3, 1, 2]], 4, rule="winner_take_all"), stake)
    assert y["incentive"][1:].tolist() == [
        0.0,
        0.0,
        0.0,
    ]  # no winner backed by half the stake: clipped to zero
    assert math.isclose(y["incentive"][0], 1.0)
    # with the tail rule a claimed winner keeps at most the tail weight the majority gives it
    y = yuma_epoch(_vectors([[1, 2, 3, 4], [2, 1, 3, 4], [3, 1, 2, 4]], 5), stake)
    assert y["incentive"][1:].max() < 1e-4
    assert (y["trust"] < 0.8).all()


def test_yuma_majority_stake_decides():
    y = yuma_epoch(_vectors([[1, 2], [1, 2], [2, 1]], 3, rule="winner_take_all"), [0.3, 0.3, 0.4])
    assert y["incentive"][1] > 0 and y["incentive"][2] == 0  # 60% of the stake backs uid 1
    y = yuma_epoch(_vectors([[1, 2], [1, 2], [2, 1]], 3, rule="winner_take_all"), [0.2, 0.2, 0.6])
    assert y["incentive"][1] == 0 and y["incentive"][2] > 0  # now the 60% validator decides


def test_consensus_weight_is_a_stake_weighted_quantile_from_the_top():
    v, s = np.array([0.5, 0.2, 0.1]), np.array([0.3, 0.3, 0.4])
    assert consensus_weight(v, s, 0.5) == 0.2  # 0.5 is backed by 30% only; >= 0.2 by 60%
    assert consensus_weight(v, s, 0.3) == 0.5
    assert consensus_weight(v, s, 1.0) == 0.1
    assert (
        consensus_weight(np.array([0.25, 0.0]), np.array([0.5, 0.5]), 0.5) == 0.25
    )  # exactly kappa is enough


def test_yuma_scale_invariance_and_errors():
    W = np.array([[3.0, 1.0], [6.0, 2.0]])
    y1, y2 = yuma_epoch(W, [1, 1]), yuma_epoch(W * 1000, [5, 5])
    assert np.allclose(y1["incentive"], y2["incentive"])
    with pytest.raises(ValueError):
        yuma_epoch([[1, 2]], [1, 1])
    with pytest.raises(ValueError):
        yuma_epoch([[-1, 2]], [1])
    assert yuma_epoch([[0, 0]], [1])["incentive"].tolist() == [0.0, 0.0]


# ---- emission ----


def test_emission_split():
    e = emission_split(1.0)
    assert e == {"owner": 0.18, "miners": 0.41, "validators": 0.41}
    assert math.isclose(sum(emission_split(7.0).values()), 7.0)
    assert np.allclose(miner_emission([0.75, 0.25], 1.0), [0.3075, 0.1025])
    with pytest.raises(ValueError):
        emission_split(1.0, {"owner": 0.5, "miners": 0.6, "validators": 0.1})


# ---- settings ----


@pytest.mark.parametrize("profile", ["smoke", "full"])
def test_arena_section_loads(profile):
    a = load_config(profile).arena
    assert (
        a.qualify_fraction == 0.95 and a.kappa == 0.5 and a.winner_share == 0.25 and a.burn_uid == 0
    )
    assert a.weights_rule == "tail" and a.margin.law in (
        "exponential",
        "linear",
        "constant",
        "none",
    )
    assert math.isclose(sum(a.emission.values()), 1.0) and math.isclose(
        sum(a.pools.fractions.values()), 1.0
    )
    assert sum(a.bank.tasks.values()) >= 300  # enough specifications for a 2,000-problem benchmark
