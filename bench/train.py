"""Training and rollout throughput of the tiny model on CPU, and how each scales with batch size; or SFT throughput of a pretrained base.

    python bench/train.py [--profile smoke] [--threads 1] [--steps 6] [--episodes 32]
    python bench/train.py --base [--profile smoke] [--threads 2] [--steps 2]

SFT: tokens per second of forward + backward + AdamW step on rendered corpus conversations (assistant-only loss),
with the output layer computed only at loss positions (`models.lm_loss`, what chapter 05 trains with) side by side with
the plain `model(input_ids, labels=...)` a user would write, at batch sizes 1-8.
Rollouts: generated tokens per second of the first assistant turn on held-out problems, with chapter 05's batched
KV-cache generator (`rollout.generate_transformers`) at batch sizes 1-32, side by side with `model.generate` called
one prompt at a time (the naive way). Both use the profile's tiny model (random weights: speed does not depend on them;
generation runs a fixed number of tokens so every row does the same work).
With `--base`: the profile's pretrained base (`train.base`, e.g. SmolLM2-135M-Instruct) instead, SFT only, batch 1 (what
chapter 05 trains with): full fine-tuning with the output layer at loss positions only, the same with the full output
layer (the plain way), and LoRA (`train.sft.lora_r`, all linear layers) with loss positions only, on the same corpus
conversations cut at `train.max_length` after context fitting; where the CPU computes bf16 natively (AMX, AVX512-BF16) also
full fine-tuning under bf16 autocast (what `sft.bf16: true` trains with there). First it counts the tokens of every stage-1
conversation in the paper's rendering (whole results), in the old smoke's (results cut at 300 characters) and in the
profile's view (`train.view`, e.g. without the reasoning), beside the compact view measured and set aside. Rollout speed of a real base: bench/rollout.py.
Needs the smoke run's corpus and bank (`make reproduce` chapters 00-04).
"""

import argparse, json, random, resource, sys, time
from dataclasses import replace

import numpy as np
import torch

