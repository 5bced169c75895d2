"""gymnax environments: construction, a static description of their spaces, observation normalisation.

Wrappers are deliberately thin functions rather than env subclasses: the rollout (rollout.py) calls
``env.step`` (gymnax 1.x: ``obs, state, reward, terminated, truncated, info`` with auto-reset and the
pre-reset observation in ``info["final_observation"]``) and ``env.step_env`` (no auto-reset, used by
episode rollouts), and keeps episode statistics in its own carry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from purejaxrl_opt.config import supported_env_ids
from purejaxrl_opt.errors import ConfigError

SUPPORTED_ENVS: tuple[str, ...] = supported_env_ids()


@dataclass(frozen=True)
class EnvSpec:
    """What the networks and rollouts need to know about an environment (static, hashable)."""

    env_id: str
    obs_shape: tuple[int, ...]
    discrete: bool
    num_actions: int  # categories if discrete, else action dimensions
    action_low: tuple[float, ...] | None
    action_high: tuple[float, ...] | None
    max_steps: int  # episode limit (time-limit truncation)
    vocab: tuple[str, ...] | None = None  # token envs (token_envs.py): the token strings; else None


class MaskedObservation:
    """A gymnax env whose observations are multiplied by a fixed 0/1 mask (same shape and dtype).

    Zeroing rather than dropping entries keeps every observation shape (images too), and a zeroed
    entry carries no information. Every observation the agent can see is masked: those of ``reset``,
    ``step`` (including ``info["final_observation"]``, the pre-reset one) and the no-auto-reset
    ``reset_env``/``step_env``; everything else is the wrapped env's.
    """

    def __init__(self, env, mask: np.ndarray):
        self._env = env
        self._mask = mask

    def __getattr__(self, name):
        return getattr(self._env, name)

    def _apply(self, obs):
        return (obs * jnp.asarray(self._mask, obs.dtype)).astype(obs.dtype)

    def reset_env(self, key, params):
        obs, state = self._env.reset_env(key, params)
        return self._apply(obs), state

    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, info = self._env.step_env(key, state, action, params)
        return self._apply(obs), state, reward, terminated, info

    def reset(self, key, params=None):
        obs, state = self._env.reset(key, params)
        return self._apply(obs), state

    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        info = dict(info, final_observation=self._apply(info["final_observation"]))
        return self._apply(obs), state, reward, terminated, truncated, info


def make(env_id: str, params_overrides: dict[str, Any] | None = None,
         obs_mask: tuple[int, ...] | None = None):
    """Return ``(env, env_params, spec)`` for a gymnax id, with ``EnvParams`` fields overridden and,
    with ``obs_mask``, observation entries zeroed (:class:`MaskedObservation`)."""
    import gymnax
    from gymnax.environments import spaces

    from purejaxrl_opt import token_envs

    if env_id not in SUPPORTED_ENVS and not token_envs.is_token_env(env_id):
        raise ValueError(f"unknown env '{env_id}'; supported: {list(SUPPORTED_ENVS)}")
    overrides = dict(params_overrides or {})
    if token_envs.is_token_env(env_id):
        # options fix the token buffer's shape: they are constructor arguments, checked here
        env, env_params = token_envs.make(env_id, overrides)
        overrides = {}
    else:
        env, env_params = gymnax.make(env_id)
    if overrides:
        unknown = sorted(set(overrides) - set(env_params.__dataclass_fields__))
        if unknown:
            raise ConfigError(f"unknown config key 'env.params.{unknown[0]}' for {env_id}; allowed: "
                              f"{sorted(env_params.__dataclass_fields__)}")
        env_params = env_params.replace(**overrides)
    obs_shape = tuple(env.observation_space(env_params).shape)
    if obs_mask is not None:
        if env_id in token_envs.TOKEN_ENVS:
            raise ConfigError(f"config key 'env.obs_mask' must be null for the token env {env_id}")
        size = int(np.prod(obs_shape))
        if len(obs_mask) != size or any(m not in (0, 1) for m in obs_mask):
            raise ConfigError(f"config key 'env.obs_mask' = {list(obs_mask)} is invalid for {env_id}: "
                              f"must be {size} entries of 0/1 (one per observation entry, obs shape "
                              f"{list(obs_shape)})")
        env = MaskedObservation(env, np.asarray(obs_mask, np.float32).reshape(obs_shape))
    space = env.action_space(env_params)
    if isinstance(space, spaces.Discrete):
        discrete, num_actions, low, high = True, int(space.n), None, None
    elif isinstance(space, spaces.Box):
        discrete = False
        num_actions = int(np.prod(space.shape))
        low = tuple(np.broadcast_to(np.asarray(space.low, np.float32), (num_actions,)).tolist())
        high = tuple(np.broadcast_to(np.asarray(space.high, np.float32), (num_actions,)).tolist())
    else:
        raise ValueError(f"{env_id}: unsupported action space {space!r}")
    max_steps = int(getattr(env_params, "max_steps_in_episode", 0) or 0)
    vocab = tuple(env.vocab) if token_envs.is_token_env(env_id) else None
    spec = EnvSpec(env_id, obs_shape, discrete, num_actions, low, high, max_steps, vocab)
    return env, env_params, spec


def eval_params(spec: EnvSpec, env_params):
    """Env params for evaluation: token envs draw held-out (test-split) prompts; others unchanged."""
    return env_params.replace(split=1) if spec.vocab is not None else env_params


def to_env_action(spec: EnvSpec, action: jnp.ndarray, clip: bool) -> jnp.ndarray:
    """Map a policy action to what ``env.step`` takes (continuous: clipped to the bounds, unbatched shape)."""
    if spec.discrete:
        return action
    if clip:
        action = jnp.clip(action, jnp.asarray(spec.action_low), jnp.asarray(spec.action_high))
    return action


# --------------------------------------------------------------------------- observation normalisation
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


def obs_norm_apply(state: ObsNormState | None, obs: jnp.ndarray, clip: float = 10.0) -> jnp.ndarray:
    obs = obs.astype(jnp.float32)
    if state is None:
        return obs
    return jnp.clip((obs - state.mean) / jnp.sqrt(state.var + 1e-8), -clip, clip)


def vmap_reset(env, env_params, keys: jax.Array):
    """Reset one env per key: ``keys [N]`` -> ``(obs [N, ...], state [N, ...])``."""
    return jax.vmap(env.reset, in_axes=(0, None))(keys, env_params)
