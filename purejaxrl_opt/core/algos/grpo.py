"""GRPO (Shao et al. 2024, DeepSeekMath) on environments: no critic, group-relative advantages.

Each update resets ``num_groups`` start states and rolls ``group_size`` complete episodes ``o_i``
from each (same-start grouping: the episodes of a group share their reset key, as GRPO's answers
share their question; ``grouping: unrelated`` gives every episode its own start). An episode's
outcome reward ``R_i`` is its (optionally discounted) return; its advantage is the z-score of that
outcome inside its group, ``A_i = (R_i - mean(R)) / std(R)``, the same for all of its steps
(:func:`group_advantages`; per-step rewards with ``process_supervision``). The policy then maximises

    J(theta) = reduce_{i,t} [ min(rho_it A_i, clip(rho_it, 1-eps, 1+eps_high) A_i)
                              - beta k3(pi_theta || pi_ref)_it + ent_coef H_it ],
    rho_it = pi_theta(o_it) / pi_old(o_it)

over ``update_epochs x num_minibatches`` passes (:func:`policy_objective`), where minibatches hold
whole episodes and steps after an episode's end count nowhere. Variants, each a config key
(GRPOConfig below), with TRL's GRPOTrainer names where it has one:

* ``reduce``: ``loss_norm`` / ``loss_type`` (grpo: per-episode mean then mean, bnpo/dapo: token
  mean, dr_grpo: a constant), ``scale_rewards`` (group / batch / none);
* ``importance_sampling_level=sequence`` (GSPO): ``rho_it = exp(mean_t log(pi_theta/pi_old))``;
* ``delta``: two-sided clipping, ``rho`` capped at ``delta`` in the unclipped term;
* ``kl_importance_weight``: ``k3`` weighted by ``pi_theta/pi_old`` (:func:`losses.k3_kl`);
* DAPO: ``epsilon_high`` (clip-higher), ``dynamic_sampling_oversample`` (keep groups with reward
  spread, :func:`select_groups`), ``overlong_buffer`` (soft length penalty, :func:`overlong_penalty`)
  and, with TRL, ``mask_truncated_completions`` (token envs).

``pi_ref`` is frozen: its parameters *and* the observation statistics it is scored with
(``env.normalize_obs``) are snapshotted together, at the start and every ``ref_update_every``
updates, so the KL pulls toward a fixed policy of the raw observation.

Env-step budget: ``total_timesteps`` counts real (unmasked) episode steps, as PPO's and TRPO's count
env steps; every rolled episode counts, also those dynamic sampling drops. A lane runs updates
while its consumed steps are below ``total_timesteps`` (a ``while_loop`` over updates,
:func:`purejaxrl_opt.core.algos.base.run_updates` with ``lane_active``;
:class:`purejaxrl_opt.core.stages.budget.StepBudget`), so it uses at least all of the
budget and at most one update's steps more. The metrics buffer has ``max_updates`` rows (default
``GRPOConfig.num_updates``: every episode one step long, the most updates a run can ever need); rows
of updates a lane did not run stay NaN.

Per-step policies (MLP/CNN on gymnax envs) roll with :func:`rollout.group_rollout_until_done`, which
stops once every episode has ended, and compute the loss over time blocks of ``loss_block_steps``
steps covering only the first ``L`` (longest episode) steps (:mod:`purejaxrl_opt.core.stages.episode_losses`):
neither the rollout nor the update pays for the padding up to the limit ``T``. Token envs (a
transformer re-scoring whole answers in one causal pass), recurrent policies and the sequence-level
ratio (which needs a whole episode before any of its steps) keep the full-length path:
:func:`rollout.group_rollout` and :func:`make_loss_fn`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import struct
from jax.flatten_util import ravel_pytree

from purejaxrl_opt import envs
from purejaxrl_opt.core.stages import rollout
from purejaxrl_opt.core.algos.base import Algorithm
from purejaxrl_opt.config.schema import (AlgoConfig, RunConfig, _check, non_negative, one_of, positive,
                                         unit_interval)
from purejaxrl_opt.core.models.distributions import for_spec
from purejaxrl_opt.envs import EnvSpec
from purejaxrl_opt.core.stages.episode_losses import (EpisodeBuffers, block_log_probs, buffer_bytes,
                                          make_block_grad_fn)
from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.config import implementations
# the objective and the advantages live one layer down, shared with the language-model trainer
from purejaxrl_opt.core.stages.grpo_objective import ADV_EPS, group_advantages, overlong_penalty, policy_objective  # noqa: F401
from purejaxrl_opt.core.stages.grpo_objective import has_spread as _has_spread
from purejaxrl_opt.core.stages.budget import StepBudget, max_updates as budget_max_updates
from purejaxrl_opt.core.stages.optim import adam, minibatch_epochs
from purejaxrl_opt.core.models.policies import Policy, as_policy, make_policy
from purejaxrl_opt.core.models.pretrained import load_initial_actor
from purejaxrl_opt.envs.tokens import EOS, reward_metric_names, reward_metrics

METRICS = ("return_mean", "episode_length", "episodes", "kl_ref", "clip_frac", "approx_kl",
           "zero_spread_groups", "group_return_std", "entropy", "policy_loss", "learning_rate")


@dataclass(frozen=True)
class GRPOConfig(AlgoConfig):
    """``algo=grpo`` on environments (and, with the language-model values of
    conf/language_model/defaults.yaml, on ``env=lm/<task>``): no critic; advantages are z-scores of
    episode outcomes inside groups of complete episodes. Env-specific values live in
    conf/tuned/grpo_<env>.yaml."""

    name: str = "grpo"
    num_groups: int = 8  # start states (groups) per update
    group_size: int = 8  # complete episodes per group (G); >= 2
    # same_start: a group's episodes share their reset key (identical initial state); unrelated: own keys
    grouping: str = "same_start"
    max_episode_steps: int = 0  # rollout length T; 0 = the env's own episode limit
    # outcome reward = sum_t outcome_discount^t r_t over the episode; 1 = undiscounted return (sweepable)
    outcome_discount: float = 1.0
    # per-step rewards normalised over the group, advantage = sum of future normalised rewards
    process_supervision: bool = False
    # divide centred outcomes by the std of the group | the batch | none (Dr. GRPO)
    scale_rewards: str = "group"
    loss_norm: str = "sequence"  # sequence (1/|o_i|, the paper) | token (DAPO) | constant (Dr. GRPO)
    # TRL GRPOTrainer's name for the reduction; "" = loss_norm as given. Each maps onto a loss_norm
    # (LOSS_TYPES): grpo -> sequence, bnpo -> token, dr_grpo -> constant, dapo -> token. TRL's dapo
    # and bnpo differ only in normalising by the tokens of the whole accumulated (multi-process)
    # batch vs the local one; here an optimizer step is one minibatch on one device, so they coincide.
    # Rewards scaling stays scale_rewards' (TRL's too: dr_grpo does not set scale_rewards=none)
    loss_type: str = ""
    # token: per-token ratio pi/pi_old (GRPO); sequence: GSPO's length-normalised sequence ratio
    # exp(mean_t log(pi/pi_old)), one per episode, shared by its every token (whole-episode loss path,
    # also on gymnax envs)
    importance_sampling_level: str = "token"
    # clip range: ratio kept within [1 - epsilon, 1 + epsilon_high] (sweepable)
    epsilon: float = 0.2
    # upper clip; 0 = symmetric (epsilon), > epsilon = DAPO clip-higher (sweepable)
    epsilon_high: float = 0.0
    # two-sided clipping (INTELLECT-2, TRL's delta): the unclipped ratio is capped at delta, bounding
    # the loss of negative-advantage tokens whose ratio grew; 0 = off, else > 1 + max(epsilon, epsilon_high)
    delta: float = 0.0
    beta: float = 0.04  # weight of the k3 KL penalty to pi_ref (sweepable)
    # weight k3 by pi_theta/pi_old (losses.k3_kl): its mean is then KL(pi_theta || pi_ref) in every
    # epoch, not only while pi_theta == pi_old. false = DeepSeekMath's and TRL's unweighted k3
    kl_importance_weight: bool = False
    # token envs: answers that reach the length limit without <eos> add nothing to the loss (they
    # still count in their group's reward statistics, as in TRL)
    mask_truncated_completions: bool = False
    # DAPO dynamic sampling: roll num_groups * this many groups, train on (up to) num_groups whose
    # rewards have spread, fill any remaining slots with zero-spread groups (zero advantage). Metrics
    # kept_fraction / spread_fraction. Every rolled step counts in total_timesteps. 1 = off
    dynamic_sampling_oversample: int = 1
    # DAPO overlong soft punishment (token envs): an answer of length |o| > T - overlong_buffer (T:
    # the answer limit) gets reward overlong_penalty * (T - overlong_buffer - |o|) / overlong_buffer
    # (down to -overlong_penalty at T) on its last token; 0 = off
    overlong_buffer: int = 0
    overlong_penalty: float = 1.0
    # refresh pi_ref <- pi_theta every this many updates; 0 = pi_ref stays the initial policy
    ref_update_every: int = 0
    # passes over each batch of episodes (1 x 1 minibatch, one step per batch as in the paper, learns
    # CartPole ~10x slower)
    update_epochs: int = 4
    num_minibatches: int = 4  # minibatches per pass (whole episodes); must divide num_groups * group_size
    lr: float = 1e-3  # Adam learning rate (sweepable)
    # linear decay of lr to 0 over training (by updates or budget used, whichever is further)
    anneal_lr: bool = False
    ent_coef: float = 0.0  # entropy bonus coefficient (sweepable)
    max_grad_norm: float = 0.5  # global gradient-norm clip (sweepable)
    # refuse (before compiling) configs whose episode buffers would need more memory than this
    max_memory_gb: float = 4.0
    # rows of the metrics buffer, the most updates a lane may run (a lane runs updates until it has
    # consumed total_timesteps real, unmasked, env steps: at most one update more). 0 =
    # ceil(total_timesteps / (num_groups * group_size)): never the bound, as no episode is shorter than
    # one step (GRPOConfig.num_updates).
    max_updates: int = 0
    # updates between two tests of the update loop's budget condition (0 = auto: 1 on CPU and TPU, 16
    # on GPU, where every test of a while_loop reads its predicate back to the host and waits). The
    # numbers are the same for every value; k > 1 computes up to k - 1 masked updates past the budget
    check_every: int = 0
    # time block of the block-wise loss (gymnax envs): gradients are summed over ceil(L / K) blocks of
    # K steps, L = the batch's longest episode (rollouts also stop once every episode has ended), so the
    # update costs ~L steps, not the limit T
    loss_block_steps: int = 16

    SWEEPABLE: ClassVar[tuple[str, ...]] = (
        "epsilon", "epsilon_high", "beta", "lr", "ent_coef", "max_grad_norm", "outcome_discount")
    SCALES: ClassVar[tuple[str, ...]] = ("group", "batch", "none")
    NORMS: ClassVar[tuple[str, ...]] = ("sequence", "token", "constant")
    GROUPINGS: ClassVar[tuple[str, ...]] = ("same_start", "unrelated")
    LOSS_TYPES: ClassVar[dict[str, str]] = {"grpo": "sequence", "bnpo": "token", "dr_grpo": "constant",
                                            "dapo": "token"}
    IS_LEVELS: ClassVar[tuple[str, ...]] = ("token", "sequence")

    @property
    def reduction(self) -> str:
        """The loss reduction in force: ``loss_type``'s ``loss_norm`` when set, else ``loss_norm``."""
        return self.LOSS_TYPES[self.loss_type] if self.loss_type else self.loss_norm

    @property
    def num_sampled_groups(self) -> int:
        """Groups rolled per update: ``num_groups * dynamic_sampling_oversample``."""
        return self.num_groups * self.dynamic_sampling_oversample

    def batch_env_steps(self) -> int:
        """Worst case of one update when ``max_episode_steps`` is set (else per step of the limit).
        Not GRPO's update count: a lane runs updates until it has consumed ``total_timesteps`` real
        steps (:meth:`num_updates` only sizes the metrics buffer)."""
        return self.num_groups * self.group_size * max(self.max_episode_steps, 1)

    def rollout_length(self, episode_limit: int) -> int:
        """``T``: ``max_episode_steps``, else the env's own episode limit."""
        length = self.max_episode_steps or episode_limit
        _check(length > 0, f"algo.max_episode_steps", self.max_episode_steps,
               "> 0 on an env without an episode limit (GRPO rolls whole episodes without auto-reset)")
        return length

    def num_updates(self, total_timesteps: int, episode_limit: int = 0) -> int:
        """Rows of the metrics buffer: ``max_updates``, else the most updates a lane can run before
        its budget of real env steps is spent, every episode being at least one step long
        (``ceil(total_timesteps / (num_groups * group_size))``). A lane stops at its budget, so the
        rows it does not use cost only memory and stay NaN."""
        self.rollout_length(episode_limit)  # an env without a limit needs max_episode_steps
        return self.max_updates or budget_max_updates(total_timesteps, self.num_groups * self.group_size)

    def validate(self, prefix: str, run: "RunConfig") -> None:
        positive(f"{prefix}.num_groups", self.num_groups)
        _check(self.group_size >= 2, f"{prefix}.group_size", self.group_size,
               ">= 2 (a z-score needs at least two outputs per group)")
        one_of(f"{prefix}.grouping", self.grouping, self.GROUPINGS)
        non_negative(f"{prefix}.max_episode_steps", self.max_episode_steps)
        unit_interval(f"{prefix}.outcome_discount", self.outcome_discount)
        one_of(f"{prefix}.scale_rewards", self.scale_rewards, self.SCALES)
        one_of(f"{prefix}.loss_norm", self.loss_norm, self.NORMS)
        _check(self.loss_type in ("",) + tuple(self.LOSS_TYPES), f"{prefix}.loss_type", self.loss_type,
               f"'' (use loss_norm) or one of {list(self.LOSS_TYPES)}")
        if self.loss_type:
            mapped = self.LOSS_TYPES[self.loss_type]
            _check(self.loss_norm in ("sequence", mapped), f"{prefix}.loss_norm", self.loss_norm,
                   f"left at its default or {mapped!r} with {prefix}.loss_type={self.loss_type} (which "
                   f"means loss_norm={mapped}); set one of the two keys")
        one_of(f"{prefix}.importance_sampling_level", self.importance_sampling_level, self.IS_LEVELS)
        positive(f"{prefix}.epsilon", self.epsilon)
        _check(self.epsilon_high == 0 or self.epsilon_high >= self.epsilon, f"{prefix}.epsilon_high",
               self.epsilon_high, f"0 (symmetric) or >= epsilon = {self.epsilon}")
        upper = 1 + max(self.epsilon, self.epsilon_high)
        _check(self.delta == 0 or self.delta > upper, f"{prefix}.delta", self.delta,
               f"0 (off) or > 1 + max(epsilon, epsilon_high) = {upper:g} (two-sided clipping caps the "
               "ratio above the clip range)")
        _check(self.dynamic_sampling_oversample >= 1, f"{prefix}.dynamic_sampling_oversample",
               self.dynamic_sampling_oversample, "an int >= 1 (1 = no dynamic sampling)")
        non_negative(f"{prefix}.overlong_buffer", self.overlong_buffer)
        non_negative(f"{prefix}.overlong_penalty", self.overlong_penalty)
        from purejaxrl_opt.envs.registry import ids, split_id

        # a language-model task (env=lm/<task>, purejaxrl_opt/host/lm/) has answers as token envs do
        token_env = run.env.id.startswith("lm/") or split_id(run.env.id)[0] == "tokens"
        for key, on in (("mask_truncated_completions", self.mask_truncated_completions),
                        ("overlong_buffer", self.overlong_buffer > 0)):
            _check(not on or token_env, f"{prefix}.{key}", getattr(self, key),
                   f"off on {run.env.id}: it concerns answers of a token env ({list(ids('tokens'))} "
                   "or a user task)")
        non_negative(f"{prefix}.beta", self.beta)
        non_negative(f"{prefix}.ref_update_every", self.ref_update_every)
        positive(f"{prefix}.update_epochs", self.update_epochs)
        positive(f"{prefix}.num_minibatches", self.num_minibatches)
        _check(self.num_groups * self.group_size % self.num_minibatches == 0,
               f"{prefix}.num_minibatches", self.num_minibatches,
               f"a divisor of num_groups * group_size = {self.num_groups * self.group_size} "
               "(minibatches keep whole trajectories)")
        positive(f"{prefix}.lr", self.lr)
        non_negative(f"{prefix}.ent_coef", self.ent_coef)
        positive(f"{prefix}.max_grad_norm", self.max_grad_norm)
        positive(f"{prefix}.max_memory_gb", self.max_memory_gb)
        non_negative(f"{prefix}.max_updates", self.max_updates)
        non_negative(f"{prefix}.check_every", self.check_every)
        positive(f"{prefix}.loss_block_steps", self.loss_block_steps)


