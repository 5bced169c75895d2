"""PPO (Schulman et al. 2017): clipped surrogate, GAE critic, minibatched Adam epochs.

Only what is PPO lives here; rollout, GAE, networks, the loop and evaluation are shared.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jax.flatten_util import ravel_pytree

from purejaxrl_opt import envs, losses, rollout
from purejaxrl_opt.algos.base import Algorithm
from purejaxrl_opt.collectives import DataAxis
from purejaxrl_opt.config import PPOConfig, RunConfig
from purejaxrl_opt.distributions import for_spec
from purejaxrl_opt.networks import Actor, Critic
from purejaxrl_opt.optim import adam, annealed, minibatch_epochs

METRICS = ("return_mean", "episode_length", "episodes", "policy_loss", "value_loss", "entropy",
           "approx_kl", "clip_frac", "learning_rate")


@struct.dataclass
class PPOState:
    params: dict  # {"actor": ..., "critic": ...}
    opt_state: Any
    env: rollout.EnvCarry
    obs_norm: envs.ObsNormState | None
    key: jax.Array


class Minibatch(struct.PyTreeNode):
    obs: jnp.ndarray  # normalised, [B, *obs_shape]
    action: jnp.ndarray
    log_prob_old: jnp.ndarray  # [B]
    value_old: jnp.ndarray  # [B]
    advantages: jnp.ndarray  # [B]
    returns: jnp.ndarray  # [B]


def make_algorithm(run: RunConfig, env, env_params, spec, axis_name=None) -> Algorithm:
    """PPO for ``run``. ``axis_name`` (default None: one device, bitwise the original numbers) makes it
    data parallel over that mapped axis (``shard_map``): each device steps ``num_envs / n`` of the
    agent's envs, env ``i`` of the global batch drawing the same keys on whichever device it lives
    (:func:`rollout.env_keys`); gradients, advantage-normalisation statistics, episode statistics and
    metrics are reduced over the axis, parameters and optimizer state stay replicated. Minibatches:
    every device shuffles its own shard (its own key) and cuts it into ``num_minibatches`` pieces;
    the global minibatch is the union of the devices' pieces (``num_envs*num_steps/num_minibatches``
    samples in all), and its gradient is the ``pmean`` of the local ones.
    """
    cfg: PPOConfig = run.algo
    dist = for_spec(spec.discrete)
    actor, critic = Actor(spec, run.network), Critic(spec, run.network)
    num_updates = run.num_updates
    global_batch_size = cfg.num_envs * cfg.num_steps

    data = DataAxis(axis_name)

    def init(key, hparams):
        actor_key, critic_key, env_key, key = jax.random.split(key, 4)
        dummy = jnp.zeros((1,) + spec.obs_shape, jnp.float32)
        params = {"actor": actor.init(actor_key, dummy), "critic": critic.init(critic_key, dummy)}
        # the optimizer works on one flat vector: one fused Adam update instead of one per leaf
        opt_state = adam(hparams, hparams["lr"]).init(ravel_pytree(params)[0])
        obs_norm = envs.obs_norm_init(spec.obs_shape) if run.env.normalize_obs else None
        num_envs, global_envs = data.env_shard(cfg.num_envs)
        carry = rollout.reset_carry(env, env_params, env_key, num_envs, global_envs)
        return PPOState(params, opt_state, carry, obs_norm, key)

    def loss_fn(params, mb: Minibatch, hparams):
        dist_params = actor.apply(params["actor"], mb.obs)
        log_prob = dist.log_prob(dist_params, mb.action)
        advantages = (losses.normalize(mb.advantages, axis_name=axis_name) if cfg.normalize_advantages
                      else mb.advantages)
        policy_loss = -losses.clipped_surrogate(log_prob, mb.log_prob_old, advantages,
                                                hparams["clip_eps"]).mean()
        values = critic.apply(params["critic"], mb.obs)
        value_loss = losses.value_loss(values, mb.value_old, mb.returns,
                                       hparams["clip_eps"] if cfg.clip_value else None).mean()
        entropy = dist.entropy(dist_params).mean()
        total = policy_loss + hparams["vf_coef"] * value_loss - hparams["ent_coef"] * entropy
        diagnostics = {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy,
                       "approx_kl": losses.approx_kl(log_prob, mb.log_prob_old).mean(),
                       "clip_frac": losses.clip_fraction(log_prob, mb.log_prob_old,
                                                         hparams["clip_eps"]).mean()}
        return total, diagnostics

    def update(state: PPOState, hparams, update_idx):
        key, rollout_key, shuffle_key = jax.random.split(state.key, 3)
        num_envs, global_envs = data.env_shard(cfg.num_envs)
        batch_size = num_envs * cfg.num_steps  # this device's
        carry, batch, stats = rollout.collect(
            env, env_params, spec, dist, actor.apply, state.params["actor"], state.obs_norm,
            state.env, rollout_key, cfg.num_steps, run.env.clip_actions, global_envs)
        stats = jax.tree_util.tree_map(data.sum, stats)

        obs = envs.obs_norm_apply(state.obs_norm, batch.obs)
        values = critic.apply(state.params["critic"], obs)
        next_values = critic.apply(state.params["critic"],
                                   envs.obs_norm_apply(state.obs_norm, batch.final_obs))
        advantages, returns = rollout.gae(batch.reward, values, next_values, batch.terminated,
                                          batch.done, hparams["gamma"], hparams["gae_lambda"])
        flat = jax.tree_util.tree_map(
            lambda x: x.reshape((batch_size,) + x.shape[2:]),
            Minibatch(obs, batch.action, batch.log_prob, values, advantages, returns))

        learning_rate = annealed(hparams["lr"], update_idx, num_updates, cfg.anneal_lr)
        optimizer = adam(hparams, learning_rate)
        flat_params, unravel = ravel_pytree(state.params)
        grad_fn = jax.grad(lambda flat, mb: loss_fn(unravel(flat), mb, hparams), has_aux=True)

        # equal local minibatch sizes: the pmean of the gradients is the global mean loss's; every
        # device shuffles its own shard
        flat_params, opt_state, diagnostics = minibatch_epochs(
            grad_fn, optimizer, flat_params, state.opt_state, flat, batch_size, cfg.num_minibatches,
            jax.random.split(shuffle_key, cfg.update_epochs), reduce_grads=data.mean,
            shuffle_key=data.device_key)
        params = unravel(flat_params)

        obs_norm = None
        if state.obs_norm is not None:
            # the global batch in single-device order, so the statistics are the same everywhere
            obs_norm = envs.obs_norm_update(state.obs_norm, data.gather_envs(batch.obs))
        metrics = {k: data.mean(v.mean()) for k, v in diagnostics.items()}
        metrics.update(return_mean=stats.return_mean(), episode_length=stats.length_mean(),
                       episodes=stats.count, learning_rate=learning_rate,
                       env_steps=jnp.asarray(global_batch_size, jnp.float32))
        return PPOState(params, opt_state, carry, obs_norm, key), metrics

    def param_fn(state: PPOState):
        return state.params

    return Algorithm(run=run, env=env, env_params=env_params, spec=spec, dist=dist,
                     actor_fn=actor.apply, init=init, update=update,
                     policy=lambda s: (s.params["actor"], s.obs_norm), metric_names=METRICS,
                     num_updates=num_updates, param_fn=param_fn)
