"The problem bank with planted leak clusters, the clustering, pools, suites and race draws (chapter 00)."

import json
import random
from collections import defaultdict
from dataclasses import asdict

import numpy as np
import pytest

from shopdistill.sandbox.catalog import Catalog, generate_catalog
from shopdistill.reproduce.settings import load_config
from shopdistill.mechanics.pools import POOLS, assign_pools, pool_audit, public_suite, race_problems
from shopdistill.mechanics.paraphrase import (
    VARIANT_KINDS,
    golds_of,
    render_query,
    swap_synonyms,
    toggle_line_breaks,
    voucher_text,
    draw_style,
)
from shopdistill.mechanics.bank import build_bank, planted_clusters
from shopdistill.mechanics.paraphrase import constraint_key, gold_ids
from shopdistill.mechanics.clusters import (
    leak_clusters,
    normalise_text,
    pairwise_scores,
    strip_gold,
)
from shopdistill.sandbox.tasks import load_tasks, shoppingbench_test_files, validate_task
from shopdistill.sandbox.task_synthesis import synthesize_tasks


@pytest.fixture(scope="module")
def catalog():
    return Catalog.from_records(generate_catalog(3000, seed=1))


@pytest.fixture(scope="module")
def bank(catalog):
    tasks = synthesize_tasks(catalog, {"product": 35, "shop": 25, "voucher": 30}, seed=1)
    return build_bank(tasks, catalog, seed=1, sibling_fraction=0.5)


@pytest.fixture(scope="module")
def labels(bank):
    return leak_clusters(bank)


def _by_spec(bank):
    out = defaultdict(list)
    for p in bank:
        out[p["extra"]["spec"]].append(p)
    return out


def _tokens(text):
    return set(normalise_text(text).split())


def _jac(a, b):
    return len(a & b) / len(a | b)


# ---- the bank ----


def test_bank_problems_are_valid_tasks(bank):
    assert len(bank) > 500
    for p in bank:
        validate_task(p)
    assert len({p["id"] for p in bank}) == len(bank)


def test_every_spec_has_every_kind(bank):
    for spec, ps in _by_spec(bank).items():
        kinds = {p["extra"]["variant"] for p in ps}
        want = set(VARIANT_KINDS) - (
            {"voucher_reworded"} if ps[0]["category"] != "voucher" else set()
        )
        assert want <= kinds, (spec, sorted(want - kinds))


def test_variants_keep_the_specification(bank):
    for spec, ps in _by_spec(bank).items():
        assert len({constraint_key(p) for p in ps}) == 1, spec
        assert len({gold_ids(p) for p in ps}) == 1, spec
        assert len({json.dumps(p["voucher"], sort_keys=True) for p in ps}) == 1, spec


def test_siblings_are_hard_negatives(bank):
    "Different specifications (no shared gold, other constraints) whose renders share most of their wording."
    specs = _by_spec(bank)
    sims = []
    for spec, ps in specs.items():
        partner = ps[0]["extra"]["sibling_of"]
        if partner is None:
            continue
        qs = specs[partner]
        assert not gold_ids(ps[0]) & gold_ids(qs[0])
        assert constraint_key(ps[0]) != constraint_key(qs[0])
        assert ps[0]["category"] == qs[0]["category"]
        a = next(p for p in ps if p["extra"]["variant"] == "paraphrase")
        b = next(q for q in qs if q["extra"]["variant"] == "paraphrase")
        sims.append(_jac(_tokens(a["query"]), _tokens(b["query"])))
    assert len(sims) >= 20
    assert np.median(sims) > 0.5  # same template: they read alike


def test_every_problem_is_solved_by_its_gold(bank, catalog):
    "The bank is usable by the arena: recommending the gold ids succeeds under production_strict (budget included)."
    from shopdistill.sandbox.scoring import score_task

    for p in bank:
        r = score_task(
            p, ",".join(g["product_id"] for g in golds_of(p)), catalog, scorer="production_strict"
        )
        assert r["success"], (p["id"], p["extra"], r)


