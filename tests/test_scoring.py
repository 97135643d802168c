"""Tests for shopdistill.sandbox.scoring: the per-product rule, the task rules, both scorers, reports, trajectories."""

import json
from pathlib import Path

import pytest

from shopdistill.sandbox.catalog import generate_catalog, write_catalog
from shopdistill.sandbox.scoring import (
    SCORERS,
    NoScoreableConstraint,
    extract_recommendation,
    gold_stand_in,
    format_reward,
    format_score,
    implied_total,
    length_reward,
    parse_recommendation,
    price_after_voucher,
    price_hit,
    rule_score,
    score_report,
    score_suite,
    score_task,
)
from shopdistill.sandbox.similarity import (
    CharNgramSimilarity,
    SentenceTransformerSimilarity,
    TitleSimilarity,
    default_similarity,
    similarity_calibration,
)
from shopdistill.sandbox.tasks import load_tasks, save_tasks
from shopdistill.sandbox.task_synthesis import synthesize_tasks

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data" / "shoppingbench"
REAL = [SHARED / f"synthesize_{c}_test.jsonl" for c in ("product", "shop", "voucher")]
needs_shared = pytest.mark.skipif(
    not all(p.exists() for p in REAL),
    reason=f"public ShoppingBench task files not found under {SHARED} (../shared absent)",
)
BOTH = list(SCORERS)


def P(
    pid, shop="s1", price=100.0, title="Acme Leather Belt Brown", service=(), sku=None, attrs=None
):
    "A tiny product in the catalog schema."
    return {
        "product_id": pid,
        "shop_id": shop,
        "title": title,
        "price": price,
        "service": list(service),
        "sku_options": sku or {},
        "attributes": attrs or {},
    }


def G(pid, title="Acme Leather Belt Brown", **kw):
    return {"product_id": pid, "title": [title], **kw}


def T(category, reward, voucher=None, tid=None, query=None):
    return {
        "id": tid or f"{category}-t",
        "query": query or f"query for {tid or category}",
        "category": category,
        "reward": reward,
        "voucher": voucher,
        "extra": {},
    }


class Fixed(TitleSimilarity):
    "A similarity backend returning a fixed value, to pin threshold behaviour."

    name = "fixed"

    def __init__(self, value):
        self.value = value

    def similarity(self, a, b):
        return 1.0 if a == b else self.value


def gold_answer(task):
    golds = task["reward"] if isinstance(task["reward"], list) else [task["reward"]]
    return ",".join(g["product_id"] for g in golds)


# ---------------------------------------------------------------- real files
@pytest.fixture(scope="module")
def real_tasks():
    if not all(p.exists() for p in REAL):
        return None
    return [t for p in REAL for t in load_tasks(p)]


@needs_shared
@pytest.mark.parametrize("scorer", BOTH)
def test_without_catalog_a_gold_id_resolves_only_for_its_own_task(real_tasks, scorer):
    "Each real task answered with the next task's gold ids: nothing resolves, nothing succeeds."
    shifted = {
        t["id"]: gold_answer(real_tasks[(i + 1) % len(real_tasks)])
        for i, t in enumerate(real_tasks)
    }
    rep = score_suite(real_tasks, shifted, None, scorer)
    assert rep["n_tasks"] == 750 and rep["successes"] == 0 and rep["gt_rate"] == 0.0
    assert not any(it["resolved"] for r in rep["tasks"] for it in r["items"])


