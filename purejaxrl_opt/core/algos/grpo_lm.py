"""GRPO on a pretrained causal language model (:mod:`purejaxrl_opt.core.models.causal_lm`): the compiled
halves of a *split step*.

One update of the host driver (:mod:`purejaxrl_opt.host.lm.runner`) is

1. :meth:`LMGRPO.sample` (compiled): ``num_groups`` prompts, each repeated ``G = group_size`` times,
   continued by one jitted KV-cache generation (:func:`purejaxrl_opt.core.models.sampling.generate`);
2. on the host: the completions are decoded and the Python reward functions score them
   (:mod:`purejaxrl_opt.host.lm.rewards`: arbitrary Python over text cannot be traced, so the step is split
   here rather than calling back from inside the compiled step; the driver measures this host time);
3. :meth:`LMGRPO.update` (compiled, one call): group-relative advantages of the rewards
   (:func:`purejaxrl_opt.core.stages.grpo_objective.group_advantages`), the old and reference log-probs, then
   ``update_epochs x num_minibatches`` AdamW steps, each accumulating gradients over the micro-batches
   of its minibatch inside a ``lax.scan``.

The loss is the environment GRPO's, :func:`purejaxrl_opt.core.stages.grpo_objective.policy_objective`, with every
variant of ``GRPOConfig`` (core/algos/grpo.py) (``loss_type``/``loss_norm``, ``scale_rewards``, GSPO's sequence
ratio, ``epsilon_high``, ``delta``, the k3 KL and its importance weight, ``mask_truncated_completions``,
``overlong_buffer``), over completion tokens only: prompt tokens and the padding after a completion's
stop token are masked. The per-token log-probs are those of the tempered policy, ``softmax(logits / T)``
with ``T`` the sampling temperature (as TRL). The reductions are split over micro-batches so that the
accumulated gradient is the minibatch's exactly: each micro-batch contributes its share of the
minibatch's reduction (``sequence``: its sequence means / minibatch size; ``token``: its token sum /
the minibatch's token count; ``constant``: its sum / (minibatch size x ``max_new_tokens``)).

Trained arrays: the LoRA adapters (:mod:`purejaxrl_opt.core.models.lora`; the reference policy is then the
frozen base with the adapters off, no copy of the weights) or, with ``model.lora_rank=0``, every
parameter as a float32 master copy (cast to ``model.dtype`` for each pass; a frozen reference copy is
kept only when ``beta > 0``). ``beta = 0`` computes no reference log-probs at all. With one optimizer
step per batch (``update_epochs = num_minibatches = 1``) ``pi_old = pi_theta`` and the old log-probs
are the current ones, detached (TRL's shortcut), saving a forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from purejaxrl_opt.core.stages import lm_policy
from purejaxrl_opt.config.schema import AlgoConfig
from purejaxrl_opt.core.stages.grpo_objective import has_spread, group_advantages, overlong_penalty, policy_objective
from purejaxrl_opt.config.lm import LMTrainConfig, ModelConfig
from purejaxrl_opt.core.stages.lm_policy import Batch, completion_log_probs, micro_reduce
from purejaxrl_opt.core.models import causal_lm, sampling
from purejaxrl_opt.core.stages.optim import minibatch_epochs

DIAGNOSTICS = ("policy_loss", "kl_ref", "entropy", "approx_kl", "clip_frac")


@struct.dataclass
class LMState:
    trained: Any  # LoRA adapters, or the full params (float32)
    opt_state: Any
    update_idx: jnp.ndarray  # int32 []


@dataclass(frozen=True)
class LMGRPO(lm_policy.LMTrainer):
    """The compiled pieces of GRPO on a causal LM, for fixed shapes (prompt length ``P``, ``T`` new
    tokens, ``num_groups x G`` completions). ``frozen`` is the base params under LoRA, the reference
    copy in full fine-tuning with ``beta > 0``, else None; it is an argument (never a closure
    constant, so a compile does not embed the weights)."""

    algo: AlgoConfig  # a GRPOConfig (core/algos/grpo.py; an algorithm imports no other)
    lm: LMTrainConfig
    model: ModelConfig
    cfg: causal_lm.LMConfig
    sampling: sampling.SamplingConfig
    prompt_len: int
    num_updates: int
    # a data x FSDP jax.sharding.Mesh (purejaxrl_opt.host.parallel.lm_mesh): the batch is split over both
    # axes inside the compiled steps; None = one device
    mesh: Any = None

    # ------------------------------------------------------------------ params
    @property
    def lora(self) -> bool:
        return self.model.lora_rank > 0

    @property
    def num_prompts(self) -> int:
        return self.algo.num_groups

    @property
    def num_completions(self) -> int:
        return self.algo.num_groups * self.algo.group_size

    def init(self, params: dict, key: jax.Array) -> tuple[LMState, Any]:
        """``(state, frozen)`` from the loaded ``params`` (in ``cfg.dtype``)."""
        # the reference in the compute dtype, as the policy is cast for each pass
        trained, frozen = lm_policy.init_trained(params, self.model, self.algo.beta > 0, self.cfg.jnp_dtype, key)
        return LMState(trained, self.optimizer(jnp.float32(0.0), 0.0).init(trained), jnp.int32(0)), frozen

    # ------------------------------------------------------------------ sampling (compiled)
    def sample(self, state: LMState, frozen, prompt_tokens, prompt_mask, key):
        """``G`` completions of each prompt ``[num_groups, P]``: ``(completions int32 [B, T],
        lengths int32 [B])``, group-major."""
        return _sample(self, state.trained, frozen, prompt_tokens, prompt_mask, key)

    # ------------------------------------------------------------------ the update (compiled)
    def update(self, state: LMState, frozen, batch: Batch, hparams, key, donate: bool = False):
        """One GRPO update on ``batch``: ``(state, metrics)``, metrics scalars.
        ``donate``: ``state``'s buffers are reused for the new state (it must not be read afterwards),
        so the state is not held twice at the step's peak."""
        return (_update_donated if donate else _update)(self, state, frozen, batch, hparams, key)

    def sequences(self, batch: Batch):
        """``(tokens [B, P + T], attention_mask [B, P + T], completion_mask bool [B, T])``."""
        return lm_policy.sequences(batch, self.algo.group_size)

    def truncated(self, batch: Batch) -> jnp.ndarray:
        """``[B]`` bool: completions cut at ``max_new_tokens`` without a stop token."""
        return lm_policy.truncated(batch, self.sampling.stop_ids)

    def advantages(self, batch: Batch):
        """``(advantages [B], rewards [B] with DAPO's overlong penalty, spread [num_groups] bool)``."""
        rewards = batch.rewards
        if self.algo.overlong_buffer > 0:
            rewards = rewards + overlong_penalty(batch.lengths.astype(jnp.float32), self.lm.max_new_tokens,
                                                 self.algo.overlong_buffer, self.algo.overlong_penalty)
        grouped = rewards.reshape(self.algo.num_groups, self.algo.group_size)
        return group_advantages(grouped, self.algo.scale_rewards).reshape(-1), rewards, has_spread(grouped)


