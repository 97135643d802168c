"""Every number in paper/generated/ is traceable: to results.json (computed by the run) or to the published table."""

import json
from pathlib import Path

import pytest

from shopdistill.results.tex import (
    Quoted,
    booktabs,
    numbers_in_tex,
    retrace,
    untraceable,
    write_generated,
)
from shopdistill.core.run import Run, generated_dir
from shopdistill.results.published import PUBLISHED, published_values

ROOT = Path(__file__).resolve().parents[1]
GEN = (
    generated_dir()
)  # where chapter 07 writes them (the checkout's paper/generated/: a publishing profile's)


def _generated():
    if not (GEN / "provenance.json").exists():
        pytest.skip("paper/generated/ has not been written yet (make reproduce)")
    return json.loads((GEN / "provenance.json").read_text()), json.loads(
        (GEN / "results.json").read_text()
    )


def test_every_number_in_generated_tex_has_a_quote():
    prov, _ = _generated()
    for tex in sorted(GEN.glob("*.tex")):
        assert untraceable(tex.read_text(), prov) == [], (
            f"{tex.name} shows numbers no quote produced"
        )


def test_every_quote_retraces_to_run_output_or_published_table():
    prov, results = _generated()
    pub = published_values()
    for e in prov:
        assert retrace(e, results, pub) == e["text"], (
            f"{e} does not follow from results.json / the published table"
        )


def test_generated_results_are_the_runs():
    _, results = _generated()
    numbers = Run.of("smoke").results().numbers
    if not numbers.exists():
        pytest.skip("no smoke run on this machine")
    assert json.loads(numbers.read_text()) == results


def test_published_rows_are_labelled():
    assert all(src.endswith("(published)") for src, *_ in PUBLISHED)


def test_a_hand_typed_number_is_refused(tmp_path):
    q = Quoted({"asr": 0.5, "n": 75}, {18.0})
    ok = booktabs(
        ["system", "ASR"],
        [
            ["ours", q.run("asr", "{:.1f}", 100)],
            ["base (published)", q.pub(18.0)],
            ["n", q.run("n", "{:d}")],
        ],
        "c",
        "tab:x",
    )
    write_generated(tmp_path, q, {"t": ok})
    prov = json.loads((tmp_path / "provenance.json").read_text())
    assert untraceable((tmp_path / "t.tex").read_text(), prov) == []
    with pytest.raises(ValueError, match="not traceable"):
        write_generated(tmp_path / "bad", q, {"t": ok.replace("50.0", "51.0")})
    with pytest.raises(ValueError, match="not in the published table"):
        q.pub(43.0)
    # a stale results.json (a number changed after the tables were written) no longer retraces
    stale = dict(q.results, asr=0.49)
    assert any(retrace(e, stale, {18.0}) != e["text"] for e in prov)


@pytest.mark.parametrize(
    "tex,nums",
    [
        (r"\label{tab:x1} 12.5 and 1,234 \ref{fig:2}", ["12.5", "1,234"]),
        (r"% 99 in a comment" + "\n7", ["7"]),
        (r"\begin{tabular}{lrr} 3 \\", ["3"]),
        (r"\newcommand{\AsrSft}{42.7}", ["42.7"]),
        ("The season (chapter 02), 5 races; the corpus (chapters 03-04)", ["5"]),
        (
            "win 3 races against 0, and 1,234 traces",
            ["3", "0", "1,234"],
        ),  # a comma after a number is not part of it
    ],
)
def test_numbers_in_tex(tex, nums):
    assert numbers_in_tex(tex) == nums


def test_main_tex_uses_only_generated_macros_and_inputs():
    _generated()
    import re

    main = (ROOT / "paper" / "main.tex").read_text()
    defined = set(re.findall(r"\\newcommand\{\\([A-Za-z]+)\}", (GEN / "macros.tex").read_text()))
    used = set(re.findall(r"\\([A-Z][a-z]+[A-Z][A-Za-z]*|[A-Z][a-z]+Name|HeldOutN)\{\}", main))
    assert used and used <= defined, (
        f"main.tex uses macros the run did not write: {sorted(used - defined)}"
    )
    for name in re.findall(r"\\input\{generated/([\w]+)\.tex\}", main):
        assert (GEN / f"{name}.tex").exists(), (
            f"main.tex inputs generated/{name}.tex, which the run did not write"
        )


def test_a_sentence_with_a_bare_percent_is_refused():
    # LaTeX reads a bare % as a comment: the macro's closing brace and every later \newcommand would vanish
    q = Quoted({"asr": 0.5}, set())
    with pytest.raises(ValueError, match="unescaped %"):
        q.say("Bad", f"held-out ASR is {q.run('asr', '{:.1f}', 100)}%")
    assert q.say("Good", rf"held-out ASR is {q.run('asr', '{:.1f}', 100)}\%").endswith(r"50.0\%")


def test_seed_sentence_escapes_its_percents():
    from shopdistill.results.tables import seed_sentence

    r = {
        "stage.s5.asr": 0.4,
        "stage.s5.seed.1.asr": 0.36,
        "stage.s5.seed.1.vs_stage.lo": -0.1,
        "stage.s5.seed.1.vs_stage.hi": 0.02,
    }
    text = Quoted(r, set()).say("Seeds", seed_sentence(Quoted(r, set()), "s5"))
    assert r"40.0\%, 36.0\%" in text


def test_generated_macros_have_no_bare_percent():
    _generated()
    import re

    for line in (GEN / "macros.tex").read_text().splitlines()[1:]:
        assert not re.search(r"(?<!\\)%", line), (
            f"a bare % in macros.tex comments out the rest: {line[:120]}"
        )
