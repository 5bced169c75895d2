"""One decoder-only causal LM for the Llama family (Llama 2/3.x, SmolLM2, TinyLlama, Mistral without a
sliding window) and Qwen2/Qwen2.5/Qwen3, as pure functions of a params pytree.

Architecture (the Hugging Face definitions, matched to their float32 logits): token embedding,
``num_layers`` pre-norm blocks (RMSNorm -> grouped-query self-attention with rotary position
embeddings in the ``rotate_half`` convention -> residual, RMSNorm -> SwiGLU MLP -> residual), a final
RMSNorm and a head that is the transposed embedding when ``tie_word_embeddings``. Qwen2 adds biases to
the q/k/v projections, Qwen3 an RMSNorm over each head's q and k before the rotation.

Params are a plain nested dict of arrays (``param_shapes`` gives every shape), the layers stacked on a
leading ``num_layers`` axis so one ``lax.scan`` runs them in the full forward and the prefill (compile
time does not grow with depth). The one-token decode step instead unrolls the layers over per-layer
weights (:func:`decode_layers`), made once per generation: a scan would slice every weight into a copy
every step.
Dense kernels are ``[in, out]`` (the transpose of a Hugging Face ``Linear.weight``)::

    embed [V, d]; final_norm [d]; lm_head [d, V] (untied only)
    layers: attn_norm [N, d], q [N, d, H*D], k/v [N, d, K*D], o [N, H*D, d],
            q_bias [N, H*D], k_bias/v_bias [N, K*D] (attention_bias only),
            q_norm/k_norm [N, D] (qk_norm only), mlp_norm [N, d], gate/up [N, d, F], down [N, F, d]

Entry points (``cfg`` is static: jit them with ``static_argnames="cfg"``):

* :func:`logits`: full forward ``tokens int [B, L]``, ``attention_mask [B, L]`` -> ``float32 [B, L, V]``.
  Padding may sit on either side (or both): a token's rotary position is the number of real tokens
  before it, and no real token attends to padding, so a sequence's logits do not depend on its padding.
* :func:`prefill` / :func:`decode`: the KV cache. ``prefill`` encodes padded prompts into a cache of
  ``max_len`` slots and returns each row's logits after its last real token; ``decode`` appends one
  token per row at the shared slot ``cache.index`` and returns the next logits. The cache has a fixed
  shape, so it can be a ``lax.scan`` / ``while_loop`` carry (:mod:`purejaxrl_opt.core.models.sampling`);
  every decode step attends over all ``max_len`` slots, the empty ones masked.

Parameters and activations are in ``cfg.dtype`` (float32 or bfloat16); RMSNorm statistics, rotary
angles, attention softmax and the output logits are float32.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from purejaxrl_opt.config.errors import ConfigError

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
ROPE_TYPES = ("default", "linear", "llama3")
DTYPES = ("float32", "bfloat16")
_MASKED = -1e30  # finite: a row with nothing to attend to (a padding query) stays finite, never NaN


@dataclass(frozen=True)
class LMConfig:
    """What fixes the model's shapes and math; hashable, so a static argument of jitted functions."""

    model_type: str  # one of SUPPORTED_MODEL_TYPES
    vocab_size: int
    hidden_size: int  # d
    intermediate_size: int  # F, the SwiGLU width
    num_layers: int  # N
    num_heads: int  # H query heads
    num_kv_heads: int  # K key/value heads (grouped-query attention: H % K == 0)
    head_dim: int  # D
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_type: str = "default"  # one of ROPE_TYPES
    rope_factor: float = 1.0  # linear and llama3
    rope_low_freq_factor: float = 1.0  # llama3
    rope_high_freq_factor: float = 4.0  # llama3
    rope_original_max_position: int = 8192  # llama3
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # biases on the q/k/v projections (Qwen2)
    qk_norm: bool = False  # RMSNorm of each head's q and k (Qwen3)
    dtype: str = "float32"  # params and activations; one of DTYPES

    def __post_init__(self):
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(f"model_type {self.model_type!r} is not supported: must be one of "
                              f"{list(SUPPORTED_MODEL_TYPES)}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype {self.dtype!r} is not supported: must be one of {list(DTYPES)}")
        if self.rope_type not in ROPE_TYPES:
            raise ConfigError(f"rope type {self.rope_type!r} is not supported: must be one of "
                              f"{list(ROPE_TYPES)}")
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads", "head_dim"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                raise ConfigError(f"{name} = {getattr(self, name)!r} is invalid: must be an int > 0")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(f"num_attention_heads = {self.num_heads} is not a multiple of "
                              f"num_key_value_heads = {self.num_kv_heads}")
        if self.head_dim % 2:
            raise ConfigError(f"head_dim = {self.head_dim} is odd: rotary embeddings need it even")

    @property
    def jnp_dtype(self):
        return jnp.dtype(self.dtype)

    def replace(self, **changes) -> "LMConfig":
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_hf(cls, config: Mapping[str, Any], dtype: str = "float32",
                source: str = "config.json") -> "LMConfig":
        """From a Hugging Face ``config.json`` dict; ConfigError naming ``source`` and the key for a model
        type, activation or option this model does not implement."""
        def fail(message: str):
            raise ConfigError(f"{source}: {message}")

        model_type = config.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            fail(f"model_type {model_type!r} is not supported: must be one of {list(SUPPORTED_MODEL_TYPES)}")
        for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                    "num_attention_heads"):
            if key not in config:
                fail(f"missing key {key!r}")
        activation = config.get("hidden_act", "silu")
        if activation != "silu":
            fail(f"hidden_act {activation!r} is not supported: must be 'silu' (SwiGLU)")
        if config.get("mlp_bias"):
            fail("mlp_bias = true is not supported: the MLP projections must have no bias")
        if model_type == "mistral" and config.get("sliding_window") is not None:
            fail(f"sliding_window = {config['sliding_window']} is not supported: only full attention "
                 "(sliding_window: null)")
        if config.get("use_sliding_window"):
            fail("use_sliding_window = true is not supported: only full attention")
        if config.get("partial_rotary_factor", 1.0) != 1.0:
            fail(f"partial_rotary_factor = {config['partial_rotary_factor']} is not supported: must be 1")
        # transformers v5 writes rope_parameters (with rope_theta inside), v4 rope_theta + rope_scaling
        scaling = config.get("rope_scaling") or config.get("rope_parameters") or {}
        rope_type = scaling.get("rope_type", scaling.get("type", "default"))
        if rope_type not in ROPE_TYPES:
            fail(f"rope_scaling type {rope_type!r} is not supported: must be one of {list(ROPE_TYPES)}")
        rope = {}
        if rope_type in ("linear", "llama3"):
            rope["rope_factor"] = float(scaling["factor"])
        if rope_type == "llama3":
            rope.update(rope_low_freq_factor=float(scaling["low_freq_factor"]),
                        rope_high_freq_factor=float(scaling["high_freq_factor"]),
                        rope_original_max_position=int(scaling["original_max_position_embeddings"]))
        heads = config["num_attention_heads"]
        try:
            return cls(
                model_type=model_type, vocab_size=config["vocab_size"], hidden_size=config["hidden_size"],
                intermediate_size=config["intermediate_size"], num_layers=config["num_hidden_layers"],
                num_heads=heads, num_kv_heads=config.get("num_key_value_heads") or heads,
                head_dim=config.get("head_dim") or config["hidden_size"] // heads,
                rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
                rope_theta=float(config.get("rope_theta", scaling.get("rope_theta", 10000.0))),
                rope_type=rope_type, **rope,
                max_position_embeddings=config.get("max_position_embeddings", 2048),
                tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
                attention_bias=model_type == "qwen2" or bool(config.get("attention_bias", False)),
                qk_norm=model_type == "qwen3", dtype=dtype)
        except ConfigError as error:
            fail(str(error))

    def to_hf(self) -> dict:
        """A Hugging Face ``config.json`` dict that :meth:`from_hf` reads back to this config."""
        architectures = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                         "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
        config = {
            "architectures": [architectures[self.model_type]], "model_type": self.model_type,
            "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size, "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads, "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim, "hidden_act": "silu", "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta, "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings, "torch_dtype": self.dtype,
        }
        if self.model_type in ("llama", "qwen3"):
            config["attention_bias"] = self.attention_bias
        if self.model_type == "mistral":
            config["sliding_window"] = None
        if self.rope_type == "linear":
            config["rope_scaling"] = {"rope_type": "linear", "factor": self.rope_factor}
        elif self.rope_type == "llama3":
            config["rope_scaling"] = {
                "rope_type": "llama3", "factor": self.rope_factor,
                "low_freq_factor": self.rope_low_freq_factor,
                "high_freq_factor": self.rope_high_freq_factor,
                "original_max_position_embeddings": self.rope_original_max_position}
        return config


