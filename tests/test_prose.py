"""The paper's result sentences follow the run's numbers: rendered for a run where a stage lifts held-out ASR and for one where
none does, the macros say "lifts" only where the paired interval lies above zero, and the committed macros agree with results.json."""
import json
import re
from pathlib import Path

import pytest

from shopdistill.core.run import generated_dir
from shopdistill.results.published import published_values
from shopdistill.results.tables import prose_macros, published_macros
from shopdistill.results.tex import Quoted, change_verdict, untraceable, write_generated

ROOT = Path(__file__).resolve().parents[1]
STAGES = ["base", "stage1_sft", "stage2_rejection"]


def run_numbers(sft: tuple, rejection: tuple, pass8: float | None = 0.0) -> dict:
    """A run's numbers: the base at 0% ASR [0, 4.9]; `sft` and `rejection` are (ASR, interval lo, interval hi) of each stage,
    the interval being the paired difference to the stage before; the rejection stage is the one sampled eight times."""
    r = {"stage.base.asr": 0.0, "stage.base.asr_lo": 0.0, "stage.base.asr_hi": 0.049, "stage.base.pass@1": 0.0, "stage.base.pass@8": 0.0}
    prev = 0.0
    for s, (asr, lo, hi) in (("stage1_sft", sft), ("stage2_rejection", rejection)):
        r.update({f"stage.{s}.asr": asr, f"stage.{s}.asr_lo": max(0.0, asr - 0.09), f"stage.{s}.asr_hi": min(1.0, asr + 0.1),
                  f"stage.{s}.vs_prev.diff": asr - prev, f"stage.{s}.vs_prev.lo": lo, f"stage.{s}.vs_prev.hi": hi,
                  f"stage.{s}.pass@1": asr, f"stage.{s}.pass@8": None})
        prev = asr
    r["stage.stage2_rejection.pass@8"] = pass8
    return r


def macros_of(tmp_path, results: dict) -> dict[str, str]:
    "Render the run's macros.tex as chapter 07 does (through write_generated, which refuses an untraceable number) and read it back."
    q = Quoted(results, published_values())
    prose_macros(q, STAGES)
    published_macros(q)
    write_generated(tmp_path, q, {})
    text = (tmp_path / "macros.tex").read_text()
    return dict(re.findall(r"\\newcommand\{\\(\w+)\}\{(.*)\}\n", text))


def test_a_stage_that_lifts_asr_is_said_to_lift_it(tmp_path):
    m = macros_of(tmp_path, run_numbers(sft=(0.267, 0.16, 0.373), rejection=(0.28, -0.04, 0.067), pass8=0.4))
    assert m["ChangeStageOneSft"].startswith(r"lifts held-out ASR from 0.0\% to 26.7\% (+26.7 points, interval [+16.0, +37.3])")
    assert m["ChangeStageTwoRejection"].startswith(r"does not lift held-out ASR measurably: 26.7\% before, 28.0\%")
    assert m["RecipeChange"].startswith(r"lifts held-out ASR from 0.0\% [0.0, 4.9] to 28.0\%")
    assert m["PassGap"].startswith(r"pass@8 is 40.0\% against a pass@1 of 28.0\%") and m["PassGapStage"] == "rejection-sampled re-SFT"


def test_a_stage_that_does_not_lift_asr_is_not_said_to(tmp_path):
    m = macros_of(tmp_path, run_numbers(sft=(0.0, 0.0, 0.0), rejection=(0.0, 0.0, 0.0)))
    for name in ("ChangeStageOneSft", "ChangeStageTwoRejection", "RecipeChange"):
        assert m[name].startswith("does not lift held-out ASR"), m[name]
        assert not m[name].startswith("lifts")
    assert m["ChangeStageOneSft"] == r"does not lift held-out ASR: it is 0.0\% before and after (+0.0 points, interval [+0.0, +0.0])"
    assert m["PassGap"].startswith(r"pass@8 equals pass@1 (0.0\%)")


def test_a_point_estimate_alone_does_not_make_a_lift(tmp_path):
    "Two problems more than the base, but an interval that holds zero: the sentence does not call it a lift."
    m = macros_of(tmp_path, run_numbers(sft=(0.027, -0.013, 0.067), rejection=(0.0, -0.067, 0.0)))
    assert m["ChangeStageOneSft"].startswith("does not lift held-out ASR measurably")
    m = macros_of(tmp_path / "down", run_numbers(sft=(0.3, 0.2, 0.4), rejection=(0.1, -0.3, -0.1)))
    assert m["ChangeStageTwoRejection"].startswith(r"lowers held-out ASR from 30.0\% to 10.0\%")


def test_a_hand_typed_number_in_a_sentence_is_refused(tmp_path):
    q = Quoted(run_numbers(sft=(0.0, 0.0, 0.0), rejection=(0.0, 0.0, 0.0)), published_values())
    prose_macros(q, STAGES)
    q.say("Claim", "lifts held-out ASR by 12.5 points")
    with pytest.raises(ValueError, match="not traceable"):
        write_generated(tmp_path, q, {})
    assert untraceable("12.5", q.entries) == ["12.5"]


def test_the_committed_sentences_agree_with_the_committed_numbers():
    "paper/generated/macros.tex of the last reproduction: every stage's verb is the one its interval in results.json gives."
    gen = generated_dir()
    if not (gen / "macros.tex").exists() or not (gen / "results.json").exists(): pytest.skip("paper/generated/ has not been written yet (make reproduce)")
    macros = dict(re.findall(r"\\newcommand\{\\(\w+)\}\{(.*)\}\n", (gen / "macros.tex").read_text()))
    results = json.loads((gen / "results.json").read_text())
    changes = {k: v for k, v in macros.items() if k.startswith("Change")}
    assert changes, "macros.tex holds no stage sentence: chapter 07 predates the generated prose"
    from shopdistill.results.tex import macro_name
    stages = [k[len("stage."):-len(".vs_prev.lo")] for k in results if k.endswith(".vs_prev.lo")]
    for s in stages:
        verdict = change_verdict(results[f"stage.{s}.vs_prev.lo"], results[f"stage.{s}.vs_prev.hi"])
        text = macros[macro_name("change", s)]
        want = {"up": "lifts ", "down": "lowers ", "flat": "does not lift "}[verdict]
        assert text.startswith(want), f"{s}: {text!r} but its interval says {verdict}"


def test_main_tex_states_results_only_through_generated_sentences():
    "The text's result sentences are macros; the old hand-written 'moves held-out ASR from ... to ...' is gone."
    main = (ROOT / "paper" / "main.tex").read_text()
    body = re.sub(r"(?m)%.*$", "", main)
    for name in ("ChangeStageOneSft", "RecipeChange", "PassGap"):
        assert f"\\{name}{{}}" in body
    assert not re.search(r"\b(moves|lifts|raises|improves) held-out ASR", body), "a result sentence typed by hand"
