"""Reward functions over decoded text, in TRL's shape, and their weighted sum.

A reward function is ``fn(prompts, completions, **columns) -> list[float]``: ``prompts`` are the rows'
prompts as the data holds them (a string, or a chat ``messages`` list), ``completions`` the decoded
completion strings (special tokens dropped), ``columns`` every other column of the data, one list
entry per completion (a prompt's columns repeated for each of its ``G`` completions). It returns one
number per completion; ``None`` means "does not apply" (TRL's convention: it counts 0 in the weighted
sum and is left out of the function's logged mean). Several functions are weighted and summed,
``R = sum_k w_k r_k``, and each is logged apart as ``reward/<name>``.

The functions run on the host, in plain Python, between the compiled generation and the compiled update
(:mod:`purejaxrl_opt.host.lm.runner`). A function that raises, returns the wrong number of values, a
non-number, NaN or an infinity stops the run with a :class:`RewardError` naming it (and the first bad
completion); nothing of that step is applied, so the last checkpoint stays the run's state.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from purejaxrl_opt.config.errors import ConfigError


class RewardError(RuntimeError):
    """A reward function failed or returned something that is not one finite number per completion."""


@dataclass(frozen=True)
class Reward:
    name: str  # logged as reward/<name>
    fn: Callable[..., Sequence[float | None]]
    weight: float = 1.0


def resolve(spec: str, builtins: Mapping[str, Callable], key: str) -> tuple[str, Callable]:
    """``(name, fn)`` of a reward named ``spec``: a built-in name, or ``module:function`` (named by its
    function). ConfigError naming ``key`` when it cannot be found."""
    if not isinstance(spec, str) or not spec:
        raise ConfigError(f"config key '{key}' = {spec!r} is invalid: must be a reward name")
    if ":" not in spec:
        if spec not in builtins:
            raise ConfigError(f"config key '{key}' = {spec!r} is invalid: must be one of the task's "
                              f"rewards {sorted(builtins)} or 'module:function'")
        return spec, builtins[spec]
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigError(f"config key '{key}' = {spec!r}: cannot import {module_name!r} ({error})") from None
    fn = getattr(module, attribute, None)
    if not callable(fn):
        raise ConfigError(f"config key '{key}' = {spec!r}: {module_name} has no function {attribute!r}")
    return attribute, fn


def make_rewards(specs: Sequence[str], weights: Sequence[float] | None, builtins: Mapping[str, Callable],
                 key: str = "env.params.rewards") -> tuple[Reward, ...]:
    """The run's rewards from names (:func:`resolve`) and weights (default 1 each); ConfigError for an
    empty list, a repeated name or a weight list of another length."""
    if not specs:
        raise ConfigError(f"config key '{key}' is empty: name at least one reward function")
    weights = [1.0] * len(specs) if weights is None else list(weights)
    weights_key = key.rsplit(".", 1)[0] + ".reward_weights"
    if len(weights) != len(specs) or not all(isinstance(w, (int, float)) and math.isfinite(w)
                                             for w in weights):
        raise ConfigError(f"config key '{weights_key}' = {weights} is invalid: must be {len(specs)} finite "
                          f"numbers, one per reward of {key} = {list(specs)}")
    rewards = [Reward(*resolve(spec, builtins, f"{key}[{i}]"), float(w))
               for i, (spec, w) in enumerate(zip(specs, weights))]
    names = [r.name for r in rewards]
    if len(set(names)) != len(names):
        raise ConfigError(f"config key '{key}' = {list(specs)} names a reward twice ({names}): each is "
                          "logged apart as reward/<name>")
    return tuple(rewards)


def _checked(reward: Reward, values, completions: Sequence[str]) -> np.ndarray:
    """``values`` as float64 ``[n]`` (None -> NaN, "does not apply"), or a RewardError naming the
    function."""
    n = len(completions)
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise RewardError(f"reward function {reward.name!r} returned {type(values).__name__}, not a list "
                          f"of {n} numbers")
    if len(values) != n:
        raise RewardError(f"reward function {reward.name!r} returned {len(values)} values for {n} "
                          "completions (one per completion expected)")
    out = np.empty(n, np.float64)
    for i, value in enumerate(values):
        if value is None:
            out[i] = np.nan
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise RewardError(f"reward function {reward.name!r} returned {value!r} for completion {i} "
                              f"({completions[i][:80]!r}): not a number") from None
        if isinstance(value, bool) or not math.isfinite(number):
            raise RewardError(f"reward function {reward.name!r} returned {value!r} for completion {i} "
                              f"({completions[i][:80]!r}): must be a finite number or None")
        out[i] = number
    return out


def compute(rewards: Sequence[Reward], prompts: Sequence, completions: Sequence[str],
            columns: Mapping[str, Sequence]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``(total float32 [n], {name: float64 [n]})``: every function's values (NaN = does not apply)
    and their weighted sum (a None counts 0)."""
    per_name = {}
    for reward in rewards:
        try:
            values = reward.fn(list(prompts), list(completions), **{k: list(v) for k, v in columns.items()})
        except Exception as error:  # noqa: BLE001 -- any failure of user code, named
            raise RewardError(f"reward function {reward.name!r} raised {type(error).__name__}: "
                              f"{error}") from error
        per_name[reward.name] = _checked(reward, values, completions)
    total = sum(r.weight * np.nan_to_num(per_name[r.name], nan=0.0) for r in rewards)
    return np.asarray(total, np.float32), per_name


def means(per_name: Mapping[str, np.ndarray], prefix: str = "reward/") -> dict[str, float]:
    """``{prefix + name: mean over the completions it applies to}`` (NaN where it applies to none)."""
    out = {}
    for name, values in per_name.items():
        applied = values[~np.isnan(values)]
        out[prefix + name] = float(applied.mean()) if applied.size else float("nan")
    return out