def param_shapes(cfg: LMConfig) -> dict:
    """The params pytree of ``cfg`` with a shape tuple at every leaf (see the module docstring)."""
    n, d, f, v = cfg.num_layers, cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    q_width, kv_width = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    layers = {"attn_norm": (n, d), "q": (n, d, q_width), "k": (n, d, kv_width), "v": (n, d, kv_width),
              "o": (n, q_width, d), "mlp_norm": (n, d), "gate": (n, d, f), "up": (n, d, f),
              "down": (n, f, d)}
    if cfg.attention_bias:
        layers.update(q_bias=(n, q_width), k_bias=(n, kv_width), v_bias=(n, kv_width))
    if cfg.qk_norm:
        layers.update(q_norm=(n, cfg.head_dim), k_norm=(n, cfg.head_dim))
    shapes = {"embed": (v, d), "layers": layers, "final_norm": (d,)}
    if not cfg.tie_word_embeddings:
        shapes["lm_head"] = (d, v)
    return shapes


def init_params(cfg: LMConfig, key: jax.Array, scale: float = 0.02) -> dict:
    """Random params (N(0, scale) weights and biases, norms N(1, scale)) in ``cfg.dtype``: for tests
    and benchmarks; a real model is loaded (:mod:`purejaxrl_opt.host.lm`)."""
    shapes = param_shapes(cfg)
    leaves, treedef = jax.tree_util.tree_flatten(shapes, is_leaf=lambda s: isinstance(s, tuple))
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(
        shapes, is_leaf=lambda s: isinstance(s, tuple))[0]]
    keys = jax.random.split(key, len(leaves))
    values = [(1.0 if "norm" in path else 0.0) + scale * jax.random.normal(k, shape, jnp.float32)
              for k, shape, path in zip(keys, leaves, paths)]
    return jax.tree_util.tree_unflatten(treedef, [x.astype(cfg.jnp_dtype) for x in values])


