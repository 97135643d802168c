"The HTTP API: a real server on loopback, a real HTTP client."

import json, subprocess, sys, time

import pytest
import requests

from shopdistill.sandbox.catalog import Catalog, generate_catalog, write_catalog
from shopdistill.sandbox.search import SearchEngine
from shopdistill.sandbox.server import ROUTES, start_server


@pytest.fixture(scope="module")
def served():
    engine = SearchEngine.build(Catalog.from_records(generate_catalog(1500, seed=2)))
    srv, url = start_server(engine)
    yield engine, url
    srv.shutdown()


def test_routes_match_the_engine(served):
    engine, url = served
    s = requests.Session()
    q = engine.catalog[10]["title"]
    r = s.get(f"{url}/find_product", params={"q": q, "page": "1"})
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/json"
    assert r.json() == json.loads(json.dumps(engine.find_product(q, page="1")))
    p = engine.catalog[10]
    r = s.get(
        f"{url}/find_product",
        params={
            "q": q,
            "price": f"{p['price'] - 1}-{p['price'] + 1}",
            "sort": "priceasc",
            "shop_id": p["shop_id"],
        },
    )
    assert p["product_id"] in [x["product_id"] for x in r.json()]
    ids = f"{p['product_id']},999,{engine.catalog[11]['product_id']}"
    info = s.get(f"{url}/view_product_information", params={"product_ids": ids}).json()
    assert [d["product_id"] for d in info] == [p["product_id"], engine.catalog[11]["product_id"]]
    raw = s.get(f"{url}/get_product_raw", params={"product_ids": p["product_id"]}).json()
    assert raw == [json.loads(json.dumps(p))]
    assert s.get(f"{url}/health").json() == {
        "status": "healthy",
        "service": "search-server",
        "products": 1500,
    }


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"q": "bag", "page": "abc"},
        {"q": "bag", "page": "6"},
        {"q": "bag", "price": "x-y", "page": "0"},
    ],
)
def test_bad_parameters_do_not_break_the_server(served, params):
    _, url = served
    r = requests.get(f"{url}/find_product", params=params)
    assert r.status_code == 200 and r.json() == []


def test_unknown_route(served):
    _, url = served
    r = requests.get(f"{url}/buy")
    assert r.status_code == 404 and "unknown route" in r.json()["error"]
    assert set(ROUTES) == {
        "/find_product",
        "/view_product_information",
        "/get_product_raw",
        "/health",
    }


def test_keep_alive_many_requests(served):
    engine, url = served
    s = requests.Session()
    for i in range(200):
        assert (
            s.get(f"{url}/find_product", params={"q": engine.catalog[i]["title"]}).status_code
            == 200
        )


def test_serve_command(tmp_path):
    "`shopdistill serve --catalog PATH` in its own process answers over HTTP."
    path = tmp_path / "documents.jsonl.gz"
    write_catalog(generate_catalog(800, seed=5), path)
    import socket

    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "shopdistill.reproduce.cli",
            "serve",
            "--catalog",
            str(path),
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                r = requests.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except requests.ConnectionError:
                assert proc.poll() is None, proc.stdout.read()
                time.sleep(0.2)
        assert r.json() == {"status": "healthy", "service": "search-server", "products": 800}
        assert (
            tmp_path / "documents.index"
        ).exists()  # the index is built once and cached next to the catalog
    finally:
        proc.terminate()
        proc.wait(10)
