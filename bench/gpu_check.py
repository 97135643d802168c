"""On a GPU: vLLM and the transformers backend behind the same `run_episodes` call give the same greedy episodes on the same
checkpoint; prints both throughputs. Without a GPU (or without vLLM) it stops at once and says what is missing.

    python bench/gpu_check.py [--model FOLDER] [--episodes 16] [--dtype float32] [--max-new-tokens 256] [--step-cap 10] [--json OUT]

What it runs, all greedy (temperature 0), on the same problems, in this order:
1. `run_episodes` with `rollout.backend: transformers` (the model on the GPU, each episode's KV cache kept between turns);
2. `run_episodes` with `rollout.backend: vllm` (each episode advancing on its own through `LLMEngine`, prefix caching on);
3. `generate_vllm` against `generate_transformers` on single turns (chapter 06's screening of GRPO states goes through these two
   functions), one prompt per problem.
Episodes are compared message by message; the first turn where two differ is reported. Same dtype on both sides (float32 by
default): bf16 kernels differ between the two engines and may flip a near-tie argmax, which says nothing about the plumbing.
`--model`: a checkpoint folder (e.g. `runs/full/train/stage1_sft/model`); default: the packaged SmolLM2-135M-Instruct base.
The problems: product tasks synthesised on a generated 2,000-product catalog (no run needed).
"""

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path


def require_gpu() -> str:
    "The GPU this check runs on; exits (status 2) with what is missing when there is none, or no vLLM."
    import importlib.util
    import torch

    problems = []
    if not torch.cuda.is_available():
        build = (
            "a CPU build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        )
        problems.append(f"no CUDA device: torch {torch.__version__} is {build} and sees no GPU")
    if importlib.util.find_spec("vllm") is None:
        problems.append(
            "vLLM is not installed (the gpu extra: `make env PROFILE=full` on a GPU machine, or pip install -e '.[gpu]')"
        )
    if problems:
        print(
            "gpu_check: cannot run here: "
            + "; ".join(problems)
            + ". It compares vLLM with transformers on a GPU; "
            "`shopdistill doctor --profile full` lists what this machine lacks.",
            file=sys.stderr,
        )
        sys.exit(2)
    return torch.cuda.get_device_name(0)


def first_difference(a: dict, b: dict) -> int | None:
    "The index of the first message where episodes `a` and `b` differ (None: identical)."
    for i, (x, y) in enumerate(zip(a["messages"], b["messages"])):
        if x != y:
            return i
    return (
        None
        if len(a["messages"]) == len(b["messages"])
        else min(len(a["messages"]), len(b["messages"]))
    )


def timed(fn) -> tuple:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--model",
        default=None,
        help="checkpoint folder (default: the packaged smollm2-135m-instruct base)",
    )
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--step-cap", type=int, default=10)
    ap.add_argument("--json", default=None, help="write the results here too")
    a = ap.parse_args()
    device = require_gpu()
    import torch
    from shopdistill.core.progress import quiet_libraries
    from shopdistill.sandbox.catalog import Catalog, generate_catalog
    from shopdistill.sandbox.search import SearchEngine
    from shopdistill.sandbox.task_synthesis import synthesize_tasks
    from shopdistill.training.bases import provision_base
    from shopdistill.training.grpo import sample_turns
    from shopdistill.training.policy import load_policy
    from shopdistill.training.rendering import render_prompt, tool_schemas_for_training
    from shopdistill.training.rollout import close_vllm, run_episodes
    from shopdistill.training.settings import RolloutSettings

    quiet_libraries()
    folder = str(Path(a.model) if a.model else provision_base("smollm2-135m-instruct"))
    catalog = Catalog.from_records(list(generate_catalog(2000, seed=0)))
    engine = SearchEngine.build(catalog)
    problems = synthesize_tasks(catalog, {"product": a.episodes}, seed=0)
    model, tok = load_policy(folder)
    model = model.to("cuda", dtype=getattr(torch, a.dtype))
    rs = RolloutSettings(
        batch_size=a.episodes,
        step_cap=a.step_cap,
        max_new_tokens=a.max_new_tokens,
        max_prompt_tokens=4096,
        vllm_dtype=a.dtype,
    )
    greedy = dict(n_samples=1, temperature=0.0, seed=0, greedy_first=True)
    prompts = [
        render_prompt(tok, [{"role": "user", "content": p["query"]}], tool_schemas_for_training())[
            0
        ]
        for p in problems
    ]
    res = {"device": device, "model": folder, "dtype": a.dtype, "episodes": len(problems)}
    runs = {}
    for name in ("transformers", "vllm"):
        target = model if name == "transformers" else folder  # vLLM loads the policy by its folder
        eps, dt = timed(
            lambda: run_episodes(
                target, tok, problems, engine, replace(rs, backend=name), desc=name, **greedy
            )
        )
        turns, dt1 = timed(
            lambda: sample_turns(
                target,
                tok,
                prompts,
                1,
                temperature=0.0,
                max_new_tokens=a.max_new_tokens,
                batch_size=a.episodes,
                backend=name,
            )
        )
        runs[name] = (eps, turns)
        gen = sum(e["meta"]["extra"]["generated_tokens"] for e in eps)
        res[name] = {
            "seconds": round(dt, 2),
            "generated_tokens": gen,
            "tokens_per_s": round(gen / dt, 1),
            "episodes_per_s": round(len(eps) / dt, 3),
            "successes": sum(e["success"] for e in eps),
            "single_turn_seconds": round(dt1, 2),
        }
        print(
            f"{name:>12}: {len(eps)} episodes in {dt:7.1f} s, {gen / dt:8.1f} generated tokens/s, {len(eps) / dt:.3f} episodes/s; "
            f"{len(prompts)} single turns in {dt1:.1f} s",
            flush=True,
        )
        if name == "transformers":
            del model
            torch.cuda.empty_cache()
    close_vllm()
    (te, tt), (ve, vt) = runs["transformers"], runs["vllm"]
    diffs = [first_difference(x, y) for x, y in zip(te, ve)]
    res["identical_episodes"] = sum(d is None for d in diffs)
    res["first_differing_message"] = {
        e["problem_id"]: d for e, d in zip(te, diffs) if d is not None
    }
    res["identical_single_turns"] = sum(x == y for x, y in zip(tt, vt))
    res["vllm_speedup_episodes"] = round(
        res["vllm"]["episodes_per_s"] / res["transformers"]["episodes_per_s"], 2
    )
    print(
        f"greedy episodes identical: {res['identical_episodes']} of {len(te)}; single turns (generate_vllm vs generate_transformers): "
        f"{res['identical_single_turns']} of {len(tt)}; vLLM {res['vllm_speedup_episodes']}x the episodes/s of transformers"
    )
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return (
        0
        if res["identical_episodes"] == len(te) and res["identical_single_turns"] == len(tt)
        else 1
    )


if __name__ == "__main__":
    sys.exit(main())
