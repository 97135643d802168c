"Stage 5 (Dr. GRPO): explicit config, byte-identical prompts, a few steps on a tiny policy with each reward."

import dataclasses, json, math

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from shopdistill.reproduce.settings import load_config
from shopdistill.training.grpo import (
    GrpoSettings,
    dr_grpo_stage,
    fitted_env_class,
    grpo_config,
    outcome_grpo_stage,
    outcome_rows,
    outcome_trainer,
    screen_states,
    state_rows,
)
from shopdistill.training.rendering import ELIDED
from shopdistill.training.policy import load_policy
from shopdistill.core.run import StageFolder
from shopdistill.training.settings import TinySettings, TrainSettings, cpu_bf16
from shopdistill.training.rendering import render_prompt, sft_row, tool_schemas_for_training
from shopdistill.training.rewards import REWARD_RANGE, per_step_reward
from shopdistill.corpus.trajectory import assistant_message, make_tool_call

TINY = TrainSettings(
    tiny=TinySettings(
        bpe_vocab=400, hidden=32, layers=2, heads=2, kv_heads=1, intermediate=64, seed=0
    ),
    max_tool_chars=200,
)
FAST = dict(
    num_generations=2,
    batch_size=2,
    grad_accum=1,
    max_steps=2,
    max_completion_length=24,
    lr=1e-3,
    screen_samples=2,
    screen_batch=4,
    lora=False,
    bf16=False,
    logging_steps=1,
    save_steps=1000,
    mixed_only=False,
)


@pytest.fixture(scope="module")
def tiny():
    return load_policy("tiny", TINY)


def conversation(n_turns: int = 3) -> list[dict]:
    "A short tool conversation: user request, then search/result pairs, long results included (the fitting must cut them)."
    msgs = [{"role": "user", "content": "a red cotton shirt under 500 pesos"}]
    for i in range(n_turns):
        msgs.append(
            assistant_message(
                "",
                f"Search {i}.",
                [make_tool_call(f"c{i}", "find_product", {"q": f"red shirt {i}", "page": 1})],
            )
        )
        msgs.append(
            {
                "role": "tool",
                "tool_call_id": f"c{i}",
                "name": "find_product",
                "content": json.dumps([{"product_id": "1000000001", "title": "x" * 400}]),
            }
        )
    return msgs + [
        assistant_message(
            "", "Done.", [make_tool_call("cz", "recommend_product", {"product_ids": "1000000001"})]
        )
    ]


def step_view(msgs: list[dict], tools: list[dict]) -> list[dict]:
    "Per-step view rows (as chapter 04 writes them) of a conversation: one per assistant turn."
    return [
        {
            "trajectory_id": "t0",
            "turn": k,
            "problem_id": "p0",
            "prompt": msgs[:k],
            "teacher_action": m,
            "tools": json.dumps(tools),
        }
        for k, m in enumerate(msgs)
        if m["role"] == "assistant"
    ]


@pytest.mark.parametrize("profile", ["smoke", "full"])
def test_config_is_dr_grpo_and_explicit(profile, tmp_path):
    s = load_config(profile).grpo
    c = grpo_config(s, tmp_path, cpu=True)
    assert (c.loss_type, c.scale_rewards, c.beta) == ("dr_grpo", "none", 0.0)
    assert (
        c.learning_rate,
        c.lr_scheduler_type.value if hasattr(c.lr_scheduler_type, "value") else c.lr_scheduler_type,
    ) == (s.lr, s.scheduler)
    assert (c.num_generations, c.temperature, c.top_p, c.max_completion_length) == (
        s.num_generations,
        s.temperature,
        s.top_p,
        s.max_completion_length,
    )
    assert c.generation_batch_size % c.num_generations == 0
    assert c.use_cpu and c.bf16 == (
        s.bf16 and cpu_bf16()
    )  # bf16 on a CPU only where it computes bf16 natively, as every stage
    assert (c.adam_beta1, c.adam_beta2) == (s.adam_beta1, s.adam_beta2) == (0.9, 0.999)
    assert c.weight_decay == 0.0 and c.num_iterations == 1
    if profile == "full":
        assert (s.lr, s.scheduler, s.num_generations, s.temperature, s.beta) == (
            1e-6,
            "constant",
            8,
            1.0,
            0.0,
        )


