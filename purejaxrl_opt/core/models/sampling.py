"""Batched generation with the KV cache in one jitted function, and per-token log-probs of completions.

:func:`generate` prefills the padded prompts, then samples and decodes one token per row a step inside
a ``lax.while_loop`` that stops when every row has emitted a stop token or ``max_new_tokens`` are out.
Logits are processed as Hugging Face's ``generate`` does: divided by the temperature, cut to the
``top_k`` largest, then to the smallest set whose probability reaches ``top_p``; ``temperature = 0`` is
greedy. The same key, prompts and options give the same tokens. :func:`score` is the teacher-forced
log-probability of given completion tokens (what GRPO's ratio and KL need).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.core.models import causal_lm
from purejaxrl_opt.core.models.causal_lm import LMConfig


@dataclass(frozen=True)
class SamplingConfig:
    """Generation options; hashable (a static argument of :func:`generate`)."""

    max_new_tokens: int = 64
    temperature: float = 1.0  # 0 = greedy (argmax)
    top_k: int = 0  # keep the k most likely tokens; 0 = all
    top_p: float = 1.0  # keep the smallest set whose probability reaches top_p; 1 = all
    stop_ids: tuple[int, ...] = ()  # a row ends after emitting any of these (it is kept in the output)
    pad_id: int = 0  # fills a row's output after its stop token

    def __post_init__(self):
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens = {self.max_new_tokens!r} is invalid: must be an int >= 1")
        if not self.temperature >= 0:
            raise ConfigError(f"temperature = {self.temperature!r} is invalid: must be >= 0 (0 = greedy)")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ConfigError(f"top_k = {self.top_k!r} is invalid: must be an int >= 0 (0 = off)")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p = {self.top_p!r} is invalid: must be in (0, 1] (1 = off)")
        if not all(isinstance(i, int) and i >= 0 for i in self.stop_ids):
            raise ConfigError(f"stop_ids = {self.stop_ids!r} is invalid: must be token ids >= 0")


def sample_token(logits: jnp.ndarray, key: jax.Array, sampling: SamplingConfig) -> jnp.ndarray:
    """One token per row from ``logits float32 [B, V]`` -> ``int32 [B]``."""
    if sampling.temperature == 0:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    logits = logits / sampling.temperature
    if sampling.top_k == 0 and sampling.top_p == 1:
        return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)
    if sampling.top_k:
        values, ids = jax.lax.top_k(logits, min(sampling.top_k, logits.shape[-1]))
    else:
        ids = jnp.argsort(-logits, axis=-1)
        values = jnp.take_along_axis(logits, ids, axis=-1)
    if sampling.top_p < 1:
        probs = jax.nn.softmax(values, axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs  # probability of the more likely candidates
        values = jnp.where(before < sampling.top_p, values, -jnp.inf)  # the first always stays
    choice = jax.random.categorical(key, values, axis=-1)
    return jnp.take_along_axis(ids, choice[:, None], axis=-1)[:, 0].astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=("cfg", "sampling"))
def generate(params: dict, cfg: LMConfig, sampling: SamplingConfig, tokens: jnp.ndarray,
             attention_mask: jnp.ndarray, key: jax.Array):
    """Continue prompts ``tokens int [B, L]`` (``attention_mask [B, L]``, padding on either side).

    Returns ``(new_tokens int32 [B, max_new_tokens], num_tokens int32 [B])``: each row's tokens up to
    and including its first stop token, then ``pad_id``; ``num_tokens`` counts them.
    """
    batch, length = tokens.shape
    steps = sampling.max_new_tokens
    logits, cache = causal_lm.prefill(params, cfg, tokens, attention_mask, length + steps)
    layers = causal_lm.decode_layers(params, cfg)  # once, not every step
    stop_ids = jnp.asarray(sampling.stop_ids or (-1,), jnp.int32)

    def not_finished(state):
        step, _, _, _, done, _ = state
        return (step < steps) & ~jnp.all(done)

    def step_fn(state):
        step, logits, cache, out, done, num_tokens = state
        token = sample_token(logits, jax.random.fold_in(key, step), sampling)
        token = jnp.where(done, sampling.pad_id, token)
        out = jax.lax.dynamic_update_slice(out, token[:, None], (0, step))
        num_tokens = num_tokens + (~done).astype(jnp.int32)
        done = done | jnp.any(token[:, None] == stop_ids[None, :], axis=1)
        logits, cache = causal_lm.decode(params, cfg, token, cache, layers)
        return step + 1, logits, cache, out, done, num_tokens

    state = (jnp.int32(0), logits, cache, jnp.full((batch, steps), sampling.pad_id, jnp.int32),
             jnp.zeros((batch,), bool), jnp.zeros((batch,), jnp.int32))
    _, _, _, out, _, num_tokens = jax.lax.while_loop(not_finished, step_fn, state)
    return out, num_tokens


@functools.partial(jax.jit, static_argnames=("cfg",))
def score(params: dict, cfg: LMConfig, tokens: jnp.ndarray, attention_mask: jnp.ndarray,
          completion_mask: jnp.ndarray) -> jnp.ndarray:
    """Teacher-forced log-probs of completion tokens.

    ``tokens int [B, L]`` = prompt + completion (padding anywhere, ``attention_mask [B, L]``);
    ``completion_mask [B, L]`` marks the tokens to score. Returns float32 ``[B, L]``:
    ``log p(tokens[b, t] | real tokens before t)`` where ``completion_mask``, 0 elsewhere (column 0 has
    no context and is always 0).
    """
    all_logits = causal_lm.logits(params, cfg, tokens, attention_mask)[:, :-1]  # predicts t = 1..L-1
    # the previous real token's logits predict a token; with padding inside a row that is not t - 1
    mask = attention_mask.astype(bool)
    index = jnp.where(mask, jnp.arange(tokens.shape[1])[None], -1)
    previous = jax.lax.cummax(index, axis=1)[:, :-1]  # last real position <= t - 1
    context = jnp.take_along_axis(all_logits, jnp.maximum(previous, 0)[:, :, None], axis=1)
    target = tokens[:, 1:]
    picked = jnp.take_along_axis(context, target[:, :, None], axis=-1)[..., 0]
    log_probs = picked - jax.nn.logsumexp(context, axis=-1)
    valid = completion_mask[:, 1:].astype(bool) & mask[:, 1:] & (previous >= 0)
    return jnp.pad(jnp.where(valid, log_probs, 0.0), [(0, 0), (1, 0)])
