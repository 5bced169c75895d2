"""GRPO (Shao et al. 2024, DeepSeekMath) on environments: no critic, group-relative advantages.

Each update resets ``num_groups`` start states and rolls ``group_size`` complete episodes from each
(same-start grouping: the episodes of a group share their reset key, as GRPO's answers share their
question; ``grouping: unrelated`` gives every episode its own start). An episode's outcome reward is
its (optionally discounted) return; its advantage is the z-score of that outcome inside its group,
the same for all of its steps. The policy then maximises the clipped-ratio objective minus
``beta * k3(pi_theta || pi_ref)`` over ``update_epochs x num_minibatches`` passes, where minibatches
hold whole episodes and steps after an episode's end count nowhere.

Env-step budget: a rollout always runs ``T`` (the episode limit) steps, but only the unmasked steps
(real episode steps) are counted as ``env_steps``. By default ``num_updates = total_timesteps //
(num_groups * group_size * T)``: every update is charged as if all its episodes ran to the limit, so
no lane can ever exceed ``total_timesteps`` (and, with short episodes, uses less). With
``max_updates`` above that, an update runs only while such a worst-case batch still fits in the
lane's remaining budget; later updates are no-ops (state unchanged, NaN metrics, 0 env steps).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jax.flatten_util import ravel_pytree

from purejaxrl_opt import envs, losses, rollout
from purejaxrl_opt.algos.base import Algorithm
from purejaxrl_opt.config import GRPOConfig, RunConfig
from purejaxrl_opt.distributions import for_spec
from purejaxrl_opt.envs import EnvSpec
from purejaxrl_opt.errors import ConfigError
from purejaxrl_opt.optim import adam, minibatch_epochs
from purejaxrl_opt.policies import Policy, as_policy, make_policy
from purejaxrl_opt.pretrained import load_initial_actor
from purejaxrl_opt.token_envs import reward_metric_names, reward_metrics

METRICS = ("return_mean", "episode_length", "episodes", "kl_ref", "clip_frac", "approx_kl",
           "zero_spread_groups", "group_return_std", "entropy", "policy_loss", "learning_rate")

ADV_EPS = 1e-8
# memory estimate: bytes per float, and a factor for the copies alive at once (rollout outputs, the
# trajectory-major copy, the shuffled minibatches)
_FLOAT_BYTES, _BUFFER_COPIES = 4, 3


@struct.dataclass
class GRPOState:
    params: dict  # {"actor": ...}: no critic
    ref_params: Any  # actor params of pi_ref
    opt_state: Any
    obs_norm: envs.ObsNormState | None
    env_steps: jnp.ndarray  # float32: unmasked env steps consumed by this lane (for the budget)
    key: jax.Array


class Minibatch(struct.PyTreeNode):
    """Whole episodes, trajectory-major: leading axes ``[episodes, T]``."""

    obs: jnp.ndarray  # normalised, [E, T, *obs_shape]
    action: jnp.ndarray  # [E, T] or [E, T, D]
    log_prob_old: jnp.ndarray  # [E, T]
    log_prob_ref: jnp.ndarray  # [E, T]
    advantages: jnp.ndarray  # [E, T]
    mask: jnp.ndarray  # [E, T] bool


# --------------------------------------------------------------------------- advantages (pure)
def outcome_rewards(rewards: jnp.ndarray, mask: jnp.ndarray, discount) -> jnp.ndarray:
    """``R_b = sum_t discount^t r_{b,t}`` over unmasked steps; ``rewards, mask [B, T]`` -> ``[B]``."""
    weights = jnp.power(discount, jnp.arange(rewards.shape[-1], dtype=jnp.float32))
    return jnp.sum(jnp.where(mask, rewards * weights, 0.0), axis=-1)


def group_advantages(returns: jnp.ndarray, scale: str, eps: float = ADV_EPS) -> jnp.ndarray:
    """Outcome advantages ``[num_groups, G]`` from outcome rewards ``returns [num_groups, G]``.

    ``A_i = (R_i - mean_group(R)) / (std + eps)`` with ``std`` the population std of the group
    (``group``), of all returns in the batch (``batch``), or no division (``none``, Dr. GRPO).
    A group whose outcomes are all equal gets exactly zero advantage.
    """
    centred = returns - returns.mean(axis=1, keepdims=True)
    if scale == "group":
        centred = centred / (returns.std(axis=1, keepdims=True) + eps)
    elif scale == "batch":
        centred = centred / (returns.std() + eps)
    elif scale != "none":
        raise ValueError(f"unknown scale_rewards {scale!r}")
    return jnp.where(_has_spread(returns)[:, None], centred, 0.0)


def process_advantages(rewards: jnp.ndarray, mask: jnp.ndarray, scale: str,
                       eps: float = ADV_EPS) -> jnp.ndarray:
    """Process-supervision advantages ``[num_groups, G, T]`` from step rewards ``[num_groups, G, T]``.

    Every unmasked step reward is normalised over all unmasked step rewards of its group,
    ``rnorm = (r - mean_group) / (std + eps)`` (std: of the group, of every unmasked step reward in
    the batch, or 1 for ``none``), and ``A_{i,t} = sum_{t' >= t} rnorm_{i,t'}``. Masked steps get 0.
    """
    weights = mask.astype(jnp.float32)
    count = jnp.maximum(weights.sum(axis=(1, 2), keepdims=True), 1.0)
    mean = jnp.sum(rewards * weights, axis=(1, 2), keepdims=True) / count
    centred = rewards - mean
    if scale == "group":
        std = jnp.sqrt(jnp.sum(weights * centred**2, axis=(1, 2), keepdims=True) / count)
        centred = centred / (std + eps)
    elif scale == "batch":
        total = jnp.maximum(weights.sum(), 1.0)
        batch_mean = jnp.sum(rewards * weights) / total
        centred = centred / (jnp.sqrt(jnp.sum(weights * (rewards - batch_mean) ** 2) / total) + eps)
    elif scale != "none":
        raise ValueError(f"unknown scale_rewards {scale!r}")
    spread = _has_spread(rewards, mask)[:, None, None]
    normalised = jnp.where(jnp.logical_and(mask, spread), centred, 0.0)
    to_go = jnp.flip(jnp.cumsum(jnp.flip(normalised, -1), axis=-1), -1)
    return jnp.where(mask, to_go, 0.0)


def _has_spread(values: jnp.ndarray, mask: jnp.ndarray | None = None) -> jnp.ndarray:
    """Per group (leading axis): do the (unmasked) values differ? ``[num_groups]`` bool."""
    flat = values.reshape(values.shape[0], -1)
    if mask is None:
        return flat.max(axis=1) > flat.min(axis=1)
    flat_mask = mask.reshape(flat.shape)
    return (jnp.where(flat_mask, flat, -jnp.inf).max(axis=1)
            > jnp.where(flat_mask, flat, jnp.inf).min(axis=1))


# --------------------------------------------------------------------------- loss (pure)
def policy_objective(log_prob, log_prob_old, log_prob_ref, entropy, advantages, mask, hparams,
                     loss_norm: str) -> tuple[jnp.ndarray, dict]:
    """GRPO loss to minimise and diagnostics; every per-step argument is ``[E, T]``.

    Per step: ``min(rho A, clip(rho, 1-eps, 1+eps_high) A) - beta k3 + ent_coef H`` with
    ``rho = pi_theta/pi_old`` and ``k3 = pi_ref/pi_theta - log(pi_ref/pi_theta) - 1``; reduced with
    ``loss_norm``. ``hparams["epsilon_high"] == 0`` means a symmetric clip.
    """
    eps = hparams["epsilon"]
    eps_high = jnp.where(hparams["epsilon_high"] > 0, hparams["epsilon_high"], eps)
    surrogate = losses.clipped_surrogate(log_prob, log_prob_old, advantages, eps, eps_high)
    kl_ref = losses.k3_kl(log_prob, log_prob_ref)
    per_step = surrogate - hparams["beta"] * kl_ref + hparams["ent_coef"] * entropy
    loss = -losses.masked_reduce(per_step, mask, loss_norm)

    def step_mean(x):
        return losses.masked_reduce(x, mask, "token")

    diagnostics = {
        "policy_loss": -losses.masked_reduce(surrogate, mask, loss_norm),
        "kl_ref": step_mean(kl_ref),
        "entropy": step_mean(entropy),
        "approx_kl": step_mean(losses.approx_kl(log_prob, log_prob_old)),
        "clip_frac": step_mean(losses.clip_fraction(log_prob, log_prob_old, eps, eps_high)),
    }
    return loss, diagnostics


def make_loss_fn(policy: Policy, dist, loss_norm: str):
    """``loss_fn(actor_params, mb: Minibatch, hparams) -> (loss, diagnostics)``; ``policy`` is a
    :class:`Policy` or a flax actor module."""
    if not isinstance(policy, Policy):
        policy = as_policy(policy.apply)

    def loss_fn(actor_params, mb: Minibatch, hparams):
        dist_params = policy.episode_apply(actor_params, mb.obs, mb.action)
        log_prob = dist.log_prob(dist_params, mb.action)
        return policy_objective(log_prob, mb.log_prob_old, mb.log_prob_ref, dist.entropy(dist_params),
                                mb.advantages, mb.mask, hparams, loss_norm)

    return loss_fn


def compute_advantages(cfg: GRPOConfig, rewards: jnp.ndarray, mask: jnp.ndarray, hparams):
    """Advantages ``[B, T]``, outcome rewards ``[B]`` and zero-spread group count, episodes ``[B, T]``."""
    num_episodes, num_steps = rewards.shape
    outcomes = outcome_rewards(rewards, mask, hparams["outcome_discount"])
    if cfg.process_supervision:
        shape = (cfg.num_groups, cfg.group_size, num_steps)
        advantages = process_advantages(rewards.reshape(shape), mask.reshape(shape),
                                        cfg.scale_rewards).reshape(num_episodes, num_steps)
        spread = _has_spread(rewards.reshape(shape), mask.reshape(shape))
    else:
        grouped = outcomes.reshape(cfg.num_groups, cfg.group_size)
        advantages = jnp.broadcast_to(group_advantages(grouped, cfg.scale_rewards).reshape(-1, 1),
                                      (num_episodes, num_steps))
        spread = _has_spread(grouped)
    return advantages, outcomes, jnp.sum(~spread).astype(jnp.float32)


# --------------------------------------------------------------------------- static checks
def episode_limit(cfg: GRPOConfig, spec: EnvSpec) -> int:
    """Rollout length ``T``: ``max_episode_steps``, else the env's own episode limit."""
    limit = cfg.max_episode_steps or spec.max_steps
    if limit <= 0:
        raise ConfigError(f"{spec.env_id} has no episode limit: set grpo.max_episode_steps > 0 "
                          "(GRPO rolls whole episodes without auto-reset)")
    return limit


