"""GRPO (Shao et al. 2024, DeepSeekMath) on environments: no critic, group-relative advantages.

Each update resets ``num_groups`` start states and rolls ``group_size`` complete episodes from each
(same-start grouping: the episodes of a group share their reset key, as GRPO's answers share their
question; ``grouping: unrelated`` gives every episode its own start). An episode's outcome reward is
its (optionally discounted) return; its advantage is the z-score of that outcome inside its group,
the same for all of its steps. The policy then maximises the clipped-ratio objective minus
``beta * k3(pi_theta || pi_ref)`` over ``update_epochs x num_minibatches`` passes, where minibatches
hold whole episodes and steps after an episode's end count nowhere.

Env-step budget: ``total_timesteps`` counts real (unmasked) episode steps, as PPO's and TRPO's count
env steps. A lane runs updates while its consumed steps are below ``total_timesteps`` (a
``while_loop`` over updates, :func:`purejaxrl_opt.algos.base.run_updates` with ``lane_active``), so
it uses at least all of the budget and at most one update's steps more. The metrics buffer has
``max_updates`` rows (default ``GRPOConfig.num_updates``: every episode one step long, the most
updates a run can ever need); rows of updates a lane did not run stay NaN.

Per-step policies (MLP/CNN on gymnax envs) roll with :func:`rollout.group_rollout_until_done`, which
stops once every episode has ended, and compute the loss over time blocks of ``loss_block_steps``
steps covering only the first ``L`` (longest episode) steps, summing the blocks' gradients
(:func:`make_block_grad_fn`): neither the rollout nor the update pays for the padding up to the
limit ``T``. Token envs (a transformer re-scoring whole answers in one causal pass, answers of a
few tokens) keep the full-length path: :func:`rollout.group_rollout` and :func:`make_loss_fn`.
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
from purejaxrl_opt.envs.tokens import reward_metric_names, reward_metrics

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


# --------------------------------------------------------------------------- block-wise loss (pure)
class EpisodeBuffers(struct.PyTreeNode):
    """Every episode of one update, time-major ``[S, B]`` (``S``: a whole number of time blocks);
    rows past the longest episode are zero and masked. Observations are raw."""

    obs: jnp.ndarray  # [S, B, *obs_shape]
    action: jnp.ndarray  # [S, B] or [S, B, D]
    log_prob_old: jnp.ndarray  # [S, B]
    log_prob_ref: jnp.ndarray  # [S, B]
    advantages: jnp.ndarray  # [S, B]
    mask: jnp.ndarray  # [S, B] bool
    lengths: jnp.ndarray  # [B] unmasked steps per episode


def step_weights(lengths: jnp.ndarray, num_steps: int, loss_norm: str):
    """Weights that turn :func:`masked_reduce` into a plain sum over unmasked steps.

    For episodes with ``lengths [E]`` rolled for ``num_steps`` steps: ``(weight [E], step_weight)``
    with ``masked_reduce(v, mask, loss_norm) == sum_{e,t unmasked} weight[e] * v[e, t]`` and
    ``masked_reduce(v, mask, "token") == sum_{e,t unmasked} step_weight * v[e, t]``. Being sums over
    steps, the loss and its gradient split into time blocks whose parts add up to the whole.
    """
    num_episodes = lengths.shape[0]
    step_weight = 1.0 / jnp.maximum(lengths.sum(), 1.0)
    if loss_norm == "sequence":
        weight = 1.0 / (num_episodes * jnp.maximum(lengths, 1.0))
    elif loss_norm == "token":
        weight = jnp.full((num_episodes,), step_weight)
    elif loss_norm == "constant":
        weight = jnp.full((num_episodes,), 1.0 / (num_episodes * num_steps))
    else:
        raise ValueError(f"unknown loss_norm {loss_norm!r}")
    return weight, step_weight


def block_objective(log_prob, log_prob_old, log_prob_ref, entropy, advantages, mask, weight,
                    step_weight, hparams) -> tuple[jnp.ndarray, dict]:
    """One time block's share of :func:`policy_objective` (per-step arguments ``[K, E]``, ``weight
    [E]`` and ``step_weight`` from :func:`step_weights`): summed over all blocks, the loss and each
    diagnostic equal :func:`policy_objective`'s over the whole episodes."""
    eps = hparams["epsilon"]
    eps_high = jnp.where(hparams["epsilon_high"] > 0, hparams["epsilon_high"], eps)
    surrogate = losses.clipped_surrogate(log_prob, log_prob_old, advantages, eps, eps_high)
    kl_ref = losses.k3_kl(log_prob, log_prob_ref)
    per_step = surrogate - hparams["beta"] * kl_ref + hparams["ent_coef"] * entropy

    def weighted(x):
        return jnp.sum(jnp.where(mask, x * weight, 0.0))

    def step_sum(x):
        return jnp.sum(jnp.where(mask, x, 0.0)) * step_weight

    diagnostics = {
        "policy_loss": -weighted(surrogate),
        "kl_ref": step_sum(kl_ref),
        "entropy": step_sum(entropy),
        "approx_kl": step_sum(losses.approx_kl(log_prob, log_prob_old)),
        "clip_frac": step_sum(losses.clip_fraction(log_prob, log_prob_old, eps, eps_high)),
    }
    return -weighted(per_step), diagnostics