@needs_shared
def test_real_product_tasks_against_a_catalog_of_their_golds(real_tasks, tmp_path):
    """A catalog built from the real product tasks' gold facts, then perturbed: every 10th gold left out of it
    fails as "not in the catalog" (never rebuilt from the task), every 7th task answered with another's id fails."""
    prod = [t for t in real_tasks if t["category"] == "product"]
    dropped = {t["reward"]["product_id"] for i, t in enumerate(prod) if i % 10 == 0}
    cat = {}
    for i, t in enumerate(prod):
        p = {k: v for k, v in gold_stand_in(t["reward"], str(i)).items() if k != "stand_in"}
        if p["product_id"] not in dropped:
            cat.setdefault(p["product_id"], {**p, "price": p["price"] or 1.0})
    write_catalog(cat.values(), tmp_path / "documents.jsonl")
    wrong = {
        t["id"]
        for i, t in enumerate(prod)
        if i % 7 == 3 and t["reward"]["product_id"] not in dropped
    }
    answers = {
        t["id"]: (
            prod[(i + 50) % len(prod)]["reward"]["product_id"]
            if t["id"] in wrong
            else t["reward"]["product_id"]
        )
        for i, t in enumerate(prod)
    }
    (tmp_path / "answers.json").write_text(json.dumps(answers))
    rep = score_report(REAL[0], tmp_path / "documents.jsonl", tmp_path / "answers.json")
    rows = {r["id"]: r for r in rep["tasks"]}
    for t in prod:
        r = rows[t["id"]]
        if t["reward"]["product_id"] in dropped:
            assert (
                not r["success"]
                and r["items"][0]["reason"] == "not in the catalog"
                and "not in the catalog" in r["problem"]
            )
        elif t["id"] in wrong:
            assert not r["success"] and r["gt"] == 0
        else:
            assert r["success"] and r["items"][0]["source"] == "catalog"
    assert rep["successes"] == len(prod) - len(
        [t for t in prod if t["reward"]["product_id"] in dropped]
    ) - len(wrong)
    assert rep["not_in_catalog"] >= len(dropped) and rep["catalog"]["products"] == len(cat)


@needs_shared
def test_gold_ids_keyed_by_id_and_voucher_inversion(real_tasks):
    rep = score_suite(
        real_tasks, {t["id"]: gold_answer(t) for t in real_tasks}, None, "production_strict"
    )
    assert rep["asr"] == 1.0 and rep["unmatched_answers"] == 0
    for t in real_tasks:
        if t["category"] == "voucher":
            v = t["voucher"]
            assert abs(price_after_voucher(implied_total(v), v) - v["price_after_voucher"]) < 1e-6
            assert implied_total(v) >= v["threshold"]


@needs_shared
def test_real_gold_in_wrong_order_fails_under_strict(real_tasks):
    shop = [t for t in real_tasks if t["category"] == "shop"]
    rows = [
        score_task(t, ",".join(reversed(gold_answer(t).split(","))), None, "production_strict")
        for t in shop
    ]
    assert sum(r["success"] for r in rows) < 0.2 * len(rows)


# ---------------------------------------------------------------- the per-product rule
@pytest.mark.parametrize(
    "mode,lo,hi,price,hit",
    [
        ("less than", 0, 100, 100.0, True),
        ("less than", 0, 100, 100.01, False),
        ("less than", 0, 100, 0.0, True),
        ("greater than", 50, None, 50.0, True),
        ("greater than", 50, None, 49.99, False),
        ("greater than", 50, None, 1e9, True),
        ("between", 10, 20, 10.0, True),
        ("between", 10, 20, 20.0, True),
        ("between", 10, 20, 9.99, False),
        ("between", 10, 20, 20.01, False),
        ("between", 10, 20, None, False),
        ("around", 10, 20, 15.0, False),
    ],
)
def test_price_modes_inclusive(mode, lo, hi, price, hit):
    assert price_hit(price, mode, lo, hi) is hit
    gold = G("9", price=[{mode: [lo, hi]}])
    r = rule_score(P("1", price=price), gold, Fixed(1.0), 0.5)
    assert r.total["price"] == 1 and r.hits["price"] == int(hit) and r.rule == (1.0 if hit else 0.5)


def test_services_each_count():
    gold = G("9", service=["official", "COD", "flashsale"])
    r = rule_score(P("1", service=["COD", "freeShipping"]), gold, Fixed(1.0), 0.5)
    assert (r.hits["service"], r.total["service"], r.rule) == (1, 3, 2 / 4)


