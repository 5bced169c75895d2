"""Typed run configuration and its validation: the one place where bad input is caught.

Hydra composes a ``DictConfig`` from ``conf/``; :func:`from_dictconfig` turns it into frozen
dataclasses, checking every key, type and range *before* anything is built or compiled. Every error is
a :class:`ConfigError` naming the key, the value and what is allowed.

Scalar hyperparameters that do not change any array shape are listed in each algorithm config's
``SWEEPABLE``; :func:`hyperparameters` turns them into a pytree of float32 scalars that the train
function reads at trace time, so they can be ``vmap``ped (one compile trains many configs).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

import jax.numpy as jnp

from purejaxrl_opt.config.errors import ConfigError

# Fisher-vector product forms (natural_gradient.make_fisher_vector_product)
FVP_MODES: tuple[str, ...] = ("gauss_newton", "hessian")


def supported_env_ids(library: str | None = None) -> tuple[str, ...]:
    """The env ids a run may name, through the env registry (purejaxrl_opt/envs/registry.py):
    ``library`` None = those named without a prefix (gymnax's registered envs and the token envs);
    a library = its ids with the prefix (``navix/Navix-Empty-5x5-v0``; imports its adapter, so a
    library that is not installed is a ConfigError naming the extra to install)."""
    from purejaxrl_opt.envs.registry import UNPREFIXED, ids

    if library is None:
        return tuple(i for name in UNPREFIXED for i in ids(name))
    return tuple(f"{library}/{i}" for i in ids(library))


# --------------------------------------------------------------------------- field checks
def _check(cond: bool, key: str, value: Any, allowed: str) -> None:
    if not cond:
        raise ConfigError(f"config key '{key}' = {value!r} is invalid: must be {allowed}")


def positive(key: str, value: float) -> None:
    _check(value > 0, key, value, "> 0")


def non_negative(key: str, value: float) -> None:
    _check(value >= 0, key, value, ">= 0")


def unit_interval(key: str, value: float, *, open_low=False, open_high=False) -> None:
    low_ok = value > 0 if open_low else value >= 0
    high_ok = value < 1 if open_high else value <= 1
    lo, hi = ("(" if open_low else "["), (")" if open_high else "]")
    _check(low_ok and high_ok, key, value, f"in {lo}0, 1{hi}")


def one_of(key: str, value: str, choices: tuple[str, ...]) -> None:
    _check(value in choices, key, value, f"one of {list(choices)}")


# --------------------------------------------------------------------------- config sections
@dataclass(frozen=True)
class EnvConfig:
    id: str
    normalize_obs: bool = False  # running mean/std of observations, frozen during each rollout
    # PPO/TRPO: rewards divided by the running std of each env's discounted return (gamma = algo's)
    normalize_reward: bool = False
    clip_actions: bool = True  # continuous actions clipped to the env's bounds before stepping
    # the library's env options (gymnax: overrides of EnvParams fields), checked by its adapter's make
    params: Mapping[str, Any] = field(default_factory=dict)
    # 1 keeps, 0 zeroes each observation entry (a partially observable variant of any env);
    # its length is checked against the env's observation size when the env is built (envs.make)
    obs_mask: tuple[int, ...] | None = None

    def validate(self, prefix: str) -> None:
        if self.obs_mask is not None:
            _check(len(self.obs_mask) > 0 and all(m in (0, 1) for m in self.obs_mask),
                   f"{prefix}.obs_mask", list(self.obs_mask), "null or a non-empty list of 0/1")
        _check(isinstance(self.id, str) and self.id != "", f"{prefix}.id", self.id, "a non-empty string")
        # '<library>/<id>', a gymnax or token env id, or 'module:TaskClass' (envs/registry.py): an
        # unknown library or id, or a library that is not installed, is a ConfigError
        from purejaxrl_opt.envs.registry import split_id

        split_id(self.id, key=f"{prefix}.id")


@dataclass(frozen=True)
class NetworkConfig:
    kind: str = "mlp"  # mlp (MLP/CNN actor and critic) | transformer (token envs: causal transformer)
    hidden_sizes: tuple[int, ...] = (64, 64)
    # the critic's MLP widths when they differ from the actor's (None: hidden_sizes); Brax's PPO for
    # Playground, e.g., uses a 4 x 32 policy and a 5 x 256 value network
    critic_hidden_sizes: tuple[int, ...] | None = None
    activation: str = "tanh"
    cnn_channels: tuple[int, ...] = (16,)  # conv torso for image observations (MinAtar)
    log_std_init: float = 0.0  # initial log std of a diagonal Gaussian policy
    # recurrent cell between the torso and the heads of actor and critic (kind=mlp): none | gru | lstm
    recurrent: str = "none"
    recurrent_size: int = 64  # hidden state width of the recurrent cell
    # hidden layers before each output layer, after the recurrent cell or the shared torso (recurrent or
    # shared networks; empty: the output layer reads the cell's state / the torso). Craftax_Baselines'
    # ppo_rnn.py: two 512 layers per head.
    head_sizes: tuple[int, ...] = ()
    # one torso (and recurrent cell) for actor and critic, each with its own head (head_sizes, then the
    # output layer); PPO only. Craftax_Baselines' ppo_rnn.py shares its embedding and GRU this way.
    shared: bool = False
    # per-backend implementations (purejaxrl_opt/config/implementations.py), auto = the fast one for the
    # backend: conv torso patch (im2col matmul; auto on CPU and GPU) | lax (flax Conv; auto on TPU);
    # recurrent cell's derivative fused (hand-arranged scan JVP, CPU) | autodiff (GPU, TPU)
    conv_impl: str = "auto"
    recurrent_grad: str = "auto"
    # transformer (kind=transformer)
    d_model: int = 64
    num_layers: int = 2
    num_heads: int = 4
    mlp_ratio: int = 4

    ACTIVATIONS: ClassVar[tuple[str, ...]] = ("tanh", "relu", "gelu", "silu")
    KINDS: ClassVar[tuple[str, ...]] = ("mlp", "transformer")
    RECURRENT: ClassVar[tuple[str, ...]] = ("none", "gru", "lstm")

    def validate(self, prefix: str) -> None:
        one_of(f"{prefix}.kind", self.kind, self.KINDS)
        for name in ("d_model", "num_layers", "num_heads", "mlp_ratio"):
            positive(f"{prefix}.{name}", getattr(self, name))
        _check(self.d_model % self.num_heads == 0, f"{prefix}.num_heads", self.num_heads,
               f"a divisor of network.d_model = {self.d_model}")
        _check(len(self.hidden_sizes) > 0 and all(h > 0 for h in self.hidden_sizes),
               f"{prefix}.hidden_sizes", list(self.hidden_sizes), "a non-empty list of positive ints")
        if self.critic_hidden_sizes is not None:
            _check(len(self.critic_hidden_sizes) > 0 and all(h > 0 for h in self.critic_hidden_sizes),
                   f"{prefix}.critic_hidden_sizes", list(self.critic_hidden_sizes),
                   "null (the actor's hidden_sizes) or a non-empty list of positive ints")
            _check(self.kind == "mlp", f"{prefix}.critic_hidden_sizes", list(self.critic_hidden_sizes),
                   "null with network.kind=transformer (the transformer's sizes are d_model/num_layers)")
        _check(all(c > 0 for c in self.cnn_channels), f"{prefix}.cnn_channels",
               list(self.cnn_channels), "a list of positive ints")
        one_of(f"{prefix}.activation", self.activation, self.ACTIVATIONS)
        one_of(f"{prefix}.recurrent", self.recurrent, self.RECURRENT)
        positive(f"{prefix}.recurrent_size", self.recurrent_size)
        _check(all(h > 0 for h in self.head_sizes), f"{prefix}.head_sizes", list(self.head_sizes),
               "a list of positive ints")
        _check(not self.head_sizes or self.recurrent != "none" or self.shared, f"{prefix}.head_sizes",
               list(self.head_sizes), "[] with network.recurrent=none and network.shared=false (a feed-forward "
               "network's layers are hidden_sizes)")
        _check(isinstance(self.shared, bool), f"{prefix}.shared", self.shared, "true or false")
        if self.shared:
            _check(self.kind == "mlp", f"{prefix}.shared", self.shared,
                   "false with network.kind=transformer (the shared trunk is the MLP/CNN torso and recurrent cell)")
            _check(self.critic_hidden_sizes is None, f"{prefix}.critic_hidden_sizes",
                   list(self.critic_hidden_sizes or ()), "null with network.shared=true (one torso for both)")
        from purejaxrl_opt.config.implementations import CONV_IMPLS, RECURRENT_GRADS

        one_of(f"{prefix}.conv_impl", self.conv_impl, CONV_IMPLS)
        one_of(f"{prefix}.recurrent_grad", self.recurrent_grad, RECURRENT_GRADS)
        _check(self.recurrent == "none" or self.kind == "mlp", f"{prefix}.recurrent", self.recurrent,
               "'none' with network.kind=transformer (a recurrent cell goes with kind=mlp)")

    @property
    def critic_sizes(self) -> tuple[int, ...]:
        """The critic's MLP widths: ``critic_hidden_sizes``, or the actor's ``hidden_sizes``."""
        return self.hidden_sizes if self.critic_hidden_sizes is None else self.critic_hidden_sizes

    @property
    def is_recurrent(self) -> bool:
        return self.recurrent != "none"


@dataclass(frozen=True)
class AlgoConfig:
    """Fields shared by every algorithm. ``SWEEPABLE`` fields may be traced (vmapped) values."""

    name: str
    SWEEPABLE: ClassVar[tuple[str, ...]] = ()

    def batch_env_steps(self) -> int:
        """Env steps consumed by one update (an upper bound for episode-based algorithms)."""
        raise NotImplementedError

    def num_updates(self, total_timesteps: int, episode_limit: int = 0) -> int:
        """Updates this algorithm runs in ``total_timesteps`` env steps per agent, on an env whose
        episodes are cut at ``episode_limit`` steps (0 = no limit)."""
        raise NotImplementedError

    def validate(self, prefix: str, run: "RunConfig") -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class _ActorCriticConfig(AlgoConfig):
    """Rollout + GAE + critic fields common to PPO and TRPO."""

    num_envs: int = 4
    num_steps: int = 128
    gamma: float = 0.99
    gae_lambda: float = 0.95
    normalize_advantages: bool = True

    def batch_env_steps(self) -> int:
        return self.num_envs * self.num_steps

    def num_updates(self, total_timesteps: int, episode_limit: int = 0) -> int:
        """Whole ``num_envs x num_steps`` batches that fit in the budget (at least one): on gymnax
        envs every step is a real env step. PPO on a token env counts real answer tokens instead
        and runs until they reach the budget (``algos/ppo_tokens.py``, its own buffer size)."""
        return max(total_timesteps // self.batch_env_steps(), 1)

    def _validate_rollout(self, prefix: str, run: "RunConfig") -> None:
        positive(f"{prefix}.num_envs", self.num_envs)
        positive(f"{prefix}.num_steps", self.num_steps)
        unit_interval(f"{prefix}.gamma", self.gamma)
        unit_interval(f"{prefix}.gae_lambda", self.gae_lambda)
        _check(run.total_timesteps >= self.batch_env_steps(), "total_timesteps", run.total_timesteps,
               f">= one update's batch, {self.name}.num_envs * num_steps = {self.batch_env_steps()}")


@dataclass(frozen=True)
class PPOConfig(_ActorCriticConfig):
    name: str = "ppo"
    update_epochs: int = 4
    num_minibatches: int = 4
    lr: float = 2.5e-4
    anneal_lr: bool = True
    clip_eps: float = 0.2
    clip_value: bool = True  # PPO2-style value clipping with the same clip_eps
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5

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
        positive(f"{prefix}.lr", self.lr)
        positive(f"{prefix}.clip_eps", self.clip_eps)
        non_negative(f"{prefix}.ent_coef", self.ent_coef)
        non_negative(f"{prefix}.vf_coef", self.vf_coef)
        positive(f"{prefix}.max_grad_norm", self.max_grad_norm)


@dataclass(frozen=True)
class TRPOConfig(_ActorCriticConfig):
    name: str = "trpo"
    max_kl: float = 0.01
    cg_iters: int = 10
    cg_damping: float = 0.1
    backtrack_coeff: float = 0.8
    max_backtracks: int = 10
    fvp: str = "gauss_newton"  # gauss_newton: J^T M J v (jvp + analytic M + vjp); hessian: fwd-over-rev
    # fraction of the batch used for Fisher-vector products (0.2 as in OpenAI baselines' TRPO: the
    # FVPs are ~4 forward passes each, and the line search still checks the KL on the full batch)
    fvp_subsample: float = 0.2
    critic_lr: float = 1e-3
    critic_epochs: int = 5  # the largest share of an update; 3 is ~15% faster (see conf/algo/trpo.yaml)
    critic_minibatches: int = 4
    critic_max_grad_norm: float = 0.5
    # shrink the trust region linearly, max_kl * (1 - update/num_updates), like PPO's anneal_lr: near
    # the optimum the advantages are noise and every step still moves KL = max_kl
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
        one_of(f"{prefix}.fvp", self.fvp, FVP_MODES)
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


@dataclass(frozen=True)
class GRPOConfig(AlgoConfig):
    name: str = "grpo"
    num_groups: int = 8
    group_size: int = 8
    grouping: str = "same_start"  # same_start: a group shares its reset key; unrelated: it does not
    max_episode_steps: int = 0  # 0 = the env's own episode limit
    outcome_discount: float = 1.0  # 1 = undiscounted return as the outcome reward
    process_supervision: bool = False  # per-step rewards normalised over the group
    scale_rewards: str = "group"  # group | batch | none (Dr. GRPO)
    loss_norm: str = "sequence"  # sequence (paper) | token (DAPO) | constant (Dr. GRPO)
    # TRL GRPOTrainer's name for the reduction; "" = loss_norm as given. Each maps onto a loss_norm
    # (LOSS_TYPES): grpo -> sequence, bnpo -> token, dr_grpo -> constant, dapo -> token. TRL's dapo
    # and bnpo differ only in normalising by the tokens of the whole accumulated (multi-process)
    # batch vs the local one; here an optimizer step is one minibatch on one device, so they coincide.
    # Rewards scaling stays scale_rewards' (TRL's too: dr_grpo does not set scale_rewards=none)
    loss_type: str = ""
    # token: per-token ratio pi/pi_old (GRPO); sequence: GSPO's length-normalised sequence ratio
    # exp(mean_t log(pi/pi_old)) shared by every token of an episode (whole-episode loss path)
    importance_sampling_level: str = "token"
    epsilon: float = 0.2
    epsilon_high: float = 0.0  # 0 = symmetric clip (epsilon); > epsilon = DAPO clip-higher
    # two-sided clipping (INTELLECT-2, TRL's delta): the unclipped ratio is capped at delta, bounding
    # the loss of negative-advantage tokens whose ratio grew; 0 = off, else > 1 + epsilon_high
    delta: float = 0.0
    beta: float = 0.04
    # weight k3 by pi_theta/pi_old (losses.k3_kl): its mean is then KL(pi_theta || pi_ref) in every
    # epoch, not only while pi_theta == pi_old. false = DeepSeekMath's and TRL's unweighted k3
    kl_importance_weight: bool = False
    # token envs: answers that reach the length limit without <eos> add nothing to the loss (they
    # still count in their group's reward statistics, as in TRL)
    mask_truncated_completions: bool = False
    # DAPO dynamic sampling: roll num_groups * this many groups, keep (up to) num_groups whose
    # rewards have spread, fill any remaining slots with zero-spread groups (zero advantage). All
    # rolled steps count in the budget. 1 = off
    dynamic_sampling_oversample: int = 1
    # DAPO overlong soft punishment (token envs): an answer of length |o| > T - overlong_buffer (T:
    # the answer limit) gets reward overlong_penalty * (T - overlong_buffer - |o|) / overlong_buffer
    # (down to -overlong_penalty at T) on its last token; 0 = off
    overlong_buffer: int = 0
    overlong_penalty: float = 1.0
    ref_update_every: int = 0  # 0 = pi_ref fixed at the initial policy
    update_epochs: int = 4  # 1 x 1 (one step per batch, as in the paper) learns CartPole ~10x slower
    num_minibatches: int = 4
    lr: float = 1e-3
    anneal_lr: bool = False
    ent_coef: float = 0.0
    max_grad_norm: float = 0.5
    max_memory_gb: float = 4.0  # refuse configs whose episode buffer would exceed this
    # rows of the metrics buffer, the most updates a lane may run (it stops once it has consumed
    # total_timesteps real steps). 0 = ceil(total_timesteps / (num_groups * group_size)): never the
    # bound, as no episode is shorter than one step (GRPOConfig.num_updates).
    max_updates: int = 0
    # time block of the block-wise loss (gymnax envs): gradients are summed over ceil(L / K) blocks of
    # K steps, L = the batch's longest episode, so the update costs ~L steps, not the limit T
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
        _check(length > 0, f"{self.name}.max_episode_steps", self.max_episode_steps,
               "> 0 on an env without an episode limit (GRPO rolls whole episodes without auto-reset)")
        return length

    def num_updates(self, total_timesteps: int, episode_limit: int = 0) -> int:
        """Rows of the metrics buffer: ``max_updates``, else the most updates a lane can run before
        its budget of real env steps is spent, every episode being at least one step long
        (``ceil(total_timesteps / (num_groups * group_size))``). A lane stops at its budget, so the
        rows it does not use cost only memory and stay NaN."""
        self.rollout_length(episode_limit)  # an env without a limit needs max_episode_steps
        return self.max_updates or max(1, -(-total_timesteps // (self.num_groups * self.group_size)))

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
        positive(f"{prefix}.loss_block_steps", self.loss_block_steps)


ALGO_CONFIGS: dict[str, type[AlgoConfig]] = {"ppo": PPOConfig, "trpo": TRPOConfig, "grpo": GRPOConfig}


@dataclass(frozen=True)
class RunConfig:
    algo: AlgoConfig
    env: EnvConfig
    network: NetworkConfig = NetworkConfig()
    seed: int = 0
    num_seeds: int = 1
    total_timesteps: int = 500_000
    eval_episodes: int = 16
    eval_deterministic: bool = True
    # evaluate every this many updates during training (metrics eval_return, and eval_accuracy /
    # eval_accuracy_sampled on token envs); 0 = only the final evaluation
    eval_every: int = 0
    # start from the policy of a supervised checkpoint (python -m purejaxrl_opt.sft); token envs
    init_from: str | None = None
    # token envs: pass@k (Chen et al. 2021, unbiased from eval_samples sampled answers to each of the
    # eval_episodes held-out prompts) for every k in eval_pass_k, final and with eval_every; 0 = off
    eval_samples: int = 0
    eval_pass_k: tuple[int, ...] = (1, 8)

    def validate(self) -> None:
        non_negative("seed", self.seed)
        positive("num_seeds", self.num_seeds)
        positive("total_timesteps", self.total_timesteps)
        positive("eval_episodes", self.eval_episodes)
        non_negative("eval_every", self.eval_every)
        non_negative("eval_samples", self.eval_samples)
        if self.eval_samples:
            _check(len(self.eval_pass_k) > 0 and all(1 <= k <= self.eval_samples for k in self.eval_pass_k)
                   and len(set(self.eval_pass_k)) == len(self.eval_pass_k), "eval_pass_k",
                   list(self.eval_pass_k), f"distinct ints in [1, eval_samples = {self.eval_samples}]")
        self.env.validate("env")
        _check(not self.env.normalize_reward or self.algo.name in ("ppo", "trpo"),
               "env.normalize_reward", self.env.normalize_reward,
               f"false for {self.algo.name} (it scales a critic's targets: PPO and TRPO only; GRPO's "
               "group z-scores already normalise its outcomes)")
        self.network.validate("network")
        _check(not self.network.shared or self.algo.name == "ppo", "network.shared", self.network.shared,
               f"false for {self.algo.name} (a trunk shared by actor and critic is trained by one loss: PPO "
               "only; TRPO steps the policy alone by its natural gradient and fits the critic apart, GRPO has "
               "no critic)")
        self.algo.validate(self.algo.name, self)


# --------------------------------------------------------------------------- sections around the run
@dataclass(frozen=True)
class ProgressConfig:
    mode: str = "auto"  # auto (bar on a terminal, lines otherwise) | bar | lines | off
    chunks: int = 10  # jitted chunks the training runs as, so progress can be shown

    MODES: ClassVar[tuple[str, ...]] = ("auto", "bar", "lines", "off")

    def validate(self, prefix: str = "progress") -> None:
        one_of(f"{prefix}.mode", self.mode, self.MODES)
        _check(self.chunks >= 1, f"{prefix}.chunks", self.chunks, "an int >= 1")

    @property
    def num_chunks(self) -> int:
        """Chunks the runner splits training into (one when nothing is shown)."""
        return self.chunks if self.mode != "off" else 1


@dataclass(frozen=True)
class CheckpointConfig:
    every_updates: int = 0  # save every N updates (0 = never)
    final: bool = True  # save after the last update (what `purejaxrl_opt.evaluate` loads)
    keep: int | None = None  # keep only the newest K checkpoints (None = all)

    def validate(self, prefix: str = "checkpoint") -> None:
        _check(self.every_updates >= 0, f"{prefix}.every_updates", self.every_updates,
               "an int >= 0 (0 = no periodic checkpoints)")
        _check(self.keep is None or self.keep >= 1, f"{prefix}.keep", self.keep, "null or an int >= 1")

    @property
    def enabled(self) -> bool:
        return self.every_updates > 0 or self.final


@dataclass(frozen=True)
class ParallelConfig:
    lanes: str = "auto"  # auto: lanes in as many equal blocks as there are devices (at most) | off
    data: int = 1  # devices per agent (data parallel); 1 = none
    # language-model runs: devices the params, optimizer state and batch are sharded over (FSDP), on a
    # data x fsdp mesh; 1 = none. Env runs: 1
    fsdp: int = 1
    # several processes (jax.distributed); null = from the environment (JAX_* or SLURM variables)
    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    init_timeout_s: float = 60.0

    LANE_MODES: ClassVar[tuple[str, ...]] = ("auto", "off")

    def validate(self, prefix: str = "parallel") -> None:
        one_of(f"{prefix}.lanes", self.lanes, self.LANE_MODES)
        _check(self.data >= 1, f"{prefix}.data", self.data, "an int >= 1 (devices per agent)")
        _check(self.fsdp >= 1, f"{prefix}.fsdp", self.fsdp, "an int >= 1 (devices the params are sharded over)")
        _check(self.init_timeout_s > 0, f"{prefix}.init_timeout_s", self.init_timeout_s,
               "a number > 0 (seconds)")


@dataclass(frozen=True)
class LoggerConfig:
    kind: str = "console"  # none | console | wandb
    # wandb only
    project: str = "purejaxrl_opt"
    entity: str | None = None
    mode: str = "offline"
    group: str | None = None
    tags: tuple[str, ...] | None = None
    dir: str | None = None
    name: str | None = None
    offline_fallback: bool = False
    # W&B's system metrics (CPU/GPU/memory sampled every 15 s) and its copy of the console: off by
    # default, they cost CPU time beside the training (experiments/bench_logging.py)
    system_stats: bool = False
    capture_console: bool = False
    # log every n-th update's row to W&B (and the run's last): 0 = auto, ceil(updates / 1000) (W&B's
    # charts show at most ~1500 points a line; each row costs the W&B client CPU time). metrics.csv
    # keeps every update.
    every_updates: int = 0

    KINDS: ClassVar[tuple[str, ...]] = ("none", "console", "wandb")
    WANDB_MODES: ClassVar[tuple[str, ...]] = ("online", "offline", "disabled")

    def validate(self, prefix: str = "logger") -> None:
        one_of(f"{prefix}.kind", self.kind, self.KINDS)
        one_of(f"{prefix}.mode", self.mode, self.WANDB_MODES)
        _check(isinstance(self.every_updates, int) and self.every_updates >= 0, f"{prefix}.every_updates",
               self.every_updates, "an int >= 0 (0 = auto: ceil(updates / 1000))")


@dataclass(frozen=True)
class SweepConfig:
    """The raw ``sweep`` section; :func:`purejaxrl_opt.host.sweep.plan_from_config` checks it against the
    algorithm and expands it into lanes."""

    vmap: Mapping[str, Any] | None = None  # {key: [values]}
    mode: str = "grid"  # grid | zip
    random: Mapping[str, Any] | None = None  # {key: {low, high, log}}
    num_samples: int = 8
    seed: int = 0
    # hydra/sweeper=optuna: suggestions evaluated by one compiled job (purejaxrl_opt/host/search.py)
    batch: int = 1
    objective: str = "mean"  # a trial's score over its seeds' final returns: mean | iqm

    OBJECTIVES: ClassVar[tuple[str, ...]] = ("mean", "iqm")

    def validate(self, prefix: str = "sweep") -> None:
        # the vmap/random values need the algorithm: sweep.plan_from_config
        _check(self.batch >= 1, f"{prefix}.batch", self.batch, "an int >= 1")
        one_of(f"{prefix}.objective", self.objective, self.OBJECTIVES)


def parse_section(cls: type, section: Mapping[str, Any] | None, name: str):
    """Build and validate section ``name`` (a dataclass with ``validate(prefix)``) from a mapping."""
    if isinstance(section, cls):
        return section
    parsed = build_section(cls, dict(section or {}), name)
    parsed.validate(name)
    return parsed


def _raw(cfg: Any) -> dict:
    from omegaconf import DictConfig, OmegaConf

    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)


# --------------------------------------------------------------------------- building
def _coerce(key: str, value: Any, annotation: Any) -> Any:
    """Check ``value`` against a dataclass field annotation (as a string) and coerce it."""
    ann = str(annotation)
    if ann.endswith(" | None") and ann != "str | None":
        return None if value is None else _coerce(key, value, ann[:-len(" | None")])
    if ann == "bool":
        _check(isinstance(value, bool), key, value, "a bool (true/false)")
        return value
    if ann == "int":
        # YAML (and so Hydra) reads 1e5 as a float: a whole, finite float is the int it writes
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        _check(isinstance(value, int) and not isinstance(value, bool), key, value,
               "an int (a whole number: 100000 or 1e5)")
        return value
    if ann == "float":
        _check(isinstance(value, (int, float)) and not isinstance(value, bool), key, value, "a number")
        _check(math.isfinite(value), key, value, "a finite number")
        return float(value)
    if ann == "str":
        _check(isinstance(value, str), key, value, "a string")
        return value
    if ann == "str | None":
        _check(value is None or isinstance(value, str), key, value, "a string or null")
        return value
    if ann.startswith("tuple[str"):
        _check(isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value), key, value,
               "a list of strings")
        return tuple(value)
    if ann == "tuple[int, ...] | None" and value is None:
        return None
    if ann.startswith("tuple[int"):
        _check(isinstance(value, (list, tuple)) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value), key, value, "a list of ints")
        return tuple(value)
    if ann.startswith("Mapping"):
        _check(isinstance(value, Mapping), key, value, "a mapping")
        return dict(value)
    raise TypeError(f"unhandled annotation {ann} for {key}")


def build_section(cls: type, values: Mapping[str, Any], prefix: str):
    """Build dataclass ``cls`` from ``values``; unknown keys and wrong types raise ConfigError."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown config key '{prefix}.{unknown[0]}'; allowed keys of '{prefix}': {sorted(fields)}")
    kwargs = {name: _coerce(f"{prefix}.{name}", values[name], fields[name].type)
              for name in fields if name in values}
    return cls(**kwargs)


