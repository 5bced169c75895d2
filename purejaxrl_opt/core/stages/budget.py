"""A lane's budget of real env steps (GRPO, PPO on token envs): its episodes end at different
lengths, so ``total_timesteps`` counts the unmasked steps a lane consumed, not updates times a batch.

A lane runs updates while its consumed steps are below the budget (:meth:`StepBudget.active`, the
``Algorithm.lane_active`` of :func:`purejaxrl_opt.core.algos.base.run_updates`), so it uses at least
all of it and at most one update's steps more. The metrics buffer has ``num_updates`` rows: the most
updates a lane can run, every episode being at least one step long (:func:`max_updates`); rows of
updates not run stay NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp


def max_updates(total_timesteps: int, episodes_per_update: int) -> int:
    """The most updates before ``total_timesteps`` real steps are spent, each of the
    ``episodes_per_update`` episodes of an update being at least one step:
    ``ceil(total_timesteps / episodes_per_update)``, at least 1."""
    return max(1, -(-total_timesteps // episodes_per_update))


@dataclass(frozen=True)
class StepBudget:
    total_timesteps: int  # real env steps per lane
    num_updates: int  # rows of the metrics buffer (:func:`max_updates`, or a configured bound)

    def learning_rate(self, lr, anneal: bool, update_idx, env_steps):
        """``lr`` decayed linearly to 0 with the share of the budget used (the larger of updates run
        / ``num_updates`` and ``env_steps`` / ``total_timesteps``; the update count only bounds)
        when ``anneal``, else ``lr``. Scalars; traced inside an update."""
        progress = jnp.maximum(update_idx / self.num_updates, env_steps / self.total_timesteps)
        return lr * (1.0 - progress) if anneal else lr

    def active(self, env_steps):
        """Whether a lane that consumed ``env_steps`` (uint32 scalar) may run another update."""
        return env_steps < self.total_timesteps

    @staticmethod
    def spend(env_steps, lengths):
        """``env_steps`` (uint32) plus this update's real steps (``lengths [B]``, per episode)."""
        return env_steps + lengths.sum().astype(jnp.uint32)
