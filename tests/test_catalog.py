"Catalog generator, loaders and the on-disk store."

import json, statistics
from collections import Counter

import pytest

from shopdistill.sandbox.catalog import (
    SERVICES,
    PRODUCT_FIELDS,
    Catalog,
    generate_catalog,
    indexed_text,
    iter_catalog_file,
    load_catalog,
    save_catalog_store,
    write_catalog,
)
from shopdistill.core.ledger import Ledger


@pytest.fixture(scope="module")
def products():
    return list(generate_catalog(5000, seed=3))


def test_deterministic_and_prefix_stable(products):
    assert list(generate_catalog(5000, seed=3)) == products
    assert list(generate_catalog(1234, seed=3)) == products[:1234]
    assert list(generate_catalog(50, seed=4)) != products[:50]


def test_schema(products):
    for p in products:
        assert tuple(p) == PRODUCT_FIELDS
        assert p["product_id"].isdigit() and len(p["product_id"]) == 10
        assert p["category"].count(" > ") == 2
        assert isinstance(p["price"], float) and p["price"] >= 1
        assert set(p["service"]) <= set(SERVICES)
        assert 1 <= len(p["sku_options"]) <= 9
        assert all(isinstance(o, dict) for o in p["sku_options"].values())
        assert all(
            isinstance(v, list) and all(x == x.lower() for x in v) for v in p["attributes"].values()
        )
    ids = [int(p["product_id"]) for p in products]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_realism(products):
    "The properties that make shopping hard are there: big shops, near-duplicates, skewed prices and sales."
    shops = Counter(p["shop_id"] for p in products)
    assert sum(c >= 4 for c in shops.values()) >= 20  # shop tasks need shops with 2-4 products
    titles = Counter(p["title"] for p in products)
    assert (
        sum(c for c in titles.values() if c > 1) / len(products) > 0.1
    )  # many near-duplicate listings
    prices = sorted(p["price"] for p in products)
    assert prices[len(prices) // 2] < statistics.mean(prices)  # log-normal: mean above median
    sold = [p["sold_count"] for p in products]
    assert max(sold) > 50 * statistics.median(sold)
    for s in SERVICES:
        assert 0.02 < sum(s in p["service"] for p in products) / len(products) < 0.9
    cats = Counter(p["category"] for p in products)
    assert len(cats) >= 30


def test_indexed_text_is_title_options_attributes(products):
    p = products[0]
    t = indexed_text(p)
    assert t.startswith(p["title"])
    for o in p["sku_options"].values():
        for v in o.values():
            assert v in t
    assert p["description"] not in t


def test_round_trip_gz_and_store(tmp_path, products):
    path = tmp_path / "documents.jsonl.gz"
    write_catalog(products[:300], path)
    first = path.read_bytes()
    write_catalog(products[:300], path)
    assert path.read_bytes() == first  # byte-stable
    cat = load_catalog(path)
    assert cat.records == products[:300]
    store = save_catalog_store(iter(products[:300]), tmp_path / "store")
    assert len(store) == 300 and store[17] == products[17] and store[-1] == products[299]
    assert store.get(products[42]["product_id"]) == products[42]
    assert store.get("999") is None and store.get("abc") is None
    assert load_catalog(tmp_path / "store")[3] == products[3]
    on_disk = load_catalog(path, in_memory=False)
    assert on_disk.get(products[200]["product_id"]) == products[200]


def test_upstream_document_lines(tmp_path, products):
    "The real documents.jsonl carries {'id', 'contents', 'product'}; bare product lines work too."
    f = tmp_path / "mixed.jsonl"
    f.write_text(
        json.dumps({"id": products[0]["product_id"], "contents": "x", "product": products[0]})
        + "\n"
        + json.dumps(products[1])
        + "\n"
    )
    assert [p["product_id"] for p in iter_catalog_file(f)] == [
        products[0]["product_id"],
        products[1]["product_id"],
    ]


def test_normalisation_of_raw_fields(tmp_path):
    raw = {
        "product_id": 123,
        "title": "A &amp; B",
        "price": "12.5",
        "sold_count": None,
        "shop_id": 7,
        "sku_options": [{"Color": "Red"}],
        "attributes": {"Material": "Cotton"},
        "service": "COD, freeShipping, unknown",
    }
    f = tmp_path / "raw.jsonl"
    f.write_text(json.dumps(raw) + "\n")
    (p,) = list(iter_catalog_file(f))
    assert (
        p["product_id"] == "123"
        and p["title"] == "A & B"
        and p["price"] == 12.5
        and p["sold_count"] == 0
    )
    assert p["sku_options"] == {"1": {"color": "red"}} and p["attributes"] == {
        "material": ["cotton"]
    }
    assert p["service"] == ["freeShipping", "COD"] and p["shop_id"] == "7"


@pytest.mark.parametrize(
    "line,reason",
    [
        ("{not json", "bad_json"),
        ('{"product": {"product_id": "x1", "title": "t", "price": 1}}', "bad_product"),
        ('{"product": {"product_id": "1", "title": "", "price": 1}}', "bad_product"),
        ('{"product": {"product_id": "1", "title": "t", "price": "cheap"}}', "bad_product"),
        ('{"product": {"product_id": "1", "title": "t", "price": -3}}', "bad_product"),
        (
            '{"product": {"product_id": "1", "title": "t", "price": 1, "sku_options": 5}}',
            "bad_product",
        ),
        ("[1, 2]", "bad_product"),
    ],
)
def test_malformed_lines_go_to_the_ledger(tmp_path, line, reason):
    good = json.dumps({"product_id": "5", "title": "ok", "price": 2})
    f = tmp_path / "c.jsonl"
    f.write_text(good + "\n" + line + "\n" + good.replace('"5"', '"6"') + "\n")
    lg = Ledger()
    ids = [p["product_id"] for p in iter_catalog_file(f, lg)]
    assert ids == ["5", "6"]
    assert [(e["line"], e["reason"]) for e in lg.entries] == [(2, reason)]
    assert lg.entries[0]["detail"]


def test_duplicates_truncated_gzip_and_bad_unicode(tmp_path, products):
    path = tmp_path / "d.jsonl.gz"
    write_catalog(products[:50] + products[:1], path)
    lg = Ledger()
    assert len(list(iter_catalog_file(path, lg))) == 50 and lg.reasons() == {"duplicate_id": 1}
    data = path.read_bytes()
    (tmp_path / "t.jsonl.gz").write_bytes(data[: len(data) // 2])
    lg = Ledger()
    got = list(iter_catalog_file(tmp_path / "t.jsonl.gz", lg))
    assert 0 < len(got) < 50 and set(lg.reasons()) & {"unreadable", "bad_json"}
    (tmp_path / "u.jsonl").write_bytes(
        b'{"product_id": "1", "title": "ok", "price": 1}\n\xff\xfe bad\n'
    )
    lg = Ledger()
    assert len(list(iter_catalog_file(tmp_path / "u.jsonl", lg))) == 1 and lg.reasons() == {
        "bad_unicode": 1
    }


def test_load_errors_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_catalog(tmp_path / "nope.jsonl")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(FileNotFoundError, match="not a catalog store"):
        load_catalog(tmp_path / "empty_dir")
    with pytest.raises(ValueError, match="duplicate"):
        Catalog([{"product_id": "1"}, {"product_id": "1"}])