def test_sku_or_attribute_pairs_take_the_best_option_set():
    prod = P(
        "1",
        sku={"1": {"color_family": "red", "size": "m"}, "2": {"color_family": "blue", "size": "l"}},
        attrs={"material": ["cotton", "linen"], "size": ["xl"]},
    )
    gold = G(
        "9",
        sku_options=[{"color_family": "blue", "size": "m"}],
        attributes=[{"material": ["linen"]}],
    )
    r = rule_score(prod, gold, Fixed(1.0), 0.5)
    assert (r.hits["sku_attr"], r.total["sku_attr"]) == (
        2,
        3,
    )  # blue and m are in different option sets: one of them + linen
    gold2 = G("9", sku_options=[{"color_family": "blue", "size": "xl"}])
    assert (
        rule_score(prod, gold2, Fixed(1.0), 0.5).hits["sku_attr"] == 2
    )  # size xl found among the attributes
    gold3 = G("9", attributes=[{"color_family": ["red"]}])
    assert (
        rule_score(prod, gold3, Fixed(1.0), 0.5).hits["sku_attr"] == 1
    )  # an attribute pair found in an option set
    assert (
        rule_score(P("1"), gold, Fixed(1.0), 0.5).hits["sku_attr"] == 0
    )  # no options, no attributes


def test_exact_id_is_one_and_counts_every_field():
    gold = G("9", price=[{"between": [1, 2]}], service=["COD"], attributes=[{"a": ["b"]}])
    r = rule_score(P("9", price=1000.0), gold, Fixed(0.0), 0.5)
    assert (r.rule, r.gt) == (1.0, 1) and r.hits == r.total


def test_title_threshold_decides_and_every_gold_title_counts():
    gold = {"product_id": "9", "title": ["Alpha", "Beta"]}
    assert rule_score(P("1", title="x"), gold, Fixed(0.55), 0.5).rule == 1.0
    assert rule_score(P("1", title="x"), gold, Fixed(0.55), 0.7).rule == 0.0
    assert rule_score(P("1", title="x"), gold, Fixed(0.5), 0.5).rule == 1.0  # >= threshold


def test_no_scoreable_constraint_raises():
    with pytest.raises(NoScoreableConstraint):
        rule_score(P("1"), {"product_id": "9", "title": []}, Fixed(1.0), 0.5)
    assert rule_score(P("9"), {"product_id": "9", "title": []}, Fixed(1.0), 0.5).rule == 1.0


# ---------------------------------------------------------------- task rules
CAT = {
    p["product_id"]: p
    for p in [
        P("1", shop="A", price=60.0, title="Acme Leather Belt Brown"),
        P("2", shop="A", price=50.0, title="Zenith Steel Water Bottle 1L"),
        P("3", shop="B", price=50.0, title="Zenith Steel Water Bottle 1L"),
        P("4", shop="A", price=70.0, title="Nimbus Cotton Pillow Case"),
        P("5", shop="A", price=80.0, title="Completely Unrelated Garden Hose"),
    ]
}
PRODUCT = T("product", G("1", "Acme Leather Belt Brown"))
SHOP = T("shop", [G("1", "Acme Leather Belt Brown"), G("2", "Zenith Steel Water Bottle 1L")])


@pytest.mark.parametrize("scorer", BOTH)
def test_product_scores_the_first_id_only(scorer):
    assert score_task(PRODUCT, "1,5", CAT, scorer)["success"]
    assert not score_task(PRODUCT, "5,1", CAT, scorer)["success"]
    assert score_task(PRODUCT, "1", CAT, scorer)["gt"] == 1


@pytest.mark.parametrize("scorer", BOTH)
def test_shop_is_positional_and_needs_one_shop(scorer):
    ok = score_task(SHOP, "1,2", CAT, scorer)
    assert ok["success"] and ok["shop"] == 1 and ok["rule"] == 1.0
    swapped = score_task(SHOP, "2,1", CAT, scorer)
    assert not swapped["success"] and swapped["rule"] < 1
    other_shop = score_task(SHOP, "1,3", CAT, scorer)  # same title as gold 2, but shop B
    assert other_shop["rule"] == 1.0 and other_shop["shop"] == 0 and not other_shop["success"]
    short = score_task(SHOP, "1", CAT, scorer)
    assert (
        short["shop"] == 0
        and short["rule"] == 0.5
        and short["product"] == 0.5
        and not short["success"]
    )
    extra = score_task(SHOP, "1,2,5,4", CAT, scorer)
    assert extra["success"]  # ids beyond the gold count are ignored