CONFIG = GRPOConfig  # this algorithm's config (config.schema.ALGORITHMS)

# with dynamic sampling: the share of the num_groups training groups that carry signal (reward
# spread), and of the rolled groups that had spread
DYNAMIC_SAMPLING_METRICS = ("kept_fraction", "spread_fraction")
DIAGNOSTICS = ("policy_loss", "kl_ref", "entropy", "approx_kl", "clip_frac")



@struct.dataclass
class GRPOState:
    params: dict  # {"actor": ...}: no critic
    ref_params: Any  # actor params of pi_ref
    opt_state: Any
    obs_norm: envs.ObsNormState | None
    env_steps: jnp.ndarray  # uint32: unmasked env steps consumed by this lane (for the budget)
    key: jax.Array
    # the observation statistics pi_ref is scored with, frozen with ref_params (None without
    # env.normalize_obs)
    ref_obs_norm: envs.ObsNormState | None = None


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


def compute_advantages(cfg: GRPOConfig, rewards: jnp.ndarray, mask: jnp.ndarray, hparams,
                       num_groups: int | None = None):
    """Advantages ``[B, T]``, outcome rewards ``[B]`` and zero-spread group count, episodes ``[B, T]``
    in ``num_groups`` (default ``cfg.num_groups``) groups of ``cfg.group_size``."""
    advantages, outcomes, spread = group_signal(cfg, rewards, mask, hparams, num_groups)
    return advantages, outcomes, jnp.sum(~spread).astype(jnp.float32)


