"""The policy side of reinforcement learning on a causal LM, shared by the language-model trainers
(:mod:`purejaxrl_opt.core.algos.grpo_lm`, :mod:`purejaxrl_opt.core.algos.ppo_lm`): the batch of prompts and
sampled completions, its token layout, per-token log-probs of the completions, passes over a batch in
micro-batches (gradients accumulated in a ``lax.scan``), the trained arrays (LoRA adapters or a float32
master copy) and the frozen ones, and the batch sharding of a device mesh.

Layout: ``num_groups`` prompts left-padded to ``P`` tokens, each answered by ``G`` completions of at
most ``T`` tokens (group-major: completion ``b`` answers prompt ``b // G``); a completion's tokens
follow its prompt at column ``P`` and the logits at column ``P - 1 + t`` predict completion token
``t``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from purejaxrl_opt.config.lm import ModelConfig
from purejaxrl_opt.core.models import causal_lm, lora, sampling

# the axes of a language-model mesh (purejaxrl_opt.host.parallel.lm_mesh): data parallel x FSDP. The
# batch is split over both, the params over FSDP only
DATA, FSDP = "data", "fsdp"
BATCH_AXES = (DATA, FSDP)


class Batch(struct.PyTreeNode):
    """One update's data: ``num_groups`` prompts (left-padded to ``P``) and their ``B = num_groups x G``
    completions (group-major: completion ``b`` answers prompt ``b // G``)."""

    prompt_tokens: jnp.ndarray  # int32 [num_groups, P]
    prompt_mask: jnp.ndarray  # int32 [num_groups, P]
    completions: jnp.ndarray  # int32 [B, T], pad after the stop token
    lengths: jnp.ndarray  # int32 [B], tokens up to and including the stop token
    rewards: jnp.ndarray  # float32 [B], the weighted sum of the reward functions


def sequences(batch: Batch, group_size: int):
    """``(tokens [B, P + T], attention_mask [B, P + T], completion_mask bool [B, T])``."""
    prompts = jnp.repeat(batch.prompt_tokens, group_size, axis=0)
    prompt_mask = jnp.repeat(batch.prompt_mask, group_size, axis=0)
    completion_mask = jnp.arange(batch.completions.shape[1])[None] < batch.lengths[:, None]
    tokens = jnp.concatenate([prompts, batch.completions], axis=1)
    attention = jnp.concatenate([prompt_mask, completion_mask.astype(prompt_mask.dtype)], axis=1)
    return tokens, attention, completion_mask


def truncated(batch: Batch, stop_ids: tuple[int, ...]) -> jnp.ndarray:
    """``[B]`` bool: completions cut at the length limit without a stop token."""
    stops = jnp.asarray(stop_ids or (-1,), jnp.int32)
    stopped = jnp.any(batch.completions[..., None] == stops, axis=-1)
    completion_mask = jnp.arange(batch.completions.shape[1])[None] < batch.lengths[:, None]
    return ~jnp.any(stopped & completion_mask, axis=-1)


def completion_log_probs(params, cfg: causal_lm.LMConfig, tokens, attention_mask, completions,
                         prompt_len: int, temperature: float):
    """Per-token log-probs and entropies ``float32 [b, T]`` of the completions ``int [b, T]`` that follow
    the prompts in ``tokens [b, P + T]`` (``P = prompt_len``; the prompt left-padded, the completion
    starting at column ``P``), under ``softmax(logits / temperature)``."""
    num_new = completions.shape[1]
    # the head on the completion's positions only: the [b, L, V] logits are the largest activation
    hidden = causal_lm.hidden_states(params, cfg, tokens, attention_mask)[:, prompt_len - 1:prompt_len - 1 + num_new]
    logits = causal_lm.lm_head(params, cfg, hidden)
    log_softmax = jax.nn.log_softmax(logits / temperature, axis=-1)
    log_prob = jnp.take_along_axis(log_softmax, completions[..., None], axis=-1)[..., 0]
    entropy = -jnp.sum(jnp.exp(log_softmax) * log_softmax, axis=-1)
    return log_prob, entropy


def micro_reduce(loss_norm: str, mask, minibatch_size: int, minibatch_tokens, num_new: int):
    """The reduction of a micro-batch's per-token values ``[b, T]`` (``mask [b, T]``) as its share of
    :func:`purejaxrl_opt.core.stages.losses.masked_reduce` over the whole minibatch: the shares of the minibatch's
    micro-batches sum to that reduction."""
    weights = mask.astype(jnp.float32)

    def reduce(values):
        values = jnp.where(mask, values, 0.0)
        if loss_norm == "sequence":
            return jnp.sum(values.sum(-1) / jnp.maximum(weights.sum(-1), 1.0)) / minibatch_size
        if loss_norm == "token":
            return values.sum() / jnp.maximum(minibatch_tokens, 1.0)
        if loss_norm == "constant":
            return values.sum() / (minibatch_size * num_new)
        raise ValueError(f"unknown loss_norm {loss_norm!r}")

    return reduce


# --------------------------------------------------------------------------- sharding
def fsdp_spec(shape: tuple[int, ...], size: int) -> P:
    """FSDP's split of one array over ``size`` devices: its largest axis that ``size`` divides (the
    first of equals), or replicated (``P()``) when none does, for scalars and for ``size = 1``."""
    candidates = [(dim, -axis) for axis, dim in enumerate(shape) if dim % size == 0 and dim >= size]
    if size == 1 or not candidates:
        return P()
    axis = -max(candidates)[1]
    return P(*([None] * axis + [FSDP]))


def param_shardings(tree, mesh) -> Any:
    """A ``NamedSharding`` per leaf of ``tree`` (params, optimizer state, adapters): split by
    :func:`fsdp_spec` over the mesh's FSDP axis, replicated over its data axis."""
    size = mesh.shape[FSDP]
    return jax.tree_util.tree_map(lambda x: NamedSharding(mesh, fsdp_spec(jnp.shape(x), size)), tree)


def constrain_params(tree, mesh):
    """``tree`` pinned to :func:`param_shardings` inside a compiled function (the identity without a
    mesh): the updated state keeps its layout from one update to the next."""
    if mesh is None:
        return tree
    return jax.tree_util.tree_map(jax.lax.with_sharding_constraint, tree, param_shardings(tree, mesh))


# --------------------------------------------------------------------------- batch sharding
def batch_shardings(tree, mesh) -> Any:
    """A ``NamedSharding`` per leaf of ``tree`` (``[n, ...]`` batch arrays): rows split over the mesh's
    batch axes (data x FSDP) where their number divides ``n``, else replicated (e.g. fewer prompts
    than devices)."""
    size = mesh.shape[DATA] * mesh.shape[FSDP]

    def one(x):
        shape = jnp.shape(x)
        return NamedSharding(mesh, P(BATCH_AXES) if shape and shape[0] % size == 0 else P())

    return jax.tree_util.tree_map(one, tree)


def constrain_batch(tree, mesh, axis: int = 0):
    """``tree``'s leaves split over the mesh's batch axes (data x FSDP) along ``axis``; the identity
    without a mesh. Inside the compiled update this pins the layout of the micro-batches (each
    device works on its slice of every micro-batch) where the propagation alone may choose another."""
    if mesh is None:
        return tree

    def one(x):
        spec = [None] * x.ndim
        spec[axis] = BATCH_AXES
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P(*spec)))

    return jax.tree_util.tree_map(one, tree)