def test_multi_item_counting_differs_between_scorers():
    # position 2 resolves (same shop A) but matches nothing: upstream counts it for `shop`, production_strict does not
    up = score_task(SHOP, "1,5", CAT, "upstream")
    st = score_task(SHOP, "1,5", CAT, "production_strict")
    assert up["shop"] == 1 and st["shop"] == 0
    assert not up["success"] and not st["success"]
    v = {
        "voucher_type": "platform",
        "threshold": 100,
        "discount_type": "fixed",
        "face_value": 20,
        "discount": None,
        "cap": None,
        "price_after_voucher": 90.0,
        "budget": 200,
    }
    task = T("voucher", [G("1"), G("2", "Zenith Steel Water Bottle 1L")], v)
    assert score_task(task, "1,5", CAT, "upstream")["budget"] == 1
    assert score_task(task, "1,5", CAT, "production_strict")["budget"] == 0


def test_zero_constraint_gold_is_an_error_upstream_and_zero_in_production():
    task = T("product", {"product_id": "1", "title": []})
    up, st = score_task(task, "2", CAT, "upstream"), score_task(task, "2", CAT, "production_strict")
    assert up["error"] and "ZeroDivisionError" in up["error"] and not up["success"]
    assert st["error"] is None and st["rule"] == 0.0 and not st["success"]
    assert score_task(task, "1", CAT, "upstream")["error"] is None  # the exact id never divides
    rep = score_suite([task], {task["id"]: "2"}, CAT, "upstream")
    assert rep["errors"] == 1 and rep["denominator"] == 1


def test_denominator_differs_between_scorers():
    tasks = [
        T("product", G("1"), tid="a"),
        T("product", G("2", "Zenith Steel Water Bottle 1L"), tid="b"),
        T("product", G("4", "Nimbus Cotton Pillow Case"), tid="c"),
    ]
    answers = {"a": "1", "b": "5"}  # c: no output (a crash)
    up, st = (
        score_suite(tasks, answers, CAT, "upstream"),
        score_suite(tasks, answers, CAT, "production_strict"),
    )
    assert (up["denominator"], up["asr"]) == (2, 0.5)
    assert (st["denominator"], st["asr"]) == (3, 1 / 3)
    assert st["asr_weighted"] == st["asr"]


def test_null_answer_is_no_output():
    r = score_task(PRODUCT, None, CAT)
    assert not r["has_output"] and r["problem"] == "no output" and not r["success"]


# ---------------------------------------------------------------- vouchers
def V(vtype="platform", kind="fixed", thr=100, face=None, d=None, cap=None, budget=100, after=0.0):
    return {
        "voucher_type": vtype,
        "threshold": thr,
        "discount_type": kind,
        "face_value": face,
        "discount": d,
        "cap": cap,
        "price_after_voucher": after,
        "budget": budget,
    }


VCAT = {
    p["product_id"]: p
    for p in [
        P("11", "A", 80.0, "Alpha Kettle"),
        P("12", "A", 70.0, "Bravo Toaster"),
        P("13", "B", 70.0, "Bravo Toaster"),
        P("14", "A", 20.0, "Charlie Spoon"),
    ]
}
VG = [G("11", "Alpha Kettle"), G("12", "Bravo Toaster")]


@pytest.mark.parametrize("scorer", BOTH)
@pytest.mark.parametrize(
    "ids,voucher,budget",
    [
        ("11,12", V(budget=150), 1),  # total 150 exactly the budget
        ("11,12", V(budget=149, face=10), 1),  # fixed: 150 - 10 = 140 <= 149
        ("11,12", V(budget=139, face=10), 0),  # 140 > 139
        ("11,12", V(budget=140, face=10), 1),  # discounted total exactly the budget
        ("11,12", V(budget=120, thr=151, face=100), 0),  # below the threshold: no voucher
        ("11,12", V(budget=120, thr=150, face=30), 1),  # total equal to the threshold applies
        ("11,12", V(kind="percentage", d=0.2, cap=100, budget=120), 1),  # 150 * 0.8 = 120
        ("11,12", V(kind="percentage", d=0.2, cap=100, budget=119), 0),
        (
            "11,12",
            V(kind="percentage", d=0.5, cap=40, budget=110),
            1,
        ),  # cap binds: max(75, 110) = 110
        ("11,12", V(kind="percentage", d=0.5, cap=40, budget=109), 0),
        ("11,12", V("shop", face=50, budget=100), 1),  # shop voucher, one shop
        ("11,13", V("shop", face=50, budget=100), 0),  # shop voucher across two shops
        ("11,13", V("platform", face=50, budget=100), 1),  # platform voucher across two shops
    ],
)
def test_voucher_budget_rules(scorer, ids, voucher, budget):
    r = score_task(T("voucher", VG, voucher), ids, VCAT, scorer)
    assert r["rule"] == 1.0 and r["budget"] == budget and r["success"] == bool(budget)