def advantages_of(grpo: LMGRPO, batch: Batch) -> jnp.ndarray:
    """The group-relative advantages ``[B]`` of ``batch``'s rewards (:meth:`LMGRPO.advantages`)."""
    return grpo.advantages(batch)[0]


def _sample(grpo: LMGRPO, trained, frozen, prompt_tokens, prompt_mask, key):
    return lm_policy.sample_groups(grpo.policy_params(trained, frozen), grpo.cfg, grpo.sampling,
                                   grpo.algo.group_size, prompt_tokens, prompt_mask, key, grpo.mesh)


def _log_probs_in_micro_batches(grpo: LMGRPO, params, tokens, attention, completions, micro: int):
    """``completion_log_probs`` over ``[B, ...]`` one micro-batch a pass (no gradient): ``float32
    [B, T]``."""
    def one(chunk):
        return completion_log_probs(params, grpo.cfg, *chunk, grpo.prompt_len, grpo.lm.temperature)[0]

    return lm_policy.in_micro_batches(one, (tokens, attention, completions), micro, grpo.mesh)


def minibatch_grads(grpo: LMGRPO, trained, frozen, mb: dict, hparams, single_step: bool):
    """``((loss, grads), diagnostics)`` of one minibatch ``mb`` (``[minibatch, ...]`` leaves: tokens,
    attention, completions, advantages, mask, log_prob_old, log_prob_ref), accumulated over its
    micro-batches in a ``lax.scan``: the loss is :func:`policy_objective` with the minibatch's
    reduction, each micro-batch contributing its share (:func:`micro_reduce`), so loss and gradient
    are those of the whole minibatch in one pass. ``single_step``: ``pi_old`` is the current policy
    (``log_prob_old`` unused)."""
    algo = grpo.algo
    minibatch = mb["tokens"].shape[0]
    micro = grpo.lm.micro_batch_size or minibatch
    minibatch_tokens = mb["mask"].sum().astype(jnp.float32)

    def micro_loss(trained, chunk):
        params = grpo.policy_params(trained, frozen)
        log_prob, entropy = completion_log_probs(params, grpo.cfg, chunk["tokens"], chunk["attention"],
                                                 chunk["completions"], grpo.prompt_len, grpo.lm.temperature)
        if algo.ent_coef == 0:
            entropy = jax.lax.stop_gradient(entropy)
        old = jax.lax.stop_gradient(log_prob) if single_step else chunk["log_prob_old"]
        ref = jax.lax.stop_gradient(log_prob) if algo.beta == 0 else chunk["log_prob_ref"]
        reduce = micro_reduce(algo.reduction, chunk["mask"], minibatch, minibatch_tokens, grpo.lm.max_new_tokens)
        return policy_objective(log_prob, old, ref, entropy, chunk["advantages"], chunk["mask"], hparams,
                                algo.reduction, algo, reduce=reduce)

    loss_and_grads, diagnostics = lm_policy.accumulate_grads(micro_loss, trained, mb, micro, grpo.mesh)
    return loss_and_grads, jax.tree_util.tree_map(jnp.mean, diagnostics)


