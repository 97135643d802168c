"The scripted reference agent: tools only, never the gold answer; strong on synthetic tasks."

import pytest

from shopdistill.sandbox.catalog import Catalog, generate_catalog
from shopdistill.sandbox.tools import ShoppingEnv, episode_state
from shopdistill.sandbox.reference_agent import (
    ReferenceAgent,
    basket_cost,
    parse_price,
    parse_services,
    parse_voucher,
    split_items,
)
from shopdistill.sandbox.scoring import score_task
from shopdistill.sandbox.search import SearchEngine
from shopdistill.sandbox.task_synthesis import synthesize_tasks


@pytest.fixture(scope="module")
def world():
    catalog = Catalog.from_records(generate_catalog(6000, seed=7))
    return (
        catalog,
        SearchEngine.build(catalog),
        synthesize_tasks(catalog, {"product": 40, "shop": 20, "voucher": 20}, seed=7),
    )


def _run(engine, task, with_gold=True):
    env = ShoppingEnv(engine)
    env.reset(**(task if with_gold else {"query": task["query"]}))
    steps = ReferenceAgent().run(env, task["query"])
    return steps, episode_state(env)


def test_never_sees_the_gold(world):
    "The same request gives the same episode whether or not the environment holds the answer."
    catalog, engine, tasks = world
    for t in tasks[::7]:
        a, b = _run(engine, t), _run(engine, t, with_gold=False)
        assert a[0] == b[0] and a[1]["recommendation"] == b[1]["recommendation"]


def test_uses_only_the_tools_and_terminates(world):
    _, engine, tasks = world
    for t in tasks[:10]:
        steps, st = _run(engine, t)
        assert {s["name"] for s in steps} <= {
            "find_product",
            "view_product_information",
            "recommend_product",
            "terminate",
        }
        assert steps[-1]["name"] == "terminate" and st["done"] and st["steps"] <= 30
        assert sum(s["name"] == "recommend_product" for s in steps) <= 1
        assert all(isinstance(s["think"], str) for s in steps)


def test_it_is_strong(world):
    "A teacher has to be worth imitating: most product tasks and a good share of multi-item ones succeed."
    catalog, engine, tasks = world
    wins = {}
    for t in tasks:
        _, st = _run(engine, t)
        wins.setdefault(t["category"], []).append(
            score_task(t, st["recommendation"], catalog, scorer="production_strict")["success"]
        )
    rate = {k: sum(v) / len(v) for k, v in wins.items()}
    assert rate["product"] >= 0.6, rate
    assert rate["shop"] >= 0.25 and rate["voucher"] >= 0.25, rate


def test_parsing():
    assert parse_price("priced from 55 to 66 pesos") == "55-66"
    assert parse_price("costs more than 42 pesos") == "42-"
    assert parse_price("no price words here") is None
    assert parse_services("available with a LazFlash deal") == ["flashsale"]
    q = (
        "Items.\n\nMy budget is only `563`, but I have a voucher with the following rules:\n1. The voucher applies only to products from the same shop.\n"
        "2. It is valid only when the total price of the products exceeds `296`.\n3. It provides a percentage discount of `26%` with a cap of `163`."
    )
    v = parse_voucher(q)
    assert (
        v["voucher_type"] == "shop"
        and v["discount_type"] == "percentage"
        and v["discount"] == pytest.approx(0.26)
    )
    assert v["cap"] == 163 and v["threshold"] == 296 and v["budget"] == 563
    assert basket_cost([400, 200], 1, v) == pytest.approx(max(600 * 0.74, 600 - 163))
    assert basket_cost([400, 200], 2, v) == 600  # a shop voucher needs one shop
    assert basket_cost([150, 50], 1, v) == 200  # below the threshold
    assert (
        split_items(
            "Looking for a shop: First, a belt in brown. Second, a tactical belt. Lastly, a pure leather belt."
        )[2]
        .strip()
        .startswith("a pure leather belt")
    )