def group_signal(cfg: GRPOConfig, rewards: jnp.ndarray, mask: jnp.ndarray, hparams,
                 num_groups: int | None = None):
    """:func:`compute_advantages` with the per-group spread ``[num_groups]`` bool in place of its
    count. With ``overlong_buffer``, :func:`overlong_penalty` is added to each episode's last reward
    (the limit is ``T``, the answer limit of a token env)."""
    num_groups = cfg.num_groups if num_groups is None else num_groups
    num_episodes, num_steps = rewards.shape
    if cfg.overlong_buffer > 0:
        lengths = mask.sum(-1)
        last = jnp.arange(num_steps) == (lengths - 1)[:, None]
        rewards = rewards + jnp.where(last, overlong_penalty(
            lengths, num_steps, cfg.overlong_buffer, cfg.overlong_penalty)[:, None], 0.0)
    outcomes = outcome_rewards(rewards, mask, hparams["outcome_discount"])
    if cfg.process_supervision:
        shape = (num_groups, cfg.group_size, num_steps)
        advantages = process_advantages(rewards.reshape(shape), mask.reshape(shape),
                                        cfg.scale_rewards).reshape(num_episodes, num_steps)
        spread = _has_spread(rewards.reshape(shape), mask.reshape(shape))
    else:
        grouped = outcomes.reshape(num_groups, cfg.group_size)
        advantages = jnp.broadcast_to(group_advantages(grouped, cfg.scale_rewards).reshape(-1, 1),
                                      (num_episodes, num_steps))
        spread = _has_spread(grouped)
    return advantages, outcomes, spread


