"""PPO on a pretrained causal LM with a value model of the same size (TRL's ``PPOTrainer`` recipe): the
compiled halves of a split step, as :mod:`purejaxrl_opt.core.algos.grpo_lm` (generation, host rewards, one
compiled update) and with its shared pieces (:mod:`purejaxrl_opt.core.stages.lm_policy`).

Models: the policy (a float32 master copy of the LM, or LoRA adapters on its frozen base), the *value
model* -- the LM's body (every param but the LM head) with a scalar head ``v = h . w + c`` on the
final-normed hidden state, its own float32 params initialised from the pretrained body with ``w = 0,
c = 0`` -- and, with ``kl_coef > 0``, the reference policy (a frozen copy of the initial params; under
LoRA the base with the adapters off). Policy and value model are trained by one AdamW over both
(TRL's ``PolicyAndValueWrapper``): each has its own moments, the gradient norm is clipped jointly.

One update on ``B = num_prompts x G`` completions of at most ``T`` tokens:

1. (no gradient, one micro-batch a pass) the old policy's per-token log-probs (tempered, as GRPO's),
   the reference's, and the value of each completion token's state ``V_t = v(h_{P-1+t})`` (the state
   before token ``t``, TRL's indexing);
2. per-token rewards ``r_t = -kl_coef (log pi_old - log pi_ref)_t``, plus the completion's score at its
   last token (``t = length - 1``); GAE over the completion tokens (``gamma``, ``gae_lambda``; the
   completion ends after its last token: no bootstrap), returns ``= A + V``; advantages whitened over
   the batch's completion tokens;
3. ``update_epochs x num_minibatches`` AdamW steps on :func:`purejaxrl_opt.core.stages.losses.ppo_objective`
   (clipped surrogate, clipped value loss, entropy bonus), every term a mean over the minibatch's
   completion tokens, gradients accumulated over micro-batches (each contributing its share of the
   token mean, so the sum is the minibatch's exactly).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from purejaxrl_opt.core.stages import lm_policy, losses
from purejaxrl_opt.config.lm import LMTrainConfig, ModelConfig, PPOLMConfig
from purejaxrl_opt.core.stages.lm_policy import Batch, completion_log_probs, micro_reduce
from purejaxrl_opt.core.models import causal_lm, sampling
from purejaxrl_opt.core.stages.optim import minibatch_epochs
from purejaxrl_opt.core.stages.rollout import gae

DIAGNOSTICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac")


@struct.dataclass
class PPOLMState:
    trained: Any  # {"policy": LoRA adapters or the full params (float32), "value": value model (float32)}
    opt_state: Any
    update_idx: jnp.ndarray  # int32 []


def init_value_model(params: dict) -> dict:
    """The value model from the LM's ``params``: ``{"body": every param but lm_head, float32,
    "head": {"w": zeros [d], "c": 0.}}``."""
    # a copy even of float32 params (astype would share the policy's buffers, which an update donates)
    body = {k: jax.tree_util.tree_map(lambda x: jnp.array(x, jnp.float32, copy=True), v)
            for k, v in params.items() if k != "lm_head"}
    hidden = params["final_norm"].shape[-1]
    return {"body": body, "head": {"w": jnp.zeros((hidden,), jnp.float32), "c": jnp.zeros((), jnp.float32)}}


def token_values(value_model: dict, cfg: causal_lm.LMConfig, tokens, attention_mask, prompt_len: int,
                 num_new: int) -> jnp.ndarray:
    """``V_t float32 [b, T]``: the value head on the hidden state before completion token ``t`` (column
    ``P - 1 + t`` of ``tokens [b, P + T]``), the body in ``cfg.dtype``."""
    body = lm_policy.cast(value_model["body"], cfg.jnp_dtype)
    hidden = causal_lm.hidden_states(body, cfg, tokens, attention_mask)[:, prompt_len - 1:prompt_len - 1 + num_new]
    head = value_model["head"]
    return jnp.einsum("btd,d->bt", hidden, head["w"].astype(hidden.dtype),
                      preferred_element_type=jnp.float32) + head["c"]


def token_rewards(scores, lengths, mask, log_prob_old, log_prob_ref, kl_coef):
    """Per-token rewards ``[B, T]``: ``-kl_coef (log pi_old - log pi_ref)`` on completion tokens
    (``mask``), plus ``scores [B]`` at each completion's last token (``lengths [B] - 1``)."""
    penalty = jnp.where(mask, -kl_coef * (log_prob_old - log_prob_ref), 0.0)
    last = jnp.arange(mask.shape[1])[None] == (lengths[:, None] - 1)
    return penalty + jnp.where(last, scores[:, None], 0.0)


