"""The paper's result sentences follow the run's numbers: rendered for a run where a stage lifts held-out ASR and for one where
none does, the macros say "lifts" only where the paired interval lies above zero; each stage says what it had to learn from
as its records count it (and that it found nothing, or left no record, when so); the GRPO claim says which way pass@1 moved
against stage 4's pass@8; and the committed macros agree with results.json."""

import json
import re
from pathlib import Path

import pytest

from shopdistill.core.files import write_json
from shopdistill.core.run import Run, generated_dir
from shopdistill.results.collect import stage_facts, stage_results
from shopdistill.results.published import published_values
from shopdistill.results.tables import prose_macros, published_macros
from shopdistill.results.tex import Quoted, change_verdict, macro_name, untraceable, write_generated

ROOT = Path(__file__).resolve().parents[1]
STAGES = ["base", "stage1_sft", "stage2_rejection"]


def run_numbers(sft: tuple, rejection: tuple, pass8: float | None = 0.0) -> dict:
    """A run's numbers: the base at 0% ASR [0, 4.9]; `sft` and `rejection` are (ASR, interval lo, interval hi) of each stage,
    the interval being the paired difference to the stage before; the rejection stage is the one sampled eight times."""
    r = {
        "stage.base.asr": 0.0,
        "stage.base.asr_lo": 0.0,
        "stage.base.asr_hi": 0.049,
        "stage.base.pass@1": 0.0,
        "stage.base.pass@8": 0.0,
    }
    prev = 0.0
    for s, (asr, lo, hi) in (("stage1_sft", sft), ("stage2_rejection", rejection)):
        r.update(
            {
                f"stage.{s}.asr": asr,
                f"stage.{s}.asr_lo": max(0.0, asr - 0.09),
                f"stage.{s}.asr_hi": min(1.0, asr + 0.1),
                f"stage.{s}.vs_prev.diff": asr - prev,
                f"stage.{s}.vs_prev.lo": lo,
                f"stage.{s}.vs_prev.hi": hi,
                f"stage.{s}.pass@1": asr,
                f"stage.{s}.pass@8": None,
            }
        )
        prev = asr
    r["stage.stage2_rejection.pass@8"] = pass8
    return r


def macros_of(tmp_path, results: dict, stages: list[str] = STAGES) -> dict[str, str]:
    "Render the run's macros.tex as chapter 07 does (through write_generated, which refuses an untraceable number) and read it back."
    q = Quoted(results, published_values())
    prose_macros(q, stages)
    published_macros(q)
    write_generated(tmp_path, q, {})
    text = (tmp_path / "macros.tex").read_text()
    return dict(re.findall(r"\\newcommand\{\\(\w+)\}\{(.*)\}\n", text))


def test_a_stage_that_lifts_asr_is_said_to_lift_it(tmp_path):
    m = macros_of(
        tmp_path, run_numbers(sft=(0.267, 0.16, 0.373), rejection=(0.28, -0.04, 0.067), pass8=0.4)
    )
    assert m["ChangeStageOneSft"].startswith(
        r"lifts held-out ASR from 0.0\% to 26.7\% (+26.7 points, interval [+16.0, +37.3])"
    )
    assert m["ChangeStageTwoRejection"].startswith(
        r"does not lift held-out ASR measurably: 26.7\% before, 28.0\%"
    )
    assert m["RecipeChange"].startswith(r"lifts held-out ASR from 0.0\% [0.0, 4.9] to 28.0\%")
    assert (
        m["PassGap"].startswith(r"pass@8 is 40.0\% against a pass@1 of 28.0\%")
        and m["PassGapStage"] == "rejection-sampled re-SFT"
    )


def test_a_stage_that_does_not_lift_asr_is_not_said_to(tmp_path):
    m = macros_of(tmp_path, run_numbers(sft=(0.0, 0.0, 0.0), rejection=(0.0, 0.0, 0.0)))
    for name in ("ChangeStageOneSft", "ChangeStageTwoRejection", "RecipeChange"):
        assert m[name].startswith("does not lift held-out ASR"), m[name]
        assert not m[name].startswith("lifts")
    assert (
        m["ChangeStageOneSft"]
        == r"does not lift held-out ASR: it is 0.0\% before and after (+0.0 points, interval [+0.0, +0.0])"
    )
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
    if not (gen / "macros.tex").exists() or not (gen / "results.json").exists():
        pytest.skip("paper/generated/ has not been written yet (make reproduce)")
    macros = dict(
        re.findall(r"\\newcommand\{\\(\w+)\}\{(.*)\}\n", (gen / "macros.tex").read_text())
    )
    results = json.loads((gen / "results.json").read_text())
    changes = {k: v for k, v in macros.items() if k.startswith("Change")}
    assert changes, "macros.tex holds no stage sentence: chapter 07 predates the generated prose"
    from shopdistill.results.tex import macro_name

    # a stage's own ASR change (`stage.<s>.vs_prev.lo`), not a measure of it (`stage.<s>.step_score.vs_prev.lo`)
    stages = [
        k[len("stage.") : -len(".vs_prev.lo")]
        for k in results
        if re.fullmatch(r"stage\.\w+\.vs_prev\.lo", k)
    ]
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
    assert not re.search(r"\b(moves|lifts|raises|improves) held-out ASR", body), (
        "a result sentence typed by hand"
    )


