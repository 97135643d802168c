"""Tests for shopdistill.sandbox.task_synthesis: the schema, the loaders (ShoppingBench JSONL, SN15 suites), the synthesiser."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from shopdistill.sandbox.catalog import generate_catalog
from shopdistill.core.ledger import Ledger
from shopdistill.sandbox.tasks import (
    PRICE_MODES,
    TaskFormatError,
    category_from_filename,
    load_tasks,
    normalise_task,
    save_tasks,
    task_id,
    to_upstream,
    validate_task,
)
from shopdistill.sandbox.task_synthesis import (
    _price_constraint,
    query_length_stats,
    sample_gold,
    synthesize_tasks,
    voucher_terms,
)
from shopdistill.mechanics.paraphrase import voucher_block

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data" / "shoppingbench"
REAL = {c: SHARED / f"synthesize_{c}_test.jsonl" for c in ("product", "shop", "voucher")}
needs_shared = pytest.mark.skipif(
    not all(p.exists() for p in REAL.values()),
    reason=f"public ShoppingBench task files not found under {SHARED} (../shared absent)",
)


def _gold(pid="123", **kw):
    return {"product_id": pid, "title": ["Some Product Title"], **kw}


def _product(pid, shop="s1", price=250.0, title="Acme Leather Belt Brown", **kw):
    "A tiny product dict in the catalog schema, for hand-made test catalogs."
    base = {
        "product_id": pid,
        "shop_id": shop,
        "brand": "Acme",
        "category": "Fashion > Accessories > Belts",
        "title": title,
        "price": price,
        "sold_count": 0,
        "sku_options": {"1": {"color_family": "brown", "size": "m"}},
        "attributes": {"material": ["leather"]},
        "service": ["COD"],
    }
    base.update(kw)
    return base


@pytest.fixture(scope="module")
def catalog():
    return list(generate_catalog(20_000, seed=0))


@pytest.fixture(scope="module")
def real():
    return (
        {c: load_tasks(p) for c, p in REAL.items()}
        if all(p.exists() for p in REAL.values())
        else None
    )


# ---------------------------------------------------------------- real files
@needs_shared
def test_real_files_load_all_750(real):
    assert {c: len(v) for c, v in real.items()} == {"product": 250, "shop": 250, "voucher": 250}
    ids = [t["id"] for v in real.values() for t in v]
    assert len(set(ids)) == 750
    for c, tasks in real.items():
        for t in tasks:
            assert t["category"] == c
            validate_task(t)
            assert (t["voucher"] is not None) == (c == "voucher")
            assert isinstance(t["reward"], dict) == (c == "product")


@needs_shared
def test_real_files_round_trip_to_upstream(real):
    for c, path in REAL.items():
        lines = [json.loads(l) for l in path.read_text().splitlines() if l.strip()]
        assert [to_upstream(t) for t in real[c]] == lines


@needs_shared
def test_ids_are_stable_hashes_of_the_query(real):
    again = load_tasks(REAL["shop"])
    assert [t["id"] for t in again] == [t["id"] for t in real["shop"]]
    assert all(t["id"] == task_id("shop", t["query"]) for t in again)


@needs_shared
def test_voucher_block_matches_the_real_files_exactly(real):
    for t in real["voucher"]:
        assert t["query"].endswith("\n\n" + voucher_block(t["voucher"])), t["query"][-300:]


@needs_shared
def test_category_from_shape_without_file_name_hint(real, tmp_path):
    for c, path in REAL.items():
        copy = tmp_path / f"tasks_{c[:2]}.jsonl"
        copy.write_text(path.read_text())
        assert {t["category"] for t in load_tasks(copy)} == {c}


# ---------------------------------------------------------------- SN15 suites
def _suite_problem(i, category="Product"):
    reward = _gold(str(1000 + i), price=[{"between": [10, 20]}])
    rec = {
        "query": f"Find item {i}",
        "reward": reward if category == "Product" else [reward, _gold(str(2000 + i))],
        "category": category,
        "difficulty": "easy",
        "title": f"{category} {i}",
    }
    if category == "Voucher":
        rec["reward"] = [{k: v for k, v in g.items() if k != "price"} for g in rec["reward"]]
        rec["voucher"] = {
            "voucher_type": "platform",
            "threshold": 100,
            "discount_type": "percentage",
            "face_value": None,
            "discount": 0.2,
            "cap": 50,
            "price_after_voucher": 160.0,
            "budget": 170,
        }
    return rec


def test_sn15_suite_array(tmp_path):
    probs = [_suite_problem(1), _suite_problem(2, "Shop"), _suite_problem(3, "Voucher")]
    probs[0]["problem_id"] = "7c0d7a1e-0000-4000-8000-000000000001"
    probs[0]["reward_title_embeddings"] = {"Some Product Title": [0.1, 0.2, 0.3]}
    f = tmp_path / "problem_suite_v9.json"
    f.write_text(json.dumps(probs, indent=2))
    tasks = load_tasks(f)
    assert [t["category"] for t in tasks] == ["product", "shop", "voucher"]
    assert tasks[0]["id"] == "7c0d7a1e-0000-4000-8000-000000000001"
    assert tasks[0]["extra"]["reward_title_embeddings"] == {"Some Product Title": [0.1, 0.2, 0.3]}
    assert tasks[0]["extra"]["difficulty"] == "easy" and tasks[0]["extra"]["title"] == "Product 1"
    assert tasks[1]["id"] == task_id("shop", "Find item 2")


def test_sn15_problems_wrapper_and_jsonl(tmp_path):
    probs = [_suite_problem(1), _suite_problem(2, "Shop")]
    (tmp_path / "suite.json").write_text(json.dumps({"version": 3, "problems": probs}))
    (tmp_path / "problems.jsonl").write_text("\n".join(json.dumps(p) for p in probs) + "\n")
    a, b = load_tasks(tmp_path / "suite.json"), load_tasks(tmp_path / "problems.jsonl")
    assert a == b and len(a) == 2


def test_integer_product_ids_become_strings():
    t = normalise_task({"query": "q", "reward": {"product_id": 42, "title": ["t"]}})
    assert t["reward"]["product_id"] == "42"


# ---------------------------------------------------------------- malformed input
def _write(tmp_path, name, lines):
    f = tmp_path / name
    f.write_text("\n".join(l if isinstance(l, str) else json.dumps(l) for l in lines) + "\n")
    return f


BAD_LINES = [
    ({"query": "ok", "reward": _gold()}, None),
    ("{not json", "invalid JSON"),
    ({"reward": _gold()}, "query missing"),
    ({"query": "no reward"}, "reward missing"),
    ({"query": "q", "reward": _gold(price=[{"between": [5]}])}, "reward.price[0].between"),
    ({"query": "q", "reward": _gold(price=[{"between": [50, 5]}])}, "lo 50 > hi 5"),
    ({"query": "q", "reward": _gold(price=[{"about": [1, 2]}])}, "reward.price[0]"),
    ({"query": "q", "reward": _gold(service=["LazMall"])}, "reward.service[0]"),
    ({"query": "q", "reward": {"title": ["x"]}}, "'product_id' is a required property"),
    ({"query": "q", "reward": _gold(product_id="abc")}, "reward.product_id"),
    ({"query": "q", "reward": _gold(), "category": "Web"}, "unknown category"),
    ({"query": "q", "reward": [_gold()], "category": "voucher"}, "voucher task without a voucher"),
    ({"query": "q", "reward": _gold(), "category": "shop"}, "reward"),
    ([1, 2], "expected a JSON object"),
]


@pytest.mark.parametrize("rec,needle", [b for b in BAD_LINES if b[1]])
def test_bad_record_raises_with_file_line_and_field(tmp_path, rec, needle):
    f = _write(tmp_path, "tasks.jsonl", [{"query": "fine", "reward": _gold()}, rec])
    with pytest.raises(TaskFormatError) as e:
        load_tasks(f)
    assert "tasks.jsonl:line 2:" in str(e.value) and needle in str(e.value)


def test_ledger_lists_every_bad_line_and_loads_the_rest(tmp_path):
    f = _write(tmp_path, "mixed_product.jsonl", [r for r, _ in BAD_LINES] + ["", "   "])
    lg = Ledger()
    tasks = load_tasks(f, ledger=lg)
    assert len(tasks) == 1
    assert [e["line"] for e in lg.entries] == list(range(2, len(BAD_LINES) + 1))
    assert all(e["reason"] == "bad_task" and e["detail"] for e in lg.entries)
    assert len(tasks) + len(lg) == len(
        BAD_LINES
    )  # blank lines are not records; nothing else vanishes


def test_suite_item_errors_name_the_item(tmp_path):
    f = tmp_path / "suite.json"
    f.write_text(json.dumps([_suite_problem(1), {"query": "x", "reward": [], "category": "Shop"}]))
    with pytest.raises(TaskFormatError, match=r"suite.json:item 2: reward"):
        load_tasks(f)
    (tmp_path / "broken.json").write_text('[{"query": ')
    with pytest.raises(TaskFormatError, match="not valid JSON"):
        load_tasks(tmp_path / "broken.json")


def test_duplicate_ids_get_suffixes(tmp_path):
    f = _write(tmp_path, "dups.jsonl", [{"query": "same", "reward": _gold()}] * 3)
    assert [t["id"] for t in load_tasks(f)] == [
        task_id("product", "same"),
        task_id("product", "same") + "~2",
        task_id("product", "same") + "~3",
    ]


def test_category_from_filename():
    assert category_from_filename("x/synthesize_voucher_test.jsonl") == "voucher"
    assert category_from_filename("problem_suite_v3.json") is None
    assert category_from_filename("shop_and_voucher.jsonl") is None


def test_save_and_load_round_trip(tmp_path, catalog):
    tasks = synthesize_tasks(catalog, 5, seed=3)
    save_tasks(tasks, tmp_path / "t.jsonl")
    assert load_tasks(tmp_path / "t.jsonl") == tasks


# ---------------------------------------------------------------- synthesiser
def test_synthesis_is_deterministic_and_seeded(catalog):
    a = synthesize_tasks(catalog, {"product": 20, "shop": 10, "voucher": 10}, seed=5)
    assert a == synthesize_tasks(catalog, {"product": 20, "shop": 10, "voucher": 10}, seed=5)
    assert a != synthesize_tasks(catalog, {"product": 20, "shop": 10, "voucher": 10}, seed=6)
    # each category has its own stream: asking for more shop tasks leaves product and voucher tasks alone
    b = synthesize_tasks(catalog, {"product": 20, "shop": 12, "voucher": 10}, seed=5)
    assert [t for t in a if t["category"] == "product"] == [
        t for t in b if t["category"] == "product"
    ]
    assert [t for t in a if t["category"] == "shop"] == [t for t in b if t["category"] == "shop"][
        :10
    ]


def test_price_constraint_strictly_contains_the_price():
    rng = np.random.default_rng(0)
    seen = set()
    for price in np.concatenate([rng.uniform(0.5, 20, 300), rng.lognormal(5, 1.5, 3000)]):
        for c in _price_constraint(float(price), rng):
            ((mode, (lo, hi)),) = c.items()
            seen.add(mode)
            assert isinstance(lo, int) and lo >= 0 and lo < price
            assert hi is None or (isinstance(hi, int) and price < hi)
            assert (mode == "greater than") == (hi is None) and (mode != "less than" or lo == 0)
    assert seen == set(PRICE_MODES)


def test_voucher_terms_arithmetic_over_many_draws():
    rng = np.random.default_rng(1)
    kinds = set()
    for _ in range(20_000):
        total = float(rng.lognormal(6, 1.2))
        v = voucher_terms(total, "platform" if rng.random() < 0.5 else "shop", rng)
        if total < 100:
            assert v is None
            continue
        if v is None:
            continue
        kinds.add(v["discount_type"])
        thr = v["threshold"]
        assert int(total * 0.1) <= thr <= int(total * 0.9) and thr <= total
        if v["discount_type"] == "fixed":
            assert int(thr * 0.1) <= v["face_value"] <= int(thr * 0.5)
            assert v["discount"] is None and v["cap"] is None
            assert v["price_after_voucher"] == total - v["face_value"]
        else:
            d = v["discount"]
            assert 0.1 <= d <= 0.5 and abs(d * 100 - round(d * 100)) < 1e-9
            assert thr * d < v["cap"] <= thr and v["face_value"] is None
            assert v["price_after_voucher"] == max(total * (1 - d), total - v["cap"])
        after = v["price_after_voucher"]
        assert after <= v["budget"]
        assert math.ceil(after) <= v["budget"] <= math.ceil(after) + math.ceil(0.1 * after)
    assert kinds == {"fixed", "percentage"}


def test_sample_gold_keeps_only_true_facts(catalog):
    rng = np.random.default_rng(2)
    fields = set()
    for p in catalog[:2000]:
        g = sample_gold(p, rng)
        fields |= set(g)
        assert g["product_id"] == p["product_id"] and g["title"] == [p["title"]]
        assert len(g.get("sku_options", [])) <= 1
        for o in g.get("sku_options", []):
            assert o in p["sku_options"].values()
        for a in g.get("attributes", []):
            ((k, vs),) = a.items()
            assert len(vs) == 1 and vs[0] in p["attributes"][k]
        assert set(g.get("service", [])) <= set(p["service"])
        assert len(g.get("price", [])) <= 1
    assert fields == {"product_id", "title", "sku_options", "attributes", "service", "price"}


@pytest.mark.parametrize("seed", range(6))
def test_synthesised_task_invariants(catalog, seed):
    tasks = synthesize_tasks(catalog, {"product": 30, "shop": 30, "voucher": 40}, seed=seed)
    by_id = {p["product_id"]: p for p in catalog}
    golds_seen, queries = set(), set()
    vtypes = set()
    for t in tasks:
        validate_task(t)
        golds = t["reward"] if isinstance(t["reward"], list) else [t["reward"]]
        prods = [by_id[g["product_id"]] for g in golds]
        ids = [g["product_id"] for g in golds]
        assert not golds_seen & set(ids)
        golds_seen |= set(ids)
        assert t["query"] not in queries
        queries.add(t["query"])
        for g, p in zip(golds, prods):
            assert p["title"] not in t["query"]  # described, never quoted
            for c in g.get("price", []):
                ((mode, (lo, hi)),) = c.items()
                assert lo < p["price"] and (hi is None or p["price"] < hi)
        if t["category"] == "shop":
            assert 2 <= len(golds) <= 4 and len({p["shop_id"] for p in prods}) == 1
        if t["category"] == "voucher":
            v = t["voucher"]
            vtypes.add(v["voucher_type"])
            assert all("price" not in g for g in golds)
            total = sum(p["price"] for p in prods)
            assert total >= 100 and v["threshold"] <= total
            assert v["price_after_voucher"] <= v["budget"]
            assert (
                abs(
                    v["price_after_voucher"]
                    - (
                        total - v["face_value"]
                        if v["discount_type"] == "fixed"
                        else max(total * (1 - v["discount"]), total - v["cap"])
                    )
                )
                < 1e-6
            )
            if v["voucher_type"] == "shop":
                assert 2 <= len(golds) <= 4 and len({p["shop_id"] for p in prods}) == 1
            else:
                assert 1 <= len(golds) <= 4
            assert t["query"].endswith("\n\n" + voucher_block(v))
        else:
            assert "My budget is only" not in t["query"]
    assert vtypes == {"platform", "shop"}


def test_query_lengths_near_upstream(catalog):
    stats = query_length_stats(synthesize_tasks(catalog, 150, seed=11))
    assert (
        13 <= stats["product"] <= 23 and 45 <= stats["shop"] <= 75 and 75 <= stats["voucher"] <= 105
    )


def test_queries_use_varied_openers_and_service_words(catalog):
    tasks = synthesize_tasks(catalog, 60, seed=4)
    openers = {" ".join(t["query"].split()[:2]) for t in tasks if t["category"] == "product"}
    assert len(openers) >= 6
    text = " ".join(t["query"] for t in tasks)
    for word in ("LazMall", "LazFlash", "free", "delivery", "PHP", "pesos"):
        assert word in text
    shop_q = [t["query"] for t in tasks if t["category"] == "shop"]
    assert any("(1)" in q for q in shop_q) and any("First," in q for q in shop_q)


def test_price_modes_setting(catalog):
    tasks = synthesize_tasks(
        catalog, {"product": 80}, seed=0, price_modes=("greater than", "between")
    )
    modes = {m for t in tasks for c in t["reward"].get("price", []) for m in c}
    assert modes == {"greater than", "between"}


def test_too_small_catalog_raises_clearly():
    tiny = [_product(str(1000 + i), shop=f"s{i}") for i in range(5)]  # every shop has one product
    with pytest.raises(ValueError, match="made only 0 of 1 shop tasks"):
        synthesize_tasks(tiny, {"shop": 1}, seed=0)
    assert len(synthesize_tasks(tiny, {"product": 5}, seed=0)) == 5
    with pytest.raises(ValueError, match="made only 5 of 6 product"):
        synthesize_tasks(tiny, {"product": 6}, seed=0)


def test_synthesis_over_plain_product_lists_without_leaf_knowledge():
    prods = [
        _product(
            str(5000 + i),
            shop=f"s{i % 3}",
            price=80.0 + 10 * i,
            category="Home > Kitchen > Cooking Pots",
            title=f"Brand{i} Nonstick Cooking Pot {i}",
        )
        for i in range(30)
    ]
    tasks = synthesize_tasks(prods, {"product": 5, "shop": 3, "voucher": 3}, seed=0)
    assert len(tasks) == 11
    assert all("cooking pot" in t["query"].lower() for t in tasks if t["category"] == "product")
