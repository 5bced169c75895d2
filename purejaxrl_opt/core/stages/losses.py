"""Pure loss terms. Shapes: any batch shape ``[...]``, all arguments broadcast elementwise.

Each returns per-element values; the caller chooses the reduction (plain mean for PPO, masked and
length-normalised means for GRPO), so the same term serves every algorithm.
"""

from __future__ import annotations

import jax.numpy as jnp


def clipped_surrogate(log_prob: jnp.ndarray, log_prob_old: jnp.ndarray, advantages: jnp.ndarray,
                      clip_low, clip_high=None, ratio_cap=None) -> jnp.ndarray:
    """Per-element PPO objective to *maximise*: ``min(r A, clip(r, 1-clip_low, 1+clip_high) A)``.

    ``r = exp(log_prob - log_prob_old)``; ``clip_high`` defaults to ``clip_low`` (symmetric PPO).
    ``ratio_cap`` (two-sided clipping, INTELLECT-2; TRL's ``delta``): the unclipped term uses
    ``min(r, ratio_cap)``, which bounds the objective where ``A < 0`` and ``r`` is large (there the
    ``min`` picks the unclipped term, unbounded without the cap); where ``A > 0`` it changes nothing
    once ``ratio_cap >= 1 + clip_high``.
    """
    clip_high = clip_low if clip_high is None else clip_high
    ratio = jnp.exp(log_prob - log_prob_old)
    clipped = jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    if ratio_cap is not None:
        ratio = jnp.minimum(ratio, ratio_cap)
    return jnp.minimum(ratio * advantages, clipped * advantages)


def sequence_log_ratio(log_prob: jnp.ndarray, log_prob_old: jnp.ndarray, mask: jnp.ndarray) -> jnp.ndarray:
    """GSPO's (Zheng et al. 2025) length-normalised sequence log-ratio, ``[E, T] -> [E, 1]``:
    ``log s_i = (1/|o_i|) sum_{t unmasked} (log pi(o_it) - log pi_old(o_it))``, so that
    ``s_i = (pi(o_i) / pi_old(o_i))^(1/|o_i|)``; every token of episode ``i`` shares it (TRL's
    ``importance_sampling_level="sequence"``). An episode without unmasked steps gets 0."""
    log_ratio = jnp.where(mask, log_prob - log_prob_old, 0.0)
    return (log_ratio.sum(-1) / jnp.maximum(mask.sum(-1), 1))[:, None]


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


def k3_kl(log_prob: jnp.ndarray, log_prob_ref: jnp.ndarray, log_prob_old=None) -> jnp.ndarray:
    """Per-element k3 estimator of KL(pi || pi_ref) (Schulman's k3): ``pi_ref/pi - log(pi_ref/pi) - 1``,
    never negative.

    Unbiased only for actions sampled from ``pi`` itself. In GRPO the actions come from ``pi_old``
    (the policy that rolled the batch): in the first epoch's first minibatch ``pi == pi_old`` and
    it is unbiased; after that, unweighted, its mean is ``E_{a~pi_old}[k3]``, KL(pi || pi_ref)'s
    k3 integrand averaged under the *old* policy (DeepSeekMath's and TRL's GRPOTrainer's choice).
    With ``log_prob_old`` it is importance-weighted, ``(pi/pi_old) * k3``, whose mean under
    ``a ~ pi_old`` is exactly KL(pi || pi_ref) at any ``pi``, and whose gradient is that of the KL
    (the weight is differentiated too).
    """
    log_ratio = log_prob_ref - log_prob
    k3 = jnp.expm1(log_ratio) - log_ratio
    if log_prob_old is None:
        return k3
    return jnp.exp(log_prob - log_prob_old) * k3


def ppo_objective(log_prob, log_prob_old, advantages, values, values_old, returns, entropy, hparams,
                  clip_value: bool, mean) -> tuple[jnp.ndarray, dict]:
    """PPO's loss to minimise, ``-surrogate + vf_coef * value_loss - ent_coef * entropy``, and its
    diagnostics: :func:`clipped_surrogate` with ``hparams["clip_eps"]``, :func:`value_loss` (clipped
    with the same ``clip_eps`` when ``clip_value``), every term reduced by ``mean`` (a plain mean
    over samples; over unmasked tokens on token envs). Per-element arguments broadcast."""
    clip_eps = hparams["clip_eps"]
    policy_loss = -mean(clipped_surrogate(log_prob, log_prob_old, advantages, clip_eps))
    value = mean(value_loss(values, values_old, returns, clip_eps if clip_value else None))
    entropy = mean(entropy)
    total = policy_loss + hparams["vf_coef"] * value - hparams["ent_coef"] * entropy
    return total, {"policy_loss": policy_loss, "value_loss": value, "entropy": entropy,
                   "approx_kl": mean(approx_kl(log_prob, log_prob_old)),
                   "clip_frac": mean(clip_fraction(log_prob, log_prob_old, clip_eps))}


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
