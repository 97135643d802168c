"""The layers of the settings: the dataclass defaults are the paper's values, `configs/full.yaml` names only this machine's
paths, models, backends and hardware, `configs/smoke.yaml` only what smoke shrinks, `configs/ci.yaml` only what ci changes
over smoke. Prints, for each profile, its files, their lines (all, and setting lines: neither blank nor comment), the
digest of its effective settings, and any training hyperparameter full.yaml writes; exits 1 when a check fails. Usage:

    python bench/settings_layers.py

tests/test_settings_layers.py runs the same checks, and pins the three digests.
"""

import sys
from pathlib import Path

import yaml

from shopdistill.reproduce.settings import load_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PROFILES = ("smoke", "ci", "full")
MAX_SETTING_LINES = 100  # smoke.yaml and ci.yaml: readable on one screen
# Keys (at any depth below a section) that are training or sizing choices, not the machine's: full.yaml writes none of
# them, since the defaults are the paper's values.
HYPERPARAMETERS = frozenset(
    """
    lr lr_sweep stage2_lr sweep_steps max_steps stage2_steps epochs batch_size grad_accum warmup_ratio scheduler
    weight_decay max_grad_norm adam_beta1 adam_beta2 beta epsilon epsilon_high loss_type scale_rewards num_iterations
    lora lora_r lora_alpha lora_dropout lora_targets temperature top_p top_k k samples n_samples num_generations mix
    problems n_problems sampled sampled_problems outcome_problems screen_states screen_samples screen_batch mixed_only
    max_states max_length max_new_tokens max_prompt_tokens max_completion_length max_tool_calls max_tool_chars step_cap
    categories per_problem min_desirable view think n n_products n_tasks catalog_products tasks days miners validators
    eligible_runs save_steps logging_steps
""".split()
)


def setting_lines(path: Path) -> int:
    "Lines of a profile file that are neither blank nor a comment (a flow mapping on one line counts once)."
    return sum(
        1 for l in path.read_text().splitlines() if l.strip() and not l.lstrip().startswith("#")
    )


def hyperparameters_in(path: Path) -> list[str]:
    "Dotted keys below the top level of profile file `path` whose last part is a training hyperparameter."

    def walk(d, prefix):
        for k, v in d.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if prefix and k in HYPERPARAMETERS:
                yield key
            if isinstance(v, dict):
                yield from walk(v, key)

    return list(walk(yaml.safe_load(path.read_text()) or {}, ""))


def problems() -> list[str]:
    "Every way the layering is broken (empty: all good)."
    out = [
        f"configs/{p}.yaml: {n} setting lines (at most {MAX_SETTING_LINES - 1})"
        for p in ("smoke", "ci")
        if (n := setting_lines(CONFIGS / f"{p}.yaml")) >= MAX_SETTING_LINES
    ]
    out += [
        f"configs/full.yaml writes a training hyperparameter (a default's job): {k}"
        for k in hyperparameters_in(CONFIGS / "full.yaml")
    ]
    files = {p: [f.name for f in load_config(p).files] for p in PROFILES}
    want = {"smoke": ["smoke.yaml"], "ci": ["ci.yaml", "smoke.yaml"], "full": ["full.yaml"]}
    out += [f"profile {p} reads {files[p]}, not {want[p]}" for p in PROFILES if files[p] != want[p]]
    return out


def main() -> int:
    for p in PROFILES:
        s, f = load_config(p), CONFIGS / f"{p}.yaml"
        print(
            f"{p:6} {' <- '.join(q.name for q in s.files):22} {len(f.read_text().splitlines()):4} lines "
            f"{setting_lines(f):4} settings  digest {s.digest()}"
        )
    bad = problems()
    for b in bad:
        print("FAIL", b)
    if not bad:
        print(
            "ok: smoke and ci under",
            MAX_SETTING_LINES,
            "setting lines, no hyperparameter in full.yaml",
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