def test_settings_reject_bad_values():
    with pytest.raises(ValueError, match="multiple of num_generations"):
        GrpoSettings(num_generations=3, batch_size=4, grad_accum=1)
    with pytest.raises(ValueError, match="grpo.reward"):
        GrpoSettings(reward="judge")


def test_prompt_is_byte_identical_to_sft(tiny):
    model, tok = tiny
    tools = tool_schemas_for_training()
    msgs = conversation()
    rows, rep = state_rows(step_view(msgs, tools), tok)
    assert rep["rows"] == 4 and rep["too_long"] == 0
    # the SFT example of the whole conversation, rendered as SFTTrainer renders it
    sft = sft_row(tok, msgs, tools)
    sft_text = tok.apply_chat_template(
        sft["messages"], tools=json.loads(sft["tools"]), tokenize=False
    )
    for k, row in zip([k for k, m in enumerate(msgs) if m["role"] == "assistant"], rows):
        text, ids = render_prompt(tok, msgs[:k], tools)
        assert row["prompt"] == text
        assert (
            tok(text=row["prompt"])["input_ids"] == ids
        )  # what GRPOTrainer feeds the model for a text prompt
        assert sft_text.startswith(text), k  # the SFT context of this turn, byte for byte
        assert ELIDED in text or k == 1  # long tool results were cut as SFT cuts them
        assert json.loads(row["teacher_action"]) == msgs[k]


def weights(model) -> dict:
    "A copy of every parameter of `model`, by name."
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def changed(before: dict, model) -> list[str]:
    "The parameters of `model` that differ from `before`."
    after = dict(model.named_parameters())
    return [n for n, w in before.items() if not torch.equal(w, after[n].detach())]


def test_screening_and_two_steps_per_step_reward(tiny, tmp_path, monkeypatch):
    import shopdistill.training.grpo as grpo
    from shopdistill.training.rewards import message_text

    model, tok = tiny
    tools = tool_schemas_for_training()
    rows, _ = state_rows(step_view(conversation(), tools), tok)
    # the reward the trainer is given scores the teacher's own turn highest, another tool lower, broken JSON lowest
    for r in rows:
        teacher = json.loads(r["teacher_action"])
        other = "terminate" if r["teacher_tool"] != "terminate" else "find_product"
        wrong = assistant_message(
            "",
            "x",
            [
                make_tool_call(
                    "w", other, {"status": "success"} if other == "terminate" else {"q": "lamp"}
                )
            ],
        )
        got = grpo.per_step_reward(
            completions=[
                message_text(teacher),
                message_text(wrong),
                "<tool_call>\n{oops\n</tool_call>",
            ],
            teacher_action=[r["teacher_action"]] * 3,
        )
        assert (
            got[0] == REWARD_RANGE[1]
            and REWARD_RANGE[0] < got[1] < got[0]
            and got[2] == REWARD_RANGE[0]
        ), (r["state_id"], got)
    # groups of 4: the tiny model's samples differ in reward; it rarely ends a turn in 24 tokens, so the text reward
    s = GrpoSettings(**{**FAST, "num_generations": 4, "batch_size": 4, "turn_end": False})
    kept, report = screen_states(model, tok, rows, s)
    assert report["screened"] == len(rows) == len(kept)  # mixed_only=False keeps every state
    assert all(
        REWARD_RANGE[0] <= r <= REWARD_RANGE[1] for st in report["states"] for r in st["rewards"]
    )
    assert (
        report["mixed"] == sum(st["mixed"] for st in report["states"]) >= 1
    )  # screening tells states apart
    assert [st["mixed"] for st in report["states"]] == [
        max(st["rewards"]) > min(st["rewards"]) for st in report["states"]
    ]
    _, report2 = screen_states(model, tok, rows, s)
    assert [st["rewards"] for st in report2["states"]] == [
        st["rewards"] for st in report["states"]
    ]  # seeded
    kept_mixed, rep_m = screen_states(model, tok, rows, dataclasses.replace(s, mixed_only=True))
    assert len(kept_mixed) == rep_m["mixed"]
    scored = []  # what the reward function handed the trainer, one list per generation batch

    def recording(*a, **kw):
        out = per_step_reward(*a, **kw)
        scored.append(out)
        return out

    recording.__name__ = "per_step_reward"
    monkeypatch.setattr(grpo, "per_step_reward", recording)
    before = weights(model)
    out = dr_grpo_stage(
        model, tok, kept, s, StageFolder(tmp_path / "dr_grpo"), resume=False, cpu=True
    )
    log = json.loads(StageFolder(tmp_path / "dr_grpo").train_log.read_text())
    steps = [h for h in log["log_history"] if "loss" in h]
    assert (
        log["global_step"] == 2 and len(steps) == 2 and all(math.isfinite(h["loss"]) for h in steps)
    )
    assert len(grpo.step_log(log)) == log["global_step"]  # the step log: one row per optimiser step
    assert all(
        REWARD_RANGE[0] <= h["reward"] <= REWARD_RANGE[1]
        for h in log["log_history"]
        if "reward" in h
    )
    # the logged rewards are the reward function's, and some group's samples differed (else Dr. GRPO has no gradient)
    assert len(scored) == 2 and all(len(x) == s.batch_size for x in scored)
    assert [h["reward"] for h in steps] == pytest.approx(
        [sum(x) / len(x) for x in scored], abs=1e-5
    )
    assert any(h["reward_std"] > 0 and h["grad_norm"] > 0 for h in steps), steps
    m2, t2 = load_policy(str(out))
    assert t2.max_tool_chars == TINY.max_tool_chars
    assert changed(before, m2), (
        "the saved policy equals the one before training: the step changed no weight"
    )


