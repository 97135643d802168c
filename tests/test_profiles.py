"""The repository's profiles: each holds only what differs from what it builds on (the defaults, or the profile it extends),
and they load as documented."""

from pathlib import Path

import pytest
import yaml

from shopdistill.reproduce.settings import EXTENDS, Settings, load_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
MISSING = object()
# full.yaml writes out the models, endpoint and precision the paper's run uses even where the defaults already say so:
# they are what a reader must download, serve or have, next to the paths
FULL_NAMES_THE_MACHINE = {
    "scoring.similarity",
    "judge.backend",
    "judge.models",
    "judge.base_url",
    "filter.tokenizer",
    "train.base",
    "train.dtype",
}


def _leaves(d: dict, prefix=()):
    "(key path, value) of every leaf of a profile file's mapping; an empty mapping is a leaf."
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from _leaves(v, prefix + (k,))
        else:
            yield prefix + (k,), v


def _get(d: dict, path):
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return MISSING
        d = d[k]
    return d


@pytest.mark.parametrize("name", ["smoke", "ci", "full"])
def test_a_profile_lists_only_what_differs(name):
    """Every key the file writes changes the value its parent's effective settings (defaults included) would give; the
    parent of a file that extends nothing (smoke, full) is the defaults, which are the paper's values."""
    own = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    ref = own.pop(EXTENDS, None)
    parent = (
        load_config(ref).effective()
        if ref
        else Settings(profile="defaults", path=CONFIGS).effective()
    )
    same = [".".join(k) for k, v in _leaves(own) if _get(parent, k) == v]
    if name == "full":
        same = [k for k in same if k not in FULL_NAMES_THE_MACHINE]
    assert not same, f"configs/{name}.yaml restates what it extends: {same}"


def test_the_guard_above_sees_a_restated_key(tmp_path):
    "The check can fail: a child that repeats one of its parent's values is caught."
    own = {"catalog": {"n_products": 5000, "seed": 0}}
    parent = load_config("smoke").effective()
    assert [".".join(k) for k, v in _leaves(own) if _get(parent, k) == v] == ["catalog.seed"]


def test_ci_extends_smoke_and_full_stands_alone_on_the_defaults():
    smoke, ci, full = load_config("smoke"), load_config("ci"), load_config("full")
    assert [f.name for f in ci.files] == ["ci.yaml", "smoke.yaml"] and [
        f.name for f in full.files
    ] == ["full.yaml"]
    assert ci.catalog.n_products < smoke.catalog.n_products < full.catalog.n_products
    assert ci.arena_traces.days < smoke.arena_traces.days < full.arena_traces.days
    assert (
        ci.train.sft.max_steps < smoke.train.sft.max_steps
        and ci.train.eval.n_problems < smoke.train.eval.n_problems
    )
    assert (
        ci.train.base == "tiny"
        and smoke.train.base == "smollm2-135m-instruct"
        and full.train.base == "Qwen/Qwen3-4B"
    )
    assert (ci.train.view.style, smoke.train.view.style, full.train.view.style) == (
        "paper",
    ) * 3  # the compact view: measured, not chosen (README)
    assert (
        ci.search == smoke.search == full.search
    )  # ShoppingBench's search semantics in every profile
    assert ci.loop.enabled  # every part of the recipe and the loop still runs in CI