def test_voucher_needs_every_position():
    r = score_task(T("voucher", VG, V(budget=1000)), "11", VCAT)
    assert r["budget"] == 0 and not r["success"]


def test_gold_ids_missing_from_catalog_resolve_from_the_task():
    v = V(
        "shop", "percentage", thr=100, d=0.2, cap=30, budget=121, after=120.0
    )  # total implied: 150
    task = T("voucher", [G("901", "Alpha Kettle"), G("902", "Bravo Toaster")], v)
    r = score_task(task, "901,902", VCAT, "production_strict")
    assert r["success"] and r["budget"] == 1 and all(it["source"] == "task" for it in r["items"])
    assert implied_total(v) == pytest.approx(150.0)
    # mixing a catalog product with a stand-in whose price is unknown cannot settle the budget
    mixed = score_task(
        T("voucher", [G("11", "Alpha Kettle"), G("902", "Bravo Toaster")], V(budget=1)),
        "11,902",
        VCAT,
    )
    assert mixed["budget"] == 0 and "price is unknown" in mixed["problem"]
    # a stand-in carries a price meeting its gold price constraint
    shop = T(
        "shop", [G("901", "Alpha Kettle", price=[{"between": [10, 20]}]), G("902", "Bravo Toaster")]
    )
    assert score_task(shop, "901,902", None)["success"]
    assert not score_task(shop, "902,901", None)["success"]


def test_implied_total_fixed_and_both_percentage_branches():
    assert implied_total(V(face=25, after=75.0)) == 100.0
    assert implied_total(V(kind="percentage", d=0.1, cap=50, after=90.0)) == pytest.approx(
        100.0
    )  # d binds
    assert implied_total(V(kind="percentage", d=0.5, cap=10, after=90.0)) == pytest.approx(
        100.0
    )  # cap binds


# ---------------------------------------------------------------- malformed recommendations
@pytest.mark.parametrize(
    "raw,ids,problem",
    [
        ("1, 2 ,1,,2", ["1", "2"], None),
        ("", [], "empty recommendation"),
        (" , ", [], "empty recommendation"),
        (["1", "2"], [], "JSON list"),
        (12, [], "got int"),
        ({"product_ids": "1"}, [], "got dict"),
        (None, [], "no output"),
    ],
)
def test_parse_recommendation(raw, ids, problem):
    got_ids, got_problem = parse_recommendation(raw)
    assert got_ids == ids
    assert (problem is None and got_problem is None) or problem in got_problem


@pytest.mark.parametrize("scorer", BOTH)
def test_malformed_recommendations_score_nothing(scorer):
    for raw in (["1", "2"], "", "999,998", 7):
        r = score_task(SHOP, raw, CAT, scorer)
        assert r["has_output"] and not r["success"] and r["rule"] == 0 and r["product"] == 0
    assert score_task(SHOP, "1,1,2", CAT, scorer)[
        "success"
    ]  # duplicates collapse before positions are read


# ---------------------------------------------------------------- trajectories
def step(calls, ts=1_760_000_000_000, think="thinking", response=""):
    return {
        "completion": {"message": {"think": think, "tool_call": calls, "response": response}},
        "extra_info": {"step": 0, "timestamp": ts},
    }


REC = lambda ids: [{"name": "recommend_product", "parameters": {"product_ids": ids}}]
TERM = [{"name": "terminate", "parameters": {"status": "success"}}]


