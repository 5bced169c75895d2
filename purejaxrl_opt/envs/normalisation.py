"""Running statistics of observations and rewards (inside jit; the state is a pytree).

Observations: a running mean/variance per entry (parallel Welford), frozen during each rollout and
applied as ``clip((obs - mean) / sqrt(var + 1e-8), -10, 10)``; or (``env.obs_norm_style=brax``) Brax
PPO's running statistics (:class:`BraxObsNormState`), applied as ``(obs - mean) / std``. Rewards: divided
by the running std of each env's discounted return (SB3's VecNormalize, gymnasium's NormalizeReward).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp


class ObsNormState(NamedTuple):
    """Running mean/variance of observations (parallel Welford), ``[*obs_shape]`` each."""

    mean: jnp.ndarray
    var: jnp.ndarray
    count: jnp.ndarray


def obs_norm_init(obs_shape: tuple[int, ...]) -> ObsNormState:
    return ObsNormState(jnp.zeros(obs_shape), jnp.ones(obs_shape), jnp.asarray(1e-4))


def obs_norm_update(state: ObsNormState, batch: jnp.ndarray, mask: jnp.ndarray | None = None) -> ObsNormState:
    """Merge a batch ``[..., *obs_shape]`` into the running statistics (Chan et al. parallel update).

    ``mask [...]`` (bool, optional): merge only the unmasked observations (episode padding excluded).
    """
    batch = batch.reshape((-1,) + state.mean.shape).astype(jnp.float32)
    if mask is None:
        batch_mean, batch_var, batch_count = batch.mean(0), batch.var(0), batch.shape[0]
    else:
        weights = mask.reshape(-1).astype(jnp.float32)
        weights_b = weights.reshape((-1,) + (1,) * len(state.mean.shape))
        batch_count = jnp.maximum(weights.sum(), 1.0)
        batch_mean = jnp.sum(batch * weights_b, 0) / batch_count
        batch_var = jnp.sum(weights_b * (batch - batch_mean) ** 2, 0) / batch_count
    delta = batch_mean - state.mean
    total = state.count + batch_count
    mean = state.mean + delta * batch_count / total
    m2 = state.var * state.count + batch_var * batch_count + delta**2 * state.count * batch_count / total
    return ObsNormState(mean, m2 / total, total)


def reward_norm_init() -> ObsNormState:
    """Statistics of ``env.normalize_reward``: the running mean/variance (scalars) of every env's
    discounted return at every step so far. The returns themselves travel with the envs
    (``rollout.EnvCarry.discounted_return``)."""
    return obs_norm_init(())


def discounted_returns(returns: jnp.ndarray, reward: jnp.ndarray, done: jnp.ndarray,
                       gamma) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Running discounted returns through a rollout: ``G_t = gamma * G_{t-1} + r_t``, restarted after
    every episode end (terminated or truncated). ``returns [N]`` carries ``G`` in from the previous
    rollout; ``reward, done [T, N]``. Returns ``(G [T, N], G carried out [N])``."""

    def _step(g, step):
        r, d = step
        g = gamma * g + r
        return jnp.where(d, 0.0, g), g

    carried, per_step = jax.lax.scan(_step, returns, (reward.astype(jnp.float32), done))
    return per_step, carried


def reward_norm_scale(stats: ObsNormState, reward: jnp.ndarray, clip: float = 10.0) -> jnp.ndarray:
    """``r / sqrt(Var[G] + 1e-8)`` clipped to ``[-clip, clip]``: rewards divided by the running std
    of the discounted return (not centred), as SB3's VecNormalize and gymnasium's NormalizeReward."""
    return jnp.clip(reward / jnp.sqrt(stats.var + 1e-8), -clip, clip)


class BraxObsNormState(NamedTuple):
    """Brax's running statistics of observations (brax.training.acme.running_statistics, Welford mode,
    ``std_eps = 0``): ``mean``, ``summed_variance`` and ``std`` are ``[*obs_shape]``; ``count`` is the
    observations seen (uint32 scalar; Brax keeps a two-word uint64, equal below 2^32 observations)."""

    mean: jnp.ndarray
    summed_variance: jnp.ndarray
    std: jnp.ndarray
    count: jnp.ndarray


# Brax's running_statistics.update defaults: the std is clipped to [BRAX_STD_MIN, BRAX_STD_MAX]
BRAX_STD_MIN, BRAX_STD_MAX = 1e-6, 1e6


def brax_obs_norm_init(obs_shape: tuple[int, ...]) -> BraxObsNormState:
    """Brax's ``init_state``: mean 0, std 1 (the first rollout acts on raw observations), count 0."""
    zeros = jnp.zeros(obs_shape, jnp.float32)
    return BraxObsNormState(zeros, zeros, jnp.ones(obs_shape, jnp.float32), jnp.zeros((), jnp.uint32))


def brax_obs_norm_update(state: BraxObsNormState, batch: jnp.ndarray) -> BraxObsNormState:
    """Merge a batch ``[..., *obs_shape]`` (every leading axis a batch axis) as Brax's
    ``running_statistics.update`` does: the mean moves by the summed difference over the new count,
    the summed variance by ``sum((x - mean_old) (x - mean_new))``, ``std = sqrt(summed_variance /
    count)`` clipped to ``[1e-6, 1e6]`` (negative rounding residue floored at 0). No clipping of the
    data, no prior count."""
    batch_axes = tuple(range(batch.ndim - state.mean.ndim))
    batch = batch.astype(jnp.float32)
    count = state.count + jnp.asarray(math.prod(batch.shape[:len(batch_axes)]), jnp.uint32)
    count_float = count.astype(jnp.float32)
    diff_to_old_mean = batch - state.mean
    mean = state.mean + jnp.sum(diff_to_old_mean, axis=batch_axes) / count_float
    summed_variance = state.summed_variance + jnp.sum(diff_to_old_mean * (batch - mean), axis=batch_axes)
    std = jnp.clip(jnp.sqrt(jnp.maximum(summed_variance, 0) / count_float), BRAX_STD_MIN, BRAX_STD_MAX)
    return BraxObsNormState(mean, summed_variance, std, count)


def obs_norm_apply(state: ObsNormState | BraxObsNormState | None, obs: jnp.ndarray,
                   clip: float = 10.0) -> jnp.ndarray:
    """Observations ``[..., *obs_shape]`` normalised with ``state`` (None: unchanged, as float32):
    ``clip((obs - mean) / sqrt(var + 1e-8), -clip, clip)``, or Brax's ``(obs - mean) / std``
    (:class:`BraxObsNormState`: no epsilon, no clipping, as Brax's PPO calls ``normalize``)."""
    obs = obs.astype(jnp.float32)
    if state is None:
        return obs
    if isinstance(state, BraxObsNormState):
        return (obs - state.mean) / state.std
    return jnp.clip((obs - state.mean) / jnp.sqrt(state.var + 1e-8), -clip, clip)
