"""Fuzzing `shopdistill corpus build` end to end, through `shopdistill.reproduce.cli.main`: inputs of which nothing can be used (empty,
binary, truncated gzip, JSON of the wrong types, a 5 MB line, records missing fields, a folder without trace files) must each end
in exit 1 and ONE stderr line naming the input and chapter 03's ledger (never a traceback, no work folder left behind); one file
mixing a tiny season's good records with every kind of bad line (and records broken by test_fuzz_readers' `mutate`) must build,
with every record either a trajectory decided by chapter 04 or a ledger entry. Seeded; one real build plus cheap failing ones."""

import gzip
import json
import random
import re
import shutil

import pytest

from conftest import CORPUS_YAML, TINY_SEASON
from shopdistill.reproduce.cli import main
from shopdistill.corpus.normalise import count_records
from shopdistill.core.run import ArenaFolder, CorpusFolder, TrajectoriesFolder
from test_fuzz_readers import mutate

SEED = 20261201
GOOD_LINES = 120  # of the season's first shard: enough that some survive the filter into train


def _season_lines(tiny_season, n: int) -> list[bytes]:
    with gzip.open(
        sorted(ArenaFolder(tiny_season / "arena").firehose.glob("shard-*.jsonl.gz"))[0], "rb"
    ) as f:
        return [line.rstrip(b"\n") for _, line in zip(range(n), f)]


