"""Fuzz `shopdistill score`: hostile answers, tasks and catalog files end in one stderr line naming the file (exit 1),
or, for a catalog with some bad lines, a report where every line is a product or a ledger entry with its line."""

import gzip, json, random

import pytest

from shopdistill.sandbox.catalog import generate_catalog, write_catalog
from shopdistill.reproduce.cli import main
from shopdistill.sandbox.tasks import save_tasks
from shopdistill.sandbox.task_synthesis import synthesize_tasks

rng = random.Random(13)
RANDOM = bytes(rng.randrange(256) for _ in range(4096))
HUGE = b'{"x": "' + b"a" * 5_000_000 + b'"}\n'


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    d = tmp_path_factory.mktemp("good")
    cat = list(generate_catalog(400, seed=1))
    tasks = synthesize_tasks(cat, {"product": 4, "shop": 2}, seed=0)
    write_catalog(cat, d / "documents.jsonl.gz")
    save_tasks(tasks, d / "tasks.jsonl")
    golds = lambda t: t["reward"] if isinstance(t["reward"], list) else [t["reward"]]
    (d / "answers.json").write_text(
        json.dumps({t["id"]: [g["product_id"] for g in golds(t)] for t in tasks})
    )
    return d, cat, tasks


def run(capsys, good, tmp_path, tasks=None, catalog=None, answers=None):
    d = good[0]
    paths = {}
    for name, data, default in (
        ("tasks.jsonl", tasks, "tasks.jsonl"),
        ("catalog.jsonl", catalog, "documents.jsonl.gz"),
        ("answers.json", answers, "answers.json"),
    ):
        if data is None:
            paths[name] = d / default
        else:
            paths[name] = tmp_path / (name + ".gz" if isinstance(data, tuple) else name)
            paths[name].write_bytes(data[0] if isinstance(data, tuple) else data)
    rc = main(
        [
            "score",
            "--tasks",
            str(paths["tasks.jsonl"]),
            "--catalog",
            str(paths["catalog.jsonl"]),
            "--answers",
            str(paths["answers.json"]),
        ]
    )
    out, err = capsys.readouterr()
    return rc, out, err, paths


def one_line_error(rc, err, path):
    assert rc == 1, err
    assert err.endswith("\n") and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("shopdistill score: error: ") and str(path) in err, err


def test_good_files_score_every_gold(capsys, good, tmp_path):
    rc, out, err, _ = run(capsys, good, tmp_path)
    rep = json.loads(out)
    assert rc == 0 and err == "" and rep["asr"] == 1.0 and rep["successes"] == len(good[2]) == 6
    assert rep["catalog"]["products"] == 400 and rep["catalog"]["skipped"] == 0


ANSWERS = {
    "empty": b"",
    "random": RANDOM,
    "not_json": b'{"a": ',
    "list": b'["1", "2"]',
    "number": b"42",
    "string": b'"1,2"',
    "null": b"null",
    "empty_object": b"{}",
    "nested_wrong": b'{"t": {"product_ids": "1"}}',
    "number_value": b'{"t": 3.5}',
    "bool_in_list": b'{"t": [true]}',
    "bad_utf8": b'{"t": "\xff\xfe"}',
    "deep": b"[" * 100_000,
    "huge_line_unmatched": b'{"' + b"k" * 5_000_000 + b'": "1"}',
    "keys_match_nothing": b'{"no-such-task": "1"}',
}


@pytest.mark.parametrize("name", ANSWERS)
def test_bad_answers(capsys, good, tmp_path, name):
    rc, out, err, paths = run(capsys, good, tmp_path, answers=ANSWERS[name])
    one_line_error(rc, err, paths["answers.json"])
    assert out == ""


TASKS = {
    "empty": b"",
    "blank_lines": b"\n\n  \n",
    "random": RANDOM,
    "bad_utf8": b'{"query": "\xff"}\n',
    "list_of_numbers": b"[1, 2, 3]",
    "numbers": b"1\n2\n",
    "missing_reward": b'{"query": "a red tent", "category": "product"}\n',
    "missing_query": b'{"reward": {"product_id": "1", "title": ["x"]}}\n',
    "deep": b"[" * 100_000,
    "huge_line": HUGE,
    "truncated_json_array": b'[{"query": "x", "reward": ',
    "wrong_nested": b'{"query": "x", "reward": [1, 2]}\n',
}


@pytest.mark.parametrize("name", TASKS)
def test_bad_tasks(capsys, good, tmp_path, name):
    rc, out, err, paths = run(capsys, good, tmp_path, tasks=TASKS[name])
    one_line_error(rc, err, paths["tasks.jsonl"])


def test_mixed_tasks_name_the_bad_line(capsys, good, tmp_path):
    "A bad task fails the run (scoring a subset would change the denominator), naming its line."
    lines = (good[0] / "tasks.jsonl").read_bytes().splitlines(keepends=True)
    rc, out, err, paths = run(
        capsys,
        good,
        tmp_path,
        tasks=b"".join(lines[:3]) + b'{"query": "x"}\n' + b"".join(lines[3:]),
    )
    one_line_error(rc, err, paths["tasks.jsonl"])
    assert ":line 4:" in err