def test_sibling_constraints_hold_for_their_products(bank, catalog):
    "A sibling's gold is its product's own values, so an agent that finds the product meets every constraint."
    for p in bank:
        if p["extra"]["sibling_of"] is None or p["extra"]["variant"] != "original":
            continue
        shops = set()
        for g in golds_of(p):
            prod = catalog.get(g["product_id"])
            shops.add(prod["shop_id"])
            assert g["title"] == [prod["title"]]
            for opt in g.get("sku_options", []):
                assert any(
                    all(o.get(k) == v for k, v in opt.items()) for o in prod["sku_options"].values()
                )
            for a in g.get("attributes", []):
                assert all(set(vs) <= set(prod["attributes"].get(k, [])) for k, vs in a.items())
            assert set(g.get("service", [])) <= set(prod["service"])
            for pr in g.get("price", []):
                ((mode, (lo, hi)),) = pr.items()
                assert (lo or 0) < prod["price"] and (hi is None or prod["price"] < hi)
        if p["category"] == "shop" or (p["voucher"] or {}).get("voucher_type") == "shop":
            assert len(shops) == 1


def test_far_variants_differ_a_lot(bank):
    sims = []
    for ps in _by_spec(bank).values():
        orig = next(p for p in ps if p["extra"]["variant"] == "original")
        far = next(p for p in ps if p["extra"]["variant"] == "far")
        sims.append(_jac(_tokens(orig["query"]), _tokens(far["query"])))
    assert np.median(sims) < 0.5


def test_line_break_variants(bank):
    for ps in _by_spec(bank).values():
        orig = next(p for p in ps if p["extra"]["variant"] == "original")
        lb = next(p for p in ps if p["extra"]["variant"] == "line_breaks")
        assert normalise_text(lb["query"]) == normalise_text(orig["query"])
        assert ("\n" in lb["query"]) != ("\n" in orig["query"])


def test_voucher_rewording_keeps_terms(bank):
    for ps in _by_spec(bank).values():
        if ps[0]["category"] != "voucher":
            continue
        v = ps[0]["voucher"]
        vr = next(p for p in ps if p["extra"]["variant"] == "voucher_reworded")
        nums = set(normalise_text(vr["query"]).split())
        assert str(int(v["budget"])) in nums and str(int(v["threshold"])) in nums
        assert "My budget is only" not in vr["query"]  # not the canonical block any more


def test_voucher_wordings_name_the_same_numbers():
    for v in (
        {
            "voucher_type": "shop",
            "threshold": 468,
            "discount_type": "percentage",
            "face_value": None,
            "discount": 0.34,
            "cap": 463,
            "price_after_voucher": 779.96,
            "budget": 791,
        },
        {
            "voucher_type": "platform",
            "threshold": 170,
            "discount_type": "fixed",
            "face_value": 34,
            "discount": None,
            "cap": None,
            "price_after_voucher": 419.0,
            "budget": 425,
        },
    ):
        want = {x for x in ("468", "34", "463", "791", "170", "425") if x in json.dumps(v)}
        for w in range(4):
            assert want <= set(normalise_text(voucher_text(v, w)).split()), w


def test_synonyms_never_touch_constraint_values():
    golds = [
        {
            "product_id": "1",
            "title": ["x"],
            "attributes": [{"headphone_type": ["over-ear"]}, {"brand": ["under armour"]}],
        }
    ]
    text = "Looking for over-ear headphones from under armour, priced under 500 pesos, free shipping please."
    from shopdistill.mechanics.paraphrase import protected_spans

    for seed in range(30):
        out = swap_synonyms(text, np.random.default_rng(seed), protected_spans(text, golds), p=1.0)
        assert "over-ear" in out and "under armour" in out and out != text


def test_toggle_line_breaks_always_changes_the_text():
    for t in ("One clause only", "a, b", "First. Second.", "x\n\ny"):
        out = toggle_line_breaks(t)
        assert out != t and normalise_text(out) == normalise_text(t)


def test_render_keeps_every_constraint():
    g = {
        "product_id": "1",
        "title": ["t"],
        "sku_options": [{"color_family": "navy blue", "size": "xl"}],
        "attributes": [{"material": ["linen"]}],
        "service": ["COD", "official"],
        "price": [{"between": [120, 480]}],
    }
    for seed in range(20):
        q = render_query(
            "product",
            [g],
            ["blouses"],
            draw_style(np.random.default_rng(seed)),
            reorder=seed % 2 == 0,
        )
        toks = set(normalise_text(q).split())
        assert {"navy", "blue", "xl", "linen", "120", "480", "lazmall"} <= toks, q


