"""Stage 1's substrate arms (issue 38): every arm on the filtered arm's budget, asserted; the lifted share; the
synthesizer's own successes on a real sandbox; what each substrate holds; and the leak guard's two draws."""

import json
import math
from dataclasses import replace

import datasets
import pytest

from shopdistill.core.run import CorpusFolder, Run
from shopdistill.corpus.trajectory import (
    assistant_message,
    make_tool_call,
    to_arrow_row,
    tool_message,
)
from shopdistill.training.evalstats import unpaired_bootstrap
from shopdistill.training.leak_guard import leak_draws, leak_guard_summary
from shopdistill.training.settings import SUBSTRATES, SftSettings, TrainSettings
from shopdistill.training.stages import Context, StageJob, stage1_conversations
from shopdistill.training.substrates import (
    budget_checked,
    filtered_arm,
    lifted_arm,
    substrate_conversations,
    substrate_diversity,
    synthesizer_arm,
    unfiltered_arm,
)

AGENTIC = ["find_product", "view_product_information", "recommend_product"]
SUBTASK = ["find_product", "find_product"]  # a script's search loop: the model only narrates


def conv(i, problem, calls, category="product", **extra):
    "A corpus row (Arrow form, as `datasets` gives it back): a request, then one assistant turn per tool with its result."
    msgs = [{"role": "user", "content": f"request {i}"}]
    for k, name in enumerate(calls):
        msgs += [
            assistant_message("", "", [make_tool_call(f"c{k}", name, {"q": str(i)})]),
            tool_message(f"c{k}", name, "[]"),
        ]
    return {
        **to_arrow_row(
            {
                "trajectory_id": f"t{i}",
                "problem_id": problem,
                "query": f"request {i}",
                "category": category,
                "messages": msgs,
                "tools": [],
                "meta": {},
            }
        ),
        **extra,
    }


def dataset_dict(rows_by_split):
    return datasets.DatasetDict(
        {s: datasets.Dataset.from_list(r) for s, r in rows_by_split.items()}
    )


# the filtered corpus: 10 product conversations on p0-p4 (two each) and a shop one; smoke's cap of 2 per problem
FILTERED = [conv(i, f"p{i % 5}", AGENTIC) for i in range(10)] + [conv(10, "s0", AGENTIC, "shop")]
UNFILTERED = FILTERED + [conv(20 + i, f"q{i % 4}", SUBTASK) for i in range(8)]
LIFTED = [
    conv(40 + i, f"q{i}", ["find_product", "recommend_product"], lifted_from=f"t{20 + i}")
    for i in range(6)
]
SFT = SftSettings(categories=["product"], per_problem=2)


def arm(name, **kw):
    return replace(SFT, substrate=name, **kw)


def teacher(pid):
    "A stand-in reference agent: it solves every problem but p4."
    return {**conv(90, pid, AGENTIC), "success": pid != "p4"}


def test_every_substrate_gives_the_filtered_arms_number_of_conversations():
    n = len(filtered_arm(FILTERED, SFT))
    assert n == 10
    sources = {"unfiltered": UNFILTERED, "lifted": LIFTED}
    for name in SUBSTRATES:
        convs, info = substrate_conversations(arm(name), FILTERED, sources.get(name), teacher)
        assert len(convs) == n and info["conversations"] == info["budget"] == n, name
        assert {c["category"] for c in convs} == {"product"}, name
    # the draw is the stage's seed's: the same seed, the same conversations; another seed, others
    a = substrate_conversations(arm("unfiltered"), FILTERED, UNFILTERED)[0]
    assert a == substrate_conversations(arm("unfiltered"), FILTERED, UNFILTERED)[0]
    assert a != substrate_conversations(arm("unfiltered", seed=1), FILTERED, UNFILTERED)[0]


