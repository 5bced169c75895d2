"""In-compile sweeps: many hyperparameter configs x seeds as lanes of one compiled function.

The ``sweep`` config section turns some of the algorithm's ``SWEEPABLE`` scalars into per-lane
values::

    sweep.vmap='{algo.lr: [1e-4, 3e-4], algo.clip_eps: [0.1, 0.2]}'    # grid: 4 configs
    sweep.vmap='{algo.lr: [1e-4, 3e-4], algo.clip_eps: [0.1, 0.2]}' sweep.mode=zip   # 2 configs
    sweep.random='{algo.lr: {low: 1e-4, high: 1e-3, log: true}}' sweep.num_samples=8

Lanes are config-major: lane ``c * num_seeds + s`` trains config ``c`` with ``PRNGKey(seed + s)``, so
every config sees the same seeds (common random numbers) and config ``c``'s lanes are exactly the
lanes of a run with those values set in the config. Keys that change an array shape or the traced
program (``num_envs``, network sizes, the env, booleans) cannot be lanes of one compile; they are
refused with a pointer to Hydra multirun (``-m``), which compiles one program per value.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from purejaxrl_opt.config.schema import (RunConfig, _check, hyperparameters, one_of, parse_section,
                                         with_overrides)
from purejaxrl_opt.config.errors import ConfigError

MODES = ("grid", "zip")
PREFIX = "algo."


# the ``sweep`` section of a run (composed in host/settings.py)
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


@dataclass(frozen=True)
class SweepPlan:
    """What the lanes of one run are.

    ``keys`` are dotted config keys (``algo.lr``); ``configs[c]`` maps each key to config ``c``'s
    value (a Python float, as the user wrote it or as sampled).
    """

    mode: str  # grid | zip | random
    keys: tuple[str, ...]
    configs: tuple[dict[str, float], ...]

    @property
    def num_configs(self) -> int:
        return len(self.configs)

    @property
    def hparam_names(self) -> tuple[str, ...]:
        return tuple(k[len(PREFIX):] for k in self.keys)

    def to_dict(self) -> dict:
        return {"mode": self.mode, "keys": list(self.keys), "configs": [dict(c) for c in self.configs]}

    @staticmethod
    def from_dict(data: Mapping | None) -> "SweepPlan | None":
        if not data:
            return None
        return SweepPlan(data["mode"], tuple(data["keys"]), tuple(dict(c) for c in data["configs"]))


@dataclass(frozen=True)
class Lane:
    index: int
    config: int  # index into plan.configs (0 without a sweep)
    seed: int
    values: dict  # swept key -> value ({} without a sweep)

    @property
    def label(self) -> str:
        """W&B/console name: ``seed_3`` or ``cfg1_seed_3``."""
        return f"seed_{self.seed}" if not self.values else f"cfg{self.config}_seed_{self.seed}"


def lanes(run: RunConfig, plan: SweepPlan | None) -> list[Lane]:
    configs = plan.configs if plan is not None else ({},)
    return [Lane(c * run.num_seeds + s, c, run.seed + s, dict(values))
            for c, values in enumerate(configs) for s in range(run.num_seeds)]


def config_runs(run: RunConfig, plan: SweepPlan | None) -> list[RunConfig]:
    """One validated :class:`RunConfig` per config of the plan (just ``[run]`` without a sweep)."""
    if plan is None:
        return [run]
    return [with_overrides(run, **{k[len(PREFIX):]: v for k, v in values.items()})
            for values in plan.configs]


def lane_hparams(run: RunConfig, plan: SweepPlan | None) -> dict:
    """The ``hparams`` pytree with a leading lane axis ``[num_configs * num_seeds]`` (float32)."""
    per_config = [{k: np.asarray(v) for k, v in hyperparameters(r.algo).items()}
                  for r in config_runs(run, plan)]
    return {name: np.repeat(np.stack([h[name] for h in per_config]), run.num_seeds, axis=0)
            for name in per_config[0]}


def lane_keys(seeds):
    """``[len(seeds)]`` PRNG keys, ``PRNGKey(seed)`` each: a lane trains with its seed's key."""
    import jax
    import jax.numpy as jnp

    return jax.vmap(jax.random.PRNGKey)(jnp.asarray(list(seeds), jnp.uint32))