def test_outcome_grpo_refuses_the_compact_view(tiny, tmp_path):
    "TRL's environment loop writes tool results in the paper's view: a compact-view policy is refused before a trainer is built."
    model, tok = tiny
    before = getattr(tok, "agent_view", None)
    tok.agent_view = {"style": "compact", "result_tokens": 300}
    try:
        with pytest.raises(ValueError, match="train.view.style is 'compact'"):
            outcome_trainer(
                model, tok, [], None, GrpoSettings(**FAST), StageFolder(tmp_path / "outcome")
            )
    finally:
        tok.agent_view = before


def test_fitted_env_keeps_schemas_and_cuts_results():
    from shopdistill.sandbox.catalog import Catalog, generate_catalog
    from shopdistill.sandbox.search import SearchEngine
    from shopdistill.sandbox.task_synthesis import synthesize_tasks

    catalog = Catalog.from_records(list(generate_catalog(300, seed=0)))
    engine = SearchEngine.build(catalog)
    task = synthesize_tasks(catalog, {"product": 1}, seed=0)[0]
    cls = fitted_env_class(100)
    from transformers.utils import get_json_schema
    import inspect

    env = cls.factory(engine)()
    names = [
        n
        for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
        if not n.startswith("_") and n not in ("reset", "get_reward")
    ]
    assert [get_json_schema(getattr(env, n)) for n in names] == tool_schemas_for_training()
    row = outcome_rows([task])[0]
    env.reset(**row)
    out = env.find_product(q=task["query"][:40])
    assert out.endswith(ELIDED) and len(out) == 100 + len(ELIDED)
    env.recommend_product(task["reward"]["product_id"])  # the gold product: the episode succeeds
    assert env.get_reward() == 1.0