# --------------------------------------------------------------------------- dynamic sampling (pure)
def select_groups(spread: jnp.ndarray, num_groups: int) -> jnp.ndarray:
    """DAPO's dynamic sampling in fixed shapes: the indices ``[num_groups]`` of the groups to train
    on, out of ``spread [num_sampled]`` (bool: does the group's reward vary?). Groups with spread
    come first, in sampling order; when fewer than ``num_groups`` have spread, the remaining slots
    hold zero-spread groups (in sampling order), whose advantages are exactly zero: they add
    nothing to the surrogate, only to the reductions' denominators, the KL and entropy terms, as
    every zero-spread group does without dynamic sampling (the ``kept_fraction`` metric shows how
    full the batch was)."""
    return jnp.argsort(~spread, stable=True)[:num_groups]


def take_groups(batch: rollout.GroupBatch, groups: jnp.ndarray, group_size: int) -> rollout.GroupBatch:
    """The episodes of ``groups`` (indices) of a group-major ``batch``: time-major fields along their
    episode axis 1, per-episode fields along axis 0."""
    episodes = (groups[:, None] * group_size + jnp.arange(group_size)).reshape(-1)
    time_major = {"obs", "action", "log_prob", "reward", "mask"}
    return batch._replace(**{name: jnp.take(x, episodes, axis=1 if name in time_major else 0)
                             for name, x in batch._asdict().items()})


