"Shared test fixtures."

import pytest

from shopdistill.reproduce.settings import load_config

TINY_SEASON = """seed: 0
catalog: {n_products: 3000, seed: 0}
tasks: {n: {product: 20, shop: 20, voucher: 20}, seed: 0}
scoring: {similarity: offline}
arena:
  pools: {fractions: {open: 0.5, held_out: 0.4, never_touch: 0.1}, seed: 0, suite_per_category: 3, suite_versions: 2, race_problems: 6}
arena_traces: {days: 3, miners: {subtask: 3, agentic: 3, decoy: 2}, validators: 2, eligible_runs: 2, workers: 2, shard_size: 200}
judge: {backend: proxy}
"""


@pytest.fixture(scope="session")
def tiny_season_yaml() -> str:
    "The profile of the tiny season (chapter 04's tests add their own filter/corpus lines to it)."
    return TINY_SEASON


@pytest.fixture(scope="session")
def tiny_season(tmp_path_factory):
    "A three-day season of eight miners (about 500 traces) on two processes, simulated once per pytest session."
    from shopdistill.arena.season import simulate_season

    base = tmp_path_factory.getbasetemp() / "tiny-season-04"
    if not (base / "arena" / "season.json").exists():
        base.mkdir(exist_ok=True)
        (base / "season.yaml").write_text(TINY_SEASON)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(
                "SHOPDISTILL_RUNS", str(tmp_path_factory.getbasetemp() / "runs")
            )  # its sandbox goes there, not into runs/
            cfg = load_config(base / "season.yaml")
            simulate_season(
                cfg.run,
                cfg.arena_traces,
                cfg.arena,
                cfg.catalog,
                cfg.search,
                cfg.tasks,
                cfg.scoring,
                out_dir=base / "arena",
                workers=2,
                progress=False,
            )
    return base


@pytest.fixture(scope="session")
def arena_copy(tmp_path_factory, tiny_season):
    """A factory: (name, extra profile lines) -> a fresh folder holding a copy of the tiny season's `arena/` and `tiny.yaml`,
    the season's profile plus the extra lines (chapter 04's tests add their filter and corpus settings)."""
    import shutil

    def make(name: str, extra_yaml: str = ""):
        d = tmp_path_factory.mktemp(name)
        shutil.copytree(tiny_season / "arena", d / "arena")
        (d / "tiny.yaml").write_text(TINY_SEASON + extra_yaml)
        return d

    return make


@pytest.fixture(scope="session")
def make_qwen3_tokenizer():
    """A factory: (texts, vocab size) -> chapter 04's offline byte-level BPE (`train_bpe`: Qwen's special and added tokens)
    as a transformers tokenizer carrying TRL's copy of Qwen3's chat template. No downloads."""

    def make(texts, vocab_size: int):
        from transformers import PreTrainedTokenizerFast
        from trl.chat_template_utils import qwen3_chat_template
        from shopdistill.corpus.tokens import train_bpe

        tok = PreTrainedTokenizerFast(
            tokenizer_object=train_bpe(texts, vocab_size),
            eos_token="<|im_end|>",
            pad_token="<|endoftext|>",
        )
        tok.chat_template = qwen3_chat_template
        return tok

    return make


CORPUS_YAML = (
    "filter: {tokenizer: bpe, bpe_vocab: 1000, bpe_sample: 100}\ncorpus: {eval_fraction: 0.3}\n"
)


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory, arena_copy):
    """(folder, summary) of chapter 04's corpus built once per session from the tiny season's raw traces (`folder/corpus`;
    the season's `arena/` with its hidden labels beside it), for the corpus tests and the corpus-level checks."""
    from shopdistill.corpus.build import build_corpus

    d = arena_copy("corpus04", CORPUS_YAML)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SHOPDISTILL_RUNS", str(tmp_path_factory.getbasetemp() / "runs"))
        cfg = load_config(d / "tiny.yaml")
        return d, build_corpus(
            cfg.run,
            cfg.filter,
            cfg.corpus,
            cfg.normalise,
            cfg.judge,
            cfg.arena.clusters,
            cfg.catalog,
            d / "arena" / "firehose",
            d / "corpus",
            workers=2,
            progress=False,
        )