def bad_files(good: bytes) -> dict:
    "Name -> the bytes of a whole input file none of whose records can be used."
    rec = json.loads(good)
    missing = {k: v for k, v in rec.items() if k not in ("dialogue", "problem_id")}
    wrong = {**rec, "dialogue": {"not": "a list"}}
    rng = random.Random(SEED)
    return {
        "empty.jsonl": b"",
        "blank-lines.jsonl": b"\n\n  \n",
        "binary.jsonl": bytes(rng.randrange(256) for _ in range(4096)),
        "truncated.jsonl.gz": gzip.compress(good + b"\n")[: len(good) // 8],
        "not-gzip.jsonl.gz": b"plain text, not gzip\n",
        "list.jsonl": b"[1, 2, 3]\n[]\n",
        "numbers.jsonl": b'1\n2.5\n-7\nnull\ntrue\n"a string"\n',
        "nested-wrong-types.jsonl": b'{"dialogue": 5, "problem_id": [1]}\n{"messages": "x"}\n{"messages": [{"role": 3}]}\n{"steps": {"a": [null]}}\n',
        "huge-line.jsonl": b'{"pad": "' + b"x" * 5_000_000 + b'"}\n',
        "missing-fields.jsonl": (json.dumps(missing) + "\n").encode() * 3,
        "wrong-dialogue.jsonl": (json.dumps(wrong) + "\n").encode(),
        "garbage.parquet": b"PAR1 not really parquet",
    }


@pytest.fixture(scope="module")
def profile(tmp_path_factory, tiny_season):
    d = tmp_path_factory.mktemp("fuzz-corpus")
    (d / "tiny.yaml").write_text(TINY_SEASON + CORPUS_YAML)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(
            "SHOPDISTILL_RUNS", str(tmp_path_factory.getbasetemp() / "runs")
        )  # the season's sandbox, for the catalog check
        yield d / "tiny.yaml"


@pytest.fixture(scope="module")
def good(tiny_season):
    return _season_lines(tiny_season, GOOD_LINES)


def _one_error_line(capsys, *names) -> str:
    "The one line the command wrote to stderr besides its progress bars (tqdm's, there on a terminal too)."
    err = [
        x for x in capsys.readouterr().err.strip().splitlines() if not re.match(r"\w+: +\d+%\|", x)
    ]
    assert (
        len(err) == 1
        and err[0].startswith("shopdistill corpus: error: ")
        and "Traceback" not in err[0]
    ), err
    assert all(n in err[0] for n in names), (names, err[0])
    return err[0]


@pytest.mark.parametrize("name", sorted(bad_files(b'{"a": 1}')))
def test_all_bad_input_is_one_error_line(name, good, profile, tmp_path, capsys):
    (tmp_path / name).write_bytes(bad_files(good[0])[name])
    out = tmp_path / "out"
    rc = main(
        [
            "corpus",
            "build",
            "--traces",
            str(tmp_path / name),
            "--out",
            str(out),
            "--profile",
            str(profile),
            "--workers",
            "1",
        ]
    )
    assert rc == 1
    line = _one_error_line(
        capsys,
        name,
        str(TrajectoriesFolder(CorpusFolder(out).trajectories).ledger),
        "0 trajectories kept",
    )
    assert sorted(p.name for p in out.iterdir()) == [
        "trajectories"
    ]  # no work folder, no half-built corpus
    ledger = TrajectoriesFolder(CorpusFolder(out).trajectories).ledger.read_text().splitlines()
    assert len(ledger) == count_records(
        tmp_path / name
    )  # every record rejected, each with its reason
    assert ("no records" in line) == (not ledger)


def test_folder_without_trace_files_and_bad_problems(good, profile, tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("no traces here")
    assert (
        main(
            [
                "corpus",
                "build",
                "--traces",
                str(tmp_path / "notes"),
                "--out",
                str(tmp_path / "o1"),
                "--profile",
                str(profile),
            ]
        )
        == 1
    )
    _one_error_line(capsys, str(tmp_path / "notes"))
    (tmp_path / "t.jsonl").write_bytes(b"\n".join(good[:3]) + b"\n")
    for name, data in (
        ("empty.jsonl", b""),
        ("numbers.jsonl", b"1\n2\n"),
        ("broken.jsonl", b'{"id": "p1", "query'),
        ("binary.jsonl", bytes(range(256))),
    ):
        (tmp_path / name).write_bytes(data)
        assert (
            main(
                [
                    "corpus",
                    "build",
                    "--traces",
                    str(tmp_path / "t.jsonl"),
                    "--problems",
                    str(tmp_path / name),
                    "--out",
                    str(tmp_path / name[:-6]),
                    "--profile",
                    str(profile),
                ]
            )
            == 1
        )
        _one_error_line(capsys, name)
        assert not (tmp_path / name[:-6]).exists()  # checked before anything is written
    assert (
        main(
            [
                "corpus",
                "build",
                "--traces",
                str(tmp_path / "t.jsonl"),
                "--problems",
                str(tmp_path / "missing.jsonl"),
                "--out",
                str(tmp_path / "o2"),
                "--profile",
                str(profile),
            ]
        )
        == 1
    )
    _one_error_line(capsys, "missing.jsonl")


def test_mixed_good_and_bad_lines_are_all_accounted_for(
    good, profile, tiny_season, tmp_path, capsys
):
    rng = random.Random(SEED)
    bad = [
        line.rstrip(b"\n")
        for data in bad_files(good[0]).values()
        if not data.startswith(b"\x1f\x8b")
        for line in data.split(b"\n")
        if line.strip()
    ]
    bad = [b for b in bad if b"\n" not in b]
    for g in good[:40]:  # records broken at random places, as the readers' fuzz test breaks them
        m, _ = mutate(rng, json.loads(g))
        m = m if isinstance(m, bytes) else json.dumps(m).encode()
        if b"\n" not in m and m.strip():
            bad.append(m)
    lines = good + bad
    rng.shuffle(lines)
    (tmp_path / "traces").mkdir()
    shutil.copy(
        ArenaFolder(tiny_season / "arena").bank, ArenaFolder(tmp_path / "traces").bank
    )  # beside the traces, where chapter 03 finds it
    src = tmp_path / "traces" / "mixed.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "out"
    assert (
        main(
            [
                "corpus",
                "build",
                "--traces",
                str(src),
                "--out",
                str(out),
                "--profile",
                str(profile),
                "--workers",
                "1",
            ]
        )
        == 0
    ), capsys.readouterr().err
    assert "Traceback" not in capsys.readouterr().err
    s = json.loads(CorpusFolder(out).summary.read_text())
    n_ledger = len(
        TrajectoriesFolder(CorpusFolder(out).trajectories).ledger.read_text().splitlines()
    )
    assert s["inputs"] == len(lines) and s["trajectories"] + n_ledger == len(lines), (
        s["inputs"],
        s["trajectories"],
        n_ledger,
        len(lines),
    )
    assert (
        s["funnel"]["train"] > 0 and n_ledger >= len(bad) - 40
    )  # every crafted bad line is in the ledger (some mutants may survive)
    print(
        f"fuzz corpus: {len(lines)} lines ({len(good)} good, {len(bad)} bad) -> {s['trajectories']} trajectories + {n_ledger} ledger rows"
    )


def test_nothing_for_train_and_a_bad_eval_fraction(good, profile, tmp_path, capsys):
    "Good records that all land in eval (a profile asking for 99% eval) are an error naming the filter's cuts; an eval share of 1 a config error."
    src = tmp_path / "t.jsonl"
    src.write_bytes(b"\n".join(good) + b"\n")
    for frac, says in (
        (0.99, "0 trajectories kept for train"),
        (1.0, "corpus.eval_fraction must be in [0, 1)"),
    ):
        (tmp_path / "p.yaml").write_text(
            profile.read_text().replace("eval_fraction: 0.3", f"eval_fraction: {frac}")
        )
        out = tmp_path / f"out-{frac}"
        assert (
            main(
                [
                    "corpus",
                    "build",
                    "--traces",
                    str(src),
                    "--out",
                    str(out),
                    "--profile",
                    str(tmp_path / "p.yaml"),
                    "--workers",
                    "1",
                ]
            )
            == 1
        )
        line = _one_error_line(capsys, says)
        assert not (out / "work").exists() and not (out / "dataset").exists()
        assert ("dropped by the filter: " in line) == (frac < 1)