def lane_inputs(run: RunConfig, plan: SweepPlan | None = None):
    """``(keys [num_lanes], hparams {name: [num_lanes]})``: the lane-vmapped arguments of ``train``."""
    import jax.numpy as jnp

    return (lane_keys(lane.seed for lane in lanes(run, plan)),
            {k: jnp.asarray(v) for k, v in lane_hparams(run, plan).items()})


# --------------------------------------------------------------------------- parsing
def _check_key(key: Any, run: RunConfig) -> str:
    algo = run.algo
    fields = {f.name for f in dataclasses.fields(algo)}
    if not isinstance(key, str) or not key.startswith(PREFIX):
        top = str(key).split(".")[0]
        if top in {f.name for f in dataclasses.fields(RunConfig)} - {"algo"}:
            raise ConfigError(
                f"sweep key '{key}' cannot be swept inside one compile (only algorithm "
                f"hyperparameters can); sweep it with Hydra multirun instead: "
                f"python -m purejaxrl_opt.train -m {key}=A,B")
        hint = f" (did you mean '{PREFIX}{key}'?)" if key in fields else ""
        raise ConfigError(f"sweep key '{key}' does not exist{hint}; in-compile sweep keys are "
                          f"'algo.<name>' with <name> one of {list(algo.SWEEPABLE)}")
    name = key[len(PREFIX):]
    if name not in fields:
        raise ConfigError(f"sweep key '{key}' does not exist for algo '{algo.name}'; sweepable keys: "
                          f"{[PREFIX + k for k in algo.SWEEPABLE]}")
    if name not in algo.SWEEPABLE:
        raise ConfigError(
            f"sweep key '{key}' changes array shapes or the compiled program, so it cannot be a lane "
            f"of one compile; sweep it with Hydra multirun instead: python -m purejaxrl_opt.train "
            f"-m {key}=A,B  (in-compile sweepable keys for {algo.name}: "
            f"{[PREFIX + k for k in algo.SWEEPABLE]})")
    return key


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"sweep value {value!r} for '{key}' is invalid: must be a finite number")
    return float(value)


def _grid(spec: Mapping, mode: str, run: RunConfig) -> SweepPlan:
    if not isinstance(spec, Mapping) or not spec:
        raise ConfigError("config key 'sweep.vmap' is empty: give at least one key and its values, "
                          "e.g. sweep.vmap='{algo.lr: [1e-4, 3e-4]}'")
    keys = tuple(_check_key(k, run) for k in spec)
    values = {}
    for key in keys:
        raw = spec[key]
        if not isinstance(raw, (list, tuple)):
            raw = [raw]
        if not raw:
            raise ConfigError(f"sweep key '{key}' has an empty list of values")
        values[key] = [_number(key, v) for v in raw]
    if mode == "grid":
        combos = itertools.product(*(values[k] for k in keys))
    else:
        lengths = {k: len(v) for k, v in values.items()}
        if len(set(lengths.values())) != 1:
            raise ConfigError(f"sweep.mode=zip needs lists of equal length; got {lengths}")
        combos = zip(*(values[k] for k in keys))
    return SweepPlan(mode, keys, tuple(dict(zip(keys, c)) for c in combos))