def test_lifted_replaces_the_stated_share_at_the_same_total():
    filtered = filtered_arm(FILTERED, SFT)
    for share, k in ((0.5, 5), (0.3, 3), (0.0, 0), (0.55, 6)):  # rounded half up: 5.5 -> 6
        convs, facts = lifted_arm(filtered, LIFTED, arm("lifted", lifted_share=share))
        assert len(convs) == 10 and sum("lifted_from" in c for c in convs) == k == facts["lifted"]
        assert facts["filtered_kept"] == 10 - k and all(
            c in filtered for c in convs if "lifted_from" not in c
        )
    with pytest.raises(
        ValueError, match="10 lifted conversations wanted"
    ):  # only 6 lifted ones to draw from
        lifted_arm(filtered, LIFTED, arm("lifted", lifted_share=1.0))


def test_lifted_keeps_the_per_problem_cap_across_both_sources():
    # lifted conversations of p0 and p1: those problems keep one filtered conversation each, not two
    lifted = [conv(60 + i, f"p{i % 2}", ["find_product"], lifted_from="x") for i in range(2)]
    convs, _ = lifted_arm(filtered_arm(FILTERED, SFT), lifted, arm("lifted", lifted_share=0.2))
    per = {p: sum(c["problem_id"] == p for c in convs) for p in ("p0", "p1", "p2", "p3", "p4")}
    assert len(convs) == 10 and per == {"p0": 2, "p1": 2, "p2": 2, "p3": 2, "p4": 2}


def test_an_arm_that_cannot_reach_the_budget_raises_naming_it():
    with pytest.raises(
        ValueError,
        match=r"'unfiltered' cannot reach stage 1's budget: its train split gives 4 .* the filtered arm 10",
    ):
        unfiltered_arm(UNFILTERED[:4], SFT, 10)
    with pytest.raises(
        ValueError,
        match=r"'lifted' cannot reach stage 1's budget: 5 lifted conversations wanted .* gives 2",
    ):
        lifted_arm(filtered_arm(FILTERED, SFT), LIFTED[:2], arm("lifted"))
    with pytest.raises(
        ValueError,
        match=r"'synthesizer' cannot reach stage 1's budget of 10: .* none of the filtered arm's 5 problems",
    ):
        synthesizer_arm(
            filtered_arm(FILTERED, SFT), lambda pid: {"success": False, "problem_id": pid}, 10
        )
    with pytest.raises(
        ValueError, match="'lifted' has 9 conversations where the filtered arm has 10"
    ):
        budget_checked("lifted", [0] * 9, 10)
    with pytest.raises(ValueError, match="needs the unfiltered train split"):
        substrate_conversations(arm("unfiltered"), FILTERED)
    with pytest.raises(ValueError, match="sft.substrate must be one of"):
        arm("raw")


def test_the_synthesizer_arm_is_the_reference_agents_successes_on_the_same_problems():
    from shopdistill.sandbox.catalog import Catalog, generate_catalog
    from shopdistill.sandbox.search import SearchEngine
    from shopdistill.sandbox.task_synthesis import synthesize_tasks

    catalog = Catalog.from_records(list(generate_catalog(300, seed=0)))
    engine = SearchEngine.build(catalog)
    bank = synthesize_tasks(catalog, {"product": 6}, seed=0)
    corpus = dataset_dict({"train": [conv(i, bank[i % 6]["id"], AGENTIC) for i in range(12)]})
    ts = replace(TrainSettings(), sft=arm("synthesizer"))
    job = StageJob(
        Context(None, ts, catalog, engine, bank, corpus, [], []), "stage1_sft", None, None, ts
    )
    convs, info = stage1_conversations(job)
    assert len(convs) == info["budget"] == 12 and info["problems_played"] == 6
    assert 0 < info["distinct"] <= 6 and all(c["success"] for c in convs)
    won = {c["problem_id"] for c in convs}
    assert len(won) == info["distinct"] and won <= {p["id"] for p in bank}
    # cycled to the budget: each success as often as the others, give or take one
    counts = [sum(c["problem_id"] == p for c in convs) for p in won]
    assert max(counts) - min(counts) <= 1
    assert all(m["role"] in ("user", "assistant", "tool") for c in convs for m in c["messages"])


