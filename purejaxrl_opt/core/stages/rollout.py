"""Collecting experience with ``lax.scan``, truncation-aware GAE, and whole-episode rollouts.

Only what acting needs runs per env step (actor forward, sampling, env step); values for GAE are
computed afterwards in one batched critic call over the whole ``[T, N]`` batch. Episode statistics
are reduced to per-rollout sums inside the scan carry: nothing per env step is kept for logging.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from purejaxrl_opt import envs
from purejaxrl_opt.core.models.distributions import Distribution
from purejaxrl_opt.envs import EnvSpec, ObsNormState
from purejaxrl_opt.core.models.policies import as_policy, reset_where

ActorFn = Callable[[Any, jnp.ndarray], dict]  # (actor_params, obs [..., *obs_shape]) -> dist params


class EnvCarry(NamedTuple):
    """Vectorised env state carried across updates. ``obs`` is the raw observation ``[N, *obs]``."""

    env_state: Any
    obs: jnp.ndarray
    episode_return: jnp.ndarray  # [N] running return of the current episode
    episode_length: jnp.ndarray  # [N]
    # recurrent networks: the actor's / critic's hidden state [N, ...] for the next observation (zero
    # where it starts an episode); () for feed-forward networks (no leaves: nothing changes)
    memory: Any = ()
    critic_memory: Any = ()
    # env.normalize_reward: each env's discounted return of its current episode so far [N]; () when off
    discounted_return: Any = ()


class Batch(NamedTuple):
    """One rollout, time-major. Observations are raw (normalise with the rollout's frozen stats)."""

    obs: jnp.ndarray  # [T, N, *obs_shape]
    action: jnp.ndarray  # [T, N] (discrete) or [T, N, D] (the distribution's: tanh_normal's pre-tanh sample)
    log_prob: jnp.ndarray  # [T, N] log pi_old(a|s)
    reward: jnp.ndarray  # [T, N]
    terminated: jnp.ndarray  # [T, N] bool: true terminal, no bootstrap
    done: jnp.ndarray  # [T, N] bool: terminated or truncated (episode boundary)
    final_obs: jnp.ndarray  # [T, N, *obs_shape] observation after the step, before any auto-reset


class EpisodeStats(NamedTuple):
    """Sums over the episodes that finished during one rollout (scalars)."""

    return_sum: jnp.ndarray
    length_sum: jnp.ndarray
    count: jnp.ndarray

    @staticmethod
    def zeros() -> "EpisodeStats":
        return EpisodeStats(jnp.zeros(()), jnp.zeros(()), jnp.zeros(()))

    def return_mean(self) -> jnp.ndarray:
        """Mean return of finished episodes; NaN when none finished."""
        return jnp.where(self.count > 0, self.return_sum / jnp.maximum(self.count, 1), jnp.nan)

    def length_mean(self) -> jnp.ndarray:
        return jnp.where(self.count > 0, self.length_sum / jnp.maximum(self.count, 1), jnp.nan)


def env_keys(key: jax.Array, num_envs: int, global_envs: tuple[int, Any] | None = None) -> jax.Array:
    """``num_envs`` keys from ``key``. With ``global_envs = (total, offset)`` (data parallel) they are
    rows ``offset .. offset+num_envs-1`` of ``split(key, total)``: env ``i`` of the global batch gets
    the same key whichever device holds it, so a data-parallel rollout equals the one-device one."""
    if global_envs is None:
        return jax.random.split(key, num_envs)
    total, offset = global_envs
    return jax.lax.dynamic_slice_in_dim(jax.random.split(key, total), offset, num_envs)


def reset_carry(env, env_params, key: jax.Array, num_envs: int,
                global_envs: tuple[int, Any] | None = None) -> EnvCarry:
    obs, env_state = envs.reset_batch(env, env_params, env_keys(key, num_envs, global_envs))
    zeros = jnp.zeros((num_envs,), jnp.float32)
    return EnvCarry(env_state, obs, zeros, zeros)


def collect(env, env_params, spec: EnvSpec, dist: Distribution, actor_fn: ActorFn, actor_params,
            obs_norm: ObsNormState | None, carry: EnvCarry, key: jax.Array, num_steps: int,
            clip_actions: bool = True,
            global_envs: tuple[int, Any] | None = None) -> tuple[EnvCarry, Batch, EpisodeStats]:
    """Step ``N`` auto-resetting envs for ``num_steps`` with actions sampled from the policy.

    ``actor_fn`` is an ``actor_fn(params, obs)`` or a :class:`purejaxrl_opt.core.models.policies.Policy`; a recurrent
    policy acts from ``carry.memory`` and its hidden state is reset where an episode ends, so the
    returned ``carry.memory`` continues the envs' episodes in the next rollout.

    By default one key samples the actions of all ``N`` envs. With ``global_envs = (total, offset)``
    (data parallel: these ``N`` envs are envs ``offset..offset+N-1`` of ``total``) every env samples
    with its own key taken from the global split (:func:`env_keys`), for actions and env steps alike.
    """
    num_envs = carry.obs.shape[0]
    policy = as_policy(actor_fn)
    recurrence = policy.recurrence

    def _act(carry):
        if recurrence is None:
            return carry.memory, policy.apply(actor_params, envs.obs_norm_apply(obs_norm, carry.obs))
        return recurrence.step(actor_params, carry.memory, envs.obs_norm_apply(obs_norm, carry.obs))

    def _env_step(loop, keys):
        carry, stats = loop
        action_input, step_env_keys = keys  # one device: the step's drawn noise; else its action key
        memory, dist_params = _act(carry)
        if global_envs is None:
            action = dist.sample_from(action_input, dist_params)
        else:
            action = jax.vmap(dist.sample)(env_keys(action_input, num_envs, global_envs), dist_params)
        log_prob = dist.log_prob(dist_params, action)
        env_action = envs.to_env_action(spec, dist.postprocess(action), clip_actions)
        obs, env_state, reward, terminated, truncated, info = envs.step_batch(
            env, env_params, step_env_keys, carry.env_state, env_action)
        reward = reward.astype(jnp.float32)
        done = jnp.logical_or(terminated, truncated)
        episode_return = carry.episode_return + reward
        episode_length = carry.episode_length + 1
        stats = EpisodeStats(stats.return_sum + jnp.sum(jnp.where(done, episode_return, 0.0)),
                             stats.length_sum + jnp.sum(jnp.where(done, episode_length, 0.0)),
                             stats.count + jnp.sum(done))
        if recurrence is not None:
            memory = reset_where(memory, done)
        new_carry = EnvCarry(env_state, obs, jnp.where(done, 0.0, episode_return),
                             jnp.where(done, 0.0, episode_length), memory, carry.critic_memory,
                             carry.discounted_return)
        transition = Batch(carry.obs, action, log_prob, reward, terminated, done,
                           info["final_observation"])
        return (new_carry, stats), transition

    # Every step's keys are split before the loop, in two batched calls: the same bits as splitting
    # inside each step (threefry hashes each key's counters on their own, in integers), but on
    # XLA:CPU each split inside the loop is a loop of its own (JAX's rolled threefry), dozens of small
    # kernels per step. On one device the actions' uniform draws are made before the loop too
    # (Distribution.draw: integer hashing and exact float steps, the same bits as drawn in the step);
    # the inexact float math of sampling (logs, erf_inv) stays in the step (sample_from), so XLA
    # computes it as it did when the step drew its own noise.
    step_keys = jax.vmap(jax.random.split)(jax.random.split(key, num_steps))
    all_env_keys = jax.vmap(lambda k: env_keys(k, num_envs, global_envs))(step_keys[:, 1])
    action_inputs = step_keys[:, 0]
    if global_envs is None:
        params_shape = jax.eval_shape(lambda c: _act(c)[1], carry)
        action_inputs = jax.vmap(lambda k: dist.draw(k, params_shape))(action_inputs)
    (carry, stats), batch = jax.lax.scan(_env_step, (carry, EpisodeStats.zeros()),
                                         (action_inputs, all_env_keys))
    return carry, batch, stats


def gae(rewards: jnp.ndarray, values: jnp.ndarray, next_values: jnp.ndarray, terminated: jnp.ndarray,
        done: jnp.ndarray, gamma, gae_lambda) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Generalised advantage estimation, truncation-aware. All inputs ``[T, N]``.

    ``next_values[t]`` is ``V`` of the observation reached by step ``t`` *before* any auto-reset, so a
    time-limit truncation bootstraps from the true next state; only ``terminated`` zeroes the
    bootstrap, while any episode end (``done``) stops the recursion. Returns ``(advantages, returns)``.
    """
    not_terminated = 1.0 - terminated.astype(jnp.float32)
    not_done = 1.0 - done.astype(jnp.float32)
    deltas = rewards + gamma * not_terminated * next_values - values
    advantages = _backward_affine(gamma * gae_lambda * not_done, deltas)
    return advantages, advantages + values


def _backward_affine(coefs: jnp.ndarray, terms: jnp.ndarray) -> jnp.ndarray:
    """``x_t = terms_t + coefs_t x_{t+1}`` (``x_T = 0``) along axis 0 of ``[T, ...]`` inputs."""

    # an affine recurrence, solved by a parallel (associative) scan in log2(T) vectorised steps
    # instead of T sequential ones
    def _compose(later, earlier):
        coef_l, value_l = later
        coef_e, value_e = earlier
        return coef_l * coef_e, value_e + coef_e * value_l

    _, out = jax.lax.associative_scan(_compose, (coefs, terms), reverse=True, axis=0)
    return out


def unroll_ends(num_steps: int, unroll_length: int) -> jnp.ndarray:
    """``[num_steps, 1]`` bool: true at the last step of every ``unroll_length``-step segment."""
    return (jnp.arange(num_steps) % unroll_length == unroll_length - 1)[:, None]


def unroll_gae(rewards: jnp.ndarray, values: jnp.ndarray, bootstrap_value: jnp.ndarray,
               terminated: jnp.ndarray, truncated: jnp.ndarray, gamma, gae_lambda):
    """Brax PPO's GAE over unrolls (``brax.training.agents.ppo.losses.compute_gae``): inputs ``[T, B]``,
    one column per unroll of ``T`` steps; ``bootstrap_value [B]`` is V of the observation after each
    unroll's last step. Returns ``(vs, advantages)``, both ``[T, B]``.

    ``vs`` are the lambda-returns (``V + GAE``). The advantages are Brax's, not GAE's: the one-step
    error against the next step's lambda-return, ``r_t + gamma (1 - terminated_t) vs_{t+1} - V_t``,
    which is ``GAE_t + gamma (1 - lambda) (1 - terminated_t) GAE_{t+1}``. A truncated step (time limit,
    not terminated) gets advantage 0 and ``vs = V`` and stops the recursion: its episode is bootstrapped
    from V of the truncated step's own observation (the auto-reset observation follows it here, as in
    Brax), so the env's last transition before a time limit does not count.
    """
    not_terminated = 1.0 - terminated.astype(jnp.float32)
    kept = 1.0 - truncated.astype(jnp.float32)
    next_values = jnp.concatenate([values[1:], bootstrap_value[None]], axis=0)
    deltas = (rewards + gamma * not_terminated * next_values - values) * kept
    vs = _backward_affine(gamma * gae_lambda * not_terminated * kept, deltas) + values
    next_vs = jnp.concatenate([vs[1:], bootstrap_value[None]], axis=0)
    advantages = (rewards + gamma * not_terminated * next_vs - values) * kept
    return vs, advantages


# =====================================================================================================
# group rollouts (GRPO)
# =====================================================================================================
class GroupBatch(NamedTuple):
    """Complete episodes of ``B = num_groups * group_size`` envs, time-major, group-major env order.

    Env ``b`` belongs to group ``b // group_size``. ``mask[t, b]`` is true for the steps of episode
    ``b`` up to and including its first ``done`` (or the step limit); everything after is padding
    (the env auto-reset and kept running) and must not enter any loss or statistic.
    """

    obs: jnp.ndarray  # [T, B, *obs_shape] raw observation before step t
    action: jnp.ndarray  # [T, B] (discrete) or [T, B, D]
    log_prob: jnp.ndarray  # [T, B] log pi_old(a|s)
    reward: jnp.ndarray  # [T, B], 0 where masked
    mask: jnp.ndarray  # [T, B] bool
    returns: jnp.ndarray  # [B] undiscounted episode return
    lengths: jnp.ndarray  # [B] unmasked steps
    correct: jnp.ndarray  # [B] bool: the env reported info["correct"] (token envs; else False)
    # [B, R]: each of the env's R reward functions, summed over the episode (token envs'
    # info["reward_terms"]; R = 0 for other envs)
    reward_terms: jnp.ndarray


def group_reset_keys(key: jax.Array, num_groups: int, group_size: int, same_start: bool) -> jax.Array:
    """Reset keys ``[num_groups * group_size]``: one per group, repeated (same start), or one per env."""
    if same_start:
        return jnp.repeat(jax.random.split(key, num_groups), group_size, axis=0)
    return jax.random.split(key, num_groups * group_size)


def alive_step(env, env_params, spec: EnvSpec, dist: Distribution, action_key: jax.Array,
               env_key: jax.Array, env_state, alive: jnp.ndarray, dist_params, greedy: bool,
               clip_actions: bool):
    """One step of ``N`` episodes played to their end (group rollouts, evaluation): act (sampled
    with ``action_key``, or the mode when ``greedy``), step the envs (one key each, split from
    ``env_key``), and mask what follows an episode's end. Returns ``(action, next_obs, env_state,
    reward [N], still_alive [N], info)``; ``reward`` is zero where the episode had already ended
    (``alive [N]`` false), and an episode stays ended (the env's auto-reset only makes padding)."""
    action = dist.mode(dist_params) if greedy else dist.sample(action_key, dist_params)
    next_obs, env_state, reward, terminated, truncated, info = envs.step_batch(
        env, env_params, jax.random.split(env_key, alive.shape[0]), env_state,
        envs.to_env_action(spec, dist.postprocess(action), clip_actions))
    reward = jnp.where(alive, reward.astype(jnp.float32), 0.0)
    still_alive = jnp.logical_and(alive, jnp.logical_not(jnp.logical_or(terminated, truncated)))
    return action, next_obs, env_state, reward, still_alive, info


def _group_step(env, env_params, spec: EnvSpec, dist: Distribution, key: jax.Array, env_state,
                alive: jnp.ndarray, dist_params, greedy: bool, clip_actions: bool):
    """:func:`alive_step` of a group rollout, with the action's log-probability and ``correct``
    (false where the episode had already ended). Returns ``(action, log_prob, next_obs, env_state,
    reward, correct, still_alive, info)``."""
    action_key, env_key = jax.random.split(key)
    action, next_obs, env_state, reward, still_alive, info = alive_step(
        env, env_params, spec, dist, action_key, env_key, env_state, alive, dist_params, greedy,
        clip_actions)
    log_prob = dist.log_prob(dist_params, action)
    correct = jnp.logical_and(alive, info.get("correct", jnp.zeros_like(alive)))
    return action, log_prob, next_obs, env_state, reward, correct, still_alive, info


def group_rollout(env, env_params, spec: EnvSpec, dist: Distribution, policy, actor_params,
                  obs_norm: ObsNormState | None, key: jax.Array, num_groups: int, group_size: int,
                  max_steps: int, same_start: bool, clip_actions: bool = True,
                  greedy: bool = False) -> GroupBatch:
    """Roll ``num_groups x group_size`` fresh episodes for ``max_steps`` steps, masking after ``done``.

    Same-start grouping resets the ``group_size`` envs of a group with one key (identical initial
    state); every env then draws its own actions and transitions (independent samples, per-env env
    keys). The env's own ``step`` is used so termination and truncation are exactly the env's; its
    auto-reset only produces padding, which keeps every padded step a valid (finite) state.

    ``policy`` is a :class:`purejaxrl_opt.core.models.policies.Policy` (acting through its ``start``/``advance``
    carry, e.g. a transformer's key/value cache) or a plain ``actor_fn(params, obs)``. ``greedy``
    takes the distribution's mode instead of sampling.
    """
    policy = as_policy(policy)
    num_envs = num_groups * group_size
    reset_key, loop_key = jax.random.split(key)
    obs, env_state = envs.reset_batch(env, env_params,
                                      group_reset_keys(reset_key, num_groups, group_size, same_start))
    policy_carry, dist_params = policy.start(actor_params, envs.obs_norm_apply(obs_norm, obs))

    def _env_step(carry, step_key):
        env_state, obs, alive, policy_carry, dist_params = carry
        action, log_prob, next_obs, env_state, reward, correct, still_alive, info = _group_step(
            env, env_params, spec, dist, step_key, env_state, alive, dist_params, greedy, clip_actions)
        terms = info.get("reward_terms", jnp.zeros((num_envs, 0), jnp.float32))
        terms = jnp.where(alive[:, None], terms, 0.0)
        policy_carry, dist_params = policy.advance(actor_params, policy_carry, action,
                                                   envs.obs_norm_apply(obs_norm, next_obs))
        return ((env_state, next_obs, still_alive, policy_carry, dist_params),
                (obs, action, log_prob, reward, alive, correct, terms))

    init = (env_state, obs, jnp.ones((num_envs,), bool), policy_carry, dist_params)
    _, (obs, action, log_prob, reward, mask, correct, terms) = jax.lax.scan(
        _env_step, init, jax.random.split(loop_key, max_steps))
    return GroupBatch(obs, action, log_prob, reward, mask, reward.sum(0),
                      mask.sum(0).astype(jnp.float32), jnp.any(correct, axis=0), terms.sum(0))


def group_rollout_until_done(env, env_params, spec: EnvSpec, dist: Distribution, actor_fn: ActorFn,
                             actor_params, obs_norm: ObsNormState | None, key: jax.Array,
                             num_groups: int, group_size: int, max_steps: int, same_start: bool,
                             clip_actions: bool = True, buffer_steps: int | None = None,
                             greedy: bool = False) -> tuple[GroupBatch, jnp.ndarray]:
    """:func:`group_rollout` for per-step policies that stops once every episode has ended.

    A ``lax.while_loop`` writes step ``t`` into preallocated ``[buffer_steps, B, ...]`` buffers
    (``buffer_steps >= max_steps``, default ``max_steps``; a multiple of the loss's time block lets
    the learner slice whole blocks) and ends after ``L = max(lengths) <= max_steps`` steps, so the
    padding after the last episode's end costs nothing. Returns ``(batch, L)`` (``L`` int32).

    Step ``t`` draws from the same key as in :func:`group_rollout` (``split(loop_key, max_steps)[t]``)
    and runs the same computation, so the unmasked steps equal that rollout's. Rows ``>= L`` are
    zeros (masked); padded rows ``< L`` hold the auto-reset steps as there. ``actor_fn(params, obs)``
    must act from one observation (an MLP; token envs' cached policies use :func:`group_rollout`).
    Under ``vmap`` the loop runs until the longest episode of every lane has ended.
    """
    buffer_steps = max_steps if buffer_steps is None else buffer_steps
    if buffer_steps < max_steps:
        raise ValueError(f"buffer_steps = {buffer_steps} must be >= max_steps = {max_steps}")
    num_envs = num_groups * group_size
    reset_key, loop_key = jax.random.split(key)
    obs, env_state = envs.reset_batch(env, env_params,
                                      group_reset_keys(reset_key, num_groups, group_size, same_start))
    dist_params = actor_fn(actor_params, envs.obs_norm_apply(obs_norm, obs))
    step_keys = jax.random.split(loop_key, max_steps)
    action_shape = jax.eval_shape(dist.sample, step_keys[0], dist_params)

    def _buffer(shape, dtype):
        return jnp.zeros((buffer_steps,) + tuple(shape), dtype)

    buffers = (_buffer(obs.shape, obs.dtype), _buffer(action_shape.shape, action_shape.dtype),
               _buffer((num_envs,), jnp.float32), _buffer((num_envs,), jnp.float32),
               _buffer((num_envs,), bool))

    def _cond(loop):
        t, _, _, alive, _, _, _ = loop
        return jnp.logical_and(t < max_steps, jnp.any(alive))

    def _body(loop):
        t, env_state, obs, alive, dist_params, correct_any, buffers = loop
        action, log_prob, next_obs, env_state, reward, correct, still_alive, _ = _group_step(
            env, env_params, spec, dist, step_keys[t], env_state, alive, dist_params, greedy,
            clip_actions)
        dist_params = actor_fn(actor_params, envs.obs_norm_apply(obs_norm, next_obs))
        buffers = tuple(buf.at[t].set(x) for buf, x in
                        zip(buffers, (obs, action, log_prob, reward, alive)))
        return (t + 1, env_state, next_obs, still_alive, dist_params,
                jnp.logical_or(correct_any, correct), buffers)

    init = (jnp.zeros((), jnp.int32), env_state, obs, jnp.ones((num_envs,), bool), dist_params,
            jnp.zeros((num_envs,), bool), buffers)
    num_steps, *_, correct, (obs, action, log_prob, reward, mask) = jax.lax.while_loop(
        _cond, _body, init)
    # per-step policies act on gymnax envs, whose steps carry no reward terms (task envs roll with
    # group_rollout)
    batch = GroupBatch(obs, action, log_prob, reward, mask, reward.sum(0),
                       mask.sum(0).astype(jnp.float32), correct, jnp.zeros((num_envs, 0), jnp.float32))
    return batch, num_steps