# --------------------------------------------------------------------------- pieces
def rms_norm(x: jnp.ndarray, weight: jnp.ndarray, eps: float) -> jnp.ndarray:
    """``weight * x / rms(x)`` over the last axis; statistics in float32, result in ``x.dtype``."""
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return weight * normed.astype(x.dtype)


def rope_inv_freq(cfg: LMConfig) -> np.ndarray:
    """Rotary inverse frequencies ``float32 [head_dim / 2]``, with linear or llama3 scaling applied."""
    dim = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    inv_freq = inv_freq.astype(np.float32)
    if cfg.rope_type == "linear":
        inv_freq = inv_freq / np.float32(cfg.rope_factor)
    elif cfg.rope_type == "llama3":
        # long wavelengths slowed by `factor`, short ones kept, a smooth blend between the two bands
        factor, low, high = cfg.rope_factor, cfg.rope_low_freq_factor, cfg.rope_high_freq_factor
        old_context = cfg.rope_original_max_position
        wavelength = 2 * math.pi / inv_freq
        scaled = np.where(wavelength > old_context / low, inv_freq / factor, inv_freq)
        smooth = (old_context / wavelength - low) / (high - low)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelength >= old_context / high) & (wavelength <= old_context / low)
        inv_freq = np.where(medium, blended, scaled).astype(np.float32)
    return inv_freq