def split_micro(tree, micro: int, mesh=None):
    """``[n, ...]`` leaves -> ``[n / micro, micro, ...]``, each micro-batch split over the mesh's batch
    axes."""
    chunks = jax.tree_util.tree_map(lambda x: x.reshape((x.shape[0] // micro, micro) + x.shape[1:]), tree)
    return constrain_batch(chunks, mesh, axis=1)


def in_micro_batches(fn, arrays, micro: int, mesh=None):
    """``fn(chunk) -> [micro, ...]`` over ``arrays`` (``[n, ...]`` leaves) in ``n / micro`` sequential
    passes (``lax.map``), so a pass holds one micro-batch's activations; the results joined back to
    ``[n, ...]`` and detached."""
    chunks = split_micro(arrays, micro, mesh)
    out = jax.lax.map(fn, chunks)
    return jax.lax.stop_gradient(jax.tree_util.tree_map(lambda x: x.reshape((-1,) + x.shape[2:]), out))


def accumulate_grads(loss_fn, trained, minibatch: dict, micro: int, mesh=None):
    """``((loss, grads), aux)`` of ``loss_fn(trained, chunk) -> (loss, aux)`` summed over the
    micro-batches of ``minibatch`` (``[minibatch, ...]`` leaves) inside a ``lax.scan``: a pass holds
    one micro-batch's activations. ``loss_fn`` returns its micro-batch's *share* of the minibatch's
    loss, so the sums are the minibatch's loss and gradient; ``aux`` is stacked ``[num_micro, ...]``."""
    grad_micro = jax.value_and_grad(loss_fn, has_aux=True)

    def accumulate(total, chunk):
        (loss, aux), grads = grad_micro(trained, chunk)
        return jax.tree_util.tree_map(jnp.add, total, (loss, grads)), aux

    zeros = (jnp.zeros((), jnp.float32), constrain_params(jax.tree_util.tree_map(jnp.zeros_like, trained), mesh))
    return jax.lax.scan(accumulate, zeros, split_micro(minibatch, micro, mesh))


# --------------------------------------------------------------------------- trained and frozen arrays
def learning_rate(lr, update_idx, warmup_updates: int, anneal: bool, num_updates: int):
    """``lr`` ramped linearly over ``warmup_updates``, then (``anneal``) decayed linearly to 0 at
    ``num_updates``."""
    rate = lr
    if warmup_updates > 0:
        rate = rate * jnp.minimum(1.0, (update_idx + 1.0) / warmup_updates)
    if anneal:
        rate = rate * (1.0 - update_idx / num_updates)
    return rate


class LMTrainer:
    """What the language-model trainers (GRPO, PPO) share, over their ``lm``, ``model``, ``cfg``, ``algo``
    and ``num_updates`` fields: the policy's params, the optimizer and its learning-rate schedule."""

    def policy_params(self, trained, frozen) -> dict:
        """The policy's params in ``cfg.dtype``: adapters merged into the base, or the master copy cast."""
        return policy_params(trained, frozen, self.model, self.cfg.jnp_dtype)

    def current_policy(self, trained, frozen) -> dict:
        """The policy's params in ``cfg.dtype`` from the whole trained state ``trained`` (a trainer whose
        state holds more than the policy, e.g. a value model, picks the policy's part)."""
        return self.policy_params(trained, frozen)

    def optimizer(self, learning_rate, max_grad_norm):
        from purejaxrl_opt.core.stages.optim import adamw

        return adamw(learning_rate, max_grad_norm, self.lm.weight_decay, self.lm.adam_beta2)

    def learning_rate(self, lr, update_idx):
        return learning_rate(lr, update_idx, self.lm.warmup_updates, self.algo.anneal_lr, self.num_updates)


def init_trained(params: dict, model: ModelConfig, keep_reference: bool, compute_dtype, key: jax.Array):
    """``(trained, frozen)`` from the loaded ``params``: LoRA adapters and the base (the reference,
    adapters off), or a float32 master copy and, with ``keep_reference``, a frozen copy of the
    initial params in ``compute_dtype`` (else None)."""
    if model.lora_rank > 0:
        return lora.init(params, model.lora_targets, model.lora_rank, key), params
    trained = jax.tree_util.tree_map(lambda x: x.astype(jnp.float32), params)
    # a copy even in float32 (astype would return the same buffers): the update may donate `trained`
    frozen = jax.tree_util.tree_map(lambda x: jnp.array(x, compute_dtype, copy=True), trained) if keep_reference else None
    return trained, frozen


def policy_params(trained, frozen, model: ModelConfig, compute_dtype) -> dict:
    """The policy's params in ``compute_dtype``: adapters merged into the base, or the master copy
    cast."""
    if model.lora_rank > 0:
        return lora.merge(frozen, trained, model.lora_alpha / model.lora_rank)
    return cast(trained, compute_dtype)


def cast(tree, dtype) -> Any:
    return jax.tree_util.tree_map(lambda x: x.astype(dtype), tree)


def sample_groups(params, cfg: causal_lm.LMConfig, sampling_cfg: sampling.SamplingConfig, group_size: int,
                  prompt_tokens, prompt_mask, key, mesh=None):
    """``G`` completions of each prompt ``[num_groups, P]``: ``(completions int32 [B, T], lengths int32
    [B])``, group-major, the rows split over the mesh's batch axes."""
    tokens = constrain_batch(jnp.repeat(prompt_tokens, group_size, axis=0), mesh)
    mask = constrain_batch(jnp.repeat(prompt_mask, group_size, axis=0), mesh)
    return sampling.generate(params, cfg, sampling_cfg, tokens, mask, key)
