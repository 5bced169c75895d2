"""GRPO's objective and group-relative advantages, shared by every GRPO path: the environment
algorithm (:mod:`purejaxrl_opt.core.algos.grpo`) and the language-model trainer
(:mod:`purejaxrl_opt.core.algos.grpo_lm`). One definition of each variant (GRPO, Dr. GRPO, DAPO, GSPO,
two-sided clipping, k3 KL), so both paths optimise the same thing; the per-element terms are
:mod:`purejaxrl_opt.core.stages.losses`.
"""

from __future__ import annotations

import jax.numpy as jnp

from purejaxrl_opt.core.stages import losses

ADV_EPS = 1e-8


def group_advantages(returns: jnp.ndarray, scale: str, eps: float = ADV_EPS) -> jnp.ndarray:
    """Outcome advantages ``[num_groups, G]`` from outcome rewards ``returns [num_groups, G]``.

    ``A_i = (R_i - mean_group(R)) / (std + eps)`` with ``std`` the population std of the group
    (``group``), of all returns in the batch (``batch``), or no division (``none``, Dr. GRPO).
    A group whose outcomes are all equal gets exactly zero advantage.
    """
    centred = returns - returns.mean(axis=1, keepdims=True)
    if scale == "group":
        centred = centred / (returns.std(axis=1, keepdims=True) + eps)
    elif scale == "batch":
        centred = centred / (returns.std() + eps)
    elif scale != "none":
        raise ValueError(f"unknown scale_rewards {scale!r}")
    return jnp.where(has_spread(returns)[:, None], centred, 0.0)


def has_spread(values: jnp.ndarray, mask: jnp.ndarray | None = None) -> jnp.ndarray:
    """Per group (leading axis): do the (unmasked) values differ? ``[num_groups]`` bool."""
    flat = values.reshape(values.shape[0], -1)
    if mask is None:
        return flat.max(axis=1) > flat.min(axis=1)
    flat_mask = mask.reshape(flat.shape)
    return (jnp.where(flat_mask, flat, -jnp.inf).max(axis=1)
            > jnp.where(flat_mask, flat, jnp.inf).min(axis=1))


def overlong_penalty(lengths: jnp.ndarray, limit: int, buffer: int, penalty: float) -> jnp.ndarray:
    """DAPO's soft overlong punishment ``[B]``: 0 for ``|o| <= limit - buffer``, then linear,
    ``penalty * (limit - buffer - |o|) / buffer``, reaching ``-penalty`` at ``|o| = limit``."""
    return penalty * jnp.minimum(0.0, (limit - buffer - lengths) / buffer)


def policy_objective(log_prob, log_prob_old, log_prob_ref, entropy, advantages, mask, hparams,
                     loss_norm: str, cfg=None, reduce=None, step_mean=None
                     ) -> tuple[jnp.ndarray, dict]:
    """GRPO's loss to minimise, ``-J(theta)`` (module docstring), and diagnostics; every per-step
    argument is ``[E, T]`` (or a time block ``[K, E]`` with ``reduce``/``step_mean`` given).

    Per step: ``min(rho A, clip(rho, 1-eps, 1+eps_high) A) - beta k3 + ent_coef H``, ``rho`` per
    token or per episode (``cfg.importance_sampling_level``; sequence needs whole ``[E, T]``
    episodes), capped at ``cfg.delta`` in the unclipped term when set, ``k3`` optionally weighted
    by ``pi_theta/pi_old`` (``cfg.kl_importance_weight``). ``reduce`` is the loss reduction
    (default: :func:`losses.masked_reduce` with ``loss_norm``), ``step_mean`` the diagnostics'
    per-step mean (default: its ``token`` reduction). ``hparams["epsilon_high"] == 0`` means a
    symmetric clip. ``cfg`` (a ``GRPOConfig``, core/algos/grpo.py) None: GRPOConfig's defaults (token
    ratio, no cap, unweighted k3).
    """
    level = "token" if cfg is None else cfg.importance_sampling_level
    delta = 0.0 if cfg is None else cfg.delta
    kl_importance_weight = False if cfg is None else cfg.kl_importance_weight
    if reduce is None:
        def reduce(x):
            return losses.masked_reduce(x, mask, loss_norm)
    if step_mean is None:
        def step_mean(x):
            return losses.masked_reduce(x, mask, "token")

    eps = hparams["epsilon"]
    eps_high = jnp.where(hparams["epsilon_high"] > 0, hparams["epsilon_high"], eps)
    cap = delta if delta > 0 else None
    if level == "sequence":
        ratio_num, ratio_den = losses.sequence_log_ratio(log_prob, log_prob_old, mask), 0.0
    else:
        ratio_num, ratio_den = log_prob, log_prob_old
    surrogate = losses.clipped_surrogate(ratio_num, ratio_den, advantages, eps, eps_high, cap)
    kl_ref = losses.k3_kl(log_prob, log_prob_ref,
                          log_prob_old if kl_importance_weight else None)
    per_step = surrogate - hparams["beta"] * kl_ref + hparams["ent_coef"] * entropy
    clip_frac = losses.clip_fraction(ratio_num, ratio_den, eps, eps_high)
    diagnostics = {
        "policy_loss": -reduce(surrogate),
        "kl_ref": step_mean(kl_ref),
        "entropy": step_mean(entropy),
        "approx_kl": step_mean(losses.approx_kl(log_prob, log_prob_old)),
        "clip_frac": step_mean(jnp.broadcast_to(clip_frac, log_prob.shape)),
    }
    return -reduce(per_step), diagnostics