def test_outcome_grpo_one_step(tiny, tmp_path, monkeypatch):
    """One outcome-GRPO step. A random tiny policy never solves a task, so every reward would be 0 and Dr. GRPO would have
    no gradient: the sandbox of every other episode starts holding the gold recommendation (what a solving policy leaves
    there), and the real `get_reward` scores each episode. The logged rewards must be the sandbox's, and the step must move weights."""
    from shopdistill.sandbox.catalog import Catalog, generate_catalog
    from shopdistill.sandbox.tools import ShoppingEnv
    from shopdistill.sandbox.search import SearchEngine
    from shopdistill.sandbox.task_synthesis import synthesize_tasks

    model, tok = tiny
    catalog = Catalog.from_records(list(generate_catalog(300, seed=0)))
    engine = SearchEngine.build(catalog)
    tasks = synthesize_tasks(catalog, {"product": 2}, seed=0)
    s = GrpoSettings(
        **{
            **FAST,
            "reward": "outcome",
            "max_steps": 1,
            "max_tool_calls": 2,
            "max_completion_length": 48,
        }
    )
    episodes, scored = [], []
    reset, get_reward = ShoppingEnv.reset, ShoppingEnv.get_reward

    def forced_reset(self, **task):
        out = reset(self, **task)
        if task.get("reward") is not None:
            episodes.append(task["id"])
            if len(episodes) % 2:
                self._recommendation = task["reward"][
                    "product_id"
                ]  # one episode of each group of 2
        return out

    def recorded_reward(self):
        r = get_reward(self)
        scored.append((type(self), self._recommendation, r))
        return r

    monkeypatch.setattr(ShoppingEnv, "reset", forced_reset)
    monkeypatch.setattr(ShoppingEnv, "get_reward", recorded_reward)
    before = weights(model)
    out = outcome_grpo_stage(
        model, tok, tasks, engine, s, StageFolder(tmp_path / "outcome"), resume=False, cpu=True
    )
    monkeypatch.undo()
    log = json.loads(StageFolder(tmp_path / "outcome").train_log.read_text())
    assert log["global_step"] == 1 and log["reward"] == "outcome"
    steps = [h for h in log["log_history"] if "reward" in h]
    # every episode the trainer played was scored by the sandbox, and the logged reward is the mean of what it gave
    assert len(scored) == len(episodes) == s.batch_size and len(steps) == 1
    assert {r for _, _, r in scored} == {0.0, 1.0}, (
        scored
    )  # the forced episodes succeed, the policy's own do not
    assert (
        steps[0]["reward"] == pytest.approx(sum(r for _, _, r in scored) / len(scored))
        and steps[0]["reward_std"] > 0
    )
    assert changed(before, load_policy(str(out))[0]), (
        "the saved policy equals the one before training: the step changed no weight"
    )
    # the reward of the sandbox class the trainer played (tool results fitted), on its own: the gold 1.0, another hit or none 0.0
    cls = scored[0][0]
    assert cls.__name__ == "FittedShoppingEnv" and all(c is cls for c, _, _ in scored)
    task = tasks[0]
    gold = task["reward"]["product_id"]
    wrong = next(
        h["product_id"] for h in engine.find_product(task["query"]) if h["product_id"] != gold
    )
    for rec, want in ((gold, 1.0), (wrong, 0.0), (None, 0.0)):
        env = cls.factory(engine)()
        env.reset(**outcome_rows([task])[0])
        if rec:
            env.recommend_product(rec)
        assert env.get_reward() == want, (rec, want)


def test_compact_lm_head_gives_the_same_log_probs():
    from trl.trainer.utils import add_fused_lm_head
    from shopdistill.training.trainer import compact_lm_head

    model, _ = load_policy("tiny", TINY)
    add_fused_lm_head(model)
    torch.manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (2, 40))
    labels = ids.clone()
    labels[:, :30] = -100
    full = model(input_ids=ids, labels=labels, fused_lm_head=True).log_probs
    with compact_lm_head():
        compact = model(input_ids=ids, labels=labels, fused_lm_head=True).log_probs
    ref = torch.log_softmax(model(input_ids=ids).logits[:, :-1].float(), -1).gather(
        -1, ids[:, 1:, None]
    )[..., 0]
    mask = labels[:, 1:] != -100
    assert torch.allclose(full[mask], compact[mask], atol=1e-5) and torch.allclose(
        compact[mask], ref[mask], atol=1e-4
    )
    assert (compact[~mask] == 0).all()


def test_full_profile_trainers_build_on_the_tiny_model(tiny, tmp_path):
    "What the full profile's dry run does: the trainers build on CPU from full.yaml (LoRA on; vLLM off without a GPU, bf16 only where the CPU computes it)."
    from shopdistill.training.grpo import per_step_trainer

    model, tok = load_policy("tiny", TINY)
    s = load_config("full").grpo
    rows, _ = state_rows(step_view(conversation(), tool_schemas_for_training()), tok)
    tr = per_step_trainer(model, tok, rows, s, StageFolder(tmp_path), cpu=True)
    assert (tr.args.loss_type, tr.args.scale_rewards, tr.args.beta, tr.args.num_generations) == (
        "dr_grpo",
        "none",
        0.0,
        8,
    )
    assert not tr.args.use_vllm and tr.args.bf16 == cpu_bf16()
    assert hasattr(tr.model, "peft_config")  # LoRA, as the full profile asks