def apply_rope(x: jnp.ndarray, positions: jnp.ndarray, inv_freq: np.ndarray) -> jnp.ndarray:
    """Rotate ``x [B, L, heads, D]`` by ``positions int [B, L]`` (``rotate_half``: the first and second
    halves of each head form the pairs)."""
    angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)  # [B, L, D/2]
    angles = jnp.concatenate([angles, angles], axis=-1)[:, :, None, :]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    x32 = x.astype(jnp.float32)
    first, second = jnp.split(x32, 2, axis=-1)
    rotated = jnp.concatenate([-second, first], axis=-1)
    return (x32 * cos + rotated * sin).astype(x.dtype)


def positions_from_mask(attention_mask: jnp.ndarray) -> jnp.ndarray:
    """Rotary positions ``int32 [B, L]``: a real token's count of real tokens before it (padding gets
    its neighbour's position, which no real token sees)."""
    return jnp.maximum(jnp.cumsum(attention_mask.astype(jnp.int32), axis=-1) - 1, 0)


def attend(q: jnp.ndarray, k: jnp.ndarray, v: jnp.ndarray, allowed: jnp.ndarray) -> jnp.ndarray:
    """Grouped-query attention: q ``[B, Lq, H, D]``, k/v ``[B, Lk, K, D]``, ``allowed`` bool
    ``[B, Lq, Lk]`` -> ``[B, Lq, H*D]``. Query head ``h`` reads key/value head ``h // (H/K)``."""
    batch, length, heads, dim = q.shape
    kv_heads = k.shape[2]
    q = q.reshape(batch, length, kv_heads, heads // kv_heads, dim)
    scores = jnp.einsum("bqkgd,bskd->bkgqs", q, k, preferred_element_type=jnp.float32)
    scores = scores / jnp.sqrt(jnp.float32(dim))
    scores = jnp.where(allowed[:, None, None], scores, _MASKED)
    weights = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgqs,bskd->bqkgd", weights, v)
    return out.reshape(batch, length, heads * dim)


def _dense(x: jnp.ndarray, kernel: jnp.ndarray, **kwargs) -> jnp.ndarray:
    """``x [..., d] @ kernel [d, f]`` as one 2-D product over the flattened leading axes. The same
    product forward; backward, the kernel's gradient contracts one axis instead of all of ``x``'s
    leading ones, which XLA:CPU runs far slower (a SmolLM2 GRPO update: 9.1 s -> 6.0 s for the MLPs
    alone, experiments/bench_grpo_step.py)."""
    flat = jnp.matmul(x.reshape(-1, x.shape[-1]), kernel, **kwargs)
    return flat.reshape(*x.shape[:-1], kernel.shape[-1])


def _qkv(cfg: LMConfig, layer: dict, x: jnp.ndarray, positions: jnp.ndarray, inv_freq: np.ndarray):
    """``x [B, L, d]`` -> q ``[B, L, H, D]``, k/v ``[B, L, K, D]`` of one layer, rotated."""
    h = rms_norm(x, layer["attn_norm"], cfg.rms_norm_eps)
    q, k, v = _dense(h, layer["q"]), _dense(h, layer["k"]), _dense(h, layer["v"])
    if cfg.attention_bias:
        q, k, v = q + layer["q_bias"], k + layer["k_bias"], v + layer["v_bias"]
    batch, length = x.shape[:2]
    q = q.reshape(batch, length, cfg.num_heads, cfg.head_dim)
    k = k.reshape(batch, length, cfg.num_kv_heads, cfg.head_dim)
    v = v.reshape(batch, length, cfg.num_kv_heads, cfg.head_dim)
    if cfg.qk_norm:
        q = rms_norm(q, layer["q_norm"], cfg.rms_norm_eps)
        k = rms_norm(k, layer["k_norm"], cfg.rms_norm_eps)
    return apply_rope(q, positions, inv_freq), apply_rope(k, positions, inv_freq), v


def _finish(cfg: LMConfig, layer: dict, x: jnp.ndarray, attention: jnp.ndarray) -> jnp.ndarray:
    """Attention output projection + residual, then the SwiGLU MLP + residual: ``[B, L, d]``."""
    x = x + _dense(attention, layer["o"])
    h = rms_norm(x, layer["mlp_norm"], cfg.rms_norm_eps)
    return x + _dense(jax.nn.silu(_dense(h, layer["gate"])) * _dense(h, layer["up"]), layer["down"])


def _head(params: dict, cfg: LMConfig, hidden: jnp.ndarray) -> jnp.ndarray:
    """Final-normed hidden ``[..., d]`` -> float32 logits ``[..., V]``."""
    if cfg.tie_word_embeddings:
        return _dense(hidden, params["embed"].T, preferred_element_type=jnp.float32)
    return _dense(hidden, params["lm_head"], preferred_element_type=jnp.float32)


def _encode(params: dict, cfg: LMConfig, tokens: jnp.ndarray, attention_mask: jnp.ndarray,
            keep_kv: bool):
    """Full causal pass: final-normed hidden ``[B, L, d]`` and, with ``keep_kv``, every layer's rotated
    keys and values ``[N, B, L, K, D]`` (else None)."""
    inv_freq = rope_inv_freq(cfg)
    mask = attention_mask.astype(bool)
    positions = positions_from_mask(mask)
    length = tokens.shape[1]
    causal = jnp.tril(jnp.ones((length, length), bool))
    allowed = causal[None] & mask[:, None, :]
    x = jnp.take(params["embed"], tokens, axis=0).astype(cfg.jnp_dtype)

    def layer_step(x, layer):
        q, k, v = _qkv(cfg, layer, x, positions, inv_freq)
        x = _finish(cfg, layer, x, attend(q, k, v, allowed))
        return x, ((k, v) if keep_kv else None)

    x, kv = jax.lax.scan(layer_step, x, params["layers"])
    return rms_norm(x, params["final_norm"], cfg.rms_norm_eps), kv


def logits(params: dict, cfg: LMConfig, tokens: jnp.ndarray, attention_mask: jnp.ndarray) -> jnp.ndarray:
    """Full forward: ``tokens int [B, L]``, ``attention_mask [B, L]`` (1 = real token) -> float32
    ``[B, L, V]``; the logits at ``t`` predict token ``t + 1`` (rows at padding are meaningless)."""
    hidden, _ = _encode(params, cfg, tokens, attention_mask, keep_kv=False)
    return _head(params, cfg, hidden)


def hidden_states(params: dict, cfg: LMConfig, tokens: jnp.ndarray, attention_mask: jnp.ndarray) -> jnp.ndarray:
    """The body's final-normed hidden states ``[B, L, d]`` in ``cfg.dtype`` (what a head other than the
    LM head reads, e.g. a value head); ``params`` needs no ``lm_head``."""
    return _encode(params, cfg, tokens, attention_mask, keep_kv=False)[0]


def lm_head(params: dict, cfg: LMConfig, hidden: jnp.ndarray) -> jnp.ndarray:
    """Float32 logits ``[..., V]`` of final-normed hidden states ``[..., d]`` (:func:`hidden_states`):
    with :func:`hidden_states`, the logits of chosen positions only."""
    return _head(params, cfg, hidden)


# --------------------------------------------------------------------------- KV cache
class KVCache(NamedTuple):
    """Fixed-shape decoding state of ``B`` sequences in ``S`` slots.

    k, v: one array per layer (tuples of ``N``), each ``[B, K, S, D]`` in ``cfg.dtype`` (rotated keys);
    mask: bool ``[B, S]``, slots holding a real token; position: int32 ``[B]``, the rotary position of
    each row's next token (its count of real tokens); index: int32 ``[]``, the slot the next token goes
    to (shared by all rows).

    Why this layout: a layer's keys are their own buffer, which a decode step reads where it lies and
    writes one slot of in place (a layer sliced out of a stacked ``[N, ...]`` array is a copy on the
    CPU, every layer of every step); and the key/value heads come before the slots, so both attention
    products read the cache as it is stored, with no transposed copy.
    """

    k: tuple
    v: tuple
    mask: jnp.ndarray
    position: jnp.ndarray
    index: jnp.ndarray


def init_cache(cfg: LMConfig, batch_size: int, max_len: int) -> KVCache:
    """An empty cache of ``max_len`` slots (no parameters needed)."""
    shape = (batch_size, cfg.num_kv_heads, max_len, cfg.head_dim)
    empty = tuple(jnp.zeros(shape, cfg.jnp_dtype) for _ in range(cfg.num_layers))
    return KVCache(empty, tuple(jnp.zeros(shape, cfg.jnp_dtype) for _ in range(cfg.num_layers)),
                   jnp.zeros((batch_size, max_len), bool), jnp.zeros((batch_size,), jnp.int32),
                   jnp.zeros((), jnp.int32))


def prefill(params: dict, cfg: LMConfig, tokens: jnp.ndarray, attention_mask: jnp.ndarray,
            max_len: int):
    """Encode prompts ``tokens int [B, L]`` (``attention_mask [B, L]``, padding on either side, at least
    one real token a row; ``L <= max_len``) into a cache of ``max_len`` slots.

    Returns ``(logits float32 [B, V] after each row's last real token, KVCache)``; slots ``0..L-1`` hold
    the prompt (padding masked out), ``cache.index = L``.
    """
    batch, length = tokens.shape
    if length > max_len:
        raise ValueError(f"prompt length {length} > max_len={max_len}")
    mask = attention_mask.astype(bool)
    hidden, (ks, vs) = _encode(params, cfg, tokens, mask, keep_kv=True)
    last = length - 1 - jnp.argmax(mask[:, ::-1], axis=1)  # each row's last real token
    last_hidden = jnp.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0]
    pad = [(0, 0), (0, 0), (0, max_len - length), (0, 0)]

    def per_layer(kv):  # [N, B, L, K, D] -> N x [B, K, max_len, D]
        return tuple(jnp.pad(kv[i].transpose(0, 2, 1, 3), pad) for i in range(cfg.num_layers))

    cache = KVCache(per_layer(ks), per_layer(vs), jnp.pad(mask, [(0, 0), (0, max_len - length)]),
                    jnp.sum(mask, axis=1).astype(jnp.int32), jnp.asarray(length, jnp.int32))
    return _head(params, cfg, last_hidden), cache


