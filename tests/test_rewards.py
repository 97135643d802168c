"The per-step teacher-grounded reward (training.md §6): table of hand-computed values, the teacher's own turn, edge cases."

import json
from fractions import Fraction as F

import pytest

from shopdistill.core.run import Run
from shopdistill.training.rewards import (
    REWARD_RANGE,
    jaccard,
    parse_turn,
    per_step_reward,
    step_reward,
    step_reward_parts,
)


def reward_of(fmt: int, s: F, smax: F) -> float:
    "The mapping written out: -3 + 6 (format + 6 S/S_max) / 7."
    return float(-3 + F(6, 7) * (fmt + 6 * F(s) / F(smax)))


def tc(name: str, args: dict | str) -> str:
    body = args if isinstance(args, str) else json.dumps(args)
    return f'<tool_call>\n{{"name": "{name}", "arguments": {body}}}\n</tool_call>'


def msg(*calls, content="", think=None) -> dict:
    return {
        "role": "assistant",
        "content": content,
        "reasoning_content": think,
        "tool_calls": [
            {"type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for n, a in calls
        ]
        or None,
    }


FIND = ("find_product", {"q": "red cotton shirt", "page": 1})  # S_max = 1 + (1 + 2) = 4
VIEW = ("view_product_information", {"product_ids": "1,2,3"})  # S_max = 1 + (1 + 1) = 3
T_FIND, T_VIEW = msg(FIND), msg(VIEW)
T_TWO = msg(
    ("find_product", {"q": "red shirt"}), ("view_product_information", {"product_ids": "1,2"})
)  # S_max = 1 + 2 + 2 = 5
T_TEXT = msg(content="Here are my recommendations.")

# (case, teacher, policy completion, expected reward) -- S computed by hand in the comment
TABLE = [
    ("exact", T_FIND, tc(*FIND), reward_of(1, 4, 4)),
    (
        "exact with thinking and content",
        T_FIND,
        "<think>\nlet me search\n</think>\n\nSearching.\n" + tc(*FIND),
        reward_of(1, 4, 4),
    ),
    # names 1 + keys 1 + q J({red,cotton,shirt},{blue,shirt}) = 1/4 + page 1
    (
        "wrong arg value",
        T_FIND,
        tc("find_product", {"q": "blue shirt", "page": 1}),
        reward_of(1, 1 + 1 + F(1, 4) + 1, 4),
    ),
    # names 1 + keys J({q,page},{q}) = 1/2 + q 1 + page 0
    (
        "missing arg",
        T_FIND,
        tc("find_product", {"q": "red cotton shirt"}),
        reward_of(1, 1 + F(1, 2) + 1, 4),
    ),
    # names 1 + keys J({q,page},{q,page,sort}) = 2/3 + q 1 + page 1
    (
        "extra arg",
        T_FIND,
        tc("find_product", {"q": "red cotton shirt", "page": 1, "sort": "price"}),
        reward_of(1, 1 + F(2, 3) + 2, 4),
    ),
    # names 1 + keys 1 + q 1 + page "1" read as the schema's integer, as the sandbox reads it = 1
    (
        "page as text",
        T_FIND,
        tc("find_product", {"q": "red cotton shirt", "page": "1"}),
        reward_of(1, 4, 4),
    ),
    # names 1 + keys 1 + q 1 + page: "one" is no integer = 0
    (
        "page not a number",
        T_FIND,
        tc("find_product", {"q": "red cotton shirt", "page": "one"}),
        reward_of(1, 3, 4),
    ),
    # names J({find},{find,view}) = 1/2 + the find call 3
    (
        "extra call",
        T_FIND,
        tc(*FIND) + "\n" + tc("view_product_information", {"product_ids": "1"}),
        reward_of(1, F(1, 2) + 3, 4),
    ),
    # names 0, no same-name call: only the format
    ("wrong name", T_FIND, tc("view_product_information", FIND[1]), reward_of(1, 0, 4)),
    ("plain text for a tool turn", T_FIND, "I will look for a shirt.", reward_of(1, 0, 4)),
    # multisets: the order of calls does not matter
    (
        "reordered calls",
        T_TWO,
        tc("view_product_information", {"product_ids": "1,2"})
        + "\n"
        + tc("find_product", {"q": "red shirt"}),
        reward_of(1, 5, 5),
    ),
    # names J({find,view},{view}) = 1/2 + view call (1 + J({1,2},{2,1,9}) = 2/3)
    (
        "one of two calls, other ids",
        T_TWO,
        tc("view_product_information", {"product_ids": "2, 1, 9"}),
        reward_of(1, F(1, 2) + 1 + F(2, 3), 5),
    ),
    # names 1 + keys 1 + ids J({1,2,3},{1,3}) = 2/3: commas and spaces both separate
    (
        "comma/space tokens",
        T_VIEW,
        tc("view_product_information", {"product_ids": "1 3"}),
        reward_of(1, 2 + F(2, 3), 3),
    ),
    (
        "text-only teacher, text",
        T_TEXT,
        "<think>\ndone\n</think>\n\nHere you go.",
        reward_of(1, 1, 1),
    ),
    ("text-only teacher, a call", T_TEXT, tc(*FIND), reward_of(1, 0, 1)),
    # format 0 (a repeated call), match: names J({find},{find,find}) = 1/2 + 3
    ("duplicate call", T_FIND, tc(*FIND) + "\n" + tc(*FIND), reward_of(0, F(1, 2) + 3, 4)),
    # format 0 (a stray opening tag); the complete call still matches
    ("stray tool_call tag", T_FIND, tc(*FIND) + "\n<tool_call>\n", reward_of(0, 4, 4)),
    (
        "truncated call",
        T_FIND,
        '<tool_call>\n{"name": "find_product", "arguments": {"q": "red',
        REWARD_RANGE[0],
    ),
    ("unclosed thinking", T_FIND, "<think>\nI should search for " + tc(*FIND), REWARD_RANGE[0]),
    (
        "unparseable JSON",
        T_FIND,
        tc("find_product", '{"q": "red cotton shirt", page: 1}'),
        REWARD_RANGE[0],
    ),
    (
        "unparseable among good calls",
        T_TWO,
        tc("find_product", {"q": "red shirt"}) + "\n<tool_call>\n{oops}\n</tool_call>",
        REWARD_RANGE[0],
    ),
    (
        "no arguments object",
        T_FIND,
        '<tool_call>\n{"name": "find_product"}\n</tool_call>',
        REWARD_RANGE[0],
    ),
    (
        "unparseable for a text teacher",
        T_TEXT,
        "<tool_call>\n[1, 2]\n</tool_call>",
        REWARD_RANGE[0],
    ),
    ("empty turn", T_FIND, "", REWARD_RANGE[0]),
    ("empty turn for a text teacher", T_TEXT, "<think>\n\n</think>\n\n", REWARD_RANGE[0]),
]


@pytest.mark.parametrize("case,teacher,completion,expected", TABLE, ids=[c[0] for c in TABLE])
def test_reward_table(case, teacher, completion, expected):
    r = step_reward(completion, teacher)
    assert r == pytest.approx(expected, abs=1e-12), step_reward_parts(completion, teacher)
    assert REWARD_RANGE[0] <= r <= REWARD_RANGE[1]


def test_table_is_ordered_sensibly():
    by = {c[0]: c[3] for c in TABLE}
    assert by["exact"] == REWARD_RANGE[1] and by["unparseable JSON"] == REWARD_RANGE[0]
    partial = [
        v
        for k, v in by.items()
        if k
        not in (
            "exact",
            "exact with thinking and content",
            "reordered calls",
            "text-only teacher, text",
            "page as text",
        )
        and v not in REWARD_RANGE
    ]
    assert partial and all(REWARD_RANGE[0] < v < REWARD_RANGE[1] for v in partial)
    assert by["wrong arg value"] > by["missing arg"] > by["wrong name"] > by["unparseable JSON"]


def test_inputs_in_other_shapes():
    # a policy turn as a parsed message, a list of messages, and the teacher as a JSON string give the same reward
    pol = msg(("find_product", {"q": "blue shirt", "page": 1}))
    text = tc("find_product", {"q": "blue shirt", "page": 1})
    r = step_reward(text, T_FIND)
    assert (
        step_reward(pol, T_FIND)
        == r
        == step_reward([pol], T_FIND)
        == step_reward(text, json.dumps(T_FIND))
    )
    assert per_step_reward(
        completions=[text, tc(*FIND)], teacher_action=[json.dumps(T_FIND)] * 2
    ) == [r, REWARD_RANGE[1]]
    assert (
        step_reward(tc(*FIND) + "<|im_end|>\n<|im_start|>user\ngarbage", T_FIND) == REWARD_RANGE[1]
    )


def test_jaccard_multisets():
    assert jaccard([], []) == 1.0
    assert jaccard(["a", "a"], ["a"]) == 0.5
    assert jaccard(["a", "b"], ["b", "c"]) == pytest.approx(1 / 3)
    assert parse_turn("no calls")["calls"] == [] and parse_turn("no calls")["format"] == 1


def _template_tokenizer():
    "A throwaway tokenizer that carries TRL's Qwen3 chat template: enough to render text."
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen3_chat_template

    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")),
        unk_token="<unk>",
    )
    tok.chat_template = qwen3_chat_template
    return tok


