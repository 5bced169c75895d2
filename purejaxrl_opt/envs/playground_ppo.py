"""MuJoCo Playground's own tuned PPO hyperparameters, mapped onto this project's PPO config.

Playground tunes Brax's PPO per task (``mujoco_playground.config.dm_control_suite_params`` /
``locomotion_params`` / ``manipulation_params``: ``brax_ppo_config(task)``). :func:`ppo_node` turns one
task's config into the values of a composed run (``algo.*``, ``network.*``, ``env.*``,
``total_timesteps``), which the Hydra plugin (hydra_plugins/purejaxrl_opt_envs) serves as
``tuned/ppo_playground/<task>``: ``algo=ppo env=playground/<task>`` composes it for every task that
has no file of its own, and every key stays overridable on the command line.

Every key of a ``brax_ppo_config`` is in exactly one table: :data:`MAPPED` (onto which key of ours, how)
or :data:`IGNORED` (with the reason); :data:`ALWAYS` holds what Brax does on every task without a key
saying so. A key in none of them (a newer Playground's) is refused, naming it:
nothing is dropped silently. A key Playground leaves out of a task's config takes Brax's own default
(the signature of ``brax.training.agents.ppo.train.train`` and of ``ppo.networks.make_ppo_networks``),
as Brax's ``train`` would.

The rollout: Brax collects ``batch_size * num_minibatches`` unrolls of ``unroll_length`` steps per
training step from ``num_envs`` envs, i.e. ``u = batch_size * num_minibatches / num_envs`` unrolls per
env, and makes ``num_minibatches`` minibatches of ``batch_size`` whole unrolls, ``num_updates_per_batch``
times. Here one update is the same ``u`` unrolls of every env, ``num_steps = unroll_length * u``, at the
run's ``algo.num_envs`` (default: Playground's ``num_envs``; the user's wins, also on the command
line); ``num_minibatches`` and the epochs are kept, so each minibatch is ``num_envs * u /
num_minibatches`` whole unrolls, and a ``num_envs`` that does not split so is refused
(config/resolvers.py); ``algo.unroll_length`` bootstraps GAE after every unroll, as Brax does.

This module imports Playground's config modules (not its envs) and brax's PPO signature when called;
config/ cannot (it imports nothing above it), so it lives in the env layer, beside the adapter.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.config.resolvers import FEED_FORWARD, NUM_STEPS, RESET_EVERY
from purejaxrl_opt.envs.registry import close_names

# Brax's max_grad_norm None (no clipping): a bound no gradient reaches (our clip is always on)
NO_GRAD_CLIP = 1.0e6
# Brax's activation functions (flax.linen names) -> network.activation
ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "tanh": "tanh", "gelu": "gelu"}
FAMILIES = ("dm_control_suite", "locomotion", "manipulation")


@dataclass(frozen=True)
class Mapped:
    """A Brax key set onto ``target`` (a dotted key of the composed config) by ``convert`` (Brax's value
    -> ours; raises ConfigError where the value has no counterpart), or a key whose value enters a
    value computed from several (``target`` None, ``note`` says where)."""

    target: str | None
    convert: Callable[[Any], Any] = lambda value: value
    note: str = ""


def _max_grad_norm(value):
    return NO_GRAD_CLIP if value is None else float(value)


def _activation(value):
    name = getattr(value, "__name__", value)
    if name not in ACTIVATIONS:
        raise ConfigError(f"Brax activation {name!r} has no network.activation; mapped: {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def _sizes(value):
    return [int(v) for v in value]


def _learning_rate_schedule(value):
    if value is not None:
        raise ConfigError(f"Brax's learning_rate_schedule = {value!r} has no counterpart here (algo.anneal_lr "
                          "is a linear decay to 0 or a constant lr); mapped: None (constant)")
    return False


def _no_value_clip(value):
    if value is not None:
        raise ConfigError(f"Brax's clipping_epsilon_value = {value!r}: algo.clip_value clips the value with "
                          "algo.clip_eps, not a value of its own; mapped: None (no value clipping)")
    return False


def _must_be(expected, what):
    def check(value):
        if value != expected:
            raise ConfigError(f"Brax's {what} = {value!r} has no counterpart here; mapped: {expected!r}")
        return value
    return check


# Brax's distribution_type -> network.action_dist: its tanh_normal is ours (tests/test_brax_options.py);
# its "normal" (a Gaussian with a state-independent std, no squash) is our gaussian
ACTION_DISTS = {"tanh_normal": "tanh_normal", "normal": "gaussian"}


def _action_dist(value):
    if value not in ACTION_DISTS:
        raise ConfigError(f"Brax's distribution_type = {value!r} has no network.action_dist; mapped: "
                          f"{sorted(ACTION_DISTS)}")
    return ACTION_DISTS[value]


def _obs_norm_style(value):
    if value != "welford":
        raise ConfigError(f"Brax's normalize_observations_mode = {value!r} has no env.obs_norm_style; "
                          "mapped: 'welford' (-> brax)")
    return "brax"


# Brax key (network_factory.* for the network's) -> how it is mapped. Keys absent from a task's config
# take Brax's defaults (brax_defaults()).
MAPPED: dict[str, Mapped] = {
    "learning_rate": Mapped("algo.lr", float),
    "entropy_cost": Mapped("algo.ent_coef", float),
    "discounting": Mapped("algo.gamma", float),
    "gae_lambda": Mapped("algo.gae_lambda", float),
    "clipping_epsilon": Mapped("algo.clip_eps", float),
    "clipping_epsilon_value": Mapped("algo.clip_value", _no_value_clip),
    "vf_loss_coefficient": Mapped("algo.vf_coef", float,
                                  "Brax's value loss is 0.5 * vf_loss_coefficient * mean squared error, "
                                  "ours 0.5 * vf_coef * the same"),
    "normalize_advantage": Mapped("algo.normalize_advantages", bool, "per minibatch in both"),
    "num_updates_per_batch": Mapped("algo.update_epochs", int),
    "num_minibatches": Mapped("algo.num_minibatches", int),
    "max_grad_norm": Mapped("algo.max_grad_norm", _max_grad_norm, f"None (no clipping) -> {NO_GRAD_CLIP:g}"),
    "learning_rate_schedule": Mapped("algo.anneal_lr", _learning_rate_schedule, "None (constant) -> false"),
    "num_envs": Mapped("algo.num_envs", int, "the default; the run's algo.num_envs wins"),
    "batch_size": Mapped(None, note=f"algo.num_steps = unroll_length * batch_size * num_minibatches / num_envs "
                                    f"(Brax's), checked at the run's algo.num_envs (${{{NUM_STEPS}:...}})"),
    "unroll_length": Mapped("algo.unroll_length", int, "GAE bootstrapped after every unroll; also "
                                                        "algo.num_steps (see batch_size)"),
    "num_timesteps": Mapped("total_timesteps", int),
    "normalize_observations": Mapped("env.normalize_obs", bool),
    "episode_length": Mapped("env.params.episode_length", int,
                             "set only where it is not Playground's env config value (the adapter's default)"),
    "action_repeat": Mapped("env.params.action_repeat", int,
                            "set only where it is not Playground's env config value (the adapter's default)"),
    "reward_scaling": Mapped("env.reward_scale", float, "rewards multiplied by it before GAE"),
    "network_factory.distribution_type": Mapped("network.action_dist", _action_dist,
                                                "tanh_normal: a tanh-squashed Gaussian, state-dependent scale"),
    "normalize_observations_mode": Mapped("env.obs_norm_style", _obs_norm_style,
                                          "Brax's running statistics (welford) -> brax"),
    "normalize_observations_std_eps": Mapped(None, _must_be(0.0, "normalize_observations_std_eps"),
                                             "Brax's default 0.0: what env.obs_norm_style=brax does; "
                                             "another value is refused"),
    "normalize_until_count": Mapped(None, _must_be(None, "normalize_until_count"),
                                    "Brax's default None (never stop updating): what env.obs_norm_style="
                                    "brax does; another value is refused"),
    "num_resets_per_eval": Mapped(None, note=f"algo.reset_envs_every = Brax's epoch length in training steps, "
                                             f"after each of which it resets all training envs "
                                             f"(${{{RESET_EVERY}:...}}, at the run's total_timesteps, "
                                             f"algo.num_envs and algo.num_steps, with num_evals)"),
    "num_evals": Mapped(None, note="enters algo.reset_envs_every (see num_resets_per_eval); ours evaluates "
                                   "every eval_every updates and at the end"),
    "network_factory.policy_hidden_layer_sizes": Mapped("network.hidden_sizes", _sizes),
    "network_factory.value_hidden_layer_sizes": Mapped("network.critic_hidden_sizes", _sizes),
    "network_factory.activation": Mapped("network.activation", _activation, "swish -> silu"),
    "network_factory.policy_obs_key": Mapped("env.params.obs_key", str,
                                             "set only where it is not the adapter's default 'state'"),
    "network_factory.value_obs_key": Mapped("env.params.critic_obs_key", str,
                                            "set only where it differs from policy_obs_key (an asymmetric "
                                            "actor-critic)"),
}


# set on every task: Brax computes GAE inside each minibatch's loss, from the current value network (no
# key of its config says so). With a recurrent network (Brax has none) this is off: a recurrent critic
# cannot score an unroll apart from the hidden state its env carried in, so GAE comes from the
# rollout's values, still cut at every unroll (config/resolvers.py, feed_forward)
# Two more things Brax always does are left ours on purpose: its lecun_uniform kernels and optax's Adam
# eps 1e-8 (network.init=lecun_uniform, algo.adam_eps=1e-8 give them). On ReacherEasy, the task where
# Brax led, they did not help on tuning seeds (suite reacher_brax_init), and turning them on here would
# change every stored Playground figure.
ALWAYS: dict[str, Any] = {"algo.recompute_advantages": f"${{{FEED_FORWARD}:${{network.recurrent}}}}"}

IGNORED: dict[str, str] = {
    "num_eval_envs": "Brax's evaluation batch; ours: eval_episodes",
    "seed": "the run's seed",
}

# defaults of brax's train/make_ppo_networks that a task's config may leave out and the tables name
_TRAIN_DEFAULTS = ("gae_lambda", "clipping_epsilon", "clipping_epsilon_value", "vf_loss_coefficient",
                   "normalize_advantage", "max_grad_norm", "learning_rate_schedule",
                   "normalize_observations_mode", "normalize_observations_std_eps", "normalize_until_count",
                   "reward_scaling", "num_evals", "num_resets_per_eval", "action_repeat")
_NETWORK_DEFAULTS = ("policy_hidden_layer_sizes", "value_hidden_layer_sizes", "activation",
                     "policy_obs_key", "value_obs_key", "distribution_type")


def brax_defaults() -> dict[str, Any]:
    """Brax's own defaults of the keys Playground's configs may leave out (flat keys)."""
    # mujoco's OpenGL backend first, before brax imports mujoco (a mujoco imported without it takes
    # GLFW, which fails on a machine without a display when a frame is rendered)
    from purejaxrl_opt.envs.opengl import set_headless_gl

    set_headless_gl()
    from brax.training.agents.ppo import networks as ppo_networks
    from brax.training.agents.ppo import train as ppo_train

    train = inspect.signature(ppo_train.train).parameters
    network = inspect.signature(ppo_networks.make_ppo_networks).parameters
    found = {key: train[key].default for key in _TRAIN_DEFAULTS if key in train}
    found.update({f"network_factory.{key}": network[key].default for key in _NETWORK_DEFAULTS if key in network})
    return found


def family(task: str) -> str:
    """The Playground family (``FAMILIES``) of ``task``; an unknown task is a ConfigError listing the
    closest names."""
    # the adapter first: it picks mujoco's OpenGL backend before mujoco is imported
    from purejaxrl_opt.envs.playground import dm_control_suite, locomotion, manipulation

    for name, module in zip(FAMILIES, (dm_control_suite, locomotion, manipulation)):
        if task in module.ALL_ENVS:
            return name
    every = [*dm_control_suite.ALL_ENVS, *locomotion.ALL_ENVS, *manipulation.ALL_ENVS]
    raise ConfigError(f"unknown Playground task {task!r}; closest: {close_names(task, every)}")


def brax_ppo_config(task: str, impl: str = "jax") -> dict[str, Any]:
    """Playground's ``brax_ppo_config(task, impl)`` as a flat dict (``network_factory.<key>``)."""
    from purejaxrl_opt.envs.opengl import set_headless_gl

    set_headless_gl()  # mujoco's OpenGL backend first, as above
    from mujoco_playground.config import dm_control_suite_params, locomotion_params, manipulation_params

    module = {"dm_control_suite": dm_control_suite_params, "locomotion": locomotion_params,
              "manipulation": manipulation_params}[family(task)]
    config = module.brax_ppo_config(task, impl)
    flat = {}
    for key, value in config.to_dict().items():
        if isinstance(value, dict):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return flat