def gz(data: bytes) -> tuple:
    return (gzip.compress(data),)


CATALOGS = {
    "empty": b"",
    "random": RANDOM,
    "not_really_gzip": (b"this is not gzip\n",),
    "random_gzip_name": (RANDOM,),
    "gzip_of_random": gz(RANDOM),
    "wrong_types": b'[1, 2]\n"x"\n3\nnull\n{"product": [1]}\n',
    "huge_line": HUGE,
    "missing_fields": b'{"product_id": "1"}\n{"title": "x", "price": 1}\n',
    "bad_utf8": b'{"product_id": "1", "title": "\xff"}\n',
    "empty_gzip": gz(b""),
}


@pytest.mark.parametrize("name", CATALOGS)
def test_unusable_catalogs(capsys, good, tmp_path, name):
    rc, out, err, paths = run(capsys, good, tmp_path, catalog=CATALOGS[name])
    one_line_error(rc, err, paths["catalog.jsonl"])
    assert "no products" in err


def test_mixed_catalog_accounts_for_every_line(capsys, good, tmp_path):
    "Good lines are scored; every bad one is in the report's ledger with its line number."
    d, cat, tasks = good
    lines = gzip.decompress((d / "documents.jsonl.gz").read_bytes()).splitlines(keepends=True)
    bad = {
        5: b"not json\n",
        17: b'{"product_id": "x1", "title": "t", "price": 1}\n',
        40: b"\xff\xfe\n",
        41: HUGE,
        90: lines[0],
        120: b"[1]\n",
        200: b'{"id": "5", "product": {"title": "no price"}}\n',
    }
    mixed = []
    for i, line in enumerate(lines, 1):
        if i in bad:
            mixed.append(bad[i])
        mixed.append(line)
    rc, out, err, _ = run(capsys, good, tmp_path, catalog=b"".join(mixed))
    rep = json.loads(out)
    assert rc == 0 and "Traceback" not in err and "7 catalog lines skipped" in err
    where = sorted(e["line"] for e in rep["catalog"]["skipped_lines"])
    shifted = sorted(
        i + sum(j < i for j in bad) for i in bad
    )  # each bad line's position in the mixed file
    assert where == shifted and rep["catalog"]["products"] + rep["catalog"]["skipped"] == len(mixed)
    assert rep["asr"] == 1.0  # the good products are all there


def test_truncated_gzip_catalog_scores_what_it_read_and_says_so(capsys, good, tmp_path):
    data = (good[0] / "documents.jsonl.gz").read_bytes()
    rc, out, err, _ = run(capsys, good, tmp_path, catalog=(data[: len(data) // 2],))
    rep = json.loads(out)
    assert (
        rc == 0
        and 0 < rep["catalog"]["products"] < 400
        and rep["catalog"]["skipped_reasons"] == {"unreadable": 1}
    )
    assert "warning" in err and "Traceback" not in err


def test_gold_missing_from_catalog_fails_with_its_reason(capsys, good, tmp_path):
    "With a catalog, a gold product is never rebuilt from the task."
    d, cat, tasks = good
    gold = tasks[0]["reward"]["product_id"]
    kept = [p for p in cat if p["product_id"] != gold]
    write_catalog(kept, tmp_path / "less.jsonl")
    rc, out, err, _ = run(capsys, good, tmp_path, catalog=(tmp_path / "less.jsonl").read_bytes())
    rep = json.loads(out)
    row = next(r for r in rep["tasks"] if r["id"] == tasks[0]["id"])
    assert (
        rc == 0
        and not row["success"]
        and row["items"][0]["reason"] == "not in the catalog"
        and gold in row["problem"]
    )
    assert (
        rep["successes"] == len(tasks) - 1
        and rep["not_in_catalog"] == 1
        and "not in the catalog" in err
    )


def test_answers_as_strings_lists_and_unmatched_keys(capsys, good, tmp_path):
    d, cat, tasks = good
    golds = lambda t: t["reward"] if isinstance(t["reward"], list) else [t["reward"]]
    answers = {t["id"]: ",".join(g["product_id"] for g in golds(t)) for t in tasks[:3]}
    answers.update({t["query"]: [int(g["product_id"]) for g in golds(t)] for t in tasks[3:]})
    answers["no-such-task"] = "1"
    rc, out, err, _ = run(capsys, good, tmp_path, answers=json.dumps(answers).encode())
    rep = json.loads(out)
    assert rc == 0 and rep["successes"] == len(tasks) and rep["unmatched_answers"] == 1
    assert (
        rep["unmatched_answer_keys"] == ["no-such-task"]
        and err.count("warning") == 1
        and "1 of 7 answers match no task" in err
    )


def test_answers_given_as_a_folder(capsys, good, tmp_path):
    rc = main(
        [
            "score",
            "--tasks",
            str(good[0] / "tasks.jsonl"),
            "--catalog",
            str(good[0] / "documents.jsonl.gz"),
            "--answers",
            str(tmp_path),
        ]
    )
    out, err = capsys.readouterr()
    one_line_error(rc, err, tmp_path)
    assert "is a folder" in err and out == ""
