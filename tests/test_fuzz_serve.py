"""Fuzz `shopdistill serve`'s catalog loading (`open_engine`, what the server uses): an unusable catalog is refused
with one stderr line naming it; in a mixed one every line is served or in the skipped-lines ledger with its number."""

import gzip, json, os, random

import pytest
import requests

from shopdistill.sandbox.catalog import generate_catalog, write_catalog
from shopdistill.reproduce.cli import main
from shopdistill.core.ledger import InputError
from shopdistill.sandbox.server import open_engine, start_server

rng = random.Random(13)
RANDOM = bytes(rng.randrange(256) for _ in range(4096))
HUGE = b'{"x": "' + b"a" * 5_000_000 + b'"}\n'


@pytest.fixture(scope="module")
def good_lines(tmp_path_factory):
    path = tmp_path_factory.mktemp("good") / "documents.jsonl"
    write_catalog(generate_catalog(300, seed=4), path)
    return path.read_bytes().splitlines(keepends=True)


BAD = {
    "empty": ("documents.jsonl", b""),
    "blank": ("documents.jsonl", b"\n \n"),
    "random": ("documents.jsonl", RANDOM),
    "not_really_gzip": ("documents.jsonl.gz", b'{"id": "1"}\n'),
    "random_gz": ("documents.jsonl.gz", RANDOM),
    "empty_gzip": ("documents.jsonl.gz", gzip.compress(b"")),
    "gzip_of_random": ("documents.jsonl.gz", gzip.compress(RANDOM)),
    "wrong_types": (
        "documents.jsonl",
        b'[1]\n2\n"x"\nnull\n{"product": 5}\n{"product": {"product_id": ["1"]}}\n',
    ),
    "missing_fields": ("documents.jsonl", b'{"product_id": "12"}\n{"title": "t", "price": 3}\n'),
    "huge_line": ("documents.jsonl", HUGE),
    "bad_utf8": ("documents.jsonl", b'{"product_id": "1", "title": "\xff", "price": 1}\n'),
}


@pytest.mark.parametrize("name", BAD)
def test_unusable_catalog_is_refused(tmp_path, name):
    fname, data = BAD[name]
    path = tmp_path / fname
    path.write_bytes(data)
    with pytest.raises(InputError, match="no products"):
        open_engine(path, tmp_path / "idx", progress=False)
    assert not (tmp_path / "idx").exists()  # nothing is served, nothing is cached


@pytest.mark.parametrize("name", ["empty", "random", "not_really_gzip", "huge_line"])
def test_serve_command_says_one_line(tmp_path, capsys, name):
    fname, data = BAD[name]
    path = tmp_path / fname
    path.write_bytes(data)
    rc = main(["serve", "--catalog", str(path), "--port", "0"])
    out, err = capsys.readouterr()
    assert (
        rc == 1
        and err.count("\n") == 1
        and err.startswith("shopdistill serve: error: ")
        and str(path) in err
    ), err
    assert "Traceback" not in err and "serving" not in out


def test_mixed_catalog_ledger_has_every_bad_line(tmp_path, good_lines, capsys):
    bad = {
        3: b"nope\n",
        10: b"\xff\xfe\n",
        11: HUGE,
        50: good_lines[0],
        77: b"[1, 2]\n",
        78: b'{"product": {"product_id": "9"}}\n',
    }
    mixed = []
    for i, line in enumerate(good_lines, 1):
        if i in bad:
            mixed.append(bad[i])
        mixed.append(line)
    path = tmp_path / "documents.jsonl"
    path.write_bytes(b"".join(mixed))
    eng = open_engine(path)
    out = capsys.readouterr().out
    ledger = tmp_path / "documents.index.skipped.jsonl"
    entries = [json.loads(l) for l in ledger.read_text().splitlines()]
    assert "6 malformed lines skipped" in out and str(ledger) in out
    assert sorted(e["line"] for e in entries) == sorted(i + sum(j < i for j in bad) for i in bad)
    assert len(eng.catalog) + len(entries) == len(mixed) and len(eng.catalog) == len(good_lines)
    assert {e["reason"] for e in entries} == {
        "bad_json",
        "bad_unicode",
        "bad_product",
        "duplicate_id",
    }
    # the same catalog without its bad lines: the stale ledger goes
    path.write_bytes(b"".join(good_lines))
    open_engine(path, progress=False)
    assert not ledger.exists()


def test_truncated_gzip_serves_what_was_read(tmp_path, good_lines):
    data = gzip.compress(b"".join(good_lines))
    path = tmp_path / "documents.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    eng = open_engine(path, progress=False)
    entries = [
        json.loads(l) for l in (tmp_path / "documents.index.skipped.jsonl").read_text().splitlines()
    ]
    assert 0 < len(eng.catalog) < len(good_lines) and [e["reason"] for e in entries] == [
        "unreadable"
    ]
    assert entries[0]["line"] == len(eng.catalog) + 1


def test_replaced_catalog_with_older_mtime_gets_a_new_index(tmp_path):
    "The index cache is keyed on the catalog's bytes: an older-mtime replacement is not served from the old index."
    path = tmp_path / "documents.jsonl.gz"
    write_catalog(generate_catalog(200, seed=1), path)
    first = open_engine(path, progress=False)
    old_ids = set(first.catalog.ids)
    write_catalog(generate_catalog(250, seed=2), path)
    os.utime(path, (1_000_000, 1_000_000))  # 1970: older than the cached index
    second = open_engine(path, progress=False)
    assert len(second.catalog) == 250 and second.index.n_docs == 250
    p = second.catalog[7]
    assert p["product_id"] not in old_ids or p != first.catalog.get(p["product_id"])
    assert p["product_id"] in [
        r["product_id"] for r in second.find_product(p["title"], page=1)[:10]
    ]
    third = open_engine(path, progress=False)  # unchanged bytes: the cached index is reused
    assert third.index.n_docs == 250 and (tmp_path / "documents.index" / "catalog.sha256").exists()


def test_good_catalog_served_on_loopback(tmp_path):
    path = tmp_path / "documents.jsonl.gz"
    write_catalog(generate_catalog(120, seed=6), path)
    eng = open_engine(path, progress=False)
    srv, url = start_server(eng)
    try:
        assert requests.get(f"{url}/health", timeout=5).json() == {
            "status": "healthy",
            "service": "search-server",
            "products": 120,
        }
        p = eng.catalog[3]
        hits = requests.get(f"{url}/find_product", params={"q": p["title"]}, timeout=5).json()
        assert p["product_id"] in [h["product_id"] for h in hits]
    finally:
        srv.shutdown()


def test_port_in_use_is_one_line(tmp_path, capsys):
    path = tmp_path / "documents.jsonl.gz"
    write_catalog(generate_catalog(60, seed=7), path)
    srv, url = start_server(
        open_engine(path, progress=False)
    )  # holds the port the command then asks for
    try:
        port = url.rsplit(":", 1)[1]
        rc = main(["serve", "--catalog", str(path), "--port", port])
        out, err = capsys.readouterr()
        assert (
            rc == 1
            and err.count("\n") == 1
            and f"127.0.0.1:{port}: cannot listen here" in err
            and "Traceback" not in err
        ), err
    finally:
        srv.shutdown()
