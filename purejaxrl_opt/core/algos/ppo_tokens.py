"""PPO on token envs (``algo=ppo env=<token env>``): the RLHF-style PPO that GRPO was built to replace.

An update generates one answer to each of ``num_envs`` fresh training prompts (``num_steps`` must be
the env's answer limit: a rollout is exactly one answer per env), with the transformer policy's
key/value cache. A **separate value transformer** of the same shape (scalar head; its body starts
from the policy's when ``init_from`` is given) scores every answer prefix in one causal pass; GAE runs
inside each answer (the last real token is terminal, steps after it are masked). The loss is PPO's —
clipped surrogate with advantages normalised over the batch's tokens, clipped value loss, entropy
bonus — averaged over real tokens, over ``update_epochs x num_minibatches`` passes of whole answers.
There is no KL penalty; ``kl_ref`` (k3 estimate of KL to the initial policy) is reported so the drift
can be compared with GRPO's.

Env-step budget: ``total_timesteps`` counts real answer tokens (unmasked steps), as every algorithm
counts real env steps; not ``num_envs x num_steps`` (the answer limit), which a batch of answers
ending early with ``<eos>`` never uses: the budget of GRPO
(:class:`purejaxrl_opt.core.stages.budget.StepBudget`: a lane runs while its tokens are below
``total_timesteps``, ``ceil(total_timesteps / num_envs)`` metric rows, ``anneal_lr`` decays with the
budget used).

The critic doubles the parameters and the per-token compute of the update: the cost GRPO's
group-relative baseline removes (experiments/compare_tokens.py measures both).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jax.flatten_util import ravel_pytree

from purejaxrl_opt.core.stages import losses, rollout
from purejaxrl_opt.core.stages.budget import StepBudget, max_updates
from purejaxrl_opt.core.algos.base import Algorithm
from purejaxrl_opt.config.schema import RunConfig
from purejaxrl_opt.core.models.distributions import for_spec
from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.core.stages.optim import adam, minibatch_epochs
from purejaxrl_opt.core.models.policies import make_policy, make_value
from purejaxrl_opt.core.models.pretrained import load_initial_actor
from purejaxrl_opt.envs.tokens import reward_metric_names, reward_metrics

METRICS = ("return_mean", "episode_length", "episodes", "policy_loss", "value_loss", "entropy",
           "approx_kl", "clip_frac", "kl_ref", "learning_rate")


@struct.dataclass
class TokenPPOState:
    params: dict  # {"actor": ..., "critic": ...}
    ref_params: Any  # the initial policy (for the kl_ref diagnostic only)
    opt_state: Any
    key: jax.Array
    env_steps: jnp.ndarray  # uint32: real answer tokens consumed by this lane (for the budget)


class Minibatch(struct.PyTreeNode):
    """Whole answers: leading axes ``[E, T]`` (obs ``[E, T, L]``)."""

    obs: jnp.ndarray
    action: jnp.ndarray
    log_prob_old: jnp.ndarray
    log_prob_ref: jnp.ndarray
    value_old: jnp.ndarray
    advantages: jnp.ndarray
    returns: jnp.ndarray
    mask: jnp.ndarray


def episode_gae(rewards, values, mask, gamma, gae_lambda):
    """GAE inside each answer: ``rewards, values, mask [E, T]``; the last real step is terminal."""
    next_mask = jnp.concatenate([mask[:, 1:], jnp.zeros_like(mask[:, :1])], axis=1)
    next_values = jnp.concatenate([values[:, 1:], jnp.zeros_like(values[:, :1])], axis=1)
    end = jnp.logical_and(mask, jnp.logical_not(next_mask))
    # padded steps are their own terminal steps: nothing leaks into the real ones
    end = jnp.logical_or(end, jnp.logical_not(mask))
    adv, ret = rollout.gae(rewards.T, values.T, next_values.T, end.T, end.T, gamma, gae_lambda)
    return jnp.where(mask, adv.T, 0.0), jnp.where(mask, ret.T, 0.0)


def transplant(source, target):
    """``target`` with every leaf replaced by ``source``'s where the shapes agree (a critic body
    initialised from the policy's; the heads differ in shape and keep their own init)."""
    return jax.tree_util.tree_map(lambda s, t: s if s.shape == t.shape else t, source, target)