def token_advantages(rewards, values, mask, gamma, gae_lambda):
    """GAE over completion tokens: ``rewards, values [B, T]``, ``mask [B, T]`` (a prefix of each row)
    -> ``(advantages, returns) [B, T]``, 0 after a completion's end; no bootstrap past the last token."""
    values = jnp.where(mask, values, 0.0)
    next_values = jnp.pad(values[:, 1:], [(0, 0), (0, 1)])
    end = ~jnp.pad(mask[:, 1:], [(0, 0), (0, 1)])  # the last token of a completion, or padding
    advantages, returns = gae(rewards.T, values.T, next_values.T, end.T, end.T, gamma, gae_lambda)
    return jnp.where(mask, advantages.T, 0.0), jnp.where(mask, returns.T, 0.0)


@dataclass(frozen=True)
class LMPPO(lm_policy.LMTrainer):
    """The compiled pieces of PPO on a causal LM for fixed shapes (prompt length ``P``, ``T`` new tokens,
    ``num_prompts x G`` completions). ``frozen``: the base under LoRA, the reference copy in full
    fine-tuning with ``kl_coef > 0``, else None (an argument, never a closure constant)."""

    algo: PPOLMConfig
    lm: LMTrainConfig
    model: ModelConfig
    cfg: causal_lm.LMConfig
    sampling: sampling.SamplingConfig
    prompt_len: int
    num_updates: int
    mesh: Any = None  # as LMGRPO.mesh

    def __post_init__(self):
        self.algo.validate(self.lm)

    @property
    def num_prompts(self) -> int:
        return self.algo.num_prompts

    @property
    def num_completions(self) -> int:
        return self.algo.num_prompts * self.algo.group_size

    def current_policy(self, trained, frozen) -> dict:
        return self.policy_params(trained["policy"], frozen)

    def init(self, params: dict, key: jax.Array) -> tuple[PPOLMState, Any]:
        """``(state, frozen)`` from the loaded ``params``."""
        policy, frozen = lm_policy.init_trained(params, self.model, self.algo.kl_coef > 0, self.cfg.jnp_dtype, key)
        trained = {"policy": policy, "value": init_value_model(params)}
        return PPOLMState(trained, self.optimizer(0.0, 0.0).init(trained), jnp.int32(0)), frozen

    def sample(self, state: PPOLMState, frozen, prompt_tokens, prompt_mask, key):
        """``G`` completions of each prompt ``[num_prompts, P]``: ``(completions int32 [B, T], lengths
        int32 [B])``."""
        return _sample(self, state.trained["policy"], frozen, prompt_tokens, prompt_mask, key)

    def update(self, state: PPOLMState, frozen, batch: Batch, hparams, key, donate: bool = False):
        """One PPO update on ``batch`` (``rewards``: each completion's score): ``(state, metrics)``.
        ``donate``: ``state``'s buffers are reused for the new state (it must not be read afterwards),
        so the state is not held twice at the step's peak."""
        return (_update_donated if donate else _update)(self, state, frozen, batch, hparams, key)

    def log_probs(self, params, tokens, attention, completions):
        return completion_log_probs(params, self.cfg, tokens, attention, completions, self.prompt_len,
                                    self.lm.temperature)


def _sample(ppo: LMPPO, policy, frozen, prompt_tokens, prompt_mask, key):
    return lm_policy.sample_groups(ppo.policy_params(policy, frozen), ppo.cfg, ppo.sampling, ppo.algo.group_size,
                                   prompt_tokens, prompt_mask, key, ppo.mesh)


