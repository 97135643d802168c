"ShoppingEnv: the four tools, bad calls as upstream answers them, the step cap, TRL compatibility."

import inspect, json

import pytest

from shopdistill.sandbox.catalog import Catalog, generate_catalog
from shopdistill.sandbox.tools import (
    HELPER_TOOL_NAMES,
    TOOL_NAMES,
    OroShoppingEnv,
    ShoppingEnv,
    call_tool,
    episode_state,
    tool_schemas,
)
from shopdistill.sandbox.search import SearchEngine


@pytest.fixture(scope="module")
def engine():
    return SearchEngine.build(Catalog.from_records(generate_catalog(2000, seed=1)))


@pytest.fixture
def env(engine):
    e = ShoppingEnv(engine)
    e.reset(
        query="q",
        category="product",
        reward={
            "product_id": engine.catalog[0]["product_id"],
            "title": [engine.catalog[0]["title"]],
        },
    )
    return e


def test_public_methods_are_exactly_the_tools():
    "TRL turns every public function of an environment class into a tool."
    pub = {
        n
        for n, _ in inspect.getmembers(ShoppingEnv, predicate=inspect.isfunction)
        if not n.startswith("_")
    }
    assert pub == set(TOOL_NAMES) | {"reset", "get_reward"}
    pub7 = {
        n
        for n, _ in inspect.getmembers(OroShoppingEnv, predicate=inspect.isfunction)
        if not n.startswith("_")
    }
    assert pub7 == set(TOOL_NAMES) | set(HELPER_TOOL_NAMES) | {"reset", "get_reward"}


def test_schemas():
    schemas = {s["function"]["name"]: s["function"] for s in tool_schemas()}
    assert list(schemas) == sorted(TOOL_NAMES)
    fp = schemas["find_product"]["parameters"]
    assert fp["required"] == ["q"]
    assert (
        fp["properties"]["q"]["type"] == "string" and fp["properties"]["page"]["type"] == "integer"
    )
    assert all(p.get("description") for p in fp["properties"].values())
    assert schemas["recommend_product"]["parameters"]["required"] == ["product_ids"]
    assert len(tool_schemas(OroShoppingEnv)) == 7


def test_search_then_view(env, engine):
    q = engine.catalog[5]["title"]
    hits = json.loads(call_tool(env, "find_product", {"q": q}))
    assert 1 <= len(hits) <= 10 and set(hits[0]) == {
        "product_id",
        "shop_id",
        "title",
        "price",
        "service",
        "sold_count",
    }
    info = json.loads(
        call_tool(
            env, "view_product_information", json.dumps({"product_ids": hits[0]["product_id"]})
        )
    )
    assert (
        info[0]["product_id"] == hits[0]["product_id"]
        and "sku_options" in info[0]
        and "title" not in info[0]
    )


@pytest.mark.parametrize(
    "name,args,expect",
    [
        ("find_product", {}, "missing required argument(s): q"),
        ("find_product", {"q": "shirt", "colour": "red"}, "unknown argument(s): colour"),
        ("find_product", "{bad json", "not valid JSON"),
        ("find_product", "[1, 2]", "must be a JSON object"),
        ("buy_now", {"q": "x"}, "unknown tool 'buy_now'"),
        ("view_product_information", {}, "missing required argument(s): product_ids"),
    ],
)
def test_bad_calls_give_error_observations(env, name, args, expect):
    out = call_tool(env, name, args)
    assert out.startswith("Error") and expect in out


@pytest.mark.parametrize(
    "args",
    [
        {"q": "shirt", "page": "abc"},
        {"q": "shirt", "page": 9},
        {"q": "shirt", "page": 0},
        {"q": "shirt", "price": "x-y", "page": 7},
        {"q": ""},
        {"q": None},
        {"q": ["a", "b"]},
    ],
)
def test_bad_values_give_empty_results_not_errors(env, args):
    out = call_tool(env, "find_product", args)
    assert json.loads(out) == []


