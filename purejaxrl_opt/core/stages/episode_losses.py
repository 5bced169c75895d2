"""Losses over whole episodes, cut into time blocks: a shared stage for episode-based algorithms (GRPO).

An update of an episode-based algorithm holds every episode of a batch, time-major ``[S, B]`` with
``S`` the rollout limit rounded up to whole time blocks; rows past an episode's end are masked (and
past the batch's longest episode, zero). A loss that is a *weighted sum over unmasked steps* (every
reduction of :func:`purejaxrl_opt.core.stages.losses.masked_reduce` is one, :func:`step_weights`) splits into
time blocks whose gradients add up to the whole: :func:`make_block_grad_fn` sums them over only the
``ceil(L / K)`` blocks the longest episode ``L`` reaches, so an update costs ~``L`` steps, not the
limit. :func:`block_log_probs` scores actions block by block; :func:`buffer_bytes` estimates the
memory of the episode buffers, so a config too large for the machine is refused before compiling.

What the loss *is* belongs to the algorithm: it passes its per-block ``objective``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import struct

from purejaxrl_opt import envs

# memory estimate: bytes per float, and a factor for the copies alive at once (rollout outputs, the
# trajectory-major copy, the shuffled minibatches)
_FLOAT_BYTES, _BUFFER_COPIES = 4, 3


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
    """Weights that turn :func:`purejaxrl_opt.core.stages.losses.masked_reduce` into a plain sum over unmasked
    steps.

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


def time_block(x: jnp.ndarray, start, block_steps: int, episodes: jnp.ndarray | None = None):
    """Rows ``start .. start+block_steps-1`` of a time-major ``x [S, B, ...]`` (``start`` may be
    traced; ``S`` must be a multiple of ``block_steps`` so no block is clamped onto its neighbour),
    optionally only the episodes (columns) ``episodes``."""
    block = jax.lax.dynamic_slice_in_dim(x, start, block_steps, axis=0)
    return block if episodes is None else block[:, episodes]


def make_block_grad_fn(actor_fn, dist, objective, diagnostic_names, loss_norm: str, block_steps: int,
                       num_steps: int):
    """``block_grads(flat_params, unravel, data: EpisodeBuffers, obs_norm, episodes [E], num_blocks,
    hparams) -> (grads, diagnostics)``: the gradient of a loss over the episodes ``episodes`` (a
    minibatch), as the sum of the gradients of ``num_blocks`` (traced) time blocks of ``block_steps``
    steps.

    ``objective(log_prob, entropy, block, weighted_sum, step_sum, hparams) -> (loss, diagnostics)``
    is one block's share of the loss (per-step arguments ``[K, E]``): ``weighted_sum(x)`` is the
    ``loss_norm`` reduction's share and ``step_sum(x)`` the per-step mean's (:func:`step_weights`),
    so that the blocks' losses and diagnostics add up to those over whole episodes. Blocks past the
    longest episode add exactly zero: ``num_blocks = ceil(L / block_steps)`` gives the full gradient
    at the cost of ``L`` steps. Valid for per-step policies only (a block cuts episodes).
    """

    def block_loss(flat_params, unravel, block: EpisodeBuffers, obs_norm, weight, step_weight,
                   hparams):
        dist_params = actor_fn(unravel(flat_params)["actor"], envs.obs_norm_apply(obs_norm, block.obs))
        log_prob = dist.log_prob(dist_params, block.action)

        def weighted_sum(x):
            return jnp.sum(jnp.where(block.mask, x * weight, 0.0))

        def step_sum(x):
            return jnp.sum(jnp.where(block.mask, x, 0.0)) * step_weight

        return objective(log_prob, dist.entropy(dist_params), block, weighted_sum, step_sum, hparams)

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

        zeros = {k: jnp.zeros((), jnp.float32) for k in diagnostic_names}
        return jax.lax.fori_loop(0, num_blocks, _block, (jnp.zeros_like(flat_params), zeros))

    return block_grads


def block_log_probs(actor_fn, dist, actor_params, obs_norm, obs, action, num_blocks,
                    block_steps: int) -> jnp.ndarray:
    """``log pi(action | obs)`` ``[S, B]`` over the first ``num_blocks`` time blocks (zeros after);
    ``obs`` raw, normalised with ``obs_norm`` (None: as they are)."""

    def _block(b, out):
        start = b * block_steps
        dist_params = actor_fn(actor_params,
                               envs.obs_norm_apply(obs_norm, time_block(obs, start, block_steps)))
        log_prob = dist.log_prob(dist_params, time_block(action, start, block_steps))
        return jax.lax.dynamic_update_slice_in_dim(out, log_prob.astype(out.dtype), start, axis=0)

    return jax.lax.fori_loop(0, num_blocks, _block, jnp.zeros(obs.shape[:2], jnp.float32))


def buffer_bytes(num_seeds: int, num_episodes: int, num_steps: int, obs_shape, num_actions: int,
                 net, num_minibatches: int) -> int:
    """Estimated memory of the episode buffers of all lanes (obs, action, log-probs, reward, mask,
    advantages) plus the activations of one minibatch, in bytes: ``num_episodes`` episodes of
    ``num_steps`` steps per lane, a network ``net`` (:class:`purejaxrl_opt.config.schema.NetworkConfig`)."""
    obs_size = math.prod(obs_shape)
    per_step = obs_size + num_actions + 6
    buffer = num_steps * num_episodes * per_step * _FLOAT_BYTES * _BUFFER_COPIES
    width = (sum(net.hidden_sizes) if net.kind == "mlp"
             else net.num_layers * net.d_model * (net.mlp_ratio + 4) * obs_size)  # per sequence
    activations = 2 * num_steps * (num_episodes // num_minibatches) * width * _FLOAT_BYTES
    return num_seeds * (buffer + activations)