def minibatch_grads(ppo: LMPPO, trained, frozen, mb: dict, hparams):
    """``((loss, grads), diagnostics)`` of one minibatch ``mb`` (``[minibatch, ...]`` leaves: tokens,
    attention, completions, mask, advantages, returns, log_prob_old, values_old), accumulated over its
    micro-batches: :func:`losses.ppo_objective` with every term a token mean over the minibatch."""
    minibatch = mb["tokens"].shape[0]
    micro = ppo.lm.micro_batch_size or minibatch
    minibatch_tokens = mb["mask"].sum().astype(jnp.float32)
    num_new = ppo.lm.max_new_tokens

    def micro_loss(trained, chunk):
        params = ppo.policy_params(trained["policy"], frozen)
        log_prob, entropy = ppo.log_probs(params, chunk["tokens"], chunk["attention"], chunk["completions"])
        if ppo.algo.ent_coef == 0:
            entropy = jax.lax.stop_gradient(entropy)
        values = token_values(trained["value"], ppo.cfg, chunk["tokens"], chunk["attention"], ppo.prompt_len,
                              num_new)
        share = micro_reduce("token", chunk["mask"], minibatch, minibatch_tokens, num_new)
        return losses.ppo_objective(log_prob, chunk["log_prob_old"], chunk["advantages"], values,
                                    chunk["values_old"], chunk["returns"], entropy, hparams,
                                    ppo.algo.clip_value, share)

    (loss, grads), diagnostics = lm_policy.accumulate_grads(micro_loss, trained, mb, micro, ppo.mesh)
    # each micro-batch's diagnostics are its share of the minibatch's token mean
    return (loss, grads), jax.tree_util.tree_map(jnp.sum, diagnostics)


def _update(ppo: LMPPO, state: PPOLMState, frozen, batch: Batch, hparams, key):
    algo = ppo.algo
    total = ppo.num_completions
    micro = ppo.lm.micro_batch_size or total // algo.num_minibatches
    tokens, attention, mask = lm_policy.sequences(batch, algo.group_size)
    num_new = mask.shape[1]
    arrays = (tokens, attention, batch.completions)

    policy = ppo.policy_params(state.trained["policy"], frozen)
    log_prob_old = lm_policy.in_micro_batches(lambda c: ppo.log_probs(policy, *c)[0], arrays, micro, ppo.mesh)
    if algo.kl_coef > 0:
        log_prob_ref = lm_policy.in_micro_batches(lambda c: ppo.log_probs(frozen, *c)[0], arrays, micro,
                                                  ppo.mesh)
    else:
        log_prob_ref = log_prob_old
    values_old = lm_policy.in_micro_batches(
        lambda c: token_values(state.trained["value"], ppo.cfg, c[0], c[1], ppo.prompt_len, num_new),
        arrays, micro, ppo.mesh)
    values_old = jnp.where(mask, values_old, 0.0)
    rewards = token_rewards(batch.rewards, batch.lengths, mask, log_prob_old, log_prob_ref, hparams["kl_coef"])
    advantages, returns = token_advantages(rewards, values_old, mask, hparams["gamma"], hparams["gae_lambda"])
    if algo.whiten_advantages:
        advantages = losses.normalize(advantages, mask=mask)
    data = {"tokens": tokens, "attention": attention, "completions": batch.completions, "mask": mask,
            "advantages": advantages, "returns": returns, "log_prob_old": log_prob_old, "values_old": values_old}
    data = lm_policy.constrain_batch(data, ppo.mesh)

    def grad_fn(trained, mb):
        (_, grads), diagnostics = minibatch_grads(ppo, trained, frozen, mb, hparams)
        return grads, diagnostics

    learning_rate = ppo.learning_rate(hparams["lr"], state.update_idx)
    optimizer = ppo.optimizer(learning_rate, hparams["max_grad_norm"])
    trained, opt_state, diagnostics = minibatch_epochs(
        grad_fn, optimizer, state.trained, state.opt_state, data, total, algo.num_minibatches,
        jax.random.split(key, algo.update_epochs))
    tokens_count = jnp.maximum(mask.sum(), 1)
    metrics = {name: diagnostics[name].mean() for name in DIAGNOSTICS}
    metrics.update(
        reward=batch.rewards.mean(), value_mean=values_old.sum() / tokens_count,
        return_mean=returns.sum() / tokens_count,
        kl_ref=jnp.where(mask, log_prob_old - log_prob_ref, 0.0).sum() / tokens_count,
        completion_length=batch.lengths.astype(jnp.float32).mean(), learning_rate=learning_rate)
    trained, opt_state = lm_policy.constrain_params((trained, opt_state), ppo.mesh)
    return PPOLMState(trained, opt_state, state.update_idx + 1), metrics


_update_donated = jax.jit(_update, static_argnums=0, donate_argnums=1)
_update = jax.jit(_update, static_argnums=0)
_sample = jax.jit(_sample, static_argnums=0)