def buffer_bytes(run: RunConfig, spec: EnvSpec, num_steps: int) -> int:
    """Estimated memory of the episode buffers of all lanes (obs, action, log-probs, reward, mask,
    advantages) plus the activations of one minibatch, in bytes."""
    cfg: GRPOConfig = run.algo
    episodes = cfg.num_groups * cfg.group_size
    obs_size = math.prod(spec.obs_shape)
    per_step = obs_size + spec.num_actions + 6
    buffer = num_steps * episodes * per_step * _FLOAT_BYTES * _BUFFER_COPIES
    net = run.network
    width = (sum(net.hidden_sizes) if net.kind == "mlp"
             else net.num_layers * net.d_model * (net.mlp_ratio + 4) * obs_size)  # per sequence
    activations = 2 * num_steps * (episodes // cfg.num_minibatches) * width * _FLOAT_BYTES
    return run.num_seeds * (buffer + activations)


def check_static(run: RunConfig, spec: EnvSpec) -> int:
    """Bad input that needs the env: raise :class:`ConfigError` before compiling; returns ``T``."""
    cfg: GRPOConfig = run.algo
    num_steps = episode_limit(cfg, spec)
    worst_case = cfg.num_groups * cfg.group_size * num_steps
    if run.total_timesteps < worst_case:
        raise ConfigError(
            f"config key 'total_timesteps' = {run.total_timesteps} is invalid: must be >= one GRPO "
            f"update's worst case, num_groups * group_size * episode limit = {cfg.num_groups} * "
            f"{cfg.group_size} * {num_steps} = {worst_case}")
    needed = buffer_bytes(run, spec, num_steps) / 2**30
    if needed > cfg.max_memory_gb:
        raise ConfigError(
            f"GRPO on {spec.env_id} rolls whole episodes of up to {num_steps} steps: "
            f"{run.num_seeds} seed(s) x {cfg.num_groups * cfg.group_size} episodes x {num_steps} "
            f"steps x obs {spec.obs_shape} need about {needed:.1f} GB, over grpo.max_memory_gb = "
            f"{cfg.max_memory_gb}. Lower num_groups/group_size/num_seeds, set "
            f"grpo.max_episode_steps, or raise grpo.max_memory_gb")
    return num_steps


# --------------------------------------------------------------------------- the algorithm
def make_algorithm(run: RunConfig, env, env_params, spec) -> Algorithm:
    cfg: GRPOConfig = run.algo
    num_steps = check_static(run, spec)
    dist = for_spec(spec.discrete)
    policy = make_policy(spec, run.network)
    initial_actor = load_initial_actor(run, spec)
    num_episodes = cfg.num_groups * cfg.group_size
    worst_case = num_episodes * num_steps
    budget_updates = run.total_timesteps // worst_case
    num_updates = cfg.max_updates or budget_updates
    gated = num_updates > budget_updates  # some updates may find the budget spent
    loss_fn = make_loss_fn(policy, dist, cfg.loss_norm)

    def init(key, hparams):
        actor_key, key = jax.random.split(key)
        actor_params = policy.init(actor_key) if initial_actor is None else initial_actor
        params = {"actor": actor_params}
        opt_state = adam(hparams, hparams["lr"]).init(ravel_pytree(params)[0])
        obs_norm = envs.obs_norm_init(spec.obs_shape) if run.env.normalize_obs else None
        return GRPOState(params, actor_params, opt_state, obs_norm, jnp.zeros((), jnp.float32), key)

    def _learn(state: GRPOState, hparams, update_idx):
        key, rollout_key, shuffle_key = jax.random.split(state.key, 3)
        batch = rollout.group_rollout(
            env, env_params, spec, dist, policy, state.params["actor"], state.obs_norm,
            rollout_key, cfg.num_groups, cfg.group_size, num_steps, cfg.grouping == "same_start",
            run.env.clip_actions)
        # trajectory-major, so that minibatches are whole episodes
        obs, action, log_prob, reward, mask = jax.tree_util.tree_map(
            lambda x: jnp.swapaxes(x, 0, 1),
            (batch.obs, batch.action, batch.log_prob, batch.reward, batch.mask))
        obs = envs.obs_norm_apply(state.obs_norm, obs)
        advantages, outcomes, zero_spread = compute_advantages(cfg, reward, mask, hparams)
        log_prob_ref = dist.log_prob(policy.episode_apply(state.ref_params, obs, action), action)
        episodes = Minibatch(obs, action, log_prob, log_prob_ref, advantages, mask)

        progress = jnp.maximum(update_idx / num_updates, state.env_steps / run.total_timesteps)
        learning_rate = hparams["lr"] * (1.0 - progress) if cfg.anneal_lr else hparams["lr"]
        optimizer = adam(hparams, learning_rate)
        flat_params, unravel = ravel_pytree(state.params)
        grad_fn = jax.grad(lambda flat, mb: loss_fn(unravel(flat)["actor"], mb, hparams), has_aux=True)

        flat_params, opt_state, diagnostics = minibatch_epochs(
            grad_fn, optimizer, flat_params, state.opt_state, episodes, num_episodes,
            cfg.num_minibatches, jax.random.split(shuffle_key, cfg.update_epochs))
        params = unravel(flat_params)

        ref_params = state.ref_params
        if cfg.ref_update_every > 0:
            refresh = (update_idx + 1) % cfg.ref_update_every == 0
            ref_params = jax.tree_util.tree_map(lambda new, old: jnp.where(refresh, new, old),
                                                params["actor"], ref_params)
        obs_norm = (envs.obs_norm_update(state.obs_norm, batch.obs, batch.mask)
                    if state.obs_norm is not None else None)
        env_steps = batch.lengths.sum()
        metrics = {k: v.mean() for k, v in diagnostics.items()}
        metrics.update(
            return_mean=batch.returns.mean(), episode_length=batch.lengths.mean(),
            episodes=jnp.asarray(num_episodes, jnp.float32), zero_spread_groups=zero_spread,
            group_return_std=outcomes.reshape(cfg.num_groups, cfg.group_size).std(axis=1).mean(),
            learning_rate=learning_rate, env_steps=env_steps)
        metrics.update(reward_metrics(env, batch.reward_terms))
        new_state = GRPOState(params, ref_params, opt_state, obs_norm, state.env_steps + env_steps,
                              key)
        return new_state, metrics

    def update(state: GRPOState, hparams, update_idx):
        new_state, metrics = _learn(state, hparams, update_idx)
        if not gated:
            return new_state, metrics
        # budget spent for this lane (worst case no longer fits): keep the state, record nothing
        active = state.env_steps + worst_case <= run.total_timesteps
        new_state = jax.tree_util.tree_map(lambda new, old: jnp.where(active, new, old),
                                           new_state, state)
        metrics = {k: jnp.where(active, v, 0.0 if k == "env_steps" else jnp.nan)
                   for k, v in metrics.items()}
        return new_state, metrics

    return Algorithm(run=run, env=env, env_params=env_params, spec=spec, dist=dist,
                     policy=policy, init=init, update=update,
                     policy_params=lambda s: (s.params["actor"], s.obs_norm),
                     metric_names=METRICS + reward_metric_names(env),
                     num_updates=num_updates, param_fn=lambda s: s.params)