def time_block(x: jnp.ndarray, start, block_steps: int, episodes: jnp.ndarray | None = None):
    """Rows ``start .. start+block_steps-1`` of a time-major ``x [S, B, ...]`` (``start`` may be
    traced; ``S`` must be a multiple of ``block_steps`` so no block is clamped onto its neighbour),
    optionally only the episodes (columns) ``episodes``."""
    block = jax.lax.dynamic_slice_in_dim(x, start, block_steps, axis=0)
    return block if episodes is None else block[:, episodes]


def make_block_grad_fn(actor_fn, dist, loss_norm: str, block_steps: int, num_steps: int):
    """``block_grads(flat_params, unravel, data: EpisodeBuffers, obs_norm, episodes [E],
    num_blocks, hparams) -> (grads, diagnostics)``: the gradient of :func:`policy_objective` over the
    episodes ``episodes`` (a minibatch), as the sum of the gradients of ``num_blocks`` (traced) time
    blocks of ``block_steps`` steps. Blocks past the longest episode would add exactly zero, so
    ``num_blocks = ceil(L / block_steps)`` gives the full gradient at the cost of ``L`` steps, not
    ``num_steps``. Valid for per-step policies only (a block cuts episodes)."""

    def block_loss(flat_params, unravel, block: EpisodeBuffers, obs_norm, weight, step_weight,
                   hparams):
        dist_params = actor_fn(unravel(flat_params)["actor"], envs.obs_norm_apply(obs_norm, block.obs))
        log_prob = dist.log_prob(dist_params, block.action)
        return block_objective(log_prob, block.log_prob_old, block.log_prob_ref,
                               dist.entropy(dist_params), block.advantages, block.mask, weight,
                               step_weight, hparams)

    block_grad = jax.grad(block_loss, has_aux=True)

    def block_grads(flat_params, unravel, data: EpisodeBuffers, obs_norm, episodes, num_blocks,
                    hparams):
        weight, step_weight = step_weights(data.lengths[episodes], num_steps, loss_norm)

        def _block(b, acc):
            grads, diagnostics = acc
            block = EpisodeBuffers(
                *(time_block(x, b * block_steps, block_steps, episodes) for x in
                  (data.obs, data.action, data.log_prob_old, data.log_prob_ref, data.advantages,
                   data.mask)), lengths=data.lengths[episodes])
            g, d = block_grad(flat_params, unravel, block, obs_norm, weight, step_weight, hparams)
            return grads + g, jax.tree_util.tree_map(jnp.add, diagnostics, d)

        zeros = {k: jnp.zeros((), jnp.float32) for k in DIAGNOSTICS}
        return jax.lax.fori_loop(0, num_blocks, _block, (jnp.zeros_like(flat_params), zeros))

    return block_grads


DIAGNOSTICS = ("policy_loss", "kl_ref", "entropy", "approx_kl", "clip_frac")


def block_log_probs(actor_fn, dist, actor_params, obs_norm, obs, action, num_blocks,
                    block_steps: int) -> jnp.ndarray:
    """``log pi(action | obs)`` ``[S, B]`` over the first ``num_blocks`` time blocks (zeros after)."""

    def _block(b, out):
        start = b * block_steps
        dist_params = actor_fn(actor_params,
                               envs.obs_norm_apply(obs_norm, time_block(obs, start, block_steps)))
        log_prob = dist.log_prob(dist_params, time_block(action, start, block_steps))
        return jax.lax.dynamic_update_slice_in_dim(out, log_prob.astype(out.dtype), start, axis=0)

    return jax.lax.fori_loop(0, num_blocks, _block, jnp.zeros(obs.shape[:2], jnp.float32))


