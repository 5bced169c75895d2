"""Pretrained LMs (purejaxrl_opt/core/models/causal_lm.py, sampling.py; purejaxrl_opt/host/lm/): loaders of
Hugging Face directories (single and sharded safetensors) and GGUF files, the tokenizer and its chat
template, the forward pass against a numpy implementation of the Hugging Face math, the KV cache,
sampling options, completion log-probs, save/load, and every bad input refused before compiling.

The tiny models are written here with numpy, safetensors and a `tokenizers` BPE trained on a few
lines (module-scoped: built once a file). Parity with transformers itself is tests/test_lm_parity.py.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")
pytest.importorskip("gguf")

from purejaxrl_opt.config.errors import ConfigError  # noqa: E402
from purejaxrl_opt.host.lm import load, pad_batch  # noqa: E402
from purejaxrl_opt.host.lm.gguf_file import permute_rows, unpermute_rows  # noqa: E402
from purejaxrl_opt.core.models import causal_lm  # noqa: E402
from purejaxrl_opt.core.models.sampling import SamplingConfig, generate, sample_token, score  # noqa: E402
from tests.conftest import compose  # noqa: E402

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] "
          "+ '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\n' }}{% endif %}")
TEXTS = ["The quick brown fox jumps over the lazy dog.", "Policy optimisation with a clipped ratio.",
         "What is 12 plus 30? It is 42.", "def add(a, b):\n    return a + b",
         "Language models predict the next token.", "Tokens, merges and a byte-level alphabet."]
LLAMA = {"model_type": "llama", "vocab_size": 320, "hidden_size": 32, "intermediate_size": 48,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 128,
         "tie_word_embeddings": False, "hidden_act": "silu"}
QWEN2 = {**LLAMA, "model_type": "qwen2", "tie_word_embeddings": True, "num_key_value_heads": 1}
QWEN3 = {**LLAMA, "model_type": "qwen3", "head_dim": 16}


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def backend():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TEXTS * 4, trainer)
    return tok


def hf_tensors(config: dict, seed: int) -> dict[str, np.ndarray]:
    """Random weights under their Hugging Face names and shapes ([out, in])."""
    rng = np.random.default_rng(seed)
    d, f, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim", d // heads)

    def w(*shape, mean=0.0):
        return (mean + 0.2 * rng.standard_normal(shape)).astype(np.float32)

    tensors = {"model.embed_tokens.weight": w(v, d), "model.norm.weight": w(d, mean=1.0)}
    if not config["tie_word_embeddings"]:
        tensors["lm_head.weight"] = w(v, d)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors.update({
            p + "input_layernorm.weight": w(d, mean=1.0), p + "post_attention_layernorm.weight": w(d, mean=1.0),
            p + "self_attn.q_proj.weight": w(heads * head_dim, d),
            p + "self_attn.k_proj.weight": w(kv * head_dim, d),
            p + "self_attn.v_proj.weight": w(kv * head_dim, d),
            p + "self_attn.o_proj.weight": w(d, heads * head_dim),
            p + "mlp.gate_proj.weight": w(f, d), p + "mlp.up_proj.weight": w(f, d),
            p + "mlp.down_proj.weight": w(d, f)})
        if config["model_type"] == "qwen2":
            tensors.update({p + "self_attn.q_proj.bias": w(heads * head_dim),
                            p + "self_attn.k_proj.bias": w(kv * head_dim),
                            p + "self_attn.v_proj.bias": w(kv * head_dim)})
        if config["model_type"] == "qwen3":
            tensors.update({p + "self_attn.q_norm.weight": w(head_dim, mean=1.0),
                            p + "self_attn.k_norm.weight": w(head_dim, mean=1.0)})
    return tensors


def write_hf_dir(path: Path, config: dict, tensors: dict, backend, shards: int = 1) -> Path:
    from safetensors.numpy import save_file

    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config))
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    (path / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": None, "eos_token": {"content": "<|im_end|>", "special": True},
        "pad_token": "<|endoftext|>", "chat_template": CHATML}))
    backend.save(str(path / "tokenizer.json"))
    if shards == 1:
        save_file(tensors, str(path / "model.safetensors"))
        return path
    names = sorted(tensors)
    weight_map = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = names[s::shards]
        save_file({n: tensors[n] for n in part}, str(path / file))
        weight_map.update({n: file for n in part})
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory, backend):
    """name -> (directory, config, tensors) for tiny Llama, Qwen2 and Qwen3 and a sharded Llama."""
    root = tmp_path_factory.mktemp("lm")
    out = {}
    for name, config, seed in (("llama", LLAMA, 0), ("qwen2", QWEN2, 1), ("qwen3", QWEN3, 2)):
        tensors = hf_tensors(config, seed)
        out[name] = (write_hf_dir(root / name, config, tensors, backend), config, tensors)
    out["llama_sharded"] = (write_hf_dir(root / "sharded", LLAMA, out["llama"][2], backend, shards=3),
                            LLAMA, out["llama"][2])
    return out


@pytest.fixture(scope="module")
def llama(models):
    return load(models["llama"][0])


# --------------------------------------------------------------------------- numpy reference
def reference_logits(config: dict, tensors: dict, ids: list[int]) -> np.ndarray:
    """The Hugging Face forward pass of one unpadded sequence in float64 numpy: ``[L, V]``."""
    t = {k: v.astype(np.float64) for k, v in tensors.items()}
    d, heads = config["hidden_size"], config["num_attention_heads"]
    kv, eps = config["num_key_value_heads"], config["rms_norm_eps"]
    head_dim = config.get("head_dim", d // heads)
    length = len(ids)

    def norm(x, w):
        return w * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)

    inv_freq = 1.0 / config["rope_theta"] ** (np.arange(0, head_dim, 2) / head_dim)
    angles = np.arange(length)[:, None] * inv_freq[None]
    cos, sin = np.cos(np.concatenate([angles] * 2, -1)), np.sin(np.concatenate([angles] * 2, -1))

    def rope(x):  # [L, h, D]
        half = head_dim // 2
        rotated = np.concatenate([-x[..., half:], x[..., :half]], -1)
        return x * cos[:, None] + rotated * sin[:, None]

    x = t["model.embed_tokens.weight"][ids]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = norm(x, t[p + "input_layernorm.weight"])
        proj = {}
        for name in "qkv":
            proj[name] = h @ t[p + f"self_attn.{name}_proj.weight"].T + t.get(p + f"self_attn.{name}_proj.bias", 0)
        q = proj["q"].reshape(length, heads, head_dim)
        k = proj["k"].reshape(length, kv, head_dim)
        v = proj["v"].reshape(length, kv, head_dim)
        if config["model_type"] == "qwen3":
            q, k = norm(q, t[p + "self_attn.q_norm.weight"]), norm(k, t[p + "self_attn.k_norm.weight"])
        q, k = rope(q), rope(k)
        out = np.zeros((length, heads, head_dim))
        for head in range(heads):
            g = head // (heads // kv)
            scores = q[:, head] @ k[:, g].T / np.sqrt(head_dim)
            scores = np.where(np.tril(np.ones((length, length), bool)), scores, -np.inf)
            weights = np.exp(scores - scores.max(-1, keepdims=True))
            out[:, head] = (weights / weights.sum(-1, keepdims=True)) @ v[:, g]
        x = x + out.reshape(length, -1) @ t[p + "self_attn.o_proj.weight"].T
        h = norm(x, t[p + "post_attention_layernorm.weight"])
        gate = h @ t[p + "mlp.gate_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * (h @ t[p + "mlp.up_proj.weight"].T)) @ t[p + "mlp.down_proj.weight"].T
    x = norm(x, t["model.norm.weight"])
    head = t["model.embed_tokens.weight"] if config["tie_word_embeddings"] else t["lm_head.weight"]
    return x @ head.T


# --------------------------------------------------------------------------- loading and the forward pass
@pytest.mark.parametrize("name", ["llama", "qwen2", "qwen3"])
def test_logits_match_a_numpy_forward_of_the_hf_math(models, name):
    path, config, tensors = models[name]
    lm = load(path)
    ids = lm.tokenizer.encode(TEXTS[2])
    ours = np.asarray(causal_lm.logits(lm.params, lm.cfg, np.array([ids]), np.ones((1, len(ids)))))[0]
    assert np.abs(ours - reference_logits(config, tensors, ids)).max() < 1e-4


def test_single_and_sharded_checkpoints_load_the_file_tensors(models, llama):
    sharded = load(models["llama_sharded"][0])
    tensors = models["llama"][2]
    assert jax.tree_util.tree_all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), llama.params,
                                               sharded.params))
    # kernels are the transposed Linear weights, layers stacked in order
    np.testing.assert_array_equal(llama.params["layers"]["q"][1], tensors["model.layers.1.self_attn.q_proj.weight"].T)
    np.testing.assert_array_equal(llama.params["lm_head"], tensors["lm_head.weight"].T)
    assert llama.cfg.num_kv_heads == 2 and not llama.cfg.tie_word_embeddings


def test_bfloat16_params_and_activations(models):
    lm = load(models["llama"][0], dtype="bfloat16")
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree_util.tree_leaves(lm.params))
    ids = np.array([lm.tokenizer.encode(TEXTS[0])])
    full = load(models["llama"][0])
    low = causal_lm.logits(lm.params, lm.cfg, ids, np.ones_like(ids))
    high = causal_lm.logits(full.params, full.cfg, ids, np.ones_like(ids))
    # bfloat16 keeps 8 bits of mantissa: errors of ~1% of the logits' scale (~1 here), not more
    assert low.dtype == jnp.float32 and float(jnp.abs(low - high).mean()) < 0.02
    assert float(jnp.abs(low - high).max()) < 0.25


def test_padding_side_does_not_change_a_sequence(llama):
    ids = [llama.tokenizer.encode(TEXTS[0]), llama.tokenizer.encode(TEXTS[4])]
    alone = [np.asarray(causal_lm.logits(llama.params, llama.cfg, np.array([s]), np.ones((1, len(s)))))[0]
             for s in ids]
    for side in ("left", "right"):
        tokens, mask = pad_batch(ids, 0, side, multiple=8)
        batch = np.asarray(causal_lm.logits(llama.params, llama.cfg, tokens, mask))
        for row, s in enumerate(ids):
            np.testing.assert_allclose(batch[row][mask[row] == 1], alone[row], atol=2e-5)
    greedy = SamplingConfig(max_new_tokens=6, temperature=0.0)
    outs = [np.asarray(generate(llama.params, llama.cfg, greedy, *pad_batch(ids, 0, side, 8),
                                jax.random.key(0))[0]) for side in ("left", "right")]
    np.testing.assert_array_equal(outs[0], outs[1])


def test_prefill_then_decode_matches_the_full_forward(llama):
    ids = llama.tokenizer.encode(TEXTS[1])
    tokens, mask = pad_batch([ids], 0, "left", multiple=32)
    full = np.asarray(causal_lm.logits(llama.params, llama.cfg, tokens, mask))[0]
    split = len(ids) - 4
    prompt, prompt_mask = pad_batch([ids[:split]], 0, "left", multiple=32)
    out, cache = causal_lm.prefill(llama.params, llama.cfg, prompt, prompt_mask, 40)
    steps = [np.asarray(out)[0]]
    for token in ids[split:-1]:
        out, cache = causal_lm.decode(llama.params, llama.cfg, jnp.array([token]), cache)
        steps.append(np.asarray(out)[0])
    np.testing.assert_allclose(np.stack(steps), full[-5:-1], atol=2e-5)  # after ids[-5] .. ids[-2]
    assert int(cache.index) == 32 + 3 and int(cache.position[0]) == len(ids) - 1


def test_gqa_positions_and_llama3_rope_pieces():
    cfg = causal_lm.LMConfig.from_hf({**LLAMA, "rope_scaling": {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}})
    inv = causal_lm.rope_inv_freq(cfg)
    base = 1.0 / 10000.0 ** (np.arange(0, 8, 2) / 8)
    wavelength = 2 * np.pi / base  # 6.3, 63, 628, 6283: high band, smooth, low, low
    assert inv[0] == pytest.approx(base[0])
    assert inv[2] == pytest.approx(base[2] / 8) and inv[3] == pytest.approx(base[3] / 8)
    smooth = (64 / wavelength[1] - 1) / 3  # bands: wavelength < 64 / 4 kept, > 64 / 1 slowed
    assert inv[1] == pytest.approx((1 - smooth) * base[1] / 8 + smooth * base[1])
    np.testing.assert_array_equal(causal_lm.positions_from_mask(jnp.array([[0, 0, 1, 1, 1], [1, 1, 0, 1, 0]])),
                                  [[0, 0, 0, 1, 2], [0, 1, 1, 2, 2]])


# --------------------------------------------------------------------------- sampling and scoring
def test_sampling_options(llama):
    ids = [llama.tokenizer.encode(t) for t in TEXTS[:3]]
    tokens, mask = pad_batch(ids, 0, "left", 8)
    key = jax.random.key(3)
    greedy, n_greedy = generate(llama.params, llama.cfg, SamplingConfig(8, 0.0), tokens, mask, key)
    top1, _ = generate(llama.params, llama.cfg, SamplingConfig(8, 1.5, top_k=1), tokens, mask, key)
    np.testing.assert_array_equal(greedy, top1)
    assert n_greedy.tolist() == [8, 8, 8]
    hot = SamplingConfig(8, 2.0, top_k=50, top_p=0.95)
    a = np.asarray(generate(llama.params, llama.cfg, hot, tokens, mask, key)[0])
    b = np.asarray(generate(llama.params, llama.cfg, hot, tokens, mask, key)[0])
    c = np.asarray(generate(llama.params, llama.cfg, hot, tokens, mask, jax.random.key(4))[0])
    np.testing.assert_array_equal(a, b)
    assert (a != c).any()
    # a stop token ends a row (kept), the rest of the row is padding
    greedy = np.asarray(greedy)
    stop = int(greedy[0, 2])
    first = [int(np.argmax(row == stop)) if (row == stop).any() else 8 for row in greedy]
    out, num = generate(llama.params, llama.cfg, SamplingConfig(8, 0.0, stop_ids=(stop, 299), pad_id=7),
                        tokens, mask, key)
    out = np.asarray(out)
    for row in range(3):
        end = min(first[row] + 1, 8)
        assert int(num[row]) == end
        np.testing.assert_array_equal(out[row, :end], greedy[row, :end])
        assert (out[row, end:] == 7).all()


def test_top_k_and_top_p_sample_from_the_renormalised_head():
    logits = jnp.log(jnp.array([[0.4, 0.05, 0.3, 0.2, 0.05]]))
    keys = jax.random.split(jax.random.key(0), 20000)

    def frequencies(sampling):
        draws = jax.vmap(lambda k: sample_token(logits, k, sampling))(keys)[:, 0]
        return np.bincount(np.asarray(draws), minlength=5) / len(keys)

    # top-k 2: {0, 2} renormalised; top-p 0.75: 0.4 + 0.3 < 0.75, so 0, 2, 3 stay
    np.testing.assert_allclose(frequencies(SamplingConfig(temperature=1.0, top_k=2)),
                               [4 / 7, 0, 3 / 7, 0, 0], atol=0.015)
    np.testing.assert_allclose(frequencies(SamplingConfig(temperature=1.0, top_p=0.75)),
                               [4 / 9, 0, 3 / 9, 2 / 9, 0], atol=0.015)
    # temperature 0.5 squares the probabilities before renormalising
    p2 = np.array([0.4, 0.05, 0.3, 0.2, 0.05]) ** 2
    np.testing.assert_allclose(frequencies(SamplingConfig(temperature=0.5)), p2 / p2.sum(), atol=0.015)


def test_score_is_the_log_softmax_of_the_completion_tokens(llama):
    prompt, completion = llama.tokenizer.encode(TEXTS[0]), llama.tokenizer.encode(" over the dog")
    ids = prompt + completion
    full = np.asarray(causal_lm.logits(llama.params, llama.cfg, np.array([ids]), np.ones((1, len(ids)))))[0]
    log_softmax = full - np.log(np.exp(full - full.max(-1, keepdims=True)).sum(-1, keepdims=True)) - full.max(-1, keepdims=True)
    expected = [log_softmax[t - 1, ids[t]] for t in range(len(prompt), len(ids))]
    for side in ("left", "right"):
        tokens, mask = pad_batch([ids, prompt[:3] + completion], 0, side, 8)
        cmask = np.zeros_like(mask)
        start = tokens.shape[1] - len(ids) if side == "left" else 0
        cmask[0, start + len(prompt):start + len(ids)] = 1
        out = np.asarray(score(llama.params, llama.cfg, tokens, mask, cmask))
        np.testing.assert_allclose(out[0][cmask[0] == 1], expected, atol=2e-5)
        assert (out[0][cmask[0] == 0] == 0).all() and (out[1] == 0).all()
    api = llama.score([TEXTS[0]], [" over the dog"])
    np.testing.assert_allclose(api[0], expected, atol=2e-5)


# --------------------------------------------------------------------------- tokenizer and template
def test_tokenizer_round_trip_specials_and_stop_ids(llama, backend):
    tok = llama.tokenizer
    for text in TEXTS + ["Ünïcödé ✓ and  two  spaces\n"]:
        assert tok.decode(tok.encode(text)) == text
        assert tok.encode(text) == backend.encode(text).ids
    assert tok.stop_ids == (2, 0)  # eos_token, then generation_config's list in order
    assert tok.pad_id == 0 and tok.bos_id is None and tok.eos_id == 2


def test_chat_template_renders_and_tokenizes_its_special_tokens(llama):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]
    text = llama.tokenizer.apply_chat_template(messages)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi?<|im_end|>\n"
                    "<|im_start|>assistant\n")
    assert llama.tokenizer.apply_chat_template(messages, add_generation_prompt=False) == text[:-len(
        "<|im_start|>assistant\n")]
    ids = llama.tokenizer.apply_chat_template(messages, tokenize=True)
    assert ids[0] == 1 and ids.count(1) == 3 and ids.count(2) == 2  # whole special tokens
    assert llama.encode_prompts(["Hi?"], chat=True, system="Be brief.") == [ids]


# --------------------------------------------------------------------------- GGUF
def write_gguf(path: Path, config: dict, tensors: dict, backend, quantize_embedding: bool = False) -> Path:
    """A GGUF file as llama.cpp's converter writes one: metadata, vocabulary and merges, q/k rows of
    the Llama architecture permuted."""
    import gguf

    arch = config["model_type"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv)
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_freq_base(config["rope_theta"])
    writer.add_vocab_size(config["vocab_size"])
    vocab = backend.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda item: item[1])]
    tokens += [f"[PAD{i}]" for i in range(config["vocab_size"] - len(tokens))]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    writer.add_token_merges([" ".join(m) for m in json.loads(backend.to_str())["model"]["merges"]])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(0)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    layer_names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
                   "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                   "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                   "mlp.down_proj": "ffn_down", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm"}
    for name, array in tensors.items():
        if name in names:
            target = names[name]
        else:
            _, _, i, rest = name.split(".", 3)
            module, kind = rest.rsplit(".", 1)
            target = f"blk.{i}.{layer_names[module]}.{kind}"
            if arch == "llama" and module == "self_attn.q_proj":
                array = permute_rows(array, heads)
            elif arch == "llama" and module == "self_attn.k_proj":
                array = permute_rows(array, kv)
        if quantize_embedding and target == "token_embd.weight":
            quantized = gguf.quants.quantize(array, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(target, quantized, raw_shape=quantized.shape,
                              raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(target, np.ascontiguousarray(array))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_row_permutation_round_trips_and_pairs_the_halves():
    w = np.arange(2 * 8 * 3).reshape(16, 3)
    np.testing.assert_array_equal(unpermute_rows(permute_rows(w, 2), 2), w)
    # head 0 rows 0..7: llama.cpp interleaves (0, 4), (1, 5), ... of the rotate_half layout
    assert permute_rows(w, 2)[:, 0].tolist()[:8] == [0, 12, 3, 15, 6, 18, 9, 21]


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_gguf_loads_the_same_model_and_tokenizer(tmp_path, models, backend, name):
    path, config, tensors = models[name]
    hf = load(path)
    lm = load(write_gguf(tmp_path / f"{name}.gguf", config, tensors, backend))
    assert lm.cfg == hf.cfg
    assert jax.tree_util.tree_all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), hf.params, lm.params))
    for text in TEXTS:
        assert lm.tokenizer.encode(text) == hf.tokenizer.encode(text)
    assert lm.tokenizer.stop_ids == (2,) and lm.tokenizer.pad_id == 0
    assert lm.tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}]) == \
        hf.tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}])


def test_gguf_quantised_tensor_is_dequantised(tmp_path, models, backend):
    path, config, tensors = models["llama"]
    lm = load(write_gguf(tmp_path / "q8.gguf", config, tensors, backend, quantize_embedding=True))
    embed = tensors["model.embed_tokens.weight"]
    error = np.abs(np.asarray(lm.params["embed"]) - embed)
    # Q8_0: blocks of 32 values share a scale max|x|/127, so the error is at most half a step
    assert 0 < error.max() <= np.abs(embed).max() / 127 / 2 + 1e-6


# --------------------------------------------------------------------------- save
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_save_then_load_is_bitwise(tmp_path, models, dtype):
    lm = load(models["qwen2"][0], dtype=dtype)
    saved = lm.save(tmp_path / "out")
    back = load(saved, dtype=dtype)
    assert back.cfg == lm.cfg
    assert jax.tree_util.tree_all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), lm.params, back.params))
    assert back.tokenizer.stop_ids == lm.tokenizer.stop_ids
    assert back.tokenizer.chat_template == lm.tokenizer.chat_template
    assert back.tokenizer.encode(TEXTS[3]) == lm.tokenizer.encode(TEXTS[3])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging left behind
    with pytest.raises(ConfigError, match="already exists"):
        lm.save(saved)


def test_a_gguf_model_saves_as_a_hf_directory(tmp_path, models, backend):
    path, config, tensors = models["llama"]
    lm = load(write_gguf(tmp_path / "m.gguf", config, tensors, backend))
    back = load(lm.save(tmp_path / "hf"))
    assert jax.tree_util.tree_all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), lm.params, back.params))
    assert back.tokenizer.encode(TEXTS[0]) == lm.tokenizer.encode(TEXTS[0])
    assert back.tokenizer.stop_ids == (2,)


# --------------------------------------------------------------------------- bad input
def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _edit_config(path: Path, **changes) -> Path:
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))
    return path


def _retensor(path: Path, tensors: dict) -> Path:
    from safetensors.numpy import save_file

    save_file(tensors, str(path / "model.safetensors"))
    return path


def test_bad_inputs_fail_naming_the_file_key_or_tensor(tmp_path, models, backend):
    src, _, tensors = models["llama"]
    cases = []
    cases.append((tmp_path / "nowhere", "no such file or directory"))
    (tmp_path / "weights.bin").write_bytes(b"x")
    cases.append((tmp_path / "weights.bin", "a Hugging Face directory or a .gguf file"))
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf file at all")
    cases.append((tmp_path / "junk.gguf", "junk.gguf: not a readable GGUF file"))
    no_config = _copy(src, tmp_path / "no_config")
    (no_config / "config.json").unlink()
    cases.append((no_config, "config.json: missing"))
    cases.append((_edit_config(_copy(src, tmp_path / "gpt2"), model_type="gpt2"),
                  "model_type 'gpt2' is not supported: must be one of ['llama', 'mistral', 'qwen2', 'qwen3']"))
    cases.append((_edit_config(_copy(src, tmp_path / "gelu"), hidden_act="gelu"), "hidden_act 'gelu'"))
    cases.append((_edit_config(_copy(src, tmp_path / "yarn"), rope_scaling={"rope_type": "yarn", "factor": 2}),
                  "rope_scaling type 'yarn'"))
    cases.append((_edit_config(_copy(src, tmp_path / "sw"), model_type="mistral", sliding_window=64),
                  "sliding_window = 64"))
    cases.append((_edit_config(_copy(src, tmp_path / "heads"), num_key_value_heads=3),
                  "num_attention_heads = 4 is not a multiple of num_key_value_heads = 3"))
    missing = {k: v for k, v in tensors.items() if k != "model.layers.1.mlp.up_proj.weight"}
    cases.append((_retensor(_copy(src, tmp_path / "missing"), missing),
                  "tensor 'model.layers.1.mlp.up_proj.weight' (shape [48, 32]) is missing from"))
    extra = {**tensors, "model.layers.2.mlp.up_proj.weight": tensors["model.layers.1.mlp.up_proj.weight"]}
    cases.append((_retensor(_copy(src, tmp_path / "extra"), extra),
                  "unexpected tensor 'model.layers.2.mlp.up_proj.weight'"))
    wrong = {**tensors, "model.layers.0.self_attn.k_proj.weight": np.zeros((32, 32), np.float32)}
    cases.append((_retensor(_copy(src, tmp_path / "shape"), wrong),
                  "model.safetensors: tensor 'model.layers.0.self_attn.k_proj.weight' has shape [32, 32], "
                  "expected [16, 32]"))
    no_weights = _copy(src, tmp_path / "no_weights")
    (no_weights / "model.safetensors").unlink()
    cases.append((no_weights, "no weights (neither model.safetensors nor model.safetensors.index.json)"))
    shard_gone = _copy(models["llama_sharded"][0], tmp_path / "shard_gone")
    (shard_gone / "model-00002-of-00003.safetensors").unlink()
    cases.append((shard_gone, "model-00002-of-00003.safetensors: missing (named by model.safetensors.index.json)"))
    no_tokenizer = _copy(src, tmp_path / "no_tokenizer")
    (no_tokenizer / "tokenizer.json").unlink()
    cases.append((no_tokenizer, "tokenizer.json: missing"))
    bad_gguf = write_gguf(tmp_path / "bad.gguf", LLAMA, missing, backend)
    cases.append((bad_gguf, "tensor 'blk.1.ffn_up.weight' (shape [48, 32]) is missing from"))
    for path, fragment in cases:
        with pytest.raises(ConfigError) as info:
            load(path)
        assert fragment in str(info.value), (path, str(info.value))
    with pytest.raises(ConfigError, match="dtype 'float16'"):
        load(src, dtype="float16")


@pytest.mark.parametrize("kwargs, fragment", [
    ({"max_new_tokens": 0}, "max_new_tokens = 0"), ({"temperature": -1.0}, "temperature = -1.0"),
    ({"top_k": -2}, "top_k = -2"), ({"top_p": 0.0}, "top_p = 0.0"), ({"stop_ids": (-1,)}, "stop_ids"),
])
def test_bad_sampling_options(kwargs, fragment):
    with pytest.raises(ConfigError, match=fragment):
        SamplingConfig(**kwargs)


def test_a_model_without_a_chat_template_says_so(tmp_path, models):
    path = _copy(models["llama"][0], tmp_path / "plain")
    (path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    with pytest.raises(ConfigError, match="no chat template"):
        load(path).generate(["Hi"], chat=True)


# --------------------------------------------------------------------------- CLI
_compose_generate = functools.partial(compose, config_name="generate")


@pytest.mark.parametrize("overrides, fragment", [
    (["prompt=hi"], "config key 'model.path' is required"),
    (["model.path=m", "prompt=hi", "+beam=4"], "unknown config key 'beam'"),
    (["model.path=m", "prompt=hi", "+model.revision=main"], "unknown config key 'model.revision'"),
    (["model.path=m"], "config key 'prompt' = '???' is invalid"),
    (["model.path=m", "prompt=hi", "top_p=1.5"], "config key 'top_p' = 1.5 is invalid"),
    (["model.path=m", "prompt=hi", "temperature=hot"], "config key 'temperature' = 'hot' is invalid"),
    (["model.path=m", "prompt=hi", "model.dtype=float16"], "config key 'model.dtype' = 'float16' is invalid"),
    (["model.path=m", "prompt=hi", "padding=middle"], "config key 'padding' = 'middle' is invalid"),
])
def test_generate_cli_refuses_bad_options_before_loading(overrides, fragment):
    from purejaxrl_opt.generate import config_from_hydra

    with pytest.raises(ConfigError) as info:
        config_from_hydra(_compose_generate(*overrides))
    assert fragment in str(info.value)


def test_generate_cli_prints_the_completions(models, llama):
    import subprocess
    import sys

    path = models["llama"][0]
    expected = llama.generate(["Hi?", TEXTS[0]], max_new_tokens=5, chat=True)
    proc = subprocess.run([sys.executable, "-m", "purejaxrl_opt.generate", f"model.path={path}",
                           f"prompt=[Hi?, '{TEXTS[0]}']", "chat=true", "max_new_tokens=5"],
                          capture_output=True, text=True, timeout=300, cwd=path.parent)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"--- 0: Hi?\n{expected[0]}\n--- 1: {TEXTS[0]}\n{expected[1]}\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["llama", "qwen2", "qwen3", "sharded"]
    bad = subprocess.run([sys.executable, "-m", "purejaxrl_opt.generate", f"model.path={path}/nope",
                          "prompt=x"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "nope: no such file or directory" in bad.stderr