RECIPE = ["base", "stage1_sft", "stage2_rejection", "stage3_teacher", "stage4_kto", "dr_grpo"]
FOUND = {
    "stage1_sft": {"steps": 30},
    "stage2_rejection": {
        "problems": 30,
        "samples": 240,
        "successes": 12,
        "problems_solved": 5,
        "rows": 40,
        "steps": 5,
    },
    "stage3_teacher": {"problems": 50, "successes": 41, "rows": 45, "steps": 6},
    "stage4_kto": {
        "episodes": 64,
        "desirable": 4,
        "desirable_own": 4,
        "desirable_corpus": 0,
        "undesirable": 60,
        "steps": 2,
    },
    "dr_grpo": {"states_screened": 13, "states_mixed": 3, "states_kept": 3, "steps": 4},
}


def recipe_numbers(
    facts: dict = FOUND,
    kto: tuple = (0.1, 0.3),
    grpo: tuple | None = (0.2, 0.3),
    interval: tuple = (0.05, 0.15),
) -> dict:
    """Every stage of the recipe at 0% ASR, what each trained on (`facts`: stage -> its `stage_facts` counts), and stage 4's and
    stage 5's (pass@1, pass@8) on 30 sampled problems with the paired `interval` of the pass@1 difference (`grpo` None: stage 5 sampled once)."""
    r = {
        f"stage.{s}.{k}": v
        for s in RECIPE
        for k, v in (
            ("asr", 0.0),
            ("asr_lo", 0.0),
            ("asr_hi", 0.049),
            ("pass@1", 0.0),
            ("pass@8", None),
        )
    }
    for prev, s in zip(RECIPE, RECIPE[1:]):
        r.update(
            {
                f"stage.{s}.vs_prev.diff": 0.0,
                f"stage.{s}.vs_prev.lo": 0.0,
                f"stage.{s}.vs_prev.hi": 0.0,
            }
        )
    r.update({f"stage.{s}.train.{k}": v for s, f in facts.items() for k, v in f.items()})
    r.update(
        {
            "stage.stage4_kto.pass@1": kto[0],
            "stage.stage4_kto.pass@8": kto[1],
            "stage.dr_grpo.pass_problems": 30,
        }
    )
    if grpo is not None:
        r.update(
            {
                "stage.dr_grpo.pass@1": grpo[0],
                "stage.dr_grpo.pass@8": grpo[1],
                "stage.dr_grpo.vs_prev.pass@1.diff": grpo[0] - kto[0],
                "stage.dr_grpo.vs_prev.pass@1.lo": interval[0],
                "stage.dr_grpo.vs_prev.pass@1.hi": interval[1],
            }
        )
    return r


def test_each_stage_says_what_it_trained_on(tmp_path):
    m = macros_of(tmp_path, recipe_numbers(), RECIPE)
    assert (
        m["DidStageOneSft"]
        == "trains the base model on the corpus's conversations for 30 optimizer steps"
    )
    assert m["DidStageTwoRejection"] == (
        "samples 240 episodes of SFT's policy on 30 training problems and finds 12 successes (on 5 problems); the SFT "
        "continues for 5 optimizer steps on what it found, mixed with the corpus's conversations (40 rows in all)"
    )
    assert m["DidStageThreeTeacher"].endswith(
        "continues the SFT for 6 optimizer steps on its 41 successes (45 training rows)"
    )
    assert m["DidStageFourKto"] == (
        "plays 64 episodes with teacher-SFT's policy and learns for 2 optimizer steps from its 4 successes as desirable "
        "against its 60 failures as undesirable"
    )
    assert m["DidDrGrpo"].startswith(
        "screens 13 states of the corpus's conversations with KTO's policy, finds 3 states with mixed rewards"
    )
    assert m["DidDrGrpo"].endswith("and trains on 3 states for 4 optimizer steps")
    assert "DidBase" not in m  # the base trains on nothing: it is where the recipe starts