def test_the_lifted_arm_reads_the_runs_lifted_split_and_keeps_out_of_evaluated_clusters(tmp_path):
    run = Run.of("demo", tmp_path)
    dataset_dict({"train": LIFTED, "eval": LIFTED[:1], "unassigned": LIFTED[:1]}).save_to_disk(
        str(run.corpus().lifted)
    )
    bank = [
        {"id": "q0", "cluster": 7},
        {"id": "h0", "cluster": 7, "pool": "held_out", "category": "product"},
    ]
    ts = replace(TrainSettings(), sft=arm("lifted", lifted_share=0.5))
    ctx = Context(
        run, ts, None, None, bank, dataset_dict({"train": FILTERED}), [bank[1]], [bank[1]]
    )
    convs, info = stage1_conversations(StageJob(ctx, "stage1_sft", None, None, ts, "arm.lifted"))
    assert len(convs) == 10 and info["left_out_in_eval_clusters"] == 1 and info["pool"] == 5
    assert "q0" not in {
        c["problem_id"] for c in convs
    }  # q0 is a near-duplicate of the evaluated h0


def test_a_missing_split_names_what_writes_it(tmp_path):
    run = Run.of("demo", tmp_path)
    ts = replace(TrainSettings(), sft=arm("lifted"))
    ctx = Context(run, ts, None, None, [], dataset_dict({"train": FILTERED}), [], [])
    with pytest.raises(FileNotFoundError, match="corpus.lift"):
        stage1_conversations(StageJob(ctx, "stage1_sft", None, None, ts, "arm.lifted"))


@pytest.mark.skipif(
    "unfiltered" not in CorpusFolder.names(),
    reason="CorpusFolder.unfiltered comes with chapter 04's unfiltered build",
)
def test_the_unfiltered_arm_reads_the_runs_unfiltered_split(tmp_path):
    run = Run.of("demo", tmp_path)
    # as the corpus writer saves it: an empty split is left out (datasets cannot load a saved split of no rows)
    dataset_dict({"train": UNFILTERED}).save_to_disk(str(run.corpus().unfiltered))
    ts = replace(TrainSettings(), sft=arm("unfiltered"))
    ctx = Context(run, ts, None, None, [], dataset_dict({"train": FILTERED}), [], [])
    convs, info = stage1_conversations(
        StageJob(ctx, "stage1_sft", None, None, ts, "arm.unfiltered")
    )
    assert len(convs) == 10 and info["pool"] == 18


def test_substrate_diversity_counts_and_entropies():
    a = conv(0, "a", ["find_product", "recommend_product"])
    b = conv(1, "b", ["search_shop", "recommend_product"])
    c = conv(2, "a", ["find_product", "view_product_information", "recommend_product"])
    assert substrate_diversity([a, b]) == {
        "conversations": 2,
        "tasks": 2,
        "call_sequences": 2,
        "first_call_bits": 1.0,
        "sequence_bits": 1.0,
        "mean_assistant_turns": 2.0,
    }
    d = substrate_diversity([a, a, b, c])  # first calls 3:1, sequences 2:1:1, turns 2, 2, 2, 3
    assert (d["tasks"], d["call_sequences"]) == (2, 3)
    assert math.isclose(d["first_call_bits"], -(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25)))
    assert math.isclose(d["sequence_bits"], 1.5) and d["mean_assistant_turns"] == 2.25
    none = conv(3, "z", [])  # no call at all: one more value of the first call
    assert substrate_diversity([a, none])["first_call_bits"] == 1.0
    assert substrate_diversity([])["conversations"] == 0


