"""Pure loss terms. Shapes: any batch shape ``[...]``, all arguments broadcast elementwise.

Each returns per-element values; the caller chooses the reduction (plain mean for PPO, masked and
length-normalised means for GRPO), so the same term serves every algorithm.
"""

from __future__ import annotations

import jax.numpy as jnp


def clipped_surrogate(log_prob: jnp.ndarray, log_prob_old: jnp.ndarray, advantages: jnp.ndarray,
                      clip_low, clip_high=None) -> jnp.ndarray:
    """Per-element PPO objective to *maximise*: ``min(r A, clip(r, 1-clip_low, 1+clip_high) A)``.

    ``r = exp(log_prob - log_prob_old)``; ``clip_high`` defaults to ``clip_low`` (symmetric PPO).
    """
    clip_high = clip_low if clip_high is None else clip_high
    ratio = jnp.exp(log_prob - log_prob_old)
    clipped = jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    return jnp.minimum(ratio * advantages, clipped * advantages)


def clip_fraction(log_prob: jnp.ndarray, log_prob_old: jnp.ndarray, clip_low, clip_high=None):
    """Per-element indicator (float) that the ratio lies outside ``[1-clip_low, 1+clip_high]``."""
    clip_high = clip_low if clip_high is None else clip_high
    ratio = jnp.exp(log_prob - log_prob_old)
    return jnp.logical_or(ratio < 1.0 - clip_low, ratio > 1.0 + clip_high).astype(jnp.float32)


def approx_kl(log_prob: jnp.ndarray, log_prob_old: jnp.ndarray) -> jnp.ndarray:
    """Per-element ``(r - 1) - log r``: non-negative, unbiased for KL(pi_old || pi) under pi_old."""
    log_ratio = log_prob - log_prob_old
    return jnp.expm1(log_ratio) - log_ratio


def value_loss(values: jnp.ndarray, values_old: jnp.ndarray, returns: jnp.ndarray,
               clip_eps=None) -> jnp.ndarray:
    """Per-element ``0.5 (V - R)^2``; with ``clip_eps``, the PPO2 pessimistic clipped variant."""
    unclipped = jnp.square(values - returns)
    if clip_eps is None:
        return 0.5 * unclipped
    clipped_values = values_old + jnp.clip(values - values_old, -clip_eps, clip_eps)
    return 0.5 * jnp.maximum(unclipped, jnp.square(clipped_values - returns))


def k3_kl(log_prob: jnp.ndarray, log_prob_ref: jnp.ndarray) -> jnp.ndarray:
    """Per-element k3 estimator of KL(pi || pi_ref) for actions sampled from pi (Schulman's k3).

    ``pi_ref/pi - log(pi_ref/pi) - 1``; never negative, unbiased under ``a ~ pi``.
    """
    log_ratio = log_prob_ref - log_prob
    return jnp.expm1(log_ratio) - log_ratio


def normalize(x: jnp.ndarray, eps: float = 1e-8, axis_name=None, mask=None) -> jnp.ndarray:
    """Zero mean, unit std. With ``axis_name`` (data parallel, equal shard sizes on every device) the
    mean and std are those of the union of all devices' ``x``, via ``lax.pmean``. With ``mask`` (same
    shape, bool) the statistics are those of the unmasked elements, and masked elements become 0."""
    if mask is not None:
        weights = mask.astype(jnp.float32)
        count = jnp.maximum(weights.sum(), 1.0)
        mean = jnp.sum(x * weights) / count
        std = jnp.sqrt(jnp.sum(weights * (x - mean) ** 2) / count)
        return jnp.where(mask, (x - mean) / (std + eps), 0.0)
    if axis_name is None:
        return (x - x.mean()) / (x.std() + eps)
    import jax

    mean = jax.lax.pmean(x.mean(), axis_name)
    var = jax.lax.pmean(jnp.mean(jnp.square(x - mean)), axis_name)
    return (x - mean) / (jnp.sqrt(var) + eps)


def masked_reduce(values: jnp.ndarray, mask: jnp.ndarray, loss_norm: str) -> jnp.ndarray:
    """Reduce per-step ``values [E, T]`` over unmasked steps (``mask [E, T]`` bool).

    ``sequence``: per-episode mean (``1/|o_i|``), then mean over episodes (GRPO's paper);
    ``token``: sum over all unmasked steps / their number (DAPO);
    ``constant``: sum / ``(E * T)`` (Dr. GRPO: no length normalisation).
    """
    values = jnp.where(mask, values, 0.0)
    weights = mask.astype(jnp.float32)
    if loss_norm == "sequence":
        return jnp.mean(values.sum(-1) / jnp.maximum(weights.sum(-1), 1.0))
    if loss_norm == "token":
        return values.sum() / jnp.maximum(weights.sum(), 1.0)
    if loss_norm == "constant":
        return values.sum() / values.size
    raise ValueError(f"unknown loss_norm {loss_norm!r}")
