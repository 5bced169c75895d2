"""TRPO (Schulman et al. 2015): a natural-gradient trust-region policy step, GAE critic trained by Adam.

Only what is TRPO lives here; the rollout, values, GAE and observation statistics are the shared
actor-critic stage (actor_critic.py), the loop and evaluation are shared too, and the Fisher-vector products, conjugate gradient and line search are in natural_gradient.py. Per update:

1. collect ``[num_steps, num_envs]`` transitions; GAE with the current critic;
2. policy: maximise ``L(theta) = mean(exp(logp_theta - logp_old) A)`` subject to
   ``mean KL(pi_old || pi_theta) <= max_kl`` by one CG + backtracking step (or no step at all);
   ``logp_old`` is recomputed at ``theta_old`` on the batch (the rollout's values up to float
   rounding), so the ratio is exactly 1 there;
3. critic: Adam for ``critic_epochs x critic_minibatches`` on the GAE returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.flatten_util import ravel_pytree

from purejaxrl_opt import envs
from purejaxrl_opt.core.stages import losses, natural_gradient, rollout
from purejaxrl_opt.core.stages.actor_critic import Networks, make_networks, make_stage
from purejaxrl_opt.core.algos.base import Algorithm
from purejaxrl_opt.core.stages.collectives import DataAxis
from purejaxrl_opt.config.schema import (ActorCriticConfig, RunConfig, _check, non_negative, one_of, positive,
                                         unit_interval)
from purejaxrl_opt.core.models.distributions import for_spec
from purejaxrl_opt.core.stages.optim import adam, minibatch_epochs, permutation


@dataclass(frozen=True)
class TRPOConfig(ActorCriticConfig):
    """``algo=trpo``; env-specific values live in conf/tuned/trpo_<env>.yaml. Rollout, discount and GAE
    fields: :class:`ActorCriticConfig`."""

    name: str = "trpo"
    # trust-region radius: bound on the mean KL(pi_old || pi_new) of each step (sweepable)
    max_kl: float = 0.01
    cg_iters: int = 10  # conjugate-gradient iterations solving (F + cg_damping I) x = g
    cg_damping: float = 0.1  # damping added to the Fisher matrix inside CG (sweepable)
    # line-search shrink factor alpha; candidates are alpha^j * full step (sweepable)
    backtrack_coeff: float = 0.8
    # line-search candidates j = 0 .. max_backtracks-1; none accepted = keep the old policy
    max_backtracks: int = 10
    # Fisher-vector products: gauss_newton (J^T M J v: jvp + analytic M + vjp) | hessian (Hessian of the
    # mean KL, fwd-over-rev)
    fvp: str = "gauss_newton"
    # fraction of the batch (a fresh random subset each update) used for Fisher-vector products; the line
    # search still checks the KL on the whole batch. 0.2 as in OpenAI baselines' TRPO: the FVPs are ~4
    # forward passes each (1.0: ~1.6x the update time)
    fvp_subsample: float = 0.2
    critic_lr: float = 1e-3  # critic Adam learning rate (sweepable)
    # critic passes over each batch: the largest share of an update; 3 is ~15% faster end to end but was
    # not adopted (one of its 8 CartPole seeds stalled; evidence too thin to call it equal)
    critic_epochs: int = 5
    critic_minibatches: int = 4  # critic minibatches per pass; must divide num_envs * num_steps
    critic_max_grad_norm: float = 0.5  # critic global gradient-norm clip (sweepable)
    # shrink the trust region linearly, max_kl * (1 - update/num_updates), like PPO's anneal_lr: near
    # the optimum the advantages are mostly noise, yet every accepted step still moves KL = max_kl
    anneal_max_kl: bool = False

    SWEEPABLE: ClassVar[tuple[str, ...]] = (
        "gamma", "gae_lambda", "max_kl", "cg_damping", "backtrack_coeff", "critic_lr",
        "critic_max_grad_norm")

    def validate(self, prefix: str, run: "RunConfig") -> None:
        self._validate_rollout(prefix, run)
        positive(f"{prefix}.max_kl", self.max_kl)
        positive(f"{prefix}.cg_iters", self.cg_iters)
        non_negative(f"{prefix}.cg_damping", self.cg_damping)
        unit_interval(f"{prefix}.backtrack_coeff", self.backtrack_coeff, open_low=True, open_high=True)
        positive(f"{prefix}.max_backtracks", self.max_backtracks)
        one_of(f"{prefix}.fvp", self.fvp, natural_gradient.FVP_MODES)
        unit_interval(f"{prefix}.fvp_subsample", self.fvp_subsample, open_low=True)
        _check(int(self.batch_env_steps() * self.fvp_subsample) >= 1, f"{prefix}.fvp_subsample",
               self.fvp_subsample, "large enough to keep at least one sample")
        positive(f"{prefix}.critic_lr", self.critic_lr)
        positive(f"{prefix}.critic_epochs", self.critic_epochs)
        positive(f"{prefix}.critic_minibatches", self.critic_minibatches)
        if run.network.is_recurrent:  # the critic's minibatches are whole env sequences
            _check(self.num_envs % self.critic_minibatches == 0, f"{prefix}.critic_minibatches",
                   self.critic_minibatches, f"a divisor of {prefix}.num_envs = {self.num_envs} with "
                   f"network.recurrent={run.network.recurrent} (minibatches are whole env sequences)")
        _check(self.batch_env_steps() % self.critic_minibatches == 0, f"{prefix}.critic_minibatches",
               self.critic_minibatches,
               f"a divisor of num_envs * num_steps = {self.batch_env_steps()}")
        positive(f"{prefix}.critic_max_grad_norm", self.critic_max_grad_norm)


CONFIG = TRPOConfig  # this algorithm's config (config.schema.ALGORITHMS)

METRICS = ("return_mean", "episode_length", "episodes", "kl", "surrogate_improvement",
           "expected_improvement", "backtracks", "cg_residual", "step_norm", "entropy", "value_loss",
           "nan_steps")


@struct.dataclass
class TRPOState:
    actor_params: Any
    critic_params: Any
    critic_opt_state: Any  # Adam state of the flattened critic parameters
    env: rollout.EnvCarry
    obs_norm: envs.ObsNormState | None
    key: jax.Array
    reward_norm: envs.ObsNormState | None = None  # env.normalize_reward's return statistics


def critic_adam(hparams) -> optax.GradientTransformation:
    """Adam with global-norm clipping for the critic (a flat vector: one fused update)."""
    return adam(hparams, hparams["critic_lr"], hparams["critic_max_grad_norm"])


def fvp_sample_size(cfg: TRPOConfig, batch_size: int | None = None) -> int:
    """Static number of samples the Fisher-vector products use (``fvp_subsample`` of the batch;
    ``batch_size`` defaults to the whole ``num_envs * num_steps``, a device's shard when data parallel)."""
    if batch_size is None:
        batch_size = cfg.num_envs * cfg.num_steps
    return min(max(int(batch_size * cfg.fvp_subsample), 1), batch_size)


class PolicyProblem(NamedTuple):
    """The trust-region problem of one batch, on the flat actor parameters ``theta [P]``."""

    theta_old: jnp.ndarray  # [P]
    unravel: Callable  # theta [P] -> actor params pytree
    objective_fn: Callable  # theta -> (L(theta), mean KL(pi_old || pi_theta)), both on the full batch
    fvp: natural_gradient.MatVec  # v [P] -> F v [P] at theta_old (on the fvp_subsample subset)
    entropy: jnp.ndarray  # mean entropy of pi_old on the batch


class TRPOParts(NamedTuple):
    """TRPO's pieces as pure functions, shared by :func:`make_algorithm` and the benchmark."""

    networks: Networks  # the actor and critic (actor_critic.make_networks)
    dist: Any
    # ``obs`` below is the observations [B, *obs], or (recurrent networks) the rollout's Sequences
    # with action/advantages/returns [N, T]: the items are then whole env sequences
    # (actor_params, obs [B, *obs], action [B, ...], advantages [B], key) -> PolicyProblem
    policy_problem: Callable
    # (actor_params, obs, action, advantages, key, hparams, max_kl) -> (actor_params, metrics)
    policy_step: Callable
    # (critic_params, opt_state, obs [B, *obs], returns [B], key, hparams) -> (params, opt_state, loss)
    critic_step: Callable


def make_parts(run: RunConfig, spec, axis_name=None) -> TRPOParts:
    """``axis_name`` (default None: unchanged) makes the steps data parallel over that mapped axis:
    the batches passed in are the device's shard; gradients, Fisher-vector products, line-search
    values and critic gradients are ``pmean``-ed (equal shard sizes), so parameters stay replicated.
    ``policy_problem`` itself stays local (its ``objective_fn``/``fvp`` are the device's means)."""
    cfg: TRPOConfig = run.algo
    dist = for_spec(spec.discrete, run.network.action_dist, spec)
    networks = make_networks(spec, run.network)
    # recurrent networks: the inputs are whole sequences, replayed from their starts
    actor_apply, critic_apply = networks.actor_apply, networks.critic_apply

    def num_items(obs) -> int:  # samples, or env sequences (static)
        return jax.tree_util.tree_leaves(obs)[0].shape[0]

    data = DataAxis(axis_name)
    pmean, local_key = data.mean, data.device_key  # local_key: every device its own subsets/shuffles

    def policy_problem(actor_params, obs, action, advantages, fvp_key) -> PolicyProblem:
        theta_old, unravel = ravel_pytree(actor_params)
        batch_size = num_items(obs)  # static; this device's shard when data parallel
        fvp_samples = fvp_sample_size(cfg, batch_size)

        def dist_fn(theta, observations):
            return actor_apply(unravel(theta), observations)

        dist_old = jax.lax.stop_gradient(dist_fn(theta_old, obs))
        log_prob_old = dist.log_prob(dist_old, action)

        def objective_fn(theta):
            dist_params = dist_fn(theta, obs)  # one forward pass serves both the surrogate and the KL
            ratio = jnp.exp(dist.log_prob(dist_params, action) - log_prob_old)
            return jnp.mean(ratio * advantages), jnp.mean(dist.kl(dist_old, dist_params))

        if fvp_samples < batch_size:  # a fresh fixed-size random subset of the batch
            subset = permutation(local_key(fvp_key), batch_size)[:fvp_samples]
            fvp_obs = jax.tree_util.tree_map(lambda x: x[subset], obs)
        else:
            fvp_obs = obs
        fvp = natural_gradient.make_fisher_vector_product(
            lambda theta: dist_fn(theta, fvp_obs), dist, theta_old, cfg.fvp)
        # a sampled entropy estimate (tanh_normal) draws apart from the subset's key
        entropy_key = jax.random.fold_in(fvp_key, 1) if dist.entropy_needs_key else None
        return PolicyProblem(theta_old, unravel, objective_fn, fvp, dist.entropy(dist_old, entropy_key).mean())

    def policy_step(actor_params, obs, action, advantages, fvp_key, hparams, max_kl):
        """The trust-region step; ``obs [B, *obs]``, ``advantages [B]`` (already normalised)."""
        problem = policy_problem(actor_params, obs, action, advantages, fvp_key)
        theta_new, info = natural_gradient.trust_region_step(
            problem.theta_old, problem.objective_fn, problem.fvp, max_kl=max_kl,
            cg_iters=cfg.cg_iters, cg_damping=hparams["cg_damping"],
            backtrack_coeff=hparams["backtrack_coeff"], max_backtracks=cfg.max_backtracks,
            mean_fn=None if axis_name is None else pmean)
        return problem.unravel(theta_new), dict(info._asdict(), entropy=pmean(problem.entropy))

    def critic_step(critic_params, opt_state, obs, returns, shuffle_key, hparams):
        """Adam epochs of minibatch regression ``0.5 (V - R)^2``; returns the mean loss."""
        optimizer = critic_adam(hparams)
        flat_params, unravel = ravel_pytree(critic_params)
        batch_size = num_items(obs)

        def loss_fn(flat, mb_obs, mb_returns):
            return losses.value_loss(critic_apply(unravel(flat), mb_obs), None, mb_returns).mean()

        value_and_grad = jax.value_and_grad(loss_fn)

        def grad_fn(flat, minibatch):
            loss, grads = value_and_grad(flat, *minibatch)
            return grads, loss

        # equal local minibatch sizes: the pmean of the gradients is the global mean loss's
        flat_params, opt_state, loss = minibatch_epochs(
            grad_fn, optimizer, flat_params, opt_state, (obs, returns), batch_size,
            cfg.critic_minibatches, jax.random.split(shuffle_key, cfg.critic_epochs),
            reduce_grads=pmean, shuffle_key=local_key)
        return unravel(flat_params), opt_state, pmean(loss.mean())

    return TRPOParts(networks, dist, policy_problem, policy_step, critic_step)


def make_algorithm(run: RunConfig, env, env_params, spec, axis_name=None) -> Algorithm:
    """TRPO for ``run``. ``axis_name`` (default None: one device, bitwise the original numbers) makes
    it data parallel over that mapped axis (``shard_map``), like PPO: each device steps
    ``num_envs / n`` of the envs; the surrogate gradient, Fisher-vector products, line-search
    surrogate/KL values, advantage-normalisation statistics, critic gradients and metrics are
    ``pmean``-ed, episode statistics ``psum``-ed, so params stay replicated. ``fvp_subsample`` and
    the critic's minibatch shuffles are drawn per device on its own shard (its own key)."""
    cfg: TRPOConfig = run.algo
    stage = make_stage(run, env, env_params, spec, axis_name)
    parts = make_parts(run, spec, axis_name)
    num_updates = cfg.num_updates(run.total_timesteps)

    def init(key, hparams):
        initial = stage.init(key)
        opt_state = critic_adam(hparams).init(ravel_pytree(initial.critic_params)[0])
        return TRPOState(initial.actor_params, initial.critic_params, opt_state, initial.env,
                         initial.obs_norm, initial.key, initial.reward_norm)

    def update(state: TRPOState, hparams, update_idx):
        key, rollout_key, fvp_key, shuffle_key = jax.random.split(state.key, 4)
        experience = stage.experience(state.actor_params, state.critic_params, state.obs_norm,
                                      state.env, rollout_key, hparams, state.reward_norm)
        batch = experience.transitions
        advantages = batch.advantages
        if cfg.normalize_advantages:
            advantages = losses.normalize(advantages, axis_name=axis_name)
        max_kl = hparams["max_kl"]
        if cfg.anneal_max_kl:  # (1 - i/N): the last update still gets max_kl / N, never 0
            max_kl = max_kl * (1.0 - update_idx / num_updates)

        # recurrent: the policy and critic see whole sequences (the batch itself), not observations
        inputs = batch if stage.recurrent else batch.obs
        actor_params, policy_metrics = parts.policy_step(state.actor_params, inputs, batch.action,
                                                         advantages, fvp_key, hparams, max_kl)
        critic_params, opt_state, value_loss = parts.critic_step(
            state.critic_params, state.critic_opt_state, inputs, batch.returns, shuffle_key, hparams)

        metrics = dict(policy_metrics, value_loss=value_loss, **stage.episode_metrics(experience.stats))
        obs_norm = stage.next_obs_norm(state.obs_norm, experience)
        return (TRPOState(actor_params, critic_params, opt_state, experience.carry, obs_norm, key,
                          experience.reward_norm), metrics)

    return Algorithm(run=run, env=env, env_params=env_params, spec=spec, dist=stage.dist,
                     policy=stage.policy, init=init, update=update,
                     policy_params=lambda s: (s.actor_params, s.obs_norm), metric_names=METRICS,
                     num_updates=num_updates,
                     param_fn=lambda s: {"actor": s.actor_params, "critic": s.critic_params})