@pytest.mark.parametrize(
    "stage,facts,said",
    [
        (
            "stage2_rejection",
            {"problems": 30, "samples": 240, "successes": 0, "problems_solved": 0},
            "finds no success, so it has nothing of its own to train on: it keeps SFT's policy unchanged",
        ),
        (
            "stage2_rejection",
            {"problems": 30, "samples": 240, "successes": 1, "problems_solved": 1},
            "finds 1 success (on 1 problem); the SFT continues on what",
        ),
        (
            "stage3_teacher",
            {"problems": 50, "successes": 0},
            "it solves none, so there is nothing to train on and the policy stays rejection-sampled re-SFT's",
        ),
        (
            "stage4_kto",
            {
                "episodes": 64,
                "desirable": 8,
                "desirable_own": 0,
                "desirable_corpus": 8,
                "undesirable": 64,
                "steps": 2,
            },
            "succeeds in none, so its desirable side is corpus trajectories only (8 trajectories), against its 64 failures",
        ),
        (
            "stage4_kto",
            {
                "episodes": 64,
                "desirable": 8,
                "desirable_own": 3,
                "desirable_corpus": 5,
                "undesirable": 61,
            },
            "its desirable side is its 3 own successes topped up with 5 corpus trajectories (8 examples in all), against its 61 failures",
        ),
        (
            "stage4_kto",
            {
                "episodes": 64,
                "desirable": 0,
                "desirable_own": 0,
                "desirable_corpus": 0,
                "undesirable": 64,
                "steps": 2,
            },
            "with no desirable example it learns for 2 optimizer steps from its 64 failures alone",
        ),
        (
            "stage4_kto",
            {"desirable": 8, "undesirable": 56},
            "learns from 8 desirable episodes against 56 undesirable ones",
        ),  # an older run's row
        (
            "dr_grpo",
            {"states_screened": 13, "states_mixed": 0, "states_kept": 0, "steps": 0},
            "finds none with mixed rewards (every sample of a state scores alike, so no state gives a gradient): it has nothing to learn from and does not train, and its policy is KTO's",
        ),
        (
            "dr_grpo",
            {"states_screened": 13, "states_mixed": 2, "states_kept": 0, "steps": 0},
            "finds 2 states with mixed rewards but trains on none of them: its policy is KTO's",
        ),
        ("stage1_sft", {}, "leaves no record in this run of what it trained on"),
        ("stage4_kto", {}, "leaves no record in this run of what it trained on"),
        ("dr_grpo", {}, "leaves no record in this run of what it trained on"),
    ],
)
def test_a_stage_says_what_it_found_to_learn_from(tmp_path, stage, facts, said):
    "Every branch: nothing found, some found, a corpus top-up, no training, and a stage whose records the run lacks."
    m = macros_of(tmp_path, recipe_numbers({**FOUND, stage: facts}), RECIPE)
    assert said in m[macro_name("did", stage)], m[macro_name("did", stage)]


def test_missing_stage_records_give_no_key_and_no_crash(tmp_path):
    "A profile that skipped stages, an older stage-4 row: stage_facts gives what is there; prose_macros says the rest is not recorded."
    train = Run.of("old", root=tmp_path).train()
    write_json(
        train.stage("stage4_kto").make().evaluation,
        {"stage": "stage4_kto", "desirable": 8, "undesirable": 56},
    )
    train.stage("stage2_rejection").make()  # a folder without its rejection.json
    facts = stage_facts(train)
    assert facts == {
        "stage.stage4_kto.train.desirable": 8,
        "stage.stage4_kto.train.undesirable": 56,
    }
    assert stage_facts(Run.of("none", root=tmp_path).train()) == {}
    m = macros_of(tmp_path / "gen", {**recipe_numbers({}), **facts}, RECIPE)
    assert (
        m["DidStageTwoRejection"]
        == m["DidDrGrpo"]
        == "leaves no record in this run of what it trained on"
    )
    assert m["DidStageFourKto"] == "learns from 8 desirable episodes against 56 undesirable ones"
    skipping = macros_of(
        tmp_path / "skip", recipe_numbers(), ["base", "stage1_sft", "stage4_kto"]
    )  # a profile without stages 2, 3 and 5
    assert (
        "DidStageTwoRejection" not in skipping
        and "GrpoPassClaim" not in skipping
        and "DidStageFourKto" in skipping
    )