def truncated_answers(action: jnp.ndarray, mask: jnp.ndarray) -> jnp.ndarray:
    """``[E]`` bool: token answers ``action, mask [E, T]`` that emitted no ``<eos>`` (cut at the
    length limit), TRL's truncated completions."""
    return ~jnp.any(jnp.logical_and(mask, action == EOS), axis=-1)


# --------------------------------------------------------------------------- loss (pure)
def make_loss_fn(policy: Policy, dist, loss_norm: str, cfg: GRPOConfig | None = None):
    """``loss_fn(actor_params, mb: Minibatch, hparams) -> (loss, diagnostics)`` over whole episodes;
    ``policy`` is a :class:`Policy` or a flax actor module."""
    if not isinstance(policy, Policy):
        policy = as_policy(policy.apply)

    def loss_fn(actor_params, mb: Minibatch, hparams):
        dist_params = policy.episode_apply(actor_params, mb.obs, mb.action)
        log_prob = dist.log_prob(dist_params, mb.action)
        return policy_objective(log_prob, mb.log_prob_old, mb.log_prob_ref, dist.entropy(dist_params),
                                mb.advantages, mb.mask, hparams, loss_norm, cfg)

    return loss_fn


def make_block_objective(cfg: GRPOConfig):
    """:func:`policy_objective` as one time block's share (:func:`episode_losses.make_block_grad_fn`)."""

    def objective(log_prob, entropy, block: EpisodeBuffers, weighted_sum, step_sum, hparams):
        return policy_objective(log_prob, block.log_prob_old, block.log_prob_ref, entropy,
                                block.advantages, block.mask, hparams, cfg.reduction, cfg,
                                reduce=weighted_sum, step_mean=step_sum)

    return objective