def decode_layers(params: dict, cfg: LMConfig) -> tuple:
    """The layer weights as :func:`decode` reads them: ``params["layers"]`` split into ``N`` dicts, with
    q/k/v joined into one kernel ``qkv [d, (H + 2K) * D]`` (and ``qkv_bias``) and gate/up into
    ``gate_up [d, 2F]``.

    Made once per generation, outside its loop (:func:`purejaxrl_opt.core.models.sampling.generate`):
    on the CPU a layer sliced from the stacked params is a copy, so slicing inside the loop copies every
    weight every step, and one wide product per layer input runs faster than three or two narrow ones.
    Costs a second copy of the layer weights while it lives.
    """
    out = []
    for i in range(cfg.num_layers):
        layer = {name: w[i] for name, w in params["layers"].items()}
        layer["qkv"] = jnp.concatenate([layer.pop("q"), layer.pop("k"), layer.pop("v")], axis=-1)
        if cfg.attention_bias:
            layer["qkv_bias"] = jnp.concatenate(
                [layer.pop("q_bias"), layer.pop("k_bias"), layer.pop("v_bias")], axis=-1)
        layer["gate_up"] = jnp.concatenate([layer.pop("gate"), layer.pop("up")], axis=-1)
        out.append(layer)
    return tuple(out)