def test_bank_is_deterministic(catalog):
    tasks = synthesize_tasks(catalog, {"product": 10, "shop": 5, "voucher": 5}, seed=2)
    a = build_bank(tasks, catalog, seed=4)
    assert a == build_bank(tasks, catalog, seed=4)
    assert a != build_bank(tasks, catalog, seed=5)
    with pytest.raises(ValueError):
        build_bank(tasks, catalog, sibling_fraction=1.5)


# ---- clustering ----


def test_clustering_recovers_planted_clusters(bank, labels):
    s = pairwise_scores(labels, planted_clusters(bank))
    assert s["f1"] >= 0.98, s
    assert s["precision"] >= 0.98 and s["recall"] >= 0.98


def test_text_only_clustering_on_stripped_problems(bank):
    "Without gold the content-token path still recovers most clusters (chapter 04 meets this case)."
    s = pairwise_scores(leak_clusters([strip_gold(p) for p in bank]), planted_clusters(bank))
    assert s["f1"] >= 0.9, s


def test_guard_keeps_siblings_apart(bank, labels):
    specs = _by_spec(bank)
    label_of = {p["id"]: l for p, l in zip(bank, labels)}
    for spec, ps in specs.items():
        partner = ps[0]["extra"]["sibling_of"]
        if partner is not None:
            assert label_of[ps[0]["id"]] != label_of[specs[partner][0]["id"]]


def test_clustering_ignores_generation_labels_and_order(bank, labels):
    blind = [{k: v for k, v in p.items() if k != "extra"} for p in bank]
    assert leak_clusters(blind) == labels
    order = list(range(len(bank)))
    random.Random(0).shuffle(order)
    shuffled = leak_clusters([bank[i] for i in order])
    back = [None] * len(bank)
    for pos, i in enumerate(order):
        back[i] = shuffled[pos]
    assert pairwise_scores(back, labels)["f1"] > 0.995  # the same partition (LSH banding aside)


def test_clustering_is_deterministic(bank, labels):
    assert leak_clusters(bank) == labels


def test_shared_gold_joins_clusters():
    a = {
        "id": "a",
        "category": "product",
        "query": "red shoes",
        "voucher": None,
        "reward": {"product_id": "9", "title": ["Shoe"]},
    }
    b = {
        "id": "b",
        "category": "shop",
        "query": "a hat and a shoe from one shop",
        "voucher": None,
        "reward": [{"product_id": "8", "title": ["Hat"]}, {"product_id": "9", "title": ["Shoe"]}],
    }
    c = {
        "id": "c",
        "category": "product",
        "query": "red shoes!",
        "voucher": None,
        "reward": {"product_id": "7", "title": ["Shoe 2"]},
    }
    lab = leak_clusters([a, b, c])
    assert lab[0] == lab[1]
    assert lab[2] == lab[0]  # identical normalised text is one problem, whatever its gold says


def test_pairwise_scores():
    assert pairwise_scores([0, 0, 1, 1], ["a", "a", "b", "b"])["f1"] == 1.0
    s = pairwise_scores([0, 0, 0, 1], ["a", "a", "b", "b"])
    assert (s["predicted_pairs"], s["true_pairs"], s["correct_pairs"]) == (3, 2, 1)
    assert (
        pairwise_scores([0, 1, 2], ["a", "b", "c"])["f1"] == 1.0
    )  # no pairs at all: nothing wrong
    with pytest.raises(ValueError):
        pairwise_scores([0], ["a", "b"])


# ---- pools ----

FRACTIONS = {"open": 0.5, "held_out": 0.4, "never_touch": 0.1}


def test_pools_by_cluster_and_audit(bank, labels):
    pools = assign_pools(bank, labels, FRACTIONS, seed=0)
    assert set(pools) == set(POOLS)
    assert pool_audit(bank, pools, labels) == []
    assert pool_audit(bank, pools, planted_clusters(bank)) == []
    for name, f in FRACTIONS.items():
        assert abs(pools.count(name) / len(bank) - f) < 0.03


def test_audit_finds_a_planted_crossing(bank, labels):
    pools = assign_pools(bank, labels, FRACTIONS, seed=0)
    i = pools.index("open")
    moved = list(pools)
    moved[i] = "never_touch"
    found = pool_audit(bank, moved, labels)
    kinds = {f["kind"] for f in found}
    assert kinds == {"cluster", "gold_product"}
    assert all(f["pools"] == ["never_touch", "open"] for f in found)
    assert any(bank[i]["id"] in f["problems"] for f in found)
    assert {f["product_id"] for f in found if f["kind"] == "gold_product"} == set(gold_ids(bank[i]))