def masked_obs_norm_update_blocks(state: envs.ObsNormState, obs: jnp.ndarray, mask: jnp.ndarray,
                                  num_blocks, block_steps: int) -> envs.ObsNormState:
    """:func:`purejaxrl_opt.envs.obs_norm_update` (masked) reading only the first ``num_blocks`` time blocks of
    ``obs [S, B, *obs_shape]`` (two passes: weighted mean, then weighted squared deviations)."""
    shape = state.mean.shape

    def _weighted(start):
        weights = time_block(mask, start, block_steps).reshape(-1).astype(jnp.float32)
        x = time_block(obs, start, block_steps).reshape((-1,) + shape).astype(jnp.float32)
        return weights, weights.reshape((-1,) + (1,) * len(shape)), x

    def _sums(b, acc):
        weights, weights_b, x = _weighted(b * block_steps)
        return acc[0] + weights.sum(), acc[1] + jnp.sum(x * weights_b, 0)

    count, total = jax.lax.fori_loop(0, num_blocks, _sums, (jnp.zeros(()), jnp.zeros(shape)))
    count = jnp.maximum(count, 1.0)
    batch_mean = total / count

    def _squares(b, acc):
        _, weights_b, x = _weighted(b * block_steps)
        return acc + jnp.sum(weights_b * (x - batch_mean) ** 2, 0)

    batch_var = jax.lax.fori_loop(0, num_blocks, _squares, jnp.zeros(shape)) / count
    delta = batch_mean - state.mean
    total_count = state.count + count
    m2 = state.var * state.count + batch_var * count + delta**2 * state.count * count / total_count
    return envs.ObsNormState(state.mean + delta * count / total_count, m2 / total_count, total_count)


# --------------------------------------------------------------------------- static checks
def episode_limit(cfg: GRPOConfig, spec: EnvSpec) -> int:
    """Rollout length ``T``: ``max_episode_steps``, else the env's own episode limit."""
    if cfg.max_episode_steps <= 0 and spec.max_steps <= 0:
        raise ConfigError(f"{spec.env_id} has no episode limit: set grpo.max_episode_steps > 0 "
                          "(GRPO rolls whole episodes without auto-reset)")
    return cfg.rollout_length(spec.max_steps)


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
    needed = buffer_bytes(run, spec, num_steps) / 2**30
    if needed > cfg.max_memory_gb:
        raise ConfigError(
            f"GRPO on {spec.env_id} rolls whole episodes of up to {num_steps} steps: "
            f"{run.num_seeds} seed(s) x {cfg.num_groups * cfg.group_size} episodes x {num_steps} "
            f"steps x obs {spec.obs_shape} need about {needed:.1f} GB, over grpo.max_memory_gb = "
            f"{cfg.max_memory_gb}. Lower num_groups/group_size/num_seeds, set "
            f"grpo.max_episode_steps, or raise grpo.max_memory_gb")
    return num_steps


def uses_block_path(spec: EnvSpec, policy: Policy) -> bool:
    """Early-stopped rollouts and the block-wise loss need a per-step policy: a feed-forward network
    (MLP or CNN) on a gymnax env. Token envs' transformers re-score whole answers in one causal pass,
    and a recurrent policy replays each episode from its zero start state: full length."""
    return spec.vocab is None and policy.recurrence is None