def make_algorithm(run: RunConfig, env, env_params, spec) -> Algorithm:
    cfg = run.algo  # a PPOConfig (core/algos/ppo.py: PPO's config, whichever env kind)
    num_steps = spec.max_steps
    if cfg.num_steps != num_steps:
        raise ConfigError(
            f"config key 'algo.num_steps' = {cfg.num_steps} is invalid on {spec.env_id}: PPO on a token "
            f"env rolls exactly one answer per env per update, so it must be the answer limit "
            f"{num_steps} (set algo.num_steps={num_steps})")
    if cfg.num_envs % cfg.num_minibatches:
        raise ConfigError(f"config key 'algo.num_minibatches' = {cfg.num_minibatches} is invalid on "
                          f"{spec.env_id}: must divide algo.num_envs = {cfg.num_envs} (minibatches "
                          "hold whole answers)")
    # Brax PPO's unrolls cut env rollouts; here one rollout is one whole answer
    for key, given, default in (("unroll_length", cfg.unroll_length, 0),
                                ("recompute_advantages", cfg.recompute_advantages, False)):
        if given != default:
            raise ConfigError(f"config key 'algo.{key}' = {given!r} is invalid on {spec.env_id}: PPO on a token "
                              f"env computes GAE over whole answers, so it must be {default!r}")
    dist = for_spec(spec.discrete)
    policy, value = make_policy(spec, run.network), make_value(spec, run.network)
    initial_actor = load_initial_actor(run, spec)
    num_updates = max_updates(run.total_timesteps, cfg.num_envs)  # every answer at least one token
    budget = StepBudget(run.total_timesteps, num_updates)

    def init(key, hparams):
        actor_key, critic_key, key = jax.random.split(key, 3)
        actor = policy.init(actor_key) if initial_actor is None else initial_actor
        critic = value.init(critic_key)
        if initial_actor is not None:
            critic = transplant(initial_actor, critic)
        params = {"actor": actor, "critic": critic}
        opt_state = adam(hparams, hparams["lr"]).init(ravel_pytree(params)[0])
        return TokenPPOState(params, actor, opt_state, key, jnp.zeros((), jnp.uint32))

    def loss_fn(params, mb: Minibatch, hparams):
        dist_params = policy.episode_apply(params["actor"], mb.obs, mb.action)
        log_prob = dist.log_prob(dist_params, mb.action)
        advantages = (losses.normalize(mb.advantages, mask=mb.mask) if cfg.normalize_advantages
                      else mb.advantages)
        values = value.episode_apply(params["critic"], mb.obs, mb.action)

        def mean(x):  # over real tokens
            return losses.masked_reduce(x, mb.mask, "token")

        total, diagnostics = losses.ppo_objective(log_prob, mb.log_prob_old, advantages, values,
                                                  mb.value_old, mb.returns, dist.entropy(dist_params),
                                                  hparams, cfg.clip_value, mean)
        diagnostics["kl_ref"] = mean(losses.k3_kl(log_prob, mb.log_prob_ref))
        return total, diagnostics

    def update(state: TokenPPOState, hparams, update_idx):
        key, rollout_key, shuffle_key = jax.random.split(state.key, 3)
        batch = rollout.group_rollout(env, env_params, spec, dist, policy, state.params["actor"], None,
                                      rollout_key, cfg.num_envs, 1, num_steps, False,
                                      run.env.clip_actions)
        obs, action, log_prob, reward, mask = jax.tree_util.tree_map(
            lambda x: jnp.swapaxes(x, 0, 1),
            (batch.obs, batch.action, batch.log_prob, batch.reward, batch.mask))
        values = value.episode_apply(state.params["critic"], obs, action)
        advantages, returns = episode_gae(reward, values, mask, hparams["gamma"], hparams["gae_lambda"])
        log_prob_ref = dist.log_prob(policy.episode_apply(state.ref_params, obs, action), action)
        answers = Minibatch(obs, action, log_prob, log_prob_ref, values, advantages, returns, mask)

        learning_rate = budget.learning_rate(hparams["lr"], cfg.anneal_lr, update_idx, state.env_steps)
        optimizer = adam(hparams, learning_rate)
        flat_params, unravel = ravel_pytree(state.params)
        grad_fn = jax.grad(lambda flat, mb: loss_fn(unravel(flat), mb, hparams), has_aux=True)

        flat_params, opt_state, diagnostics = minibatch_epochs(
            grad_fn, optimizer, flat_params, state.opt_state, answers, cfg.num_envs,
            cfg.num_minibatches, jax.random.split(shuffle_key, cfg.update_epochs))
        metrics = {k: v.mean() for k, v in diagnostics.items()}
        metrics.update(return_mean=batch.returns.mean(), episode_length=batch.lengths.mean(),
                       episodes=jnp.asarray(cfg.num_envs, jnp.float32), learning_rate=learning_rate,
                       env_steps=batch.lengths.sum())
        metrics.update(reward_metrics(env, batch.reward_terms))
        env_steps = budget.spend(state.env_steps, batch.lengths)
        return TokenPPOState(unravel(flat_params), state.ref_params, opt_state, key, env_steps), metrics

    return Algorithm(run=run, env=env, env_params=env_params, spec=spec, dist=dist,
                     policy=policy, init=init, update=update,
                     policy_params=lambda s: (s.params["actor"], None),
                     metric_names=METRICS + reward_metric_names(env),
                     num_updates=num_updates, param_fn=lambda s: s.params,
                     lane_active=lambda s: budget.active(s.env_steps))
