"""Collectives over an optional data-parallel ``shard_map`` axis, used inside the traced update."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp


@dataclass(frozen=True)
class DataAxis:
    """Collectives over an optional data-parallel ``shard_map`` axis (``name``); with ``name=None``
    (one device) every method is the identity, so single-device numbers are untouched."""

    name: str | None = None

    def mean(self, x):
        return x if self.name is None else jax.lax.pmean(x, self.name)

    def sum(self, x):
        return x if self.name is None else jax.lax.psum(x, self.name)

    def device_key(self, key: jax.Array) -> jax.Array:
        """A key of this device's own (per-device shuffles and subsets)."""
        return key if self.name is None else jax.random.fold_in(key, jax.lax.axis_index(self.name))

    def env_shard(self, num_envs: int):
        """``(local num_envs, global_envs)`` of this device; ``global_envs`` for rollout.collect."""
        if self.name is None:
            return num_envs, None
        local = num_envs // jax.lax.axis_size(self.name)
        return local, (num_envs, jax.lax.axis_index(self.name) * local)

    def gather_envs(self, x: jnp.ndarray) -> jnp.ndarray:
        """``[T, N_local, ...]`` -> the global ``[T, N, ...]`` batch in single-device env order."""
        return x if self.name is None else jax.lax.all_gather(x, self.name, axis=1, tiled=True)