def reference_log_probs(policy: Policy, dist, state: GRPOState, obs, action) -> jnp.ndarray:
    """``log pi_ref(action | obs)`` for whole episodes ``obs [E, T, *obs_shape]`` (raw), with the
    reference's own frozen parameters and observation statistics."""
    ref_obs = envs.obs_norm_apply(state.ref_obs_norm, obs)
    return dist.log_prob(policy.episode_apply(state.ref_params, ref_obs, action), action)


# --------------------------------------------------------------------------- static checks
def episode_limit(cfg: GRPOConfig, spec: EnvSpec) -> int:
    """Rollout length ``T``: ``max_episode_steps``, else the env's own episode limit."""
    if cfg.max_episode_steps <= 0 and spec.max_steps <= 0:
        raise ConfigError(f"{spec.env_id} has no episode limit: set algo.max_episode_steps > 0 "
                          "(GRPO rolls whole episodes without auto-reset)")
    return cfg.rollout_length(spec.max_steps)


def check_static(run: RunConfig, spec: EnvSpec) -> int:
    """Bad input that needs the env: raise :class:`ConfigError` before compiling; returns ``T``."""
    cfg: GRPOConfig = run.algo
    num_steps = episode_limit(cfg, spec)
    if cfg.overlong_buffer >= num_steps:
        raise ConfigError(f"config key 'algo.overlong_buffer' = {cfg.overlong_buffer} is invalid on "
                          f"{spec.env_id}: must be 0 (off) or below the answer limit {num_steps}")
    episodes = cfg.num_sampled_groups * cfg.group_size
    needed = buffer_bytes(run.num_seeds, episodes, num_steps, spec.obs_shape, spec.num_actions,
                          run.network, cfg.num_minibatches) / 2**30
    if needed > cfg.max_memory_gb:
        raise ConfigError(
            f"GRPO on {spec.env_id} rolls whole episodes of up to {num_steps} steps: "
            f"{run.num_seeds} seed(s) x {episodes} episodes x {num_steps} "
            f"steps x obs {spec.obs_shape} need about {needed:.1f} GB, over algo.max_memory_gb = "
            f"{cfg.max_memory_gb}. Lower num_groups/group_size/dynamic_sampling_oversample/num_seeds, "
            f"set algo.max_episode_steps, or raise algo.max_memory_gb")
    return num_steps