def test_pools_deterministic_and_label_invariant(bank, labels):
    a = assign_pools(bank, labels, FRACTIONS, seed=3)
    assert a == assign_pools(bank, labels, FRACTIONS, seed=3)
    assert a != assign_pools(bank, labels, FRACTIONS, seed=4)
    renamed = [f"c{(l * 7919) % 100003}" for l in labels]  # same partition, other names
    assert assign_pools(bank, renamed, FRACTIONS, seed=3) == a
    with pytest.raises(ValueError, match="unknown pools"):
        assign_pools(bank, labels, {"train": 1.0})
    with pytest.raises(ValueError, match="sum to 1"):
        assign_pools(bank, labels, {"open": 0.5})


def test_public_suites_and_race_draws(bank, labels):
    pools = assign_pools(bank, labels, FRACTIONS, seed=0)
    pool_of = {p["id"]: pools[i] for i, p in enumerate(bank)}
    label_of = {p["id"]: labels[i] for i, p in enumerate(bank)}
    cat_of = {p["id"]: p["category"] for p in bank}
    v1, v2 = (public_suite(bank, pools, labels, v, per_category=10, seed=0) for v in (1, 2))
    for s in (v1, v2):
        ids = s["problem_ids"]
        assert len(ids) == 30 and all(pool_of[i] == "open" for i in ids)
        assert sorted(cat_of[i] for i in ids) == ["product"] * 10 + ["shop"] * 10 + ["voucher"] * 10
        assert len({label_of[i] for i in ids}) == 30
    assert v1["version"] == "v1" and v1["problem_ids"] != v2["problem_ids"]
    assert public_suite(bank, pools, labels, 1, 10, 0) == v1
    r = race_problems(bank, pools, labels, problem_seed=7, n=20)
    assert r == race_problems(bank, pools, labels, problem_seed=7, n=20)
    assert r != race_problems(bank, pools, labels, problem_seed=8, n=20)
    assert all(pool_of[i] == "held_out" for i in r) and len({label_of[i] for i in r}) == 20
    with pytest.raises(ValueError, match="only"):
        race_problems(bank, pools, labels, 7, n=10_000)
    with pytest.raises(ValueError, match="open pool"):
        public_suite(bank, pools, labels, 1, per_category=10_000)


# ---- the 2,000-problem benchmark of the smoke profile (the notebook's, run here too) ----


def test_smoke_benchmark_f1():
    a = load_config("smoke").arena
    cat = Catalog.from_records(generate_catalog(a.bank.catalog_products, seed=a.bank.seed))
    tasks = synthesize_tasks(cat, a.bank.tasks, seed=a.bank.seed)
    bank = build_bank(
        tasks,
        cat,
        seed=a.bank.seed,
        sibling_fraction=a.bank.sibling_fraction,
        extra_variants=a.bank.extra_variants,
    )
    assert len(bank) >= 2000
    labels = leak_clusters(bank, **asdict(a.clusters))
    s = pairwise_scores(labels, planted_clusters(bank))
    assert s["f1"] >= 0.98, s
    pools = assign_pools(bank, labels, a.pools.fractions, seed=a.pools.seed)
    assert pool_audit(bank, pools, labels) == []


# ---- real ShoppingBench tasks (read from ../shared when present) ----


def test_real_shoppingbench_tasks_cluster():
    files = shoppingbench_test_files()
    if not files:
        pytest.skip("ShoppingBench test files not found under ../shared/data/shoppingbench")
    tasks = [t for f in files.values() for t in load_tasks(f)]
    labels = leak_clusters(tasks)
    assert len(labels) == len(tasks)
    assert len(set(labels)) < len(
        tasks
    )  # the public split leaks too: some product and voucher tasks share a gold product
    owner = {}
    for t, l in zip(tasks, labels):  # any shared gold product puts two tasks in one cluster
        for g in gold_ids(t):
            assert owner.setdefault(g, l) == l
    pools = assign_pools(tasks, labels, FRACTIONS, seed=0)
    assert pool_audit(tasks, pools, labels) == []