def test_bad_filters_behave_as_upstream(env):
    "Unknown services are dropped, a malformed price bound means no bound: results still come back."
    assert json.loads(
        call_tool(env, "find_product", {"q": "shirt", "service": "teleport"})
    ) == json.loads(call_tool(env, "find_product", {"q": "shirt"}))
    assert json.loads(call_tool(env, "find_product", {"q": "shirt", "price": "x-y"})) == json.loads(
        call_tool(env, "find_product", {"q": "shirt"})
    )


def test_list_where_string_expected(env, engine):
    ids = [engine.catalog[0]["product_id"], engine.catalog[1]["product_id"]]
    info = json.loads(call_tool(env, "view_product_information", {"product_ids": ids}))
    assert [d["product_id"] for d in info] == ids
    call_tool(env, "recommend_product", {"product_ids": ids})
    assert (
        episode_state(env)["recommendation"] == ids
    )  # kept as given; the scorer decides it is unscoreable


def test_recommend_terminate_reward(env, engine):
    gold = engine.catalog[0]["product_id"]
    call_tool(env, "recommend_product", {"product_ids": gold})
    call_tool(env, "terminate", {"status": "success"})
    st = episode_state(env)
    assert (
        st["done"]
        and st["status"] == "success"
        and st["recommendation"] == gold
        and st["steps"] == 2
    )
    assert env.get_reward() == 1.0
    assert call_tool(env, "find_product", {"q": "x"}) == "Error: the episode is over."
    env.reset(
        query="q",
        category="product",
        reward={"product_id": gold, "title": [engine.catalog[0]["title"]]},
    )
    assert episode_state(env)["steps"] == 0 and env.get_reward() == 0.0


def test_step_cap(engine):
    env = ShoppingEnv(engine, step_cap=3)
    outs = [call_tool(env, "find_product", {"q": "bag"}) for _ in range(4)]
    assert "step cap of 3 reached" in outs[2] and outs[3] == "Error: the episode is over."
    assert episode_state(env)["done"] and episode_state(env)["status"] is None


def test_helper_tools(engine):
    env = OroShoppingEnv(engine)
    p = engine.catalog[3]
    lo, hi = p["price"] - 1, p["price"] + 1
    out = json.loads(
        call_tool(
            env,
            "check_product_match",
            {"product_id": p["product_id"], "constraints": f"price={lo}-{hi}; service=teleport"},
        )
    )
    assert (
        out["matches"]["price"] is True
        and out["matches"]["service"] is False
        and not out["all_match"]
    )
    v = json.loads(
        call_tool(
            env,
            "calculate_voucher",
            {
                "prices": "100,200",
                "threshold": 250,
                "discount_type": "percentage",
                "value": 20,
                "cap": 30,
                "budget": 275,
            },
        )
    )
    assert v == {
        "total": 300.0,
        "voucher_applies": True,
        "price_after_voucher": 270.0,
        "within_budget": True,
    }
    v = json.loads(
        call_tool(
            env,
            "calculate_voucher",
            {"prices": "100", "threshold": 250, "discount_type": "fixed", "value": 20},
        )
    )
    assert v["price_after_voucher"] == 100.0 and not v["voucher_applies"]
    by_shop = {}
    for x in engine.catalog:
        by_shop.setdefault(x["shop_id"], []).append(x)
    q1, q2 = next(v for v in by_shop.values() if len({y["category"] for y in v}) >= 2)[:2]
    queries = [q1["title"], q2["title"]]
    shops = json.loads(
        call_tool(env, "find_products_in_same_shop", {"queries": "; ".join(queries)})
    )
    assert 1 <= len(shops) <= 5 and q1["shop_id"] in [s["shop_id"] for s in shops]
    for s in (
        shops
    ):  # one product per query, every one sold by that shop and the shop's best hit for its query
        assert len(s["products"]) == 2
        for pid, q in zip(s["products"], queries):
            assert engine.catalog.get(pid)["shop_id"] == s["shop_id"]
            assert pid == engine.find_product(q, page=1, shop_id=s["shop_id"])[0]["product_id"]
    assert json.loads(call_tool(env, "find_products_in_same_shop", {"queries": " ; "})) == []


def test_factory_is_what_trl_expects(engine):
    make = ShoppingEnv.factory(engine, step_cap=5)
    a, b = make(), make()
    assert a is not b and a._engine is engine and a._step_cap == 5
    assert a.reset(query="x") is None