def _random(spec: Mapping, num_samples: Any, seed: Any, run: RunConfig) -> SweepPlan:
    if not isinstance(spec, Mapping) or not spec:
        raise ConfigError("config key 'sweep.random' is empty: give at least one key, e.g. "
                          "sweep.random='{algo.lr: {low: 1e-4, high: 1e-3, log: true}}'")
    if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples < 1:
        raise ConfigError(f"config key 'sweep.num_samples' = {num_samples!r} is invalid: must be an "
                          "int >= 1")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ConfigError(f"config key 'sweep.seed' = {seed!r} is invalid: must be an int")
    rng = np.random.default_rng(seed)
    keys = tuple(_check_key(k, run) for k in spec)
    columns = {}
    for key in keys:
        dist = spec[key]
        if not isinstance(dist, Mapping) or set(dist) - {"low", "high", "log"} or not {"low", "high"} <= set(dist):
            raise ConfigError(f"sweep.random['{key}'] = {dist!r} is invalid: must be "
                              "{low: L, high: H} with optional log: true")
        low, high = _number(key, dist["low"]), _number(key, dist["high"])
        log = dist.get("log", False)
        if not isinstance(log, bool):
            raise ConfigError(f"sweep.random['{key}'].log = {log!r} is invalid: must be a bool")
        if not low < high or (log and low <= 0):
            raise ConfigError(f"sweep.random['{key}'] needs low < high (and low > 0 with log: true); "
                              f"got low={low}, high={high}")
        draws = rng.uniform(math.log(low), math.log(high), num_samples) if log else rng.uniform(
            low, high, num_samples)
        # 6 significant digits: the value written to summaries is the one trained with (float32)
        columns[key] = [float(f"{(math.exp(d) if log else d):.6g}") for d in draws]
    return SweepPlan("random", keys, tuple({k: columns[k][i] for k in keys} for i in range(num_samples)))


def plan_from_config(section: SweepConfig | Mapping | None, run: RunConfig) -> SweepPlan | None:
    """Validate the ``sweep`` config section; ``None`` when no in-compile sweep is asked for.

    Every config is validated as a full run config (e.g. a negative ``lr`` is refused), before
    anything is compiled.
    """
    section = parse_section(SweepConfig, section, "sweep")
    mode = section.mode
    if mode not in MODES:
        raise ConfigError(f"config key 'sweep.mode' = {mode!r} is invalid: must be one of {list(MODES)}")
    vmap, random = section.vmap, section.random
    if vmap is not None and random is not None:
        raise ConfigError("config keys 'sweep.vmap' and 'sweep.random' are both set: choose one")
    if vmap is None and random is None:
        return None
    plan = (_grid(vmap, mode, run) if vmap is not None
            else _random(random, section.num_samples, section.seed, run))
    config_runs(run, plan)  # validates every config
    return plan


# --------------------------------------------------------------------------- objectives
def objective_value(per_seed, objective: str) -> float:
    """A config's score from its seeds' final returns ``[num_seeds]``: ``mean`` or ``iqm``
    (:func:`purejaxrl_opt.host.stats.iqm`: the mean of the middle half; with 4 seeds, of the middle 2).
    NaN when a seed's return is not finite (a diverged lane: the search records a failed trial)."""
    from purejaxrl_opt.host import stats

    values = np.asarray(per_seed, np.float64)
    if values.size == 0 or not np.all(np.isfinite(values)):
        return float("nan")
    if objective == "mean":
        return float(values.mean())
    if objective == "iqm":
        return float(stats.iqm(values))
    raise ConfigError(f"config key 'sweep.objective' = {objective!r} is invalid: must be one of "
                      f"{list(SweepConfig.OBJECTIVES)}")


def run_objective(summary: Mapping, objective: str = "mean", per_config: bool = False):
    """What ``python -m purejaxrl_opt.train`` returns for a finished run's ``summary``.

    ``per_config=False``: one float over every lane's final return (``objective=mean`` is
    ``summary['final_return_mean']``). ``per_config=True`` (a job of a batched search,
    ``sweep.batch > 1``): one float per config of the in-compile sweep, in plan order, each over that
    config's own seeds; a run without a sweep is one config.
    """
    if not per_config:
        if objective == "mean":  # as computed for summary.json (float32 lanes), bit for bit
            return float(summary["final_return_mean"])
        return objective_value(summary["final_return_per_seed"], objective)
    configs = summary.get("sweep", {}).get("configs")
    if not configs:
        return [objective_value(summary["final_return_per_seed"], objective)]
    return [objective_value(c["final_return_per_seed"], objective) for c in configs]
