"""Stage 1 of the recipe on the pretrained base, and the held-out evaluation that says whether it learned.

The smoke profile's CI reproduction keeps the tiny stand-in (a reproduction of every stage on SmolLM2-135M-Instruct takes
hours on 2 AVX2 cores, see the README); this script measures the one claim the paper's recipe rests on, on a real base:
SFT on the corpus lifts held-out ASR. It uses the `smollm2` profile's `train` section and the data a smoke reproduction
already made (the two profiles' data sections are identical, which is checked):

    make env VLLM=1 && make reproduce ONLY="00 01 02 03 04"    # the smoke data, if runs/smoke/ does not hold it yet
    .venv/bin/python examples/smollm2_stage1.py                # about 2 hours on 2 AVX2 cores (measured: stage 1 69 min, evaluations 13 and 27 min)

It writes `runs/smollm2/stage1_only/{base,stage1_sft}/` (episodes, `eval.json`, the checkpoint) and its `stages.json` (the summary),
and skips every part whose output exists. Greedy episodes (sample 0 of chapter 05's evaluation) on the same held-out
problems for both; production_strict; Wilson 95% intervals.
"""
import json
import os
import sys
import time
from dataclasses import asdict


def main() -> int:
    import datasets
    import torch
    from shopdistill.core.files import write_json
    from shopdistill.core.run import TrainFolder
    from shopdistill.reproduce.settings import load_config
    from shopdistill.core.progress import quiet_libraries
    from shopdistill.training.policy import load_policy
    from shopdistill.sandbox.profile import load_sandbox
    from shopdistill.training.sft import corpus_rows, per_problem_rows, sft
    from shopdistill.training.evaluation import evaluate_stage, evaluation_problems

    quiet_libraries()
    torch.set_num_threads(os.cpu_count() or 1)  # as chapter 05 does for a real base: every core for its matmuls
    cfg, data = load_config("smollm2"), load_config("smoke")
    a, b = cfg.to_dict(), data.to_dict()
    same = {k: a.get(k) == b.get(k) for k in ("catalog", "search", "tasks", "scoring", "arena", "arena_traces", "normalise", "judge", "filter", "corpus")}
    if not all(same.values()):
        sys.exit(f"configs/smollm2.yaml and configs/smoke.yaml differ in {', '.join(k for k, v in same.items() if not v)}: "
                 "this script reads the smoke run's data, so the data sections must be the same")
    run = data.run
    bank_path, corpus_path = run.bank(), run.corpus().dataset
    if not (bank_path.exists() and corpus_path.exists()):
        sys.exit(f"no smoke data under {run.path}: run `make reproduce ONLY=\"00 01 02 03 04\"` first")
    ts = cfg.train
    out = TrainFolder(cfg.run.stage1_only)
    bank = [json.loads(line) for line in bank_path.open()]
    corpus = datasets.load_from_disk(str(corpus_path))
    engine = load_sandbox(data.run, data.catalog, data.search, data.tasks)[1]
    problems = evaluation_problems(bank, corpus, ts)
    assert not {p["id"] for p in problems} & set(corpus["train"]["problem_id"])
    print(f"held-out: {len(problems)} {', '.join(ts.eval.categories)} problems; base {ts.base}; rollouts on {ts.rollout.backend}")

    def evaluate(stage, spec):
        folder = out.stage(stage)
        if not folder.evaluation.exists():
            model, tok = load_policy(spec, ts)
            evaluate_stage(folder, model if ts.rollout.backend != "vllm" else spec, tok, problems, engine, ts, n_samples=1)
        return json.loads(folder.evaluation.read_text())

    rows = {"base": evaluate("base", ts.base)}
    s1 = out.stage("stage1_sft")
    if not s1.has_policy:
        model, tok = load_policy(ts.base, ts)
        mine = [r for r in corpus["train"] if r["category"] in ts.sft.categories]
        train = corpus_rows(per_problem_rows(mine, ts.sft.per_problem), tok)
        print(f"stage 1: {len(train)} corpus conversations of {len({r['problem_id'] for r in mine})} problems, "
              f"{ts.sft.max_steps} steps x {ts.sft.grad_accum}, lr {ts.sft.lr}")
        t = time.time()
        sft(model, tok, train, ts, s1)
        print(f"stage 1 trained in {time.time() - t:.0f} s")
        del model
    rows["stage1_sft"] = evaluate("stage1_sft", str(s1.policy))

    summary = {}
    for stage, r in rows.items():
        k, n = round(r["asr"] * r["n_problems"]), r["n_problems"]
        lo, hi = r["asr_lo"], r["asr_hi"]  # stage_row's Wilson 95% interval
        summary[stage] = {"solved": k, "n": n, "asr": r["asr"], "wilson95": [lo, hi], "valid_call_rate": r["valid_call_rate"],
                          "existing_id_rate": r["existing_id_rate"], "eval_seconds": r["eval_seconds"], "generated_tokens": r.get("generated_tokens")}
        print(f"{stage:>11}: {k}/{n} = {100 * r['asr']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]  valid calls {100 * r['valid_call_rate']:.1f}%  "
              f"ids that exist {100 * r['existing_id_rate']:.1f}%  ({r['eval_seconds']:.0f} s, {r.get('generated_tokens')} tokens)")
    b, s = summary["base"], summary["stage1_sft"]
    summary["lift_points"] = 100 * (s["asr"] - b["asr"])
    summary["intervals_overlap"] = not (s["wilson95"][0] > b["wilson95"][1] or b["wilson95"][0] > s["wilson95"][1])
    summary["train"] = json.loads(s1.train_log.read_text()).get("train_seconds")
    summary["settings"] = {"sft": asdict(ts.sft), "rollout": asdict(ts.rollout), "base": ts.base}
    write_json(out.table, summary)
    print(f"stage 1 vs base: {summary['lift_points']:+.1f} points; Wilson intervals {'overlap' if summary['intervals_overlap'] else 'do not overlap'}")
    return 0


if __name__ == "__main__":  # vLLM's engine may spawn processes: the guard keeps them from running this again
    raise SystemExit(main())