def teacher_completion(tok, prompt: list[dict], action: dict, tools: list[dict]) -> str:
    "The teacher's turn as the chat template renders it after the generation prompt of its state."
    head = tok.apply_chat_template(prompt, tools=tools, tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template(prompt + [action], tools=tools, tokenize=False)
    assert full.startswith(head)
    return full[len(head) :]


def test_teacher_turn_through_chat_template_is_maximal():
    tok = _template_tokenizer()
    prompt = [{"role": "user", "content": "a red cotton shirt please"}]
    for action in (
        msg(FIND, think="I should search."),
        T_TWO,
        msg(VIEW, content="Checking details."),
        T_TEXT,
    ):
        comp = teacher_completion(tok, prompt, action, tools=[])
        assert step_reward(comp, action) == REWARD_RANGE[1], (comp, step_reward_parts(comp, action))


CORPUS = (
    Run.of("smoke").corpus().steps
)  # the smoke run's per-step view, when chapter 04 has built it


@pytest.mark.skipif(
    not CORPUS.exists(), reason=f"per-step corpus not built ({CORPUS}); run chapter 04"
)
def test_teacher_turns_of_the_corpus_are_maximal():
    import datasets

    steps = datasets.load_from_disk(str(CORPUS))["train"]
    tok = _template_tokenizer()
    for row in steps.select(range(0, len(steps), max(1, len(steps) // 150))):
        comp = teacher_completion(
            tok, row["prompt"], row["teacher_action"], json.loads(row["tools"])
        )
        assert step_reward(comp, row["teacher_action"]) == REWARD_RANGE[1], row["trajectory_id"]


def test_page_as_text_and_as_number_score_alike():
    'The sandbox reads every argument as text, so page "2" and page 2 open the same page and score the same.'
    teacher = msg(("find_product", {"q": "red cotton shirt", "page": 2}))
    assert (
        step_reward(tc("find_product", {"q": "red cotton shirt", "page": "2"}), teacher)
        == step_reward(tc("find_product", {"q": "red cotton shirt", "page": 2}), teacher)
        == REWARD_RANGE[1]
    )


def test_a_turn_cut_at_the_budget_scores_below_the_same_turn_ended():
    from shopdistill.training.rewards import turn_reward

    right = tc(*FIND)
    assert (
        step_reward(right, T_FIND, ended=False)
        < step_reward(right, T_FIND, ended=True)
        == REWARD_RANGE[1]
    )
    # through TRL's reward interface: the end is read from the token ids (7 ends a turn here), not from the text
    got = turn_reward(stop_ids=[7], unended=-2.5)(
        completions=[right, right],
        teacher_action=[json.dumps(T_FIND)] * 2,
        completion_ids=[[1, 2, 7], [1, 2, 3]],
    )
    assert got == [REWARD_RANGE[1], -2.5]
    # the text-only reward cannot tell them apart: what the ablation's `turn_end: false` arm keeps
    assert per_step_reward(completions=[right], teacher_action=[json.dumps(T_FIND)]) == [
        REWARD_RANGE[1]
    ]
