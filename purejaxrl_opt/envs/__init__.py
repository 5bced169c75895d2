"""The environment layer: one protocol (protocol.py), a registry of libraries (registry.py), one
adapter per library (gymnax.py, tokens.py, ...), wrappers and running normalisation statistics.

Everything above this package reaches environments through what is exported here:

* :func:`make` ``(env_id, params, obs_mask) -> (env, env_params, spec)`` for any registered id
  (``CartPole-v1``, ``gymnax/CartPole-v1``, ``Addition-v0``, ``mypkg.tasks:MyTask``,
  ``<library>/<id>``), with the static :class:`EnvSpec`;
* :func:`reset_batch` / :func:`step_batch`: the one way a batch of envs is reset and stepped (with
  auto-reset that keeps ``terminated``, ``truncated`` and the pre-reset observation in
  ``info["final_observation"]``), used by every rollout, evaluation and SFT;
* :func:`to_env_action`, :func:`eval_params`, the observation/reward normalisation functions.

Nothing here imports an algorithm, a stage or the runner.
"""

from __future__ import annotations

from typing import Any

from purejaxrl_opt.envs import deferred

deferred.defer()  # before any env library is imported (gymnax's Pong imports seaborn to draw)

import jax
import jax.numpy as jnp
import numpy as np

from purejaxrl_opt.envs import registry
from purejaxrl_opt.envs.normalisation import (BraxObsNormState, ObsNormState, brax_obs_norm_init,
                                              brax_obs_norm_update, discounted_returns, obs_norm_apply,
                                              obs_norm_init, obs_norm_update, reward_norm_init,
                                              reward_norm_scale)
from purejaxrl_opt.envs.protocol import EnvSpec, keyed_reset, spec_of
from purejaxrl_opt.envs.wrappers import MaskedObservation
from purejaxrl_opt.config.errors import ConfigError


def make(env_id: str, params_overrides: dict[str, Any] | None = None,
         obs_mask: tuple[int, ...] | None = None):
    """Return ``(env, env_params, spec)`` for a registered env id, built by its library's adapter
    with ``params_overrides`` (the run's ``env.params``) and, with ``obs_mask``, observation entries
    zeroed (:class:`MaskedObservation`). Every bad id, key or value is a ConfigError."""
    library, env, env_params = registry.make(env_id, dict(params_overrides or {}))
    spec = spec_of(env, env_params, env_id, library)
    if obs_mask is not None:
        env = MaskedObservation(env, _check_obs_mask(spec, obs_mask))
    return env, env_params, spec


def _check_obs_mask(spec: EnvSpec, obs_mask: tuple[int, ...]) -> np.ndarray:
    if spec.vocab is not None:
        raise ConfigError(f"config key 'env.obs_mask' must be null for the token env {spec.env_id}")
    size = int(np.prod(spec.obs_shape))
    if len(obs_mask) != size or any(m not in (0, 1) for m in obs_mask):
        raise ConfigError(f"config key 'env.obs_mask' = {list(obs_mask)} is invalid for {spec.env_id}: "
                          f"must be {size} entries of 0/1 (one per observation entry, obs shape "
                          f"{list(spec.obs_shape)})")
    if spec.action_mask and not all(obs_mask[-spec.num_actions:]):
        raise ConfigError(f"config key 'env.obs_mask' = {list(obs_mask)} is invalid for {spec.env_id}: "
                          f"its last {spec.num_actions} entries are the legal-action mask and must be 1")
    return np.asarray(obs_mask, np.float32).reshape(spec.obs_shape)


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


def reset_batch(env, env_params, keys: jax.Array):
    """Reset one env per key: ``keys [N]`` -> ``(obs [N, ...], state [N, ...])``."""
    return jax.vmap(env.reset, in_axes=(0, None))(keys, env_params)


def step_batch(env, env_params, keys: jax.Array, state, action):
    """Step ``N`` envs with auto-reset: ``keys [N]``, ``state [N, ...]``, ``action [N, ...]`` ->
    ``(obs, state, reward, terminated, truncated, info)``, each ``[N, ...]``, with the pre-reset
    observation in ``info["final_observation"]``. The env's own ``step_batch`` when it has one (a
    batch-level reset, e.g. an optimistic one), else ``env.step`` vmapped over the envs."""
    batched = getattr(env, "step_batch", None)
    if batched is not None:
        return batched(keys, state, action, env_params)
    return jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, action, env_params)


__all__ = ["BraxObsNormState", "ConfigError", "EnvSpec", "MaskedObservation", "ObsNormState",
           "brax_obs_norm_init", "brax_obs_norm_update", "discounted_returns",
           "eval_params", "keyed_reset", "make", "obs_norm_apply", "obs_norm_init", "obs_norm_update",
           "registry", "reset_batch", "reward_norm_init", "reward_norm_scale", "spec_of", "step_batch",
           "to_env_action"]