def block_layout(cfg: GRPOConfig, num_steps: int) -> tuple[int, int]:
    """``(block_steps K, buffer_steps S)``: ``K = min(loss_block_steps, T)``, ``S`` = ``T`` rounded up
    to a whole number of blocks."""
    block_steps = min(cfg.loss_block_steps, num_steps)
    return block_steps, -(-num_steps // block_steps) * block_steps


# --------------------------------------------------------------------------- the algorithm
def make_algorithm(run: RunConfig, env, env_params, spec) -> Algorithm:
    cfg: GRPOConfig = run.algo
    num_steps = check_static(run, spec)
    dist = for_spec(spec.discrete)
    policy = make_policy(spec, run.network)
    initial_actor = load_initial_actor(run, spec)
    num_episodes = cfg.num_groups * cfg.group_size
    num_updates = cfg.num_updates(run.total_timesteps, spec.max_steps)
    loss_fn = make_loss_fn(policy, dist, cfg.loss_norm)
    blocks = uses_block_path(spec, policy)
    block_steps, buffer_steps = block_layout(cfg, num_steps)
    block_grads = make_block_grad_fn(policy.apply, dist, cfg.loss_norm, block_steps, num_steps)

    def init(key, hparams):
        actor_key, key = jax.random.split(key)
        actor_params = policy.init(actor_key) if initial_actor is None else initial_actor
        params = {"actor": actor_params}
        opt_state = adam(hparams, hparams["lr"]).init(ravel_pytree(params)[0])
        obs_norm = envs.obs_norm_init(spec.obs_shape) if run.env.normalize_obs else None
        return GRPOState(params, actor_params, opt_state, obs_norm, jnp.zeros((), jnp.float32), key)

    def _optimise_full(state: GRPOState, batch: rollout.GroupBatch, hparams, optimizer, shuffle_key):
        """Whole ``[E, T]`` episodes per minibatch (token envs)."""
        # trajectory-major, so that minibatches are whole episodes
        obs, action, log_prob, reward, mask = jax.tree_util.tree_map(
            lambda x: jnp.swapaxes(x, 0, 1),
            (batch.obs, batch.action, batch.log_prob, batch.reward, batch.mask))
        obs = envs.obs_norm_apply(state.obs_norm, obs)
        advantages, outcomes, zero_spread = compute_advantages(cfg, reward, mask, hparams)
        log_prob_ref = dist.log_prob(policy.episode_apply(state.ref_params, obs, action), action)
        episodes = Minibatch(obs, action, log_prob, log_prob_ref, advantages, mask)
        flat_params, unravel = ravel_pytree(state.params)
        grad_fn = jax.grad(lambda flat, mb: loss_fn(unravel(flat)["actor"], mb, hparams), has_aux=True)
        flat_params, opt_state, diagnostics = minibatch_epochs(
            grad_fn, optimizer, flat_params, state.opt_state, episodes, num_episodes,
            cfg.num_minibatches, jax.random.split(shuffle_key, cfg.update_epochs))
        obs_norm = (envs.obs_norm_update(state.obs_norm, batch.obs, batch.mask)
                    if state.obs_norm is not None else None)
        return unravel(flat_params), opt_state, obs_norm, diagnostics, outcomes, zero_spread

    def _optimise_blocks(state: GRPOState, batch: rollout.GroupBatch, rollout_steps, hparams,
                         optimizer, shuffle_key):
        """Time blocks over the first ``rollout_steps`` steps only; minibatches are episode indices."""
        num_blocks = (rollout_steps + block_steps - 1) // block_steps
        advantages, outcomes, zero_spread = compute_advantages(cfg, batch.reward.T, batch.mask.T,
                                                               hparams)
        log_prob_ref = block_log_probs(policy.apply, dist, state.ref_params, state.obs_norm,
                                       batch.obs, batch.action, num_blocks, block_steps)
        data = EpisodeBuffers(batch.obs, batch.action, batch.log_prob, log_prob_ref, advantages.T,
                              batch.mask, batch.lengths)
        flat_params, unravel = ravel_pytree(state.params)

        def grad_fn(flat, episodes):
            return block_grads(flat, unravel, data, state.obs_norm, episodes, num_blocks, hparams)

        flat_params, opt_state, diagnostics = minibatch_epochs(
            grad_fn, optimizer, flat_params, state.opt_state, jnp.arange(num_episodes), num_episodes,
            cfg.num_minibatches, jax.random.split(shuffle_key, cfg.update_epochs))
        obs_norm = (masked_obs_norm_update_blocks(state.obs_norm, batch.obs, batch.mask, num_blocks,
                                                  block_steps)
                    if state.obs_norm is not None else None)
        return unravel(flat_params), opt_state, obs_norm, diagnostics, outcomes, zero_spread

    def update(state: GRPOState, hparams, update_idx):
        key, rollout_key, shuffle_key = jax.random.split(state.key, 3)
        progress = jnp.maximum(update_idx / num_updates, state.env_steps / run.total_timesteps)
        learning_rate = hparams["lr"] * (1.0 - progress) if cfg.anneal_lr else hparams["lr"]
        optimizer = adam(hparams, learning_rate)
        same_start = cfg.grouping == "same_start"
        if blocks:
            batch, rollout_steps = rollout.group_rollout_until_done(
                env, env_params, spec, dist, policy.apply, state.params["actor"], state.obs_norm,
                rollout_key, cfg.num_groups, cfg.group_size, num_steps, same_start,
                run.env.clip_actions, buffer_steps=buffer_steps)
            params, opt_state, obs_norm, diagnostics, outcomes, zero_spread = _optimise_blocks(
                state, batch, rollout_steps, hparams, optimizer, shuffle_key)
        else:
            batch = rollout.group_rollout(
                env, env_params, spec, dist, policy, state.params["actor"], state.obs_norm,
                rollout_key, cfg.num_groups, cfg.group_size, num_steps, same_start,
                run.env.clip_actions)
            params, opt_state, obs_norm, diagnostics, outcomes, zero_spread = _optimise_full(
                state, batch, hparams, optimizer, shuffle_key)

        ref_params = state.ref_params
        if cfg.ref_update_every > 0:
            refresh = (update_idx + 1) % cfg.ref_update_every == 0
            ref_params = jax.tree_util.tree_map(lambda new, old: jnp.where(refresh, new, old),
                                                params["actor"], ref_params)
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

    def lane_active(state: GRPOState):
        return state.env_steps < run.total_timesteps

    return Algorithm(run=run, env=env, env_params=env_params, spec=spec, dist=dist,
                     policy=policy, init=init, update=update,
                     policy_params=lambda s: (s.params["actor"], s.obs_norm),
                     metric_names=METRICS + reward_metric_names(env),
                     num_updates=num_updates, param_fn=lambda s: s.params, lane_active=lane_active)