def test_states_are_drawn_from_the_training_categories_and_shown_evaluations_tools(tiny):
    "A state of a category stage 1 does not train on is never drawn; every state is shown the tools evaluation shows."
    model, tok = tiny
    tools = tool_schemas_for_training()
    seven = tools + [
        {
            "type": "function",
            "function": {
                "name": f"helper_{i}",
                "description": "x",
                "parameters": {"type": "object", "properties": {}},
            },
        }
        for i in range(3)
    ]
    rows = [
        dict(r, category=cat, trajectory_id=f"{cat}{i}")
        for i, cat in enumerate(["product", "shop", "voucher"] * 4)
        for r in step_view(conversation(1), seven)
    ]
    for seed in range(5):
        drawn, rep = state_rows(rows, tok, categories=["product"], limit=3, seed=seed)
        assert drawn and all(r["category"] == "product" for r in drawn), rep
    drawn, _ = state_rows(rows, tok, categories=["product"])
    msgs = conversation(1)
    for r in drawn:
        turn = int(r["state_id"].split(":")[1])
        text, ids = render_prompt(
            tok, msgs[:turn], tools
        )  # what evaluation's rollout renders (`rollout.Turns.prompt`)
        assert r["prompt"] == text and "helper_0" not in r["prompt"]
        assert tok(text=r["prompt"])["input_ids"] == ids  # GRPOTrainer's ids for a text prompt
        assert tok(r["prompt"], add_special_tokens=False)["input_ids"] == ids  # the screening's


def test_a_state_whose_teacher_calls_an_unshown_tool_is_skipped(tiny):
    model, tok = tiny
    msgs = [
        {"role": "user", "content": "two shirts from one shop"},
        assistant_message(
            "", "", [make_tool_call("c0", "find_products_in_same_shop", {"queries": "a|b"})]
        ),
    ]
    rows, rep = state_rows(step_view(msgs, tool_schemas_for_training()), tok)
    assert rows == [] and rep["other_tools"] == 1


def test_smollm2_prompts_tokenise_alike_for_stage_5_and_evaluation():
    "The real base's tokenizer adds no token of its own to a rendered prompt, so TRL and evaluation see one id list."
    from shopdistill.training.bases import base_folder

    name = "smollm2-135m-instruct"
    if not (base_folder(name) / "config.json").exists():
        pytest.skip(f"{name} is not provisioned (make env)")
    from shopdistill.training.policy import load_tokenizer

    tok = load_tokenizer(name, load_config("smoke").train)
    msgs = conversation()
    rows, _ = state_rows(step_view(msgs, tool_schemas_for_training()), tok)
    for r in rows:
        ids = render_prompt(
            tok, msgs[: int(r["state_id"].split(":")[1])], tool_schemas_for_training()
        )[1]
        assert (
            tok(text=r["prompt"])["input_ids"]
            == ids
            == tok(r["prompt"], add_special_tokens=False)["input_ids"]
        )


def test_learning_rate_zero_gives_back_the_starting_policy(tiny, tmp_path):
    "Stage 5 at lr 0 trains every step and changes no weight, so its evaluation is the stage-4 policy's, episode for episode."
    from shopdistill.sandbox.catalog import Catalog, generate_catalog
    from shopdistill.sandbox.search import SearchEngine
    from shopdistill.sandbox.task_synthesis import synthesize_tasks
    from shopdistill.training.rollout import run_episodes
    from shopdistill.training.settings import RolloutSettings

    model, tok = load_policy("tiny", TINY)
    rows, _ = state_rows(step_view(conversation(), tool_schemas_for_training()), tok)
    s = GrpoSettings(**{**FAST, "lr": 0.0, "max_steps": -1})
    before = weights(model)
    out = dr_grpo_stage(
        model, tok, rows, s, StageFolder(tmp_path / "dr_grpo"), resume=False, cpu=True
    )
    log = json.loads(StageFolder(tmp_path / "dr_grpo").train_log.read_text())
    assert log["global_step"] == len(rows)  # every kept state once: steps follow from the states
    m2, t2 = load_policy(str(out))
    assert not changed(before, m2)
    cat = Catalog.from_records(list(generate_catalog(300, seed=0)))
    eng = SearchEngine.build(cat)
    probs = [t for t in synthesize_tasks(cat, {"product": 2}, seed=0)][:2]
    rs = RolloutSettings(backend="transformers", step_cap=3, max_new_tokens=16, batch_size=2)
    play = lambda m, t: [
        (e["messages"], e["success"])
        for e in run_episodes(m, t, probs, eng, rs, n_samples=2, temperature=1.0)
    ]
    start, _ = load_policy("tiny", TINY)
    assert play(m2, t2) == play(start, tok)
