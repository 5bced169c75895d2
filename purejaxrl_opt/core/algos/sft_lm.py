"""Supervised warm start of a pretrained causal language model, the compiled step: teacher-forced
cross-entropy on reference completions of a task's prompts (the run: :mod:`purejaxrl_opt.host.lm.sft`).

A batch is the RL trainers' :class:`purejaxrl_opt.core.stages.lm_policy.Batch` with one completion per
prompt (``G = 1``): ``b`` prompts left-padded to ``P`` tokens and their reference completions (the answer's
tokens and the stop token, padded to ``T``). The loss is the mean over the batch's completion tokens of
``-log pi(token)`` at temperature 1, accumulated over micro-batches (``lm.micro_batch_size``) so the
gradient is the batch's exactly; one AdamW step (the RL trainers' optimizer, gradient norm clipped at
1.0, TRL's default) per batch. The trained arrays are those of the RL trainers: a float32 master copy,
or LoRA adapters on the frozen base (merged for evaluation and saving), so the warm-started model is
what ``init_from`` gives GRPO or PPO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from purejaxrl_opt.config.lm import LMTrainConfig, ModelConfig
from purejaxrl_opt.core.models import causal_lm, sampling
from purejaxrl_opt.core.stages import lm_policy
from purejaxrl_opt.core.stages.lm_policy import Batch, completion_log_probs, micro_reduce

MAX_GRAD_NORM = 1.0


@struct.dataclass
class SFTState:
    trained: Any  # LoRA adapters, or the full params (float32)
    opt_state: Any
    step: jnp.ndarray  # int32 []


@dataclass(frozen=True)
class LMSFT(lm_policy.LMTrainer):
    """The compiled SFT step for fixed shapes (``P`` prompt tokens, ``T`` completion tokens,
    ``sft.batch_size`` rows). ``frozen``: LoRA's base, else None."""

    algo: Any  # an SFTConfig (core/algos/sft.py): steps, batch_size, lr, schedule, warmup_steps
    lm: LMTrainConfig
    model: ModelConfig
    cfg: causal_lm.LMConfig
    sampling: sampling.SamplingConfig  # of the held-out evaluations
    prompt_len: int
    num_updates: int  # SFT steps
    mesh: Any = None

    def init(self, params: dict, key: jax.Array) -> tuple[SFTState, Any]:
        """``(state, frozen)`` from the loaded ``params``."""
        trained, frozen = lm_policy.init_trained(params, self.model, False, self.cfg.jnp_dtype, key)
        return SFTState(trained, self.optimizer(0.0, MAX_GRAD_NORM).init(trained), jnp.int32(0)), frozen

    def learning_rate(self, lr, step):
        schedule = self.algo.learning_rate()
        return schedule(step) if callable(schedule) else jnp.float32(schedule)

    def step(self, state: SFTState, frozen, batch: Batch, donate: bool = False):
        """One AdamW step on ``batch``: ``(state, {loss, learning_rate})``; ``loss`` is the batch's mean
        cross-entropy per completion token before the step."""
        return (_step_donated if donate else _step)(self, state, frozen, batch)

    def loss(self, trained, frozen, batch: Batch):
        """The batch's mean cross-entropy per completion token (a scalar), one pass."""
        tokens, attention, mask = lm_policy.sequences(batch, 1)
        log_prob, _ = completion_log_probs(self.policy_params(trained, frozen), self.cfg, tokens, attention,
                                           batch.completions, self.prompt_len, 1.0)
        return -jnp.where(mask, log_prob, 0.0).sum() / jnp.maximum(mask.sum(), 1)


def _step(sft: LMSFT, state: SFTState, frozen, batch: Batch):
    tokens, attention, mask = lm_policy.sequences(batch, 1)
    size = tokens.shape[0]
    micro = sft.lm.micro_batch_size or size
    total_tokens = mask.sum().astype(jnp.float32)
    data = lm_policy.constrain_batch({"tokens": tokens, "attention": attention, "completions": batch.completions,
                                      "mask": mask}, sft.mesh)

    def micro_loss(trained, chunk):
        log_prob, _ = completion_log_probs(sft.policy_params(trained, frozen), sft.cfg, chunk["tokens"],
                                           chunk["attention"], chunk["completions"], sft.prompt_len, 1.0)
        share = micro_reduce("token", chunk["mask"], size, total_tokens, batch.completions.shape[1])
        loss = share(-log_prob)
        return loss, loss

    (loss, grads), _ = lm_policy.accumulate_grads(micro_loss, state.trained, data, micro, sft.mesh)
    rate = sft.learning_rate(sft.algo.lr, state.step)
    optimizer = sft.optimizer(rate, MAX_GRAD_NORM)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.trained)
    trained = jax.tree_util.tree_map(lambda p, u: (p + u).astype(p.dtype), state.trained, updates)
    trained, opt_state = lm_policy.constrain_params((trained, opt_state), sft.mesh)
    return SFTState(trained, opt_state, state.step + 1), {"loss": loss, "learning_rate": rate}


_step_donated = jax.jit(_step, static_argnums=0, donate_argnums=1)
_step = jax.jit(_step, static_argnums=0)
