"""gymnax (the protocol itself): ``env.id=CartPole-v1`` or ``env.id=gymnax/CartPole-v1``.

gymnax 1.x envs already speak the protocol (purejaxrl_opt/envs/protocol.py): ``make`` builds the env
with ``gymnax.make`` and applies ``env.params`` as overrides of its ``EnvParams`` fields (e.g.
``max_steps_in_episode``), nothing else.

Options (``env.params``): the env's ``EnvParams`` fields, each typed by its default (a bool, an int,
a float, or an array given as a list of numbers of the default's shape, e.g. Acrobot's
``available_torque``) and checked before the env is built (purejaxrl_opt/envs/options.py): ints are
counts, sizes, intervals and step limits, so >= 1 (a cool-down >= 0: 0 = no wait); floats finite.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import gymnax

from purejaxrl_opt.envs.options import Option, check
from purejaxrl_opt.config.errors import ConfigError

LIBRARY = "gymnax"
# MNISTBandit downloads MNIST at construction time: not usable offline, so not offered
_EXCLUDED = ("MNISTBandit-bsuite",)
# int fields for which 0 is meaningful (MinAtar: 0 = a shot every step)
_ZERO_ALLOWED = ("shot_cool_down",)


def ids() -> tuple[str, ...]:
    """gymnax's registered envs, minus those that cannot be built offline."""
    return tuple(e for e in gymnax.registered_envs if e not in _EXCLUDED)


def params_options(env_params) -> dict[str, Option]:
    """The options of an env: its ``EnvParams`` fields, typed by their defaults (module docstring)."""
    out = {}
    for field in dataclasses.fields(env_params):
        # BernoulliBandit's limit is a float 100.0: a limit of at least one step either way
        minimum = 1 if field.name == "max_steps_in_episode" else 0 if field.name in _ZERO_ALLOWED else None
        option = Option.like(getattr(env_params, field.name), minimum=minimum)
        if option is not None:
            out[field.name] = option
    return out


def make(name: str, options: Mapping[str, Any]):
    """``(env, env_params)`` of the gymnax env ``name`` with ``EnvParams`` fields overridden by
    ``options``; an unknown field or a bad value is a ConfigError naming ``env.params.<key>``."""
    if name not in ids():
        raise ConfigError(f"config key 'env.id' = {name!r} is invalid: must be one of {list(ids())}")
    env, env_params = gymnax.make(name)
    values = check(name, dict(options), params_options(env_params))
    if values:
        env_params = env_params.replace(**values)
    return env, env_params
