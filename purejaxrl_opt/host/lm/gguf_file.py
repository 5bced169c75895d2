"""A GGUF file (llama.cpp's format) as a config, dequantised params and a tokenizer.

``gguf``'s reader gives the metadata and the tensors; quantised ones (Q4_0/Q4_1/Q8_0/K-quants...) are
dequantised to float32 with numpy. llama.cpp's converter reorders the rows of the Llama-architecture
q and k projections within each head, from the Hugging Face ``rotate_half`` layout (the first half of
a head pairs with the second) to interleaved pairs (rows 2i and 2i+1); :func:`unpermute_rows` undoes
that, so the params are the Hugging Face model's. Qwen2/Qwen3 files are stored unpermuted.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.host.lm.tokenizer import Tokenizer, from_gguf_metadata
from purejaxrl_opt.host.lm.weights import assemble, check_tensors, tensor_table
from purejaxrl_opt.core.models.causal_lm import LMConfig

# general.architecture -> model_type (llama.cpp writes "llama" for Mistral models too)
ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}
_PERMUTED = ("llama",)


def unpermute_rows(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """llama.cpp's rotary row order -> Hugging Face's, for a projection ``[num_heads * D, ...]``: within
    each head, rows ``(2i, 2i + 1)`` go back to ``(i, i + D/2)``."""
    rows = weight.shape[0]
    head_dim = rows // num_heads
    return (weight.reshape(num_heads, head_dim // 2, 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def permute_rows(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """The inverse of :func:`unpermute_rows` (what llama.cpp's converter does)."""
    rows = weight.shape[0]
    head_dim = rows // num_heads
    return (weight.reshape(num_heads, 2, head_dim // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def _field_values(reader) -> dict:
    values = {}
    for name, field in reader.fields.items():
        try:
            values[name] = field.contents()
        except Exception:  # a field type this gguf release cannot decode: unused here
            continue
    return values


def _float32_value(value) -> float:
    """A float32 metadata value as the decimal it was written from (1e-05, not 9.99999974738e-06): the
    shortest repr that rounds to the same float32."""
    return float(str(np.float32(value)))


def hf_config(fields: dict, tensor_names: set[str], source: str) -> dict:
    """A Hugging Face ``config.json`` dict from GGUF metadata (``{arch}.*`` keys)."""
    arch = fields.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise ConfigError(f"{source}: general.architecture {arch!r} is not supported: must be one of "
                          f"{list(ARCHITECTURES)}")
    if "rope_freqs.weight" in tensor_names:
        raise ConfigError(f"{source}: tensor 'rope_freqs.weight' (llama3 RoPE frequency factors) is not "
                          "supported in GGUF files: load the model's Hugging Face directory")

    def get(key, default=None, required=False):
        full = f"{arch}.{key}"
        if full not in fields:
            if required:
                raise ConfigError(f"{source}: metadata key {full!r} is missing")
            return default
        return fields[full]

    heads = int(get("attention.head_count", required=True))
    hidden = int(get("embedding_length", required=True))
    tokens = fields.get("tokenizer.ggml.tokens") or []
    config = {
        "model_type": ARCHITECTURES[arch],
        "vocab_size": int(get("vocab_size", len(tokens))),
        "hidden_size": hidden,
        "intermediate_size": int(get("feed_forward_length", required=True)),
        "num_hidden_layers": int(get("block_count", required=True)),
        "num_attention_heads": heads,
        "num_key_value_heads": int(get("attention.head_count_kv", heads)),
        "head_dim": int(get("attention.key_length", hidden // heads)),
        "rms_norm_eps": _float32_value(get("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": _float32_value(get("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(get("context_length", 2048)),
        "tie_word_embeddings": "output.weight" not in tensor_names,
        "attention_bias": "blk.0.attn_q.bias" in tensor_names,
    }
    scaling = get("rope.scaling.type", "none")
    if scaling == "linear":
        config["rope_scaling"] = {"rope_type": "linear", "factor": float(get("rope.scaling.factor"))}
    elif scaling != "none":
        raise ConfigError(f"{source}: {arch}.rope.scaling.type {scaling!r} is not supported: must be "
                          "'none' or 'linear'")
    for key in ("bos", "eos"):
        if f"tokenizer.ggml.{key}_token_id" in fields:
            config[f"{key}_token_id"] = int(fields[f"tokenizer.ggml.{key}_token_id"])
    return config


def read_gguf(path: Path, dtype: str) -> tuple[LMConfig, dict, Tokenizer, dict]:
    """``(cfg, params (numpy), tokenizer, config.json dict)`` of the GGUF file ``path``; names and
    shapes are checked against the config before any tensor is dequantised."""
    import gguf

    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as error:
        raise ConfigError(f"{path}: not a readable GGUF file ({error})") from None
    fields = _field_values(reader)
    tensors = {t.name: t for t in reader.tensors}
    config = hf_config(fields, set(tensors), str(path))
    cfg = LMConfig.from_hf(config, dtype=dtype, source=str(path))
    table = tensor_table(cfg, "gguf")
    # a reader tensor's shape is GGUF's (fastest axis first): reversed, it is numpy's
    present = {name: tuple(int(n) for n in reversed(t.shape)) for name, t in tensors.items()}
    check_tensors(table, present, {name: str(path) for name in present}, str(path))
    permuted = fields["general.architecture"] in _PERMUTED

    def read(name: str) -> np.ndarray:
        tensor = tensors[name]
        array = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        array = array.reshape(table[name].shape)
        if permuted and name.endswith(("attn_q.weight", "attn_q.bias")):
            array = unpermute_rows(array, cfg.num_heads)
        elif permuted and name.endswith(("attn_k.weight", "attn_k.bias")):
            array = unpermute_rows(array, cfg.num_kv_heads)
        return array

    params = assemble(cfg, table, read)
    tokenizer = from_gguf_metadata(fields, str(path))
    return cfg, params, tokenizer, config