@pytest.mark.parametrize(
    "kto,grpo,interval,said",
    [
        (
            (0.1, 0.3),
            (0.2, 0.3),
            (0.05, 0.15),
            r"Dr.~GRPO lifts pass@1 from 10.0\% to 20.0\% (+10.0 points, interval [+5.0, +15.0]), with a pass@8 of 30.0\%; "
            "pass@1 moves toward the pass@8 KTO had",
        ),
        ((0.1, 0.3), (0.35, 0.4), (0.1, 0.4), "pass@1 reaches the pass@8 KTO had"),
        ((0.2, 0.3), (0.1, 0.2), (-0.15, -0.05), r"Dr.~GRPO lowers pass@1 from 20.0\% to 10.0\%"),
        ((0.1, 0.3), (0.133, 0.3), (-0.02, 0.08), "does not lift pass@1 measurably"),
        (
            (0.1, 0.3),
            (0.1, 0.3),
            (0.0, 0.0),
            "this run does not show GRPO turning pass@8 headroom into pass@1",
        ),
        (
            (0.0, 0.0),
            (0.0, 0.0),
            (0.0, 0.0),
            r"KTO's pass@8 equals its pass@1 (0.0\%), no headroom to convert",
        ),
    ],
)
def test_the_grpo_claim_says_which_way_pass1_moved(tmp_path, kto, grpo, interval, said):
    m = macros_of(tmp_path, recipe_numbers(kto=kto, grpo=grpo, interval=interval), RECIPE)
    assert m["GrpoPassClaim"].startswith("on the 30 held-out problems both stages sampled, ")
    assert said in m["GrpoPassClaim"], m["GrpoPassClaim"]
    assert ("away" in m["GrpoPassClaim"]) == (
        interval[1] < 0
    )  # "away from pass@8" only for a pass@1 that measurably fell


def test_the_grpo_claim_needs_both_stages_sampled(tmp_path):
    assert "GrpoPassClaim" not in macros_of(
        tmp_path, recipe_numbers(grpo=None), RECIPE
    )  # stage 5 sampled once: no pass@8, no claim
    r = recipe_numbers()
    r["stage.stage4_kto.pass@8"] = None
    assert "GrpoPassClaim" not in macros_of(tmp_path / "kto", r, RECIPE)


def test_pass1_is_compared_only_on_the_same_sampled_problems():
    "stage_results pairs pass@1 of two stages sampled on the same problems, and only then (the claim's interval)."
    eps = lambda n, hit: [
        {"problem_id": f"p{i}", "sample": j, "success": hit(i, j), "category": "product"}
        for i in range(6)
        for j in range(n)
    ]
    # sample 0 greedy, samples 1..8 alike: pass@1 is read from the like samples only
    kto, grpo = eps(9, lambda i, j: 1 <= j < 3), eps(9, lambda i, j: j < 5)
    r = stage_results({"stage4_kto": kto, "dr_grpo": grpo}, {}, ks=(1, 8), n_boot=200)
    assert (
        r["stage.dr_grpo.vs_prev.pass@1.diff"]
        == pytest.approx(r["stage.dr_grpo.pass@1"] - r["stage.stage4_kto.pass@1"])
        == pytest.approx(0.25)
    )
    assert r["stage.dr_grpo.pass_problems"] == 6
    once = stage_results(
        {"stage4_kto": kto, "dr_grpo": eps(1, lambda i, j: True)}, {}, ks=(1, 8), n_boot=200
    )
    assert "stage.dr_grpo.vs_prev.pass@1.diff" not in once and once["stage.dr_grpo.pass@8"] is None
    other = stage_results(
        {"stage4_kto": kto, "dr_grpo": [e for e in grpo if e["problem_id"] != "p0"]},
        {},
        ks=(1, 8),
        n_boot=200,
    )
    assert (
        "stage.dr_grpo.vs_prev.pass@1.diff" not in other
    )  # sampled on different problems: no paired pass@1


def test_the_committed_grpo_claim_agrees_with_the_committed_numbers():
    "When the last reproduction made the GRPO claim, its verb for pass@1 is the one the paired interval in results.json gives."
    gen = generated_dir()
    if not (gen / "macros.tex").exists() or not (gen / "results.json").exists():
        pytest.skip("paper/generated/ has not been written yet (make reproduce)")
    macros = dict(
        re.findall(r"\\newcommand\{\\(\w+)\}\{(.*)\}\n", (gen / "macros.tex").read_text())
    )
    if "GrpoPassClaim" not in macros:
        pytest.skip(
            "the committed macros.tex predates the GRPO claim (the next reproduction writes it)"
        )
    results = json.loads((gen / "results.json").read_text())
    keys = [
        k[: -len(".lo")]
        for k in results
        if k.endswith(".vs_prev.pass@1.lo")
        and k.startswith(("stage.dr_grpo.", "stage.outcome_grpo."))
    ]
    assert keys, (
        "macros.tex makes the GRPO claim, but results.json holds no paired pass@1 of stage 5"
    )
    key = keys[0]
    verdict = change_verdict(results[key + ".lo"], results[key + ".hi"])
    want = {"up": " lifts pass@1 ", "down": " lowers pass@1 ", "flat": " does not lift pass@1"}[
        verdict
    ]
    assert want in macros["GrpoPassClaim"], (
        f"{macros['GrpoPassClaim']!r} but the interval says {verdict}"
    )