def test_format_reward_cases():
    good = '<think>x</think>\n<tool_call>[{"name": "a", "parameters": {}}]</tool_call>\n<response></response>'
    assert format_reward(good) == 1
    assert format_reward("<think>x</think><response>hi</response>") == 1
    assert (
        format_reward('<tool_call>[{"name": "a", "parameters": {}}]</tool_call>') == 0
    )  # no think
    assert format_reward("<think>x</think>") == 0  # neither tool call nor response
    assert format_reward("<think>x</think><think>y</think><response>r</response>") == 0
    assert format_reward("<think>x<response>r</response></think>") == 0  # nested
    assert (
        format_reward('<think>x</think><tool_call>{"name": "a", "parameters": {}}</tool_call>') == 0
    )  # not a list
    assert format_reward('<think>x</think><tool_call>[{"name": "a"}]</tool_call>') == 0
    assert format_reward("<think>x</think><tool_call>[oops</tool_call>") == 0
    assert format_reward("</think>x<think>") == 0


def test_trajectory_scores():
    traj = [
        step([{"name": "find_product", "parameters": {"q": "belt"}}]),
        step(REC("5")),
        step(REC("1,2"), ts=None),
        step(TERM, ts="yesterday"),
    ]
    assert extract_recommendation(traj) == "1,2"
    assert format_score(traj, "upstream") == 1.0
    assert format_score(traj, "production_strict") == pytest.approx((1 + 1 + 0.5 + 0.5) / 4)
    assert (
        length_reward(traj) == 0.25 and length_reward(traj[:-1]) == 0.0 and length_reward([]) == 0.0
    )
    r = score_task(SHOP, traj, CAT, "production_strict")
    assert r["success"] and r["length"] == 0.25 and r["format"] == pytest.approx(0.75)
    assert extract_recommendation([step([{"name": "find_product", "parameters": {}}])]) == ""
    list_traj = [step([{"name": "recommend_product", "parameters": {"product_ids": ["1", "2"]}}])]
    assert "JSON list" in score_task(SHOP, list_traj, CAT)["problem"]


def test_report_fields_and_trajectory_means():
    tasks = [SHOP, PRODUCT]
    answers = {SHOP["id"]: [step(REC("1,2")), step(TERM)], PRODUCT["query"]: "5"}
    rep = score_suite(tasks, answers, CAT, "production_strict")
    assert (
        rep["asr"] == 0.5
        and rep["shop_rate"] == 1.0
        and set(rep["per_category"]) == {"product", "shop"}
    )
    assert rep["format"] == pytest.approx(0.5) and rep["length"] == pytest.approx(0.25)
    assert set(rep["field_rates"]) == {"title", "price", "service", "sku_attr"}
    assert rep["field_rates"]["price"] is None and 0 < rep["field_rates"]["title"] < 1
    row = rep["tasks"][0]
    assert {"query", "success", "gt", "rule", "shop", "items"} <= set(row)
    json.dumps(rep)  # JSON-able


# ---------------------------------------------------------------- similarity backends
def test_char_ngram_similarity_properties():
    s = CharNgramSimilarity()
    assert s("Acme Leather Belt", "Acme Leather Belt") == 1.0
    assert s("ACME leather   belt!", "belt leather acme") == pytest.approx(1.0)
    assert s("Acme Leather Belt", "Zenith Steel Bottle") < 0.2
    assert s("", "x") == 0.0 and s("【限定】", "【限定】") == 1.0
    assert s.threshold("upstream") < s.threshold("production_strict")


def test_thresholds_separate_scorers_on_a_mid_similarity_title():
    gold = G("9", "Acme Leather Belt Brown Men")
    cat = {"1": P("1", title="Acme Belt")}
    value = default_similarity()("Acme Belt", "Acme Leather Belt Brown Men")
    assert (
        default_similarity().threshold("upstream")
        <= value
        < default_similarity().threshold("production_strict")
    )
    assert score_task(T("product", gold), "1", cat, "upstream")["success"]
    assert not score_task(T("product", gold), "1", cat, "production_strict")["success"]
    # the embedding thresholds, 0.5 and 0.7, with a backend that always answers 0.6
    assert score_task(T("product", gold), "1", cat, "upstream", Fixed(0.6))["success"]
    assert not score_task(T("product", gold), "1", cat, "production_strict", Fixed(0.6))["success"]


