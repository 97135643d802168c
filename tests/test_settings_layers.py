"""The layers of the settings (bench/settings_layers.py): defaults are the paper's values, full.yaml names only the machine
(paths, models, backends, hardware), smoke.yaml and ci.yaml list only what they change, each on one screen; and the
effective settings of every profile are pinned by their digests."""

import importlib.util
from pathlib import Path

import pytest

from shopdistill.reproduce.settings import load_config

_spec = importlib.util.spec_from_file_location(
    "settings_layers", Path(__file__).resolve().parents[1] / "bench" / "settings_layers.py"
)
layers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(layers)

# The sha256 of each profile's effective settings (`load_config(p).digest()`: defaults included, paths relative to the
# repository, so the same on every machine). Moving a value between the dataclass defaults and the profile files must
# leave these alone; update a constant only in a change that means to move a profile's settings (and so its results).
# (Last moved by the new `variants` section, empty in every profile, and by smoke's rollouts choosing their dtype from
# the CPU: `train.rollout.vllm_dtype: auto`, which moves smoke's results where the CPU has bf16 units; then by stage 5's
# reward that reads the turn's end, its task-matched states, steps from states, and smoke's seeds of stage 5; then by
# `arena.score_rule`, whose default, `judge`, leaves every season as it was; then by `corpus.unfiltered`, which writes the
# unfiltered split beside the corpus and leaves the corpus as it was.)
DIGESTS = {
    "smoke": "8de28c9886557ca358bccb754b99c7d09b2e7ad8ce9bdd7fa16fdf0c65fab42a",
    "ci": "4e8fec03eef6565beea0436eebc04546dffcfd393db6aa2aedba075f0b28f648",
    "full": "25ddd4921d28b5d1dd41155d48858a381ea5563534222ebc17fa483fe4bdd503",
}


@pytest.mark.parametrize("profile", sorted(DIGESTS))
def test_the_effective_settings_of_each_profile_are_pinned(profile):
    assert load_config(profile).digest() == DIGESTS[profile]


@pytest.mark.parametrize("profile", ["smoke", "ci"])
def test_smoke_and_ci_fit_on_one_screen(profile):
    assert layers.setting_lines(layers.CONFIGS / f"{profile}.yaml") < layers.MAX_SETTING_LINES


def test_full_writes_no_training_hyperparameter():
    assert layers.hyperparameters_in(layers.CONFIGS / "full.yaml") == []


def test_the_hyperparameter_guard_can_fail(tmp_path):
    p = tmp_path / "f.yaml"
    p.write_text(
        "catalog: {path: x}\ntrain:\n  base: b\n  sft: {lr: 1.0e-5}\n  rollout: {backend: vllm, step_cap: 30}\nkto: {beta: 0.02}\n"
    )
    assert layers.hyperparameters_in(p) == ["train.sft.lr", "train.rollout.step_cap", "kto.beta"]


def test_the_layering_holds():
    assert layers.problems() == []