from shopdistill.reproduce.settings import load_config
from shopdistill.training.policy import load_policy, load_tokenizer
from shopdistill.training.rendering import render_prompt, sft_row, tool_schemas_for_training
from shopdistill.training.loss import lm_loss


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def encode(tok, row, max_len):
    "input ids and labels (-100 outside assistant turns) of one rendered SFT example."
    from trl.chat_template_utils import get_training_chat_template

    enc = tok.apply_chat_template(
        row["messages"],
        tools=json.loads(row["tools"]),
        chat_template=get_training_chat_template(tok),
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    ids, mask = list(enc["input_ids"])[:max_len], list(enc["assistant_masks"])[:max_len]
    return ids, [t if m else -100 for t, m in zip(ids, mask)]


def batches(examples, bs, pad):
    for i in range(0, len(examples) - bs + 1, bs):
        chunk = examples[i : i + bs]
        L = max(len(x[0]) for x in chunk)
        ids = torch.full((bs, L), pad)
        lab = torch.full((bs, L), -100)
        att = torch.zeros((bs, L), dtype=torch.long)
        for j, (x, y) in enumerate(chunk):
            ids[j, : len(x)] = torch.tensor(x)
            lab[j, : len(y)] = torch.tensor(y)
            att[j, : len(x)] = 1
        yield ids, att, lab


def sft_speed(model, examples, bs, steps, pad, loss_positions_only, bf16=False):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    it = batches(examples * 4, bs, pad)
    next(it)  # warm-up batch: allocator and kernels
    toks, t0 = 0, None
    for k, (ids, att, lab) in enumerate(it):
        if k == 1:
            t0, toks = time.perf_counter(), 0
        if k > steps:
            break
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = (
                lm_loss(model, ids, att, lab)
                if loss_positions_only
                else model(input_ids=ids, attention_mask=att, labels=lab).loss
            )
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        toks += int(att.sum())
    return toks / (time.perf_counter() - t0)


def rollout_speed(model, tok, prompts, bs, new_tokens, batched):
    from shopdistill.training.rollout import generate_transformers

    pad = tok.pad_token_id
    t0, gen = time.perf_counter(), 0
    if batched:
        for i in range(0, len(prompts), bs):
            chunk = prompts[i : i + bs]
            out = generate_transformers(
                model,
                chunk,
                max_new_tokens=new_tokens,
                temperature=1.0,
                top_p=1.0,
                seeds=list(range(i, i + len(chunk))),
                stop_ids=[-1],
                pad_id=pad,
            )
            gen += sum(len(o) for o in out)
    else:
        model.eval()
        with torch.inference_mode():
            for i, p in enumerate(prompts):
                torch.manual_seed(i)
                out = model.generate(
                    torch.tensor([p]),
                    attention_mask=torch.ones(1, len(p), dtype=torch.long),
                    max_new_tokens=new_tokens,
                    min_new_tokens=new_tokens,
                    do_sample=True,
                    temperature=1.0,
                    top_p=1.0,
                    pad_token_id=pad,
                )
                gen += out.shape[1] - len(p)
    return gen / (time.perf_counter() - t0)


def view_tokens(ts, rows) -> dict:
    "Mean, median and max tokens of `rows` (stage 1's conversations) in four renderings under the base's tokenizer."
    tok, tools, out = (
        load_tokenizer(ts.base, ts),
        tool_schemas_for_training(),
        {},
    )  # no weights: only tokens are counted
    mine = dict(tok.agent_view)
    said = (
        f"this profile ({mine['style']}, results cut at {ts.max_tool_chars} chars, "
        f"{'with' if mine.get('think', True) else 'without'} reasoning)"
    )
    for name, view, chars in (
        ("paper, whole results", {"style": "paper"}, None),
        ("paper, results cut at 300 chars", {"style": "paper"}, 300),
        ("compact, 300 tokens a result", {"style": "compact", "result_tokens": 300}, None),
        (said, mine, ts.max_tool_chars),
    ):
        tok.agent_view, tok.max_tool_chars = view, chars
        n = [
            len(render_prompt(tok, r["messages"], tools, add_generation_prompt=False)[1])
            for r in rows
        ]
        out[name] = {
            "mean": float(np.mean(n)),
            "median": float(np.median(n)),
            "max": int(max(n)),
            "conversations": len(n),
        }
        print(
            f"{name:>48}: mean {np.mean(n):6,.0f}  median {np.median(n):6,.0f}  max {max(n):6,}  tokens a conversation ({len(n)})"
        )
    return out


def base_sft(a, ts, rows):
    "SFT tokens/s of the profile's pretrained base at batch 1: full fine-tuning two ways (and under bf16 autocast where native), and LoRA."
    from peft import get_peft_model
    from shopdistill.training.settings import cpu_bf16
    from shopdistill.training.trainer import (
        peft_config,
    )  # the LoRA config chapter 05's SFT trainer is given

    tools = tool_schemas_for_training()
    results, examples = {}, None
    modes = [
        ("full, loss positions only", False, True, False),
        ("full, whole output layer", False, False, False),
        (f"LoRA r{ts.sft.lora_r}, loss positions only", True, True, False),
    ]
    if cpu_bf16():
        modes.insert(1, ("full, loss positions, bf16 autocast", False, True, True))
    for name, lora, positions_only, bf16 in modes:
        model, tok = load_policy(
            ts.base, ts
        )  # a fresh copy per row: each row's optimizer state starts empty
        if lora:
            model = get_peft_model(
                model, peft_config(replace(ts.sft, lora=True))
            )  # the profile's LoRA settings, on
        if examples is None:  # the same tokenizer every row: encoded once
            examples = [
                encode(tok, sft_row(tok, r["messages"], tools), ts.max_length) for r in rows
            ]
            n = sum(p.numel() for p in model.parameters())
            print(
                f"{ts.base}: {n / 1e6:.1f}M parameters ({next(model.parameters()).dtype}), {a.threads} thread(s); SFT examples of "
                f"{np.mean([len(x[0]) for x in examples]):.0f} tokens (cut at {ts.max_length}; view {tok.agent_view})"
            )
            print(
                f"\nSFT tokens/s at batch 1 (forward + backward + AdamW), {a.steps} timed steps per row after two warm-up steps"
            )
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        results[name] = sft_speed(
            model, examples, 1, a.steps, tok.pad_token_id, positions_only, bf16
        )
        print(
            f"{name:>32}: {results[name]:8,.1f} tokens/s  ({trainable / 1e6:.2f}M trainable)  peak RSS {rss_mb():,.0f} MB",
            flush=True,
        )
        del model
    first = next(iter(results.values()))
    for name, v in results.items():
        print(f"{name:>32}: {v / first:.2f}x the first row")
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="smoke")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=6, help="timed SFT steps per batch size")
    ap.add_argument(
        "--episodes", type=int, default=32, help="prompts generated per rollout setting"
    )
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument(
        "--max-len", type=int, default=4096, help="cut SFT examples here (the tiny model's context)"
    )
    ap.add_argument(
        "--base",
        action="store_true",
        help="SFT speed of the profile's pretrained base (train.base) instead of the tiny model",
    )
    ap.add_argument(
        "--data", default=None, help="the profile whose run holds the corpus (default: --profile)"
    )
    ap.add_argument(
        "--examples", type=int, default=8, help="--base: corpus conversations cycled through"
    )
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    random.seed(0)
    from shopdistill.core.progress import quiet_libraries

    quiet_libraries()  # no weight-loading bars between the rows
    cfg = load_config(a.profile)
    ts = cfg.train
    run = (load_config(a.data) if a.data else cfg).run
    from datasets import load_from_disk
    from shopdistill.corpus.trajectory import from_arrow_row

    corpus = run.corpus().dataset
    if not corpus.exists():
        sys.exit(f"{corpus} is missing: run `make reproduce` (chapters 00-04) first")
    train = load_from_disk(str(corpus))["train"]
    if a.base:
        from shopdistill.training.sft import per_problem_rows

        keep = [
            i for i, c in enumerate(train["category"]) if c in ts.sft.categories
        ]  # what stage 1 trains on
        stage1 = per_problem_rows([from_arrow_row(train[i]) for i in keep], ts.sft.per_problem)
        print("Tokens of stage 1's conversations, rendered four ways:")
        view_tokens(ts, stage1)
        print()
        base_sft(a, ts, stage1[: a.examples])
        return
    rows = [from_arrow_row(r) for r in train.select(range(64))]
    texts = [m.get("content") or "" for r in rows for m in r["messages"]][:2000]
    model, tok = load_policy("tiny", ts, texts=texts)
    tools = tool_schemas_for_training()
    examples = [encode(tok, sft_row(tok, r["messages"], tools), a.max_len) for r in rows]
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"tiny model: {n_params / 1e6:.2f}M parameters, {a.threads} thread(s); SFT examples of {np.mean([len(x[0]) for x in examples]):.0f} tokens "
        f"(cut at {a.max_len}), {np.mean([np.mean(np.array(y) != -100) for _, y in examples]) * 100:.0f}% of them assistant tokens"
    )
    print(f"\nSFT tokens/s (forward + backward + AdamW), {a.steps} timed steps per row")
    print(f"{'batch':>5} {'loss positions only':>20} {'full output layer':>18} {'ratio':>6}")
    sft = {}
    for bs in (1, 2, 4, 8):
        ours = sft_speed(model, examples, bs, a.steps, tok.pad_token_id, True)
        plain = sft_speed(model, examples, bs, a.steps, tok.pad_token_id, False)
        sft[bs] = (ours, plain)
        print(f"{bs:>5} {ours:>20,.0f} {plain:>18,.0f} {ours / plain:>6.2f}")
    bank = [json.loads(l) for l in run.bank().read_text().splitlines() if l.strip()]
    held = [p for p in bank if p.get("pool") == "held_out"][: a.episodes]
    prompts = [
        render_prompt(tok, [{"role": "user", "content": p["query"]}], tools)[1] for p in held
    ]
    print(
        f"\nRollout tokens/s: first assistant turn of {len(prompts)} held-out problems (prompts of {np.mean([len(p) for p in prompts]):.0f} tokens), "
        f"{a.new_tokens} new tokens each"
    )
    naive = rollout_speed(model, tok, prompts, 1, a.new_tokens, batched=False)
    print(f"{'batch':>5} {'batched KV cache':>17} {'generate() one by one':>22} {'ratio':>6}")
    roll = {}
    for bs in (1, 4, 16, 32):
        ours = rollout_speed(model, tok, prompts, bs, a.new_tokens, batched=True)
        roll[bs] = ours
        print(f"{bs:>5} {ours:>17,.0f} {naive:>22,.0f} {ours / naive:>6.2f}")
    print(
        f"\nscaling 1 -> 8 (SFT, ours): {sft[8][0] / sft[1][0]:.2f}x; rollouts 1 -> 32: {roll[32] / roll[1]:.2f}x; peak RSS {rss_mb():,.0f} MB"
    )


if __name__ == "__main__":
    main()