def test_sentence_transformer_backend_with_precomputed_vectors_needs_no_model():
    st = SentenceTransformerSimilarity()
    assert isinstance(SentenceTransformerSimilarity.available(), bool)
    st.add_embeddings({"a": [1.0, 0.0], "b": [1.0, 1.0], "c": [0.0, 2.0]})
    assert st("a", "b") == pytest.approx(2**-0.5) and st("a", "c") == pytest.approx(0.0)
    assert (st.threshold("upstream"), st.threshold("production_strict")) == (0.5, 0.7)
    assert st._model is None


def test_suite_embeddings_reach_the_backend():
    st = SentenceTransformerSimilarity()
    st.add_embeddings({"Widget Pro": [0.0, 1.0]})
    task = {
        **T("product", G("9", "Gold Widget")),
        "extra": {"reward_title_embeddings": {"Gold Widget": [0.6, 0.8]}},
    }
    rep = score_suite([task], {task["id"]: "1"}, {"1": P("1", title="Widget Pro")}, "upstream", st)
    assert (
        rep["tasks"][0]["title"] == 1.0
    )  # cosine 0.8 >= 0.5, computed from the suite's own vectors
    assert (
        score_suite(
            [task], {task["id"]: "1"}, {"1": P("1", title="Widget Pro")}, "production_strict", st
        )["tasks"][0]["title"]
        == 1.0
    )


def test_similarity_calibration_shape():
    titles = [
        "Acme Leather Belt Brown",
        "Zenith Steel Water Bottle",
        "Nimbus Cotton Pillow Case Large",
    ]
    cal = similarity_calibration(titles, [(titles[0], titles[1])], thresholds=(0.35,))
    assert (
        cal["self"]["≥0.35"] == 1.0
        and cal["sibling"]["n"] == 1
        and set(cal) >= {"random", "drop50"}
    )


# ---------------------------------------------------------------- synthetic suites and files
@pytest.fixture(scope="module")
def syn():
    cat = list(generate_catalog(20_000, seed=0))
    return cat, synthesize_tasks(cat, {"product": 40, "shop": 30, "voucher": 40}, seed=2)


@pytest.mark.parametrize("scorer", BOTH)
def test_synthetic_gold_facts_satisfy_their_own_constraints(syn, scorer):
    "A clone listing of each gold product (new id, same facts) meets every sampled constraint."
    cat, tasks = syn
    by_id = {p["product_id"]: p for p in cat}
    clones, answers = {}, {}
    for t in tasks:
        golds = t["reward"] if isinstance(t["reward"], list) else [t["reward"]]
        ids = []
        for g in golds:
            cid = "9" + g["product_id"]
            clones[cid] = {**by_id[g["product_id"]], "product_id": cid}
            ids.append(cid)
        answers[t["id"]] = ",".join(ids)
    rep = score_suite(tasks, answers, {**by_id, **clones}, scorer)
    assert rep["asr"] == 1.0 and rep["gt_rate"] == 0.0 and rep["car"] == 1.0


def test_score_report_from_files(syn, tmp_path):
    cat, tasks = syn
    write_catalog(cat, tmp_path / "documents.jsonl")
    save_tasks(tasks, tmp_path / "tasks" / "suite.jsonl")
    answers = {t["query"]: gold_answer(t) for t in tasks[:50]}
    (tmp_path / "answers.json").write_text(json.dumps(answers))
    for scorer, denom in (("production_strict", len(tasks)), ("upstream", 50)):
        rep = score_report(
            tmp_path / "tasks", tmp_path / "documents.jsonl", tmp_path / "answers.json", scorer
        )
        assert rep["denominator"] == denom and rep["successes"] == 50
    rep = score_report(tmp_path / "tasks" / "suite.jsonl", None, tmp_path / "answers.json")
    assert rep["successes"] == 50  # without a catalog the gold ids resolve from the tasks
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="answers must be a JSON object"):
        score_report(tmp_path / "tasks", None, tmp_path / "bad.json")


def test_unknown_scorer_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown scorer"):
        score_task(PRODUCT, "1", CAT, "lenient")