def env_defaults(task: str) -> dict[str, int]:
    """The adapter's ``env.params.episode_length`` / ``action_repeat`` for ``task`` when none is given:
    Playground's env config (purejaxrl_opt/envs/playground.py)."""
    from purejaxrl_opt.envs import playground as adapter

    config = adapter._playground_default_config(task)
    return {"env.params.episode_length": int(config.get("episode_length", 1000)),
            "env.params.action_repeat": int(config.get("action_repeat", 1))}


def _set(node: dict, dotted: str, value) -> None:
    *parents, leaf = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def ppo_node(task: str, impl: str = "jax") -> dict[str, Any]:
    """The composed-config values (a nested dict, package ``_global_``) of Playground's tuned PPO
    config for ``task``: every :data:`MAPPED` key set, ``algo.num_steps`` the resolver expression
    that checks the run's ``algo.num_envs``. A key in none of the tables, or a value with no
    counterpart, is a ConfigError naming it."""
    brax = {**brax_defaults(), **brax_ppo_config(task, impl)}
    unknown = sorted(set(brax) - set(MAPPED) - set(IGNORED))
    if unknown:
        raise ConfigError(f"Playground's brax_ppo_config({task!r}) has key {unknown[0]!r} = {brax[unknown[0]]!r}, "
                          "which purejaxrl_opt/envs/playground_ppo.py neither maps nor ignores; known keys: "
                          f"{sorted({*MAPPED, *IGNORED})}")
    # what the adapter uses when env.params does not say (its defaults: Playground's env config)
    adapter_defaults = {"env.params.obs_key": "state",
                        "env.params.critic_obs_key": brax.get("network_factory.policy_obs_key", "state"),
                        **env_defaults(task)}
    node: dict[str, Any] = {}
    for key, rule in MAPPED.items():
        if key not in brax:
            continue
        if rule.target is None:
            try:
                rule.convert(brax[key])  # a value that must be Brax's default (or enters num_steps)
            except ConfigError as error:
                raise ConfigError(f"playground/{task}: {error}") from None
            continue
        try:
            value = rule.convert(brax[key])
        except ConfigError as error:
            raise ConfigError(f"playground/{task}: {error}") from None
        if rule.target in adapter_defaults and value == adapter_defaults[rule.target]:
            continue  # the same either way; the run's config stays as short as before
        _set(node, rule.target, value)
    num_envs, batch_size, num_minibatches = brax["num_envs"], brax["batch_size"], brax["num_minibatches"]
    if (batch_size * num_minibatches) % num_envs:
        raise ConfigError(f"Playground's brax_ppo_config({task!r}): batch_size * num_minibatches = "
                          f"{batch_size * num_minibatches} is not a multiple of num_envs = {num_envs}")
    unrolls = batch_size * num_minibatches // num_envs
    for target, value in ALWAYS.items():
        _set(node, target, value)
    _set(node, "algo.reset_envs_every",
         f"${{{RESET_EVERY}:${{total_timesteps}},${{algo.num_envs}},${{algo.num_steps}},"
         f"{int(brax['action_repeat'])},{int(brax['num_evals'])},{int(brax['num_resets_per_eval'])}}}")
    _set(node, "algo.num_steps",
         f"${{{NUM_STEPS}:${{algo.num_envs}},{int(brax['unroll_length'])},{unrolls},{int(num_minibatches)},"
         f"playground/{task}}}")
    return node


def scaled_num_steps(task: str, num_envs: int, impl: str = "jax") -> int:
    """``algo.num_steps`` of :func:`ppo_node` at ``num_envs`` (the resolver's value)."""
    from purejaxrl_opt.config.resolvers import brax_ppo_num_steps

    brax = brax_ppo_config(task, impl)
    unrolls = brax["batch_size"] * brax["num_minibatches"] // brax["num_envs"]
    return brax_ppo_num_steps(num_envs, int(brax["unroll_length"]), unrolls, int(brax["num_minibatches"]),
                              f"playground/{task}")


__all__ = ["ALWAYS", "IGNORED", "MAPPED", "brax_defaults", "brax_ppo_config", "env_defaults", "family",
           "ppo_node", "scaled_num_steps"]