def _attend_cache(q: jnp.ndarray, k: jnp.ndarray, v: jnp.ndarray, allowed: jnp.ndarray) -> jnp.ndarray:
    """One query per row against a layer's cache: q ``[B, H, D]``, k/v ``[B, K, S, D]``, ``allowed``
    bool ``[B, S]`` -> ``[B, H*D]`` (the math of :func:`attend`)."""
    batch, heads, dim = q.shape
    kv_heads = k.shape[1]
    q = q.reshape(batch, kv_heads, heads // kv_heads, dim)
    scores = jnp.einsum("bkgd,bksd->bkgs", q, k, preferred_element_type=jnp.float32)
    scores = scores / jnp.sqrt(jnp.float32(dim))
    scores = jnp.where(allowed[:, None, None], scores, _MASKED)
    weights = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bkgs,bksd->bkgd", weights, v).reshape(batch, heads * dim)


def decode(params: dict, cfg: LMConfig, token: jnp.ndarray, cache: KVCache, layers: tuple | None = None):
    """Append ``token int [B]`` (one per row) at slot ``cache.index`` and rotary position
    ``cache.position``; returns ``(logits float32 [B, V] for the next token, KVCache)``.

    ``layers`` is :func:`decode_layers` of ``params``, made once outside a decoding loop (made here when
    None). The layers are unrolled: each writes its keys/values into its own cache buffer in place.
    Past the last slot, the write lands on the last slot: size ``max_len`` for every token a caller
    decodes.
    """
    if layers is None:
        layers = decode_layers(params, cfg)
    inv_freq = rope_inv_freq(cfg)
    slot = cache.index
    positions = cache.position[:, None]  # [B, 1]
    batch = token.shape[0]
    heads, kv_heads, dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    splits = [heads * dim, (heads + kv_heads) * dim]
    mask = jax.lax.dynamic_update_slice(cache.mask, jnp.ones((batch, 1), bool), (0, slot))
    x = jnp.take(params["embed"], token, axis=0).astype(cfg.jnp_dtype)  # [B, d]
    ks, vs = list(cache.k), list(cache.v)
    for i, layer in enumerate(layers):
        h = rms_norm(x, layer["attn_norm"], cfg.rms_norm_eps)
        qkv = h @ layer["qkv"]
        if cfg.attention_bias:
            qkv = qkv + layer["qkv_bias"]
        q, k, v = jnp.split(qkv, splits, axis=-1)
        q = q.reshape(batch, 1, heads, dim)
        k = k.reshape(batch, 1, kv_heads, dim)
        if cfg.qk_norm:
            q = rms_norm(q, layer["q_norm"], cfg.rms_norm_eps)
            k = rms_norm(k, layer["k_norm"], cfg.rms_norm_eps)
        q, k = apply_rope(q, positions, inv_freq)[:, 0], apply_rope(k, positions, inv_freq)
        at = (0, 0, slot, 0)
        ks[i] = jax.lax.dynamic_update_slice(ks[i], k.transpose(0, 2, 1, 3).astype(ks[i].dtype), at)
        vs[i] = jax.lax.dynamic_update_slice(
            vs[i], v.reshape(batch, kv_heads, 1, dim).astype(vs[i].dtype), at)
        x = x + _attend_cache(q, ks[i], vs[i], mask) @ layer["o"]
        h = rms_norm(x, layer["mlp_norm"], cfg.rms_norm_eps)
        gate, up = jnp.split(h @ layer["gate_up"], 2, axis=-1)
        x = x + (jax.nn.silu(gate) * up) @ layer["down"]
    hidden = rms_norm(x, params["final_norm"], cfg.rms_norm_eps)
    return _head(params, cfg, hidden), KVCache(tuple(ks), tuple(vs), mask, cache.position + 1, slot + 1)
