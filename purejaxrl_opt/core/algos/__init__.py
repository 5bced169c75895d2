"""Registry of algorithms: name -> ``make_algorithm(run, env, env_params, spec)``.

``make_train(run)`` is the public entry point: it returns ``train(key, hparams=None)``, the whole run
as one function for ``jax.jit`` (and ``jax.vmap`` over keys/hyperparameters).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

import numpy as np

from purejaxrl_opt import envs
from purejaxrl_opt.core.algos.base import Algorithm, TrainOutput, make_train as _make_train
from purejaxrl_opt.config.schema import ALGORITHMS, RunConfig

# (algo.name, observation kind) -> module defining make_algorithm(run, env, env_params, spec). "vector"
# = every env of the protocol but the token envs (vector or image observations, rollouts with
# auto-reset: gymnax and the other libraries' adapters): the module of each algorithm in
# config.schema.ALGORITHMS (the one list of algorithms, each module also defining its config class);
# "token" = token envs (whole-answer rollouts with a transformer policy). PPO on a token env is its own
# algorithm file (a value transformer, GAE inside each answer), chosen here rather than inside ppo.py.
REGISTRY: dict[tuple[str, str], str] = {
    **{(name, "vector"): module for name, module in ALGORITHMS.items()},
    ("ppo", "token"): "purejaxrl_opt.core.algos.ppo_tokens",
    ("grpo", "token"): "purejaxrl_opt.core.algos.grpo",
}
# algorithms that run on token envs
TOKEN_ALGOS: frozenset[str] = frozenset(name for name, kind in REGISTRY if kind == "token")
# (algo.name, kind) whose make_algorithm accepts axis_name (data parallel inside shard_map)
DATA_PARALLEL: frozenset[str] = frozenset({"ppo", "trpo"})


def env_kind(spec) -> str:
    """``"token"`` for token envs, ``"vector"`` for every other env (the registry's second key)."""
    return "token" if spec.vocab is not None else "vector"


def make_env(run: RunConfig):
    """``(env, env_params, spec)`` for the run's env config (any registered library: envs/registry.py)."""
    return envs.make(run.env.id, dict(run.env.params), run.env.obs_mask)


def make_algorithm(run: RunConfig, env: tuple | None = None, axis_name: str | None = None) -> Algorithm:
    """Build the :class:`Algorithm` for ``run``; ``env`` is an optional ``(env, env_params, spec)``.

    ``axis_name``: data parallel over that ``shard_map`` mesh axis (algorithms in ``DATA_PARALLEL``
    only); None = one device, unchanged numbers."""
    if run.algo.name not in {name for name, _ in REGISTRY}:
        raise ValueError(f"unknown algo '{run.algo.name}'; registered: {sorted(REGISTRY)}")
    env, env_params, spec = env if env is not None else make_env(run)
    check_env_fit(run, spec)
    module = importlib.import_module(REGISTRY[run.algo.name, env_kind(spec)])
    if axis_name is None:
        return module.make_algorithm(run, env, env_params, spec)
    if run.algo.name not in DATA_PARALLEL or env_kind(spec) != "vector":
        raise ValueError(f"algo '{run.algo.name}' has no data-parallel mode; supported: "
                         f"{sorted(DATA_PARALLEL)}")
    return module.make_algorithm(run, env, env_params, spec, axis_name=axis_name)


def check_env_fit(run: RunConfig, spec) -> None:
    """Refuse, before compiling, combinations of algorithm, env and network that cannot work."""
    from purejaxrl_opt.config.errors import ConfigError
    from purejaxrl_opt.core.models.policies import check_network

    check_network(run.network, spec)
    if run.network.action_dist == "tanh_normal":
        if spec.discrete:
            raise ConfigError(f"config key 'network.action_dist' = 'tanh_normal' is invalid on {spec.env_id}: "
                              f"its actions are discrete ({spec.num_actions} choices); must be 'gaussian' "
                              "(a categorical policy either way)")
        bounds = tuple(spec.action_low or ()) + tuple(spec.action_high or ())
        if not bounds or not all(np.isfinite(bounds)):
            raise ConfigError(f"config key 'network.action_dist' = 'tanh_normal' is invalid on {spec.env_id}: "
                              f"its action bounds ({spec.action_low}, {spec.action_high}) are not finite, so "
                              "there is no interval to squash onto; must be 'gaussian'")
    if run.env.normalize_obs and spec.action_mask:
        raise ConfigError(f"config key 'env.normalize_obs' = True is invalid on {spec.env_id}: the last "
                          f"{spec.num_actions} observation entries are its legal-action mask, which "
                          "normalising would destroy; must be false")
    if (run.algo.name == "grpo" and getattr(run.algo, "grouping", None) == "same_start"
            and not spec.keyed_reset):
        raise ConfigError(f"config key 'algo.grouping' = 'same_start' is invalid on {spec.env_id}: its "
                          "reset is not determined by the key (keyed_reset = False), so a group cannot "
                          "share a start state; use algo.grouping=unrelated")
    if spec.vocab is not None:
        if run.algo.name not in TOKEN_ALGOS:
            raise ConfigError(f"config key 'algo.name' = {run.algo.name!r} is invalid on the token env "
                              f"{spec.env_id}: must be one of {sorted(TOKEN_ALGOS)}")
        if run.env.normalize_obs:
            raise ConfigError(f"config key 'env.normalize_obs' = True is invalid on the token env "
                              f"{spec.env_id}: observations are token ids; must be false")
        if run.env.normalize_reward:
            raise ConfigError(f"config key 'env.normalize_reward' = True is invalid on the token env "
                              f"{spec.env_id}: one reward per answer; must be false")
        if run.env.reward_scale != 1.0:
            raise ConfigError(f"config key 'env.reward_scale' = {run.env.reward_scale} is invalid on the token "
                              f"env {spec.env_id}: PPO on token envs has its own rollout; must be 1.0")
    elif run.eval_samples:
        raise ConfigError(f"config key 'eval_samples' = {run.eval_samples} is invalid on {spec.env_id}: "
                          "pass@k is measured on token envs only; must be 0")
    elif run.init_from is not None:
        raise ConfigError(f"config key 'init_from' = {run.init_from!r} is invalid on {spec.env_id}: "
                          "supervised checkpoints exist for token envs only")


def make_train(run: RunConfig, env: tuple | None = None) -> Callable[..., TrainOutput]:
    """``train(key, hparams=None) -> TrainOutput`` for ``run``: ``jax.jit(make_train(run))(key)``."""
    return _make_train(make_algorithm(run, env))


__all__: list[Any] = ["REGISTRY", "make_algorithm", "make_env", "make_train", "TrainOutput", "Algorithm"]
