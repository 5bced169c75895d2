"""Wrappers that keep the protocol (purejaxrl_opt/envs/protocol.py): same methods, same signatures."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np


class MaskedObservation:
    """A protocol env whose observations are multiplied by a fixed 0/1 mask (same shape and dtype).

    Zeroing rather than dropping entries keeps every observation shape (images too), and a zeroed
    entry carries no information. Every observation the agent can see is masked: those of ``reset``,
    ``step`` (including ``info["final_observation"]``, the pre-reset one), the no-auto-reset
    ``reset_env``/``step_env`` and the wrapped env's own ``step_batch`` when it has one; everything
    else (spaces, ``is_truncated``, ``render_frame``, the optional attributes) is the wrapped env's.
    """

    def __init__(self, env, mask: np.ndarray):
        self._env = env
        self._mask = mask
        if hasattr(env, "step_batch"):  # an instance attribute wins over __getattr__'s pass-through
            self.step_batch = self._step_batch

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

    def _step_batch(self, keys, state, action, params):
        obs, state, reward, terminated, truncated, info = self._env.step_batch(keys, state, action, params)
        info = dict(info, final_observation=self._apply(info["final_observation"]))
        return self._apply(obs), state, reward, terminated, truncated, info
