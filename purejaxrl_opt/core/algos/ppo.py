"""PPO (Schulman et al. 2017): clipped surrogate, GAE critic, minibatched Adam epochs.

Only what is PPO lives here: the loss and the update's optimisation. The rollout, values, GAE and
observation statistics are the shared actor-critic stage (actor_critic.py); the loop and evaluation are
shared too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import struct
from jax.flatten_util import ravel_pytree

from purejaxrl_opt import envs
from purejaxrl_opt.core.stages import losses, rollout
from purejaxrl_opt.core.stages.actor_critic import Transitions, Unrolls, make_stage
from purejaxrl_opt.core.algos.base import Algorithm
from purejaxrl_opt.config.schema import ActorCriticConfig, RunConfig, _check, non_negative, positive
from purejaxrl_opt.core.stages.optim import adam, annealed, minibatch_epochs


@dataclass(frozen=True)
class PPOConfig(ActorCriticConfig):
    """``algo=ppo``: the defaults are PureJaxRL's classic CartPole settings; env-specific values live in
    conf/tuned/ppo_<env>.yaml. Rollout, discount and GAE fields: :class:`ActorCriticConfig`."""

    name: str = "ppo"
    update_epochs: int = 4  # passes over each batch
    num_minibatches: int = 4  # minibatches per pass; must divide num_envs * num_steps
    lr: float = 2.5e-4  # Adam learning rate (sweepable)
    anneal_lr: bool = True  # linear decay of lr to 0 over training
    clip_eps: float = 0.2  # surrogate clip range epsilon (sweepable)
    clip_value: bool = True  # PPO2-style value clipping with the same clip_eps
    ent_coef: float = 0.01  # entropy bonus coefficient (sweepable)
    vf_coef: float = 0.5  # value loss coefficient (sweepable)
    max_grad_norm: float = 0.5  # global gradient-norm clip (sweepable)
    adam_eps: float = 1e-5  # Adam's epsilon (PureJaxRL's 1e-5; Brax's PPO uses optax's default, 1e-8)
    # every env reset to a fresh start state before every N-th update's rollout (the episodes in progress
    # dropped unreported), as Brax's PPO resets all its envs num_resets_per_eval times per evaluation;
    # 0: never, an env resets only when its episode ends
    reset_envs_every: int = 0
    # Brax PPO's loss: values, GAE targets and advantages computed inside every minibatch's loss with
    # the current critic (stop-gradient), minibatches of whole unrolls (unroll_length; 0: num_steps)
    recompute_advantages: bool = False

    SWEEPABLE: ClassVar[tuple[str, ...]] = (
        "lr", "gamma", "gae_lambda", "clip_eps", "ent_coef", "vf_coef", "max_grad_norm")

    def validate(self, prefix: str, run: "RunConfig") -> None:
        self._validate_rollout(prefix, run)
        positive(f"{prefix}.update_epochs", self.update_epochs)
        positive(f"{prefix}.num_minibatches", self.num_minibatches)
        _check(self.batch_env_steps() % self.num_minibatches == 0, f"{prefix}.num_minibatches",
               self.num_minibatches,
               f"a divisor of num_envs * num_steps = {self.batch_env_steps()}")
        if run.network.is_recurrent:  # minibatches are whole env sequences
            _check(self.num_envs % self.num_minibatches == 0, f"{prefix}.num_minibatches",
                   self.num_minibatches, f"a divisor of {prefix}.num_envs = {self.num_envs} with "
                   f"network.recurrent={run.network.recurrent} (minibatches are whole env sequences)")
        if self.recompute_advantages:
            _check(not run.network.is_recurrent, f"{prefix}.recompute_advantages", self.recompute_advantages,
                   f"false with network.recurrent={run.network.recurrent} (it recomputes GAE over "
                   "unrolls of a feed-forward critic)")
            unrolls = self.batch_env_steps() // self.unroll_steps()
            _check(unrolls % self.num_minibatches == 0, f"{prefix}.num_minibatches", self.num_minibatches,
                   f"a divisor of the {unrolls} unrolls, num_envs * num_steps / unroll_length, with "
                   f"{prefix}.recompute_advantages=true (minibatches are whole unrolls): one of "
                   f"{[d for d in range(1, unrolls + 1) if unrolls % d == 0]}")
        positive(f"{prefix}.lr", self.lr)
        positive(f"{prefix}.clip_eps", self.clip_eps)
        non_negative(f"{prefix}.ent_coef", self.ent_coef)
        non_negative(f"{prefix}.vf_coef", self.vf_coef)
        positive(f"{prefix}.max_grad_norm", self.max_grad_norm)
        positive(f"{prefix}.adam_eps", self.adam_eps)
        non_negative(f"{prefix}.reset_envs_every", self.reset_envs_every)


CONFIG = PPOConfig  # this algorithm's config (config.schema.ALGORITHMS)
RESET_SALT = 0x5E7  # algo.reset_envs_every: the reset's key is fold_in(the update's rollout key, RESET_SALT)

def unroll_loss(networks, dist, params, mb: Unrolls, hparams, cfg: PPOConfig, axis_name=None, key=None):
    """PPO's loss on a minibatch of ``M`` unrolls (``mb`` leaves ``[M, k, ...]``) the way Brax PPO's
    ``compute_ppo_loss`` computes it: the current critic's values of the unrolls' observations and of
    each unroll's next observation give :func:`rollout.unroll_gae`'s targets ``vs`` and advantages
    (stop-gradient; normalised over the minibatch when ``cfg.normalize_advantages``), then
    :func:`losses.ppo_objective` with ``vs`` as the value targets. ``key``: the minibatch's draw for a
    sampled entropy (tanh_normal). Returns ``(loss, diagnostics)``."""
    num_unrolls, k = mb.reward.shape
    obs = mb.obs.reshape((num_unrolls * k,) + mb.obs.shape[2:])
    dist_params, values = networks.actor_critic_apply(params, obs)
    values = values.reshape(num_unrolls, k)
    bootstrap = networks.critic_apply(networks.critic_params(params), mb.next_obs)
    vs, advantages = jax.lax.stop_gradient(rollout.unroll_gae(
        mb.reward.T, values.T, bootstrap, mb.terminated.T, mb.truncated.T, hparams["gamma"],
        hparams["gae_lambda"]))
    vs, advantages = vs.T, advantages.T
    if cfg.normalize_advantages:
        advantages = losses.normalize(advantages, axis_name=axis_name)
    log_prob = dist.log_prob(dist_params, mb.action.reshape((num_unrolls * k,) + mb.action.shape[2:]))
    return losses.ppo_objective(log_prob.reshape(num_unrolls, k), mb.log_prob_old, advantages, values,
                                mb.value_old, vs, dist.entropy(dist_params, key).reshape(num_unrolls, k), hparams,
                                cfg.clip_value, jnp.mean)


METRICS = ("return_mean", "episode_length", "episodes", "policy_loss", "value_loss", "entropy",
           "approx_kl", "clip_frac", "learning_rate")


@struct.dataclass
class PPOState:
    params: dict  # {"actor": ..., "critic": ...} (network.shared: the critic's are {}, see Networks)
    opt_state: Any
    env: rollout.EnvCarry
    obs_norm: envs.ObsNormState | None
    key: jax.Array
    reward_norm: envs.ObsNormState | None = None  # env.normalize_reward's return statistics


def make_algorithm(run: RunConfig, env, env_params, spec, axis_name=None) -> Algorithm:
    """PPO for ``run``. ``axis_name`` (default None: one device, bitwise the original numbers) makes it
    data parallel over that mapped axis (``shard_map``): each device steps ``num_envs / n`` of the
    agent's envs, env ``i`` of the global batch drawing the same keys on whichever device it lives
    (:func:`rollout.env_keys`); gradients, advantage-normalisation statistics, episode statistics and
    metrics are reduced over the axis, parameters and optimizer state stay replicated. Minibatches:
    every device shuffles its own shard (its own key) and cuts it into ``num_minibatches`` pieces;
    the global minibatch is the union of the devices' pieces (``num_envs*num_steps/num_minibatches``
    samples in all), and its gradient is the ``pmean`` of the local ones.

    Recurrent networks (``network.recurrent``): minibatches are ``num_envs / num_minibatches`` whole
    env sequences (shuffled over envs, never over time), and the loss replays actor and critic over
    each from the hidden states it started with (truncated backpropagation through ``num_steps``).
    """
    cfg: PPOConfig = run.algo
    stage = make_stage(run, env, env_params, spec, axis_name, unrolls=cfg.recompute_advantages)
    networks, dist, data = stage.networks, stage.dist, stage.data
    num_updates = cfg.num_updates(run.total_timesteps)

    def init(key, hparams):
        parts = stage.init(key)
        params = {"actor": parts.actor_params, "critic": parts.critic_params}
        # the optimizer works on one flat vector: one fused Adam update instead of one per leaf
        opt_state = adam(hparams, hparams["lr"], eps=cfg.adam_eps).init(ravel_pytree(params)[0])
        return PPOState(params, opt_state, parts.env, parts.obs_norm, parts.key, parts.reward_norm)

    def loss_fn(params, mb: Transitions, hparams, key=None):
        if cfg.recompute_advantages:
            return unroll_loss(networks, dist, params, mb, hparams, cfg, axis_name, key)
        # recurrent: mb is Sequences ([M, T] leaves), replayed from their start states; every term is
        # elementwise, then a plain mean. key: the minibatch's draw for a sampled entropy (tanh_normal)
        inputs = mb if networks.recurrent else mb.obs
        dist_params, values = networks.actor_critic_apply(params, inputs)
        log_prob = dist.log_prob(dist_params, mb.action)
        advantages = (losses.normalize(mb.advantages, axis_name=axis_name) if cfg.normalize_advantages
                      else mb.advantages)
        return losses.ppo_objective(log_prob, mb.log_prob_old, advantages, values, mb.value_old, mb.returns,
                                    dist.entropy(dist_params, key), hparams, cfg.clip_value, jnp.mean)

    def update(state: PPOState, hparams, update_idx):
        key, rollout_key, shuffle_key = jax.random.split(state.key, 3)
        carry = state.env
        if cfg.reset_envs_every:  # (off: the program and its numbers are those without the option)
            due = (update_idx > 0) & (update_idx % cfg.reset_envs_every == 0)
            carry = jax.lax.cond(due, lambda c: stage.fresh_carry(jax.random.fold_in(rollout_key, RESET_SALT)),
                                 lambda c: c, carry)
        experience = stage.experience(state.params["actor"], networks.critic_params(state.params), state.obs_norm,
                                      carry, rollout_key, hparams, state.reward_norm)
        learning_rate = annealed(hparams["lr"], update_idx, num_updates, cfg.anneal_lr)
        flat_params, unravel = ravel_pytree(state.params)
        grad_fn = jax.grad(lambda flat, mb, key=None: loss_fn(unravel(flat), mb, hparams, key), has_aux=True)
        # equal local minibatch sizes: the pmean of the gradients is the global mean loss's; every
        # device shuffles its own shard (recurrent: leaves are [N, T], so these are minibatches of envs)
        batch = experience.transitions
        flat_params, opt_state, diagnostics = minibatch_epochs(
            grad_fn, adam(hparams, learning_rate, eps=cfg.adam_eps), flat_params, state.opt_state, batch,
            batch.action.shape[0], cfg.num_minibatches, jax.random.split(shuffle_key, cfg.update_epochs),
            reduce_grads=data.mean, shuffle_key=data.device_key, loss_keys=dist.entropy_needs_key)

        metrics = {k: data.mean(v.mean()) for k, v in diagnostics.items()}
        metrics.update(stage.episode_metrics(experience.stats), learning_rate=learning_rate)
        obs_norm = stage.next_obs_norm(state.obs_norm, experience)
        return (PPOState(unravel(flat_params), opt_state, experience.carry, obs_norm, key,
                         experience.reward_norm), metrics)

    return Algorithm(run=run, env=env, env_params=env_params, spec=spec, dist=dist,
                     policy=stage.policy, init=init, update=update,
                     policy_params=lambda s: (s.params["actor"], s.obs_norm), metric_names=METRICS,
                     num_updates=num_updates, param_fn=lambda s: s.params)