def uses_block_path(spec: EnvSpec, policy: Policy, cfg: GRPOConfig | None = None) -> bool:
    """Early-stopped rollouts and the block-wise loss need a per-step policy: a feed-forward network
    (MLP or CNN) on a gymnax env, and a per-token ratio. Token envs' transformers re-score whole
    answers in one causal pass, a recurrent policy replays each episode from its zero start state,
    and GSPO's sequence ratio needs the whole episode: full length."""
    per_token = cfg is None or cfg.importance_sampling_level == "token"
    return spec.vocab is None and policy.recurrence is None and per_token


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
    num_sampled = cfg.num_sampled_groups
    dynamic_sampling = cfg.dynamic_sampling_oversample > 1
    num_updates = cfg.num_updates(run.total_timesteps, spec.max_steps)
    budget = StepBudget(run.total_timesteps, num_updates)
    loss_fn = make_loss_fn(policy, dist, cfg.reduction, cfg)
    blocks = uses_block_path(spec, policy, cfg)
    block_steps, buffer_steps = block_layout(cfg, num_steps)
    block_grads = make_block_grad_fn(policy.apply, dist, make_block_objective(cfg), DIAGNOSTICS,
                                     cfg.reduction, block_steps, num_steps)

    def init(key, hparams):
        actor_key, key = jax.random.split(key)
        actor_params = policy.init(actor_key) if initial_actor is None else initial_actor
        params = {"actor": actor_params}
        opt_state = adam(hparams, hparams["lr"]).init(ravel_pytree(params)[0])
        obs_norm = envs.obs_norm_init(spec.obs_shape) if run.env.normalize_obs else None
        return GRPOState(params, actor_params, opt_state, obs_norm, jnp.zeros((), jnp.uint32), key,
                         ref_obs_norm=obs_norm)

    def _optimise_full(state: GRPOState, batch: rollout.GroupBatch, hparams, optimizer, shuffle_key):
        """Whole ``[E, T]`` episodes per minibatch (token envs, recurrent policies, GSPO)."""
        # trajectory-major, so that minibatches are whole episodes
        raw_obs, action, log_prob, reward, mask = jax.tree_util.tree_map(
            lambda x: jnp.swapaxes(x, 0, 1),
            (batch.obs, batch.action, batch.log_prob, batch.reward, batch.mask))
        obs = envs.obs_norm_apply(state.obs_norm, raw_obs)
        advantages, outcomes, zero_spread = compute_advantages(cfg, reward, mask, hparams)
        log_prob_ref = reference_log_probs(policy, dist, state, raw_obs, action)
        loss_mask = (jnp.logical_and(mask, ~truncated_answers(action, mask)[:, None])
                     if cfg.mask_truncated_completions else mask)
        episodes = Minibatch(obs, action, log_prob, log_prob_ref, advantages, loss_mask)
        flat_params, unravel = ravel_pytree(state.params)
        grad_fn = jax.grad(lambda flat, mb: loss_fn(unravel(flat)["actor"], mb, hparams), has_aux=True)
        flat_params, opt_state, diagnostics = minibatch_epochs(
            grad_fn, optimizer, flat_params, state.opt_state, episodes, num_episodes,
            cfg.num_minibatches, jax.random.split(shuffle_key, cfg.update_epochs))
        return unravel(flat_params), opt_state, diagnostics, outcomes, zero_spread

    def _optimise_blocks(state: GRPOState, batch: rollout.GroupBatch, rollout_steps, hparams,
                         optimizer, shuffle_key):
        """Time blocks over the first ``rollout_steps`` steps only; minibatches are episode indices."""
        num_blocks = (rollout_steps + block_steps - 1) // block_steps
        advantages, outcomes, zero_spread = compute_advantages(cfg, batch.reward.T, batch.mask.T,
                                                               hparams)
        log_prob_ref = block_log_probs(policy.apply, dist, state.ref_params, state.ref_obs_norm,
                                       batch.obs, batch.action, num_blocks, block_steps)
        data = EpisodeBuffers(batch.obs, batch.action, batch.log_prob, log_prob_ref, advantages.T,
                              batch.mask, batch.lengths)
        flat_params, unravel = ravel_pytree(state.params)

        def grad_fn(flat, episodes):
            return block_grads(flat, unravel, data, state.obs_norm, episodes, num_blocks, hparams)

        flat_params, opt_state, diagnostics = minibatch_epochs(
            grad_fn, optimizer, flat_params, state.opt_state, jnp.arange(num_episodes), num_episodes,
            cfg.num_minibatches, jax.random.split(shuffle_key, cfg.update_epochs))
        return unravel(flat_params), opt_state, diagnostics, outcomes, zero_spread

    def update(state: GRPOState, hparams, update_idx):
        key, rollout_key, shuffle_key = jax.random.split(state.key, 3)
        learning_rate = budget.learning_rate(hparams["lr"], cfg.anneal_lr, update_idx, state.env_steps)
        optimizer = adam(hparams, learning_rate)
        same_start = cfg.grouping == "same_start"
        if blocks:
            batch, rollout_steps = rollout.group_rollout_until_done(
                env, env_params, spec, dist, policy.apply, state.params["actor"], state.obs_norm,
                rollout_key, num_sampled, cfg.group_size, num_steps, same_start,
                run.env.clip_actions, buffer_steps=buffer_steps)
        else:
            batch = rollout.group_rollout(
                env, env_params, spec, dist, policy, state.params["actor"], state.obs_norm,
                rollout_key, num_sampled, cfg.group_size, num_steps, same_start,
                run.env.clip_actions)
        sampled = batch
        if dynamic_sampling:
            spread = group_signal(cfg, batch.reward.T, batch.mask.T, hparams, num_sampled)[2]
            batch = take_groups(batch, select_groups(spread, cfg.num_groups), cfg.group_size)
        if blocks:
            params, opt_state, diagnostics, outcomes, zero_spread = _optimise_blocks(
                state, batch, rollout_steps, hparams, optimizer, shuffle_key)
        else:
            params, opt_state, diagnostics, outcomes, zero_spread = _optimise_full(
                state, batch, hparams, optimizer, shuffle_key)
        obs_norm = (envs.obs_norm_update(state.obs_norm, batch.obs, batch.mask)
                    if state.obs_norm is not None else None)

        ref_params, ref_obs_norm = state.ref_params, state.ref_obs_norm
        if cfg.ref_update_every > 0:  # pi_ref <- pi_theta: parameters and statistics together
            refresh = (update_idx + 1) % cfg.ref_update_every == 0
            ref_params, ref_obs_norm = jax.tree_util.tree_map(
                lambda new, old: jnp.where(refresh, new, old),
                (params["actor"], obs_norm), (ref_params, ref_obs_norm))
        env_steps = sampled.lengths.sum()
        metrics = {k: v.mean() for k, v in diagnostics.items()}
        metrics.update(
            return_mean=sampled.returns.mean(), episode_length=sampled.lengths.mean(),
            episodes=jnp.asarray(num_sampled * cfg.group_size, jnp.float32),
            zero_spread_groups=zero_spread,
            group_return_std=outcomes.reshape(cfg.num_groups, cfg.group_size).std(axis=1).mean(),
            learning_rate=learning_rate, env_steps=env_steps)
        if dynamic_sampling:
            metrics.update(kept_fraction=1.0 - zero_spread / cfg.num_groups,
                           spread_fraction=spread.mean())
        metrics.update(reward_metrics(env, sampled.reward_terms))
        new_state = GRPOState(params, ref_params, opt_state, obs_norm,
                              budget.spend(state.env_steps, sampled.lengths), key, ref_obs_norm)
        return new_state, metrics

    return Algorithm(run=run, env=env, env_params=env_params, spec=spec, dist=dist,
                     policy=policy, init=init, update=update,
                     policy_params=lambda s: (s.params["actor"], s.obs_norm),
                     metric_names=(METRICS + (DYNAMIC_SAMPLING_METRICS if dynamic_sampling else ())
                                   + reward_metric_names(env)),
                     num_updates=num_updates, param_fn=lambda s: s.params,
                     lane_active=lambda s: budget.active(s.env_steps),
                     check_every=implementations.check_every(cfg.check_every))
