"""The actor-critic stage PPO and TRPO share: everything of an update except the policy/critic step.

Per update: collect ``[num_steps, num_envs]`` transitions with the current policy (observations
normalised with the statistics frozen for this rollout) -> episode statistics -> values and next values
from the critic in one batched call each -> truncation-aware GAE -> one flat ``[B]`` batch; after the
step, the observation statistics absorb the rollout and the episode metrics are reported.
``env.obs_norm_style=brax`` is Brax PPO's order instead: the statistics absorb the rollout *before* the
values, GAE and the policy step, which all read the updated ones (the rollout's log-probs stay those
of the statistics it acted with). ``env.reward_scale`` multiplies the rewards GAE sees (Brax PPO's
``reward_scaling``); episode metrics keep the env's rewards. With ``algo.unroll_length`` GAE also
bootstraps at the end of every unroll (Brax PPO's); a stage made with ``unrolls=True`` (PPO's
``algo.recompute_advantages``) leaves GAE to the update and returns the rollout as :class:`Unrolls`. Data
parallel (``axis_name``): each device steps its shard of the envs; episode statistics are summed
and the observation statistics see the global batch in single-device order, so they agree everywhere.

Recurrent networks (``network.recurrent=gru|lstm``): the actor's hidden state is carried through the
rollout (``EnvCarry.memory``) and reset where an episode ends; the critic replays the rollout from its
own carried state (``EnvCarry.critic_memory``) for the values, and bootstraps each step's final
observation from its state after that step. The batch is then :class:`Sequences`: whole env sequences
``[N, T]`` with the hidden states they started from, so an update replays them exactly (truncated
backpropagation through time over ``num_steps``) and minibatches are sets of envs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from purejaxrl_opt import envs
from purejaxrl_opt.core.stages import rollout
from purejaxrl_opt.core.stages.collectives import DataAxis
from purejaxrl_opt.config.schema import RunConfig
from purejaxrl_opt.core.models.distributions import Distribution, for_spec
from purejaxrl_opt.envs import EnvSpec
from purejaxrl_opt.core.models.policies import Policy, ValueFunction, make_policy, make_value, replay, shared_apply


class Transitions(struct.PyTreeNode):
    """One rollout as a flat batch, ``B = num_envs * num_steps`` (a device's shard when data parallel)."""

    obs: jnp.ndarray  # normalised, [B, *obs_shape]
    action: jnp.ndarray  # [B] or [B, D]
    log_prob_old: jnp.ndarray  # [B] log pi_old(a|s) from the rollout
    value_old: jnp.ndarray  # [B] V(s) of the critic that computed GAE
    advantages: jnp.ndarray  # [B]
    returns: jnp.ndarray  # [B] advantages + value_old


class Sequences(struct.PyTreeNode):
    """One rollout of a recurrent actor-critic as env sequences, ``[N, T, ...]`` (a device's shard of
    the envs when data parallel): minibatches take whole sequences, each replayed from its start."""

    obs: jnp.ndarray  # normalised, [N, T, *obs_shape]
    action: jnp.ndarray  # [N, T] or [N, T, D]
    log_prob_old: jnp.ndarray  # [N, T]
    value_old: jnp.ndarray  # [N, T]
    advantages: jnp.ndarray  # [N, T]
    returns: jnp.ndarray  # [N, T]
    done: jnp.ndarray  # [N, T] bool: the step ended an episode (the hidden state resets after it)
    actor_start: Any  # actor hidden state [N, ...] before the first step
    critic_start: Any  # critic hidden state [N, ...] before the first step

    @property
    def num_sequences(self) -> int:
        return self.done.shape[0]


class Unrolls(struct.PyTreeNode):
    """One rollout cut into Brax PPO's unrolls, ``U = num_envs * num_steps / k`` segments of ``k``
    consecutive steps of one env (``k``: ``algo.unroll_steps()``), env-major (unroll ``u`` is env
    ``u // (num_steps / k)``), with what an update needs to compute GAE itself
    (``algo.recompute_advantages``): minibatches take whole unrolls."""

    obs: jnp.ndarray  # normalised, [U, k, *obs_shape]
    action: jnp.ndarray  # [U, k] or [U, k, D]
    log_prob_old: jnp.ndarray  # [U, k]
    value_old: jnp.ndarray  # [U, k] V(s) of the rollout's critic (value clipping)
    reward: jnp.ndarray  # [U, k] as GAE sees it (after env.normalize_reward)
    terminated: jnp.ndarray  # [U, k] bool
    truncated: jnp.ndarray  # [U, k] bool: the episode ended without terminating (time limit)
    next_obs: jnp.ndarray  # normalised, [U, *obs_shape]: the observation after the unroll's last step


def time_major(x: jnp.ndarray) -> jnp.ndarray:
    return jnp.swapaxes(x, 0, 1)


def replay_actor(policy: Policy, actor_params, seq: Sequences) -> dict:
    """The actor's distribution parameters ``[N, T, ...]`` over ``seq`` replayed from its start states."""
    _, out, _ = replay(policy.recurrence, actor_params, seq.actor_start, time_major(seq.obs),
                       time_major(seq.done))
    return jax.tree_util.tree_map(time_major, out)


def replay_critic(value: ValueFunction, critic_params, seq: Sequences) -> jnp.ndarray:
    """The critic's values ``[N, T]`` over ``seq`` replayed from its start states."""
    _, out, _ = replay(value.recurrence, critic_params, seq.critic_start, time_major(seq.obs),
                       time_major(seq.done))
    return time_major(out)


class Networks(NamedTuple):
    """The actor and critic of an actor-critic run, built in one place (:func:`make_networks`).

    ``actor_apply`` / ``critic_apply`` take what an update has: observations ``[B, *obs]`` for MLP/CNN
    networks, the rollout's :class:`Sequences` (replayed from their start states) for recurrent ones.
    A run's parameters are ``{"actor": ..., "critic": ...}``; with ``network.shared`` the actor's are the
    whole shared network and the critic's are empty (:meth:`critic_params` gives what the critic reads).
    """

    policy: Policy  # recurrent networks: with its Recurrence
    value: ValueFunction
    # network.shared: (params, inputs) -> (distribution parameters, values), one pass of the trunk
    both: Callable | None = None

    @property
    def recurrent(self) -> bool:
        return self.policy.recurrence is not None

    @property
    def shared(self) -> bool:
        return self.both is not None

    def actor_apply(self, params, inputs):
        return replay_actor(self.policy, params, inputs) if self.recurrent else self.policy.apply(params, inputs)

    def critic_apply(self, params, inputs):
        return replay_critic(self.value, params, inputs) if self.recurrent else self.value.apply(params, inputs)

    def init_critic(self, key: jax.Array):
        """The critic's own parameters: none (``{}``) when it shares the actor's network."""
        return {} if self.shared else self.value.init(key)

    def critic_params(self, params: dict):
        """What the critic reads of a run's ``{"actor": ..., "critic": ...}``."""
        return params["actor"] if self.shared else params["critic"]

    def actor_critic_apply(self, params: dict, inputs):
        """``(distribution parameters, values)`` for ``inputs`` under a run's parameters: one pass of a
        shared trunk, or the actor's and the critic's networks in turn."""
        if self.shared:
            return self.both(params["actor"], inputs)
        return self.actor_apply(params["actor"], inputs), self.critic_apply(params["critic"], inputs)


def make_networks(spec: EnvSpec, net) -> Networks:
    """The actor and critic for ``spec`` from ``network.*`` (:func:`policies.make_policy` /
    :func:`policies.make_value`: MLP, CNN, GRU/LSTM or transformer; ``network.shared``: the two heads of
    one network, :func:`policies.shared_apply`)."""
    both = shared_apply(spec, net) if net.shared else None
    return Networks(make_policy(spec, net), make_value(spec, net), both)


class Experience(NamedTuple):
    """What one rollout gives an update."""

    carry: rollout.EnvCarry  # env state to continue from next update
    # Sequences for recurrent networks; Unrolls (no GAE yet) for a stage made with unrolls=True
    transitions: Transitions | Sequences | Unrolls
    raw_obs: jnp.ndarray  # [T, N, *obs_shape] unnormalised, for the observation statistics
    stats: rollout.EpisodeStats  # summed over devices
    reward_norm: envs.ObsNormState | None  # return statistics after this rollout (None: off)
    # env.obs_norm_style=brax: the observation statistics already updated with this rollout (the batch
    # was normalised with them); None otherwise (next_obs_norm updates them after the step)
    obs_norm: envs.BraxObsNormState | None = None


class InitialParts(NamedTuple):
    actor_params: Any
    critic_params: Any
    env: rollout.EnvCarry
    obs_norm: envs.ObsNormState | None
    key: jax.Array
    reward_norm: envs.ObsNormState | None = None  # env.normalize_reward's statistics


@dataclass(frozen=True)
class ActorCriticStage:
    """The shared stage for one run: the actor and critic (any network kind) on any registered env."""

    run: RunConfig
    env: Any
    env_params: Any
    spec: EnvSpec
    dist: Distribution
    data: DataAxis
    networks: Networks
    # the batch as Unrolls, GAE left to the update (PPO's algo.recompute_advantages)
    unrolls: bool = False

    @property
    def policy(self) -> Policy:
        return self.networks.policy

    @property
    def value(self) -> ValueFunction:
        return self.networks.value

    @property
    def recurrent(self) -> bool:
        return self.networks.recurrent

    @property
    def brax_obs_norm(self) -> bool:
        return self.run.env.normalize_obs and self.run.env.obs_norm_style == "brax"

    @property
    def global_batch_size(self) -> int:
        """Env steps of one update, all devices together."""
        return self.run.algo.num_envs * self.run.algo.num_steps

    def init(self, key: jax.Array) -> InitialParts:
        """Fresh actor and critic parameters, reset envs (this device's shard), observation statistics."""
        actor_key, critic_key, env_key, key = jax.random.split(key, 4)
        obs_norm = None
        if self.run.env.normalize_obs:
            obs_norm = (envs.brax_obs_norm_init(self.spec.obs_shape) if self.brax_obs_norm
                        else envs.obs_norm_init(self.spec.obs_shape))
        reward_norm = envs.reward_norm_init() if self.run.env.normalize_reward else None
        return InitialParts(self.policy.init(actor_key), self.networks.init_critic(critic_key),
                            self.fresh_carry(env_key), obs_norm, key, reward_norm)

    def fresh_carry(self, key: jax.Array) -> rollout.EnvCarry:
        """Every env of this device's shard reset to a fresh start state drawn with ``key``: no episode
        in progress (zero discounted return, zero recurrent states)."""
        num_envs, global_envs = self.data.env_shard(self.run.algo.num_envs)
        carry = rollout.reset_carry(self.env, self.env_params, key, num_envs, global_envs)
        if self.run.env.normalize_reward:
            carry = carry._replace(discounted_return=jnp.zeros((num_envs,), jnp.float32))
        if self.recurrent:
            carry = carry._replace(memory=self.policy.recurrence.zero((num_envs,)),
                                   critic_memory=self.value.recurrence.zero((num_envs,)))
        return carry

    def experience(self, actor_params, critic_params, obs_norm, carry: rollout.EnvCarry, key: jax.Array,
                   hparams, reward_norm: envs.ObsNormState | None = None) -> Experience:
        """Collect a rollout and turn it into a flat batch (recurrent: env sequences) with GAE
        advantages and returns. With ``reward_norm`` the critic and GAE see rewards scaled by the
        running std of the discounted return, updated with this rollout first; with
        ``env.reward_scale`` multiplied by it (episode metrics keep the env's own rewards either way).
        ``env.obs_norm_style=brax``: the observation statistics absorb the rollout first and the batch
        is normalised with the updated ones (returned in ``Experience.obs_norm``)."""
        cfg = self.run.algo
        num_envs, global_envs = self.data.env_shard(cfg.num_envs)
        start = carry
        carry, batch, stats = rollout.collect(
            self.env, self.env_params, self.spec, self.dist,
            self.policy if self.recurrent else self.policy.apply, actor_params, obs_norm,
            carry, key, cfg.num_steps, self.run.env.clip_actions, global_envs)
        stats = jax.tree_util.tree_map(self.data.sum, stats)
        if reward_norm is not None:
            per_step, carried = envs.discounted_returns(start.discounted_return, batch.reward, batch.done,
                                                        hparams["gamma"])
            # the returns of every step of the global batch in single-device order: the same
            # statistics on every device
            reward_norm = envs.obs_norm_update(reward_norm, self.data.gather_envs(per_step))
            batch = batch._replace(reward=envs.reward_norm_scale(reward_norm, batch.reward))
            carry = carry._replace(discounted_return=carried)
        if self.run.env.reward_scale != 1.0:
            batch = batch._replace(reward=batch.reward * self.run.env.reward_scale)
        updated_obs_norm = None
        if self.brax_obs_norm:
            # the global batch in single-device order: the same statistics on every device
            obs_norm = updated_obs_norm = envs.brax_obs_norm_update(obs_norm, self.data.gather_envs(batch.obs))
        if self.recurrent:
            experience = self._sequence_experience(critic_params, obs_norm, start, carry, batch, stats,
                                                   hparams, reward_norm)
            return experience._replace(obs_norm=updated_obs_norm)

        obs = envs.obs_norm_apply(obs_norm, batch.obs)
        values = self.value.apply(critic_params, obs)
        if self.unrolls:
            return Experience(carry, self._unrolls(obs_norm, obs, values, batch), batch.obs, stats,
                              reward_norm, updated_obs_norm)
        next_values = self.value.apply(critic_params, envs.obs_norm_apply(obs_norm, batch.final_obs))
        advantages, returns = rollout.gae(batch.reward, values, next_values, batch.terminated,
                                          self._gae_done(batch.done), hparams["gamma"], hparams["gae_lambda"])
        batch_size = num_envs * cfg.num_steps  # this device's
        transitions = jax.tree_util.tree_map(
            lambda x: x.reshape((batch_size,) + x.shape[2:]),
            Transitions(obs, batch.action, batch.log_prob, values, advantages, returns))
        return Experience(carry, transitions, batch.obs, stats, reward_norm, updated_obs_norm)

    def _sequence_experience(self, critic_params, obs_norm, start: rollout.EnvCarry, carry: rollout.EnvCarry,
                             batch: rollout.Batch, stats, hparams, reward_norm=None) -> Experience:
        recurrence = self.value.recurrence
        obs = envs.obs_norm_apply(obs_norm, batch.obs)
        critic_memory, values, memory_after = replay(recurrence, critic_params, start.critic_memory, obs,
                                                     batch.done)
        # V of the observation each step reached, from the critic's state after that step: the next
        # step's value within an episode, the truncated episode's own continuation at its end
        _, next_values = recurrence.step(critic_params, memory_after,
                                         envs.obs_norm_apply(obs_norm, batch.final_obs))
        advantages, returns = rollout.gae(batch.reward, values, next_values, batch.terminated,
                                          self._gae_done(batch.done), hparams["gamma"], hparams["gae_lambda"])
        sequences = Sequences(*jax.tree_util.tree_map(
            time_major, (obs, batch.action, batch.log_prob, values, advantages, returns, batch.done)),
            actor_start=start.memory, critic_start=start.critic_memory)
        return Experience(carry._replace(critic_memory=critic_memory), sequences, batch.obs, stats,
                          reward_norm)

    def _gae_done(self, done: jnp.ndarray) -> jnp.ndarray:
        """Where GAE's recursion stops, ``[T, N]``: every episode end, and with ``algo.unroll_length``
        every unroll's last step too, whose bootstrap value (the next observation's V, as on a time
        limit) then stands for the rest of the rollout, as in Brax PPO's unrolls."""
        unroll_length = self.run.algo.unroll_length
        if not unroll_length:
            return done
        return jnp.logical_or(done, rollout.unroll_ends(done.shape[0], unroll_length))

    def _unrolls(self, obs_norm, obs: jnp.ndarray, values: jnp.ndarray, batch: rollout.Batch) -> Unrolls:
        """The rollout ``[T, N, ...]`` as ``[N * T / k, k, ...]`` unrolls (env-major)."""
        k = self.run.algo.unroll_steps()

        def cut(x):  # [T, N, ...] -> [N, T, ...] -> [N * T/k, k, ...]
            x = time_major(x)
            return x.reshape((x.shape[0] * x.shape[1] // k, k) + x.shape[2:])

        # the observation each unroll's last step reached (before any auto-reset): [T/k, N, ...]
        next_obs = envs.obs_norm_apply(obs_norm, batch.final_obs[k - 1::k])
        next_obs = time_major(next_obs).reshape((-1,) + next_obs.shape[2:])
        truncated = jnp.logical_and(batch.done, jnp.logical_not(batch.terminated))
        return Unrolls(cut(obs), cut(batch.action), cut(batch.log_prob), cut(values), cut(batch.reward),
                       cut(batch.terminated), cut(truncated), next_obs)

    def next_obs_norm(self, obs_norm, experience: Experience):
        """The observation statistics after this rollout (None when observations are not normalised)."""
        if obs_norm is None:
            return None
        if self.brax_obs_norm:  # already updated, before the batch was normalised
            return experience.obs_norm
        raw_obs = experience.raw_obs
        # the global batch in single-device order, so the statistics are the same everywhere
        return envs.obs_norm_update(obs_norm, self.data.gather_envs(raw_obs))

    def episode_metrics(self, stats: rollout.EpisodeStats) -> dict:
        """Finished-episode metrics of the rollout and the env steps the update consumed."""
        return dict(return_mean=stats.return_mean(), episode_length=stats.length_mean(),
                    episodes=stats.count, env_steps=jnp.asarray(self.global_batch_size, jnp.uint32))


def make_stage(run: RunConfig, env, env_params, spec: EnvSpec, axis_name: str | None = None,
               unrolls: bool = False) -> ActorCriticStage:
    """``unrolls``: the batch is :class:`Unrolls` without GAE (feed-forward networks only)."""
    if unrolls and run.network.is_recurrent:
        raise ValueError("Unrolls are for feed-forward networks")  # PPOConfig.validate refuses it first
    return ActorCriticStage(run, env, env_params, spec, for_spec(spec.discrete, run.network.action_dist, spec),
                            DataAxis(axis_name), make_networks(spec, run.network), unrolls)