def test_the_unguarded_draw_holds_what_the_guard_keeps_out():
    bank = [
        {"id": f"o{i}", "pool": "open", "category": "product", "cluster": i} for i in range(2)
    ] + [{"id": f"h{i}", "pool": "held_out", "category": "product", "cluster": i} for i in range(5)]
    corpus = dataset_dict({"train": [{"problem_id": "o1"}], "eval": [{"problem_id": "x"}]})
    ts = replace(
        TrainSettings(), eval=replace(TrainSettings().eval, categories=["product"], n_problems=3)
    )
    d = leak_draws(bank, corpus, ts)
    assert [p["id"] for p in d["unguarded"]] == ["h0", "h1", "h2"] and d["in_corpus"] == ["h1"]
    assert [p["id"] for p in d["guarded"]] == [
        "h0",
        "h2",
        "h3",
    ]  # h1 shares o1's cluster: the guard skips it


def test_the_leak_guards_difference_and_its_interval():
    guarded = {f"g{i}": float(i < 20) for i in range(75)}
    unguarded = {**{f"g{i}": float(i < 20) for i in range(45)}, **{f"x{i}": 1.0 for i in range(30)}}
    s = leak_guard_summary(guarded, unguarded, [f"x{i}" for i in range(30)])
    assert math.isclose(s["diff_points"], 100 * (50 - 20) / 75)
    assert 0 < s["lo_points"] < s["diff_points"] < s["hi_points"]
    assert (
        s["in_corpus_clusters"]["n_problems"],
        s["in_corpus_clusters"]["asr"],
        s["shared_problems"],
    ) == (30, 1.0, 45)
    assert s["unguarded"]["asr_lo"] < s["unguarded"]["asr"] < s["unguarded"]["asr_hi"]
    # each set resampled on its own: equal sets give no difference, and the two streams are not one paired draw
    same = unpaired_bootstrap([0, 1] * 20, [0, 1] * 20, n_boot=2000)
    assert same["diff"] == 0.0 and same["lo"] < 0 < same["hi"]


def test_an_arm_learns_at_the_rate_the_main_line_chose(tmp_path):
    from shopdistill.core.files import write_json
    from shopdistill.training.stages import _sweep

    run = Run.of("demo", tmp_path)
    main = run.stage("stage1_sft").make()
    write_json(main.sweep_result, {"1e-05": 1.2, "2e-05": 1.1, "best": 2e-05})
    ts = TrainSettings()
    ctx = Context(run, ts, None, None, [], dataset_dict({"train": FILTERED}), [], [])
    v = main.variant("arm.lifted")
    _sweep(
        StageJob(ctx, "stage1_sft", v, None, replace(ts, sft=arm("lifted")), "arm.lifted"), None, []
    )
    assert (
        json.loads(v.sweep_result.read_text())["best"] == 2e-05
    )  # no sweep of its own: nothing was trained
    assert not v.sweep.exists()


def test_stage1_records_what_it_trained_on(tmp_path):
    "A finished stage 1 (nothing trained here) records its substrate: counts, tokens under the base's tokenizer, diversity."
    from shopdistill.core.files import write_json
    from shopdistill.training.policy import load_policy, save_policy
    from shopdistill.training.settings import TinySettings
    from shopdistill.training.stages import run_stage1

    ts = TrainSettings(
        base="tiny",
        sft=SFT,
        tiny=TinySettings(bpe_vocab=400, hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64),
    )
    run = Run.of("demo", tmp_path)
    s1 = run.stage("stage1_sft").make()
    save_policy(*load_policy("tiny", ts), s1.policy)
    write_json(s1.train_log, {"train_seconds": 1.0, "global_step": 1})
    write_json(s1.evaluation, {"stage": "stage1_sft", "eval_seconds": 1.0})
    write_json(s1.sweep_result, {"best": 1e-4})
    ctx = Context(run, ts, None, None, [], dataset_dict({"train": FILTERED}), [], [])
    r = run_stage1(StageJob(ctx, "stage1_sft", s1, None, ts))
    got = json.loads(s1.substrate.read_text())
    assert (
        got["substrate"] == "filtered"
        and got["conversations"] == got["budget"] == r.record["corpus"] == 10
    )
    assert 0 < got["assistant_tokens"] < got["trained_tokens"] <= got["tokens"]
    assert got["diversity"]["tasks"] == 5 and r.record["substrate"]["tokens"] == got["tokens"]
