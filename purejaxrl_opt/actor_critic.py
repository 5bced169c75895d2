"""The actor-critic stage PPO and TRPO share: everything of an update except the policy/critic step.

Per update: collect ``[num_steps, num_envs]`` transitions with the current policy (observations
normalised with the statistics frozen for this rollout) -> episode statistics -> values and next values
from the critic in one batched call each -> truncation-aware GAE -> one flat ``[B]`` batch; after the
step, the observation statistics absorb the rollout and the episode metrics are reported. Data
parallel (``axis_name``): each device steps its shard of the envs; episode statistics are summed
and the observation statistics see the global batch in single-device order, so they agree everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from purejaxrl_opt import envs, rollout
from purejaxrl_opt.collectives import DataAxis
from purejaxrl_opt.config import RunConfig
from purejaxrl_opt.distributions import Distribution, for_spec
from purejaxrl_opt.envs import EnvSpec
from purejaxrl_opt.networks import Actor, Critic


class Transitions(struct.PyTreeNode):
    """One rollout as a flat batch, ``B = num_envs * num_steps`` (a device's shard when data parallel)."""

    obs: jnp.ndarray  # normalised, [B, *obs_shape]
    action: jnp.ndarray  # [B] or [B, D]
    log_prob_old: jnp.ndarray  # [B] log pi_old(a|s) from the rollout
    value_old: jnp.ndarray  # [B] V(s) of the critic that computed GAE
    advantages: jnp.ndarray  # [B]
    returns: jnp.ndarray  # [B] advantages + value_old


class Experience(NamedTuple):
    """What one rollout gives an update."""

    carry: rollout.EnvCarry  # env state to continue from next update
    transitions: Transitions
    raw_obs: jnp.ndarray  # [T, N, *obs_shape] unnormalised, for the observation statistics
    stats: rollout.EpisodeStats  # summed over devices


class InitialParts(NamedTuple):
    actor_params: Any
    critic_params: Any
    env: rollout.EnvCarry
    obs_norm: envs.ObsNormState | None
    key: jax.Array


@dataclass(frozen=True)
class ActorCriticStage:
    """The shared stage for one run: an MLP/CNN actor and critic on a gymnax env."""

    run: RunConfig
    env: Any
    env_params: Any
    spec: EnvSpec
    dist: Distribution
    actor: Actor
    critic: Critic
    data: DataAxis

    @property
    def global_batch_size(self) -> int:
        """Env steps of one update, all devices together."""
        return self.run.algo.num_envs * self.run.algo.num_steps

    def init(self, key: jax.Array) -> InitialParts:
        """Fresh actor and critic parameters, reset envs (this device's shard), observation statistics."""
        actor_key, critic_key, env_key, key = jax.random.split(key, 4)
        dummy = jnp.zeros((1,) + self.spec.obs_shape, jnp.float32)
        obs_norm = envs.obs_norm_init(self.spec.obs_shape) if self.run.env.normalize_obs else None
        num_envs, global_envs = self.data.env_shard(self.run.algo.num_envs)
        carry = rollout.reset_carry(self.env, self.env_params, env_key, num_envs, global_envs)
        return InitialParts(self.actor.init(actor_key, dummy), self.critic.init(critic_key, dummy), carry,
                            obs_norm, key)

    def experience(self, actor_params, critic_params, obs_norm, carry: rollout.EnvCarry, key: jax.Array,
                   hparams) -> Experience:
        """Collect a rollout and turn it into a flat batch with GAE advantages and returns."""
        cfg = self.run.algo
        num_envs, global_envs = self.data.env_shard(cfg.num_envs)
        carry, batch, stats = rollout.collect(
            self.env, self.env_params, self.spec, self.dist, self.actor.apply, actor_params, obs_norm,
            carry, key, cfg.num_steps, self.run.env.clip_actions, global_envs)
        stats = jax.tree_util.tree_map(self.data.sum, stats)

        obs = envs.obs_norm_apply(obs_norm, batch.obs)
        values = self.critic.apply(critic_params, obs)
        next_values = self.critic.apply(critic_params, envs.obs_norm_apply(obs_norm, batch.final_obs))
        advantages, returns = rollout.gae(batch.reward, values, next_values, batch.terminated,
                                          batch.done, hparams["gamma"], hparams["gae_lambda"])
        batch_size = num_envs * cfg.num_steps  # this device's
        transitions = jax.tree_util.tree_map(
            lambda x: x.reshape((batch_size,) + x.shape[2:]),
            Transitions(obs, batch.action, batch.log_prob, values, advantages, returns))
        return Experience(carry, transitions, batch.obs, stats)

    def next_obs_norm(self, obs_norm, raw_obs: jnp.ndarray):
        """The observation statistics after this rollout (None when observations are not normalised)."""
        if obs_norm is None:
            return None
        # the global batch in single-device order, so the statistics are the same everywhere
        return envs.obs_norm_update(obs_norm, self.data.gather_envs(raw_obs))

    def episode_metrics(self, stats: rollout.EpisodeStats) -> dict:
        """Finished-episode metrics of the rollout and the env steps the update consumed."""
        return dict(return_mean=stats.return_mean(), episode_length=stats.length_mean(),
                    episodes=stats.count, env_steps=jnp.asarray(self.global_batch_size, jnp.float32))


def make_stage(run: RunConfig, env, env_params, spec: EnvSpec, axis_name: str | None = None) -> ActorCriticStage:
    return ActorCriticStage(run, env, env_params, spec, for_spec(spec.discrete), Actor(spec, run.network),
                            Critic(spec, run.network), DataAxis(axis_name))