def from_dictconfig(cfg: Any) -> RunConfig:
    """Validate a composed Hydra config (``DictConfig`` or plain dict) into a :class:`RunConfig`."""
    raw = _raw(cfg)
    run_keys = {f.name for f in dataclasses.fields(RunConfig)}
    # keys consumed outside the training function (logging, output, launch)
    outer_keys = {"logger", "hydra", "progress", "checkpoint", "resume", "resume_step", "sweep", "parallel",
                  "out_dir"}
    unknown = sorted(set(raw) - run_keys - outer_keys)
    if unknown:
        raise ConfigError(f"unknown config key '{unknown[0]}'; allowed top-level keys: "
                          f"{sorted(run_keys | outer_keys)}")
    for section in ("algo", "env"):
        if not isinstance(raw.get(section), Mapping):
            raise ConfigError(f"config section '{section}' is missing; choose one with {section}=NAME")
    algo_raw = dict(raw["algo"])
    name = algo_raw.get("name")
    if name not in ALGO_CONFIGS:
        raise ConfigError(f"config key 'algo.name' = {name!r} is invalid: must be one of "
                          f"{sorted(ALGO_CONFIGS)}")
    algo = build_section(ALGO_CONFIGS[name], algo_raw, name)
    env = build_section(EnvConfig, raw["env"], "env")
    network = build_section(NetworkConfig, raw.get("network", {}), "network")
    top = {k: raw[k] for k in run_keys - {"algo", "env", "network"} if k in raw}
    top_fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    top = {k: _coerce(k, v, top_fields[k].type) for k, v in top.items()}
    run = RunConfig(algo=algo, env=env, network=network, **top)
    run.validate()
    return run


def with_overrides(run: RunConfig, **algo_overrides: Any) -> RunConfig:
    """A copy of ``run`` with some algorithm fields replaced (validated again)."""
    new = dataclasses.replace(run, algo=dataclasses.replace(run.algo, **algo_overrides))
    new.validate()
    return new


def hyperparameters(algo: AlgoConfig) -> dict[str, jnp.ndarray]:
    """The algorithm's sweepable scalars as float32 arrays: the ``hparams`` pytree of ``train``."""
    return {name: jnp.asarray(getattr(algo, name), jnp.float32) for name in algo.SWEEPABLE}
