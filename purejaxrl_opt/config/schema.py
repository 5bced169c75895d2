"""Typed run configuration and its validation: the one place where bad input is caught.

Hydra composes a ``DictConfig`` from ``conf/``; :func:`from_dictconfig` turns it into frozen
dataclasses, checking every key, type and range *before* anything is built or compiled. Every error is
a :class:`ConfigError` naming the key, the value and what is allowed.

An algorithm's own config class lives beside its code (``CONFIG`` of ``core/algos/<name>.py``, found
through :data:`ALGORITHMS`); the sections read around the run live beside the host code that reads them
(composed in :mod:`purejaxrl_opt.host.settings`). Here: the env and network sections, the shared bases
and the checks every section uses.

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
    # PPO/TRPO: rewards multiplied by this constant before GAE and the critic's targets (Brax PPO's
    # reward_scaling, applied to the unroll's rewards in its loss); episode returns stay the env's
    reward_scale: float = 1.0
    # with normalize_obs: project (running mean/var frozen during a rollout, updated after the policy step,
    # clip to +-10) | brax (Brax PPO's running_statistics: updated with each rollout's observations
    # *before* its SGD epochs, which then read them; std floored at 1e-6, no clipping)
    obs_norm_style: str = "project"

    OBS_NORM_STYLES: ClassVar[tuple[str, ...]] = ("project", "brax")

    def validate(self, prefix: str) -> None:
        positive(f"{prefix}.reward_scale", self.reward_scale)
        one_of(f"{prefix}.obs_norm_style", self.obs_norm_style, self.OBS_NORM_STYLES)
        _check(self.obs_norm_style == "project" or self.normalize_obs, f"{prefix}.obs_norm_style",
               self.obs_norm_style, f"'project' with {prefix}.normalize_obs=false (it chooses how "
               "observations are normalised; set normalize_obs=true)")
        _check(self.reward_scale == 1.0 or not self.normalize_reward, f"{prefix}.reward_scale",
               self.reward_scale, f"1.0 with {prefix}.normalize_reward=true (dividing by the return's "
               "running std undoes any constant scale; choose one)")
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
    # continuous actions: gaussian (state-free log-std, actions clipped to the bounds) | tanh_normal
    # (Brax's NormalTanhDistribution: scale = softplus(raw) + 0.001 from the policy's output, action =
    # tanh(sample) mapped onto the bounds; log-probs of the pre-tanh sample with the tanh Jacobian,
    # entropy Brax's one-sample estimate). Discrete actions: categorical either way (tanh_normal refused)
    action_dist: str = "gaussian"
    # the dense layers' initial kernels (MLP torso, heads, outputs; biases zero): orthogonal (PureJaxRL's
    # and CleanRL's: gain sqrt(2) hidden, 0.01 policy output, 1.0 value output) | lecun_uniform (Brax's
    # MLP, every layer). Conv layers and the recurrent cell keep their own.
    init: str = "orthogonal"
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

    ACTION_DISTS: ClassVar[tuple[str, ...]] = ("gaussian", "tanh_normal")
    INITS: ClassVar[tuple[str, ...]] = ("orthogonal", "lecun_uniform")

    def validate(self, prefix: str) -> None:
        one_of(f"{prefix}.kind", self.kind, self.KINDS)
        one_of(f"{prefix}.action_dist", self.action_dist, self.ACTION_DISTS)
        one_of(f"{prefix}.init", self.init, self.INITS)
        _check(self.init == "orthogonal" or self.kind == "mlp", f"{prefix}.init", self.init,
               "orthogonal with network.kind=transformer (the transformer has its own initialisation)")
        _check(self.action_dist == "gaussian" or self.log_std_init == 0.0, f"{prefix}.log_std_init",
               self.log_std_init, f"0.0 with {prefix}.action_dist={self.action_dist} (its scale is an "
               "output of the policy network, there is no log-std parameter)")
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
class ActorCriticConfig(AlgoConfig):
    """Rollout + GAE + critic fields common to PPO and TRPO."""

    num_envs: int = 4  # parallel (vmapped) envs per agent
    num_steps: int = 128  # env steps per env per update (rollout length)
    gamma: float = 0.99  # discount factor (sweepable)
    gae_lambda: float = 0.95  # GAE lambda (sweepable)
    # normalise advantages (PPO: per minibatch; TRPO: over the batch before the policy step)
    normalize_advantages: bool = True
    # Brax PPO's unrolls: GAE bootstrapped from V of the observation after every unroll_length-step
    # segment of each env's rollout; 0 = num_steps (one bootstrap at the rollout's end)
    unroll_length: int = 0

    def unroll_steps(self) -> int:
        """Steps of one unroll: ``unroll_length``, or the whole rollout when it is 0."""
        return self.unroll_length or self.num_steps

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
        _check(0 <= self.unroll_length <= self.num_steps
               and (self.unroll_length == 0 or self.num_steps % self.unroll_length == 0),
               f"{prefix}.unroll_length", self.unroll_length,
               f"0 (= num_steps) or a divisor of {prefix}.num_steps = {self.num_steps}: one of "
               f"{[0] + [d for d in range(1, self.num_steps + 1) if self.num_steps % d == 0]}")
        _check(run.total_timesteps >= self.batch_env_steps(), "total_timesteps", run.total_timesteps,
               f">= one update's batch, algo.num_envs * num_steps = {self.batch_env_steps()}")


# algo.name -> the module of that algorithm (purejaxrl_opt/core/algos/<name>.py), which defines its config
# class (a subclass of AlgoConfig) as ``CONFIG``, beside its code: the one list of algorithms. Named as
# strings and imported with importlib only when a run names one (as envs/registry.py loads adapters), so
# config/ imports nothing above it. The algorithm registry (core/algos/__init__.py) runs these modules on
# vector envs; Hydra's ``algo=<name>`` is served from ``CONFIG``'s defaults (hydra_plugins/purejaxrl_opt_envs).
ALGORITHMS: dict[str, str] = {
    "ppo": "purejaxrl_opt.core.algos.ppo",
    "trpo": "purejaxrl_opt.core.algos.trpo",
    "grpo": "purejaxrl_opt.core.algos.grpo",
}


def algo_config(name: Any, key: str = "algo.name") -> type[AlgoConfig]:
    """The config class of algorithm ``name`` (imports its module); an unknown name is a ConfigError
    listing the algorithms."""
    if not isinstance(name, str) or name not in ALGORITHMS:
        raise ConfigError(f"config key '{key}' = {name!r} is invalid: must be one of {sorted(ALGORITHMS)}")
    import importlib

    return importlib.import_module(ALGORITHMS[name]).CONFIG


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
        for key, value, default in (("env.reward_scale", self.env.reward_scale, 1.0),
                                    ("env.obs_norm_style", self.env.obs_norm_style, "project"),
                                    ("network.action_dist", self.network.action_dist, "gaussian")):
            _check(value == default or self.algo.name in ("ppo", "trpo"), key, value,
                   f"{default!r} for {self.algo.name} (a Brax PPO option of the actor-critic stage: PPO "
                   "and TRPO only)")
        self.network.validate("network")
        critic_obs_key = self.env.params.get("critic_obs_key") if isinstance(self.env.params, Mapping) else None
        _check(critic_obs_key is None or not self.network.shared, "network.shared", self.network.shared,
               f"false with env.params.critic_obs_key = {critic_obs_key!r} (an asymmetric actor-critic: "
               "the critic reads another observation field than the policy, so they cannot share a torso)")
        _check(not self.network.shared or self.algo.name == "ppo", "network.shared", self.network.shared,
               f"false for {self.algo.name} (a trunk shared by actor and critic is trained by one loss: PPO "
               "only; TRPO steps the policy alone by its natural gradient and fits the critic apart, GRPO has "
               "no critic)")
        self.algo.validate("algo", self)  # the key as the user writes it: algo.<key>


def parse_section(cls: type, section: Mapping[str, Any] | None, name: str):
    """Build and validate section ``name`` (a dataclass with ``validate(prefix)``) from a mapping."""
    if isinstance(section, cls):
        return section
    parsed = build_section(cls, dict(section or {}), name)
    parsed.validate(name)
    return parsed


def _raw(cfg: Any) -> dict:
    """``cfg`` as plain containers, interpolations resolved; a ConfigError raised by a resolver
    (config/resolvers.py) stays a ConfigError."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import InterpolationResolutionError

    from purejaxrl_opt.config import resolvers

    if not isinstance(cfg, DictConfig):
        return dict(cfg)
    resolvers.register()
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except InterpolationResolutionError as error:
        cause = resolvers.config_error_of(error)
        if cause is None:
            raise
        raise ConfigError(str(cause)) from None


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
    """Validate the run's part of a composed Hydra config (``DictConfig`` or plain dict) into a
    :class:`RunConfig`: the keys of :class:`RunConfig`. The sections read around the run (progress,
    checkpoint, logger, ...) are their owners', checked with the top-level keys by
    :func:`purejaxrl_opt.host.settings.parse_settings`; other keys are ignored here."""
    raw = _raw(cfg)
    for section in ("algo", "env"):
        if not isinstance(raw.get(section), Mapping):
            raise ConfigError(f"config section '{section}' is missing; choose one with {section}=NAME")
    algo_raw = dict(raw["algo"])
    name = algo_raw.get("name")
    algo = build_section(algo_config(name), algo_raw, "algo")
    env = build_section(EnvConfig, raw["env"], "env")
    network = build_section(NetworkConfig, raw.get("network", {}), "network")
    top_fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    top = {k: _coerce(k, raw[k], top_fields[k].type) for k in top_fields.keys() - {"algo", "env", "network"}
           if k in raw}
    run = RunConfig(algo=algo, env=env, network=network, **top)
    run.validate()
    return run


def check_top_level(raw: Mapping[str, Any], allowed: Any, what: str = "") -> None:
    """Refuse a top-level key not in ``allowed`` (ConfigError naming it and every allowed key)."""
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise ConfigError(f"unknown config key '{unknown[0]}'; allowed top-level keys{what}: {sorted(allowed)}")


def with_overrides(run: RunConfig, **algo_overrides: Any) -> RunConfig:
    """A copy of ``run`` with some algorithm fields replaced (validated again)."""
    new = dataclasses.replace(run, algo=dataclasses.replace(run.algo, **algo_overrides))
    new.validate()
    return new


def hyperparameters(algo: AlgoConfig) -> dict[str, jnp.ndarray]:
    """The algorithm's sweepable scalars as float32 arrays: the ``hparams`` pytree of ``train``."""
    return {name: jnp.asarray(getattr(algo, name), jnp.float32) for name in algo.SWEEPABLE}