def _update(grpo: LMGRPO, state: LMState, frozen, batch: Batch, hparams, key):
    algo = grpo.algo
    total = grpo.num_completions
    minibatch = total // algo.num_minibatches
    micro = grpo.lm.micro_batch_size or minibatch
    single_step = algo.update_epochs * algo.num_minibatches == 1
    tokens, attention, completion_mask = grpo.sequences(batch)
    advantages, rewards, spread = grpo.advantages(batch)
    truncated = grpo.truncated(batch)
    loss_mask = completion_mask & ~truncated[:, None] if algo.mask_truncated_completions else completion_mask

    policy = grpo.policy_params(state.trained, frozen)
    nothing = jnp.zeros_like(completion_mask, jnp.float32)
    log_prob_old = nothing if single_step else _log_probs_in_micro_batches(
        grpo, policy, tokens, attention, batch.completions, micro)
    if algo.beta > 0:
        reference = frozen  # LoRA: the base, adapters off; full fine-tuning: the initial params
        log_prob_ref = _log_probs_in_micro_batches(grpo, reference, tokens, attention, batch.completions, micro)
    else:
        log_prob_ref = nothing
    data = {"tokens": tokens, "attention": attention, "completions": batch.completions,
            "advantages": jnp.broadcast_to(advantages[:, None], completion_mask.shape), "mask": loss_mask,
            "log_prob_old": log_prob_old, "log_prob_ref": log_prob_ref}
    data = lm_policy.constrain_batch(data, grpo.mesh)

    def grad_fn(trained, mb):
        loss_and_grads, diagnostics = minibatch_grads(grpo, trained, frozen, mb, hparams, single_step)
        return loss_and_grads[1], diagnostics

    learning_rate = grpo.learning_rate(hparams["lr"], state.update_idx)
    optimizer = grpo.optimizer(learning_rate, hparams["max_grad_norm"])
    trained, opt_state, diagnostics = minibatch_epochs(
        grad_fn, optimizer, state.trained, state.opt_state, data, total, algo.num_minibatches,
        jax.random.split(key, algo.update_epochs))
    lengths = batch.lengths.astype(jnp.float32)
    metrics = {name: diagnostics[name].mean() for name in DIAGNOSTICS}
    metrics.update(
        reward=batch.rewards.mean(),
        reward_std=rewards.reshape(algo.num_groups, algo.group_size).std(axis=1).mean(),
        zero_spread_groups=jnp.sum(~spread).astype(jnp.float32),
        completion_length=lengths.mean(), truncated_fraction=truncated.mean(),
        learning_rate=learning_rate)
    trained, opt_state = lm_policy.constrain_params((trained, opt_state), grpo.mesh)
    return LMState(trained, opt_state, state.update_idx + 1), metrics


# compiled once per LMGRPO (a hashable, static description of the shapes and options)
_update_donated = jax.jit(_update, static_argnums=0, donate_argnums=1)
_update = jax.jit(_update, static_argnums=0)
_sample = jax.jit(_sample, static_argnums=0)
