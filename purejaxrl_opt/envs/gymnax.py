"""gymnax (the protocol itself): ``env.id=CartPole-v1`` or ``env.id=gymnax/CartPole-v1``.

gymnax 1.x envs already speak the protocol (purejaxrl_opt/envs/protocol.py): ``make`` builds the env
with ``gymnax.make`` and applies ``env.params`` as overrides of its ``EnvParams`` fields (e.g.
``max_steps_in_episode``), nothing else.
"""

from __future__ import annotations

from typing import Any, Mapping

import gymnax

from purejaxrl_opt.errors import ConfigError

LIBRARY = "gymnax"
# MNISTBandit downloads MNIST at construction time: not usable offline, so not offered
_EXCLUDED = ("MNISTBandit-bsuite",)


def ids() -> tuple[str, ...]:
    """gymnax's registered envs, minus those that cannot be built offline."""
    return tuple(e for e in gymnax.registered_envs if e not in _EXCLUDED)


def make(name: str, options: Mapping[str, Any]):
    """``(env, env_params)`` of the gymnax env ``name`` with ``EnvParams`` fields overridden by
    ``options``; an unknown field is a ConfigError naming ``env.params.<key>`` and the allowed ones."""
    if name not in ids():
        raise ConfigError(f"config key 'env.id' = {name!r} is invalid: must be one of {list(ids())}")
    env, env_params = gymnax.make(name)
    options = dict(options)
    if options:
        fields = sorted(env_params.__dataclass_fields__)
        unknown = sorted(set(options) - set(fields))
        if unknown:
            raise ConfigError(f"unknown config key 'env.params.{unknown[0]}' for {name}; allowed: {fields}")
        env_params = env_params.replace(**options)
    return env, env_params
