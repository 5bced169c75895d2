"""Hyperparameter search: Optuna (TPE / random / CMA-ES) through Hydra's sweeper, K trials per compile.

    python -m purejaxrl_opt.train -m hydra/sweeper=optuna env=Acrobot-v1 hydra.sweeper.n_trials=32
    python -m purejaxrl_opt.train -m hydra/sweeper=optuna env=Acrobot-v1 hydra.sweeper.n_trials=32 \\
        sweep.batch=8 hydra/sweeper/sampler=random 'algo.lr=tag(log, interval(1e-4, 1e-2))'

**Search space.** ``conf/hydra/sweeper/optuna.yaml`` holds a default range for every in-compile
sweepable key of each algorithm (``spaces.<algo>``, in Hydra's override syntax: ``interval``,
``tag(log, interval(...))``, ``choice``, ``range``). ``hydra.sweeper.params`` (when set) replaces the
algorithm's default space; sweep overrides on the command line add or replace single keys, and a
plain value on the command line (``algo.vf_coef=0.5``) pins a key and takes it out of the space.
Every key and every range end is validated against the run config before anything is launched (a
:class:`ConfigError` naming the key).

**Objective.** Each trial's score is ``sweep.objective`` over its ``num_seeds`` seeds' final returns
(``final_return_per_seed``: a seed's final policy's mean return over ``eval_episodes`` episodes,
deterministic by default): ``mean`` (what ``train.main`` returned before) or ``iqm``; the direction is
``maximize``. Every trial sees the same seeds ``seed .. seed + num_seeds - 1`` (tune on seeds < 1000,
experiments/SEEDS.md).

**Batches.** With ``sweep.batch=K`` the sweeper asks Optuna for K suggestions, launches ONE job whose
``sweep.vmap`` (mode zip) holds the K suggested values of every searched key, and tells trial ``i``
the objective of the job's config ``i`` (its ``num_seeds`` lanes); the job compiles once for all K.
Only the algorithm's sweepable keys (:mod:`purejaxrl_opt.host.sweep`) can then be searched; shape-changing
keys (``algo.num_envs``, network sizes) need ``sweep.batch=1``, one job and one compile per trial.
``hydra.sweeper.n_jobs`` jobs are launched at once (the launcher's parallelism, e.g.
``hydra/launcher=parallel``), so a round asks ``n_jobs * K`` suggestions before telling any.

The sweep dir gets Optuna's ``optimization_results.yaml`` (``best_params``, ``best_value``) plus
every trial's number, value, params and job dir, rewritten after each round.
"""

from __future__ import annotations

import functools
import logging
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

# optuna imports alembic, whose plugin set-up logs a line per plugin at INFO (Hydra shows INFO)
logging.getLogger("alembic").setLevel(logging.WARNING)

import optuna  # noqa: E402
from hydra_plugins.hydra_optuna_sweeper._impl import OptunaSweeperImpl, create_params_from_overrides  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402
from optuna.distributions import BaseDistribution, CategoricalDistribution  # noqa: E402

from purejaxrl_opt.host import sweep as in_compile  # noqa: E402
from purejaxrl_opt.config.schema import ConfigError, from_dictconfig, parse_section  # noqa: E402
from purejaxrl_opt.host.sweep import SweepConfig  # noqa: E402

log = logging.getLogger(__name__)

# sweep keys the sweeper sets on a batched job itself
_RESERVED = ("sweep.vmap", "sweep.mode", "sweep.random")


def distribution_bounds(distribution: BaseDistribution) -> list:
    """The values a range can produce at its ends (every choice of a categorical)."""
    if isinstance(distribution, CategoricalDistribution):
        return list(distribution.choices)
    return [distribution.low, distribution.high]


def _base_config(config: DictConfig) -> DictConfig:
    """The composed run config without the ``hydra`` node (whose job fields are not set yet)."""
    raw = OmegaConf.to_container(config, resolve=False)
    raw.pop("hydra", None)
    return OmegaConf.create(raw)


def check_space(config: DictConfig, space: Mapping[str, BaseDistribution],
                fixed: Mapping[str, Any], batch: int) -> None:
    """Refuse, before anything is launched, a searched key that does not exist (or, with
    ``batch > 1``, is not in-compile sweepable) and a range whose ends are invalid values of it."""
    base = _base_config(config)
    run = from_dictconfig(base)
    if not space:
        raise ConfigError("hydra/sweeper=optuna has an empty search space: set hydra.sweeper.params "
                          "or give a range on the command line, e.g. 'algo.lr=interval(1e-4, 1e-3)'")
    for key in _RESERVED:
        value = fixed.get(key, OmegaConf.select(base, key))
        if batch > 1 and value not in (None, "null", "grid"):
            raise ConfigError(f"config key '{key}' = {value!r} cannot be set with sweep.batch="
                              f"{batch}: the search sets it on each job (the batch's suggestions)")
    for key, distribution in space.items():
        if batch > 1:
            try:
                in_compile._check_key(key, run)
            except ConfigError as error:
                raise ConfigError(f"search key '{key}' cannot be batched (sweep.batch={batch}): "
                                  f"{error}; search it with sweep.batch=1") from None
        elif OmegaConf.select(base, key, default="__missing__") == "__missing__":
            raise ConfigError(f"search key '{key}' does not exist in the run config (a typo? "
                              f"algorithm keys are 'algo.<name>', e.g. algo.lr)")
        for value in distribution_bounds(distribution):
            try:
                if batch > 1:
                    in_compile.plan_from_config({"vmap": {key: [value]}}, run)
                else:
                    trial = base.copy()
                    OmegaConf.update(trial, key, value, merge=False)
                    from_dictconfig(trial)
            except ConfigError as error:
                raise ConfigError(f"search range of '{key}' reaches {value!r}, an invalid value: "
                                  f"{error}") from None


def batched_overrides(params: Sequence[Mapping[str, Any]], fixed: Mapping[str, Any]) -> list[str]:
    """One job's overrides: the fixed values, and ``sweep.vmap`` holding the suggestions in order."""
    keys = list(params[0])
    columns = ", ".join(f"{key}: [{', '.join(repr(float(p[key])) for p in params)}]" for key in keys)
    return [f"{name}={value}" for name, value in fixed.items()] + [
        f"sweep.vmap={{{columns}}}", "sweep.mode=zip"]


class BatchedOptunaSweeperImpl(OptunaSweeperImpl):
    """Optuna's Hydra sweeper with per-algorithm default spaces, checks before launching, and
    ``sweep.batch`` suggestions per job (module docstring)."""

    def __init__(self, *, spaces: Mapping | None = None, **optuna_settings: Any) -> None:
        super().__init__(**optuna_settings)
        self.spaces = spaces or {}

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        section = parse_section(SweepConfig, OmegaConf.to_container(config.sweep, resolve=True), "sweep")
        self.batch, self.objective = section.batch, section.objective

    # ------------------------------------------------------------------ the search space
    def _parse_sweeper_params_config(self) -> list[str]:
        """``hydra.sweeper.params`` when set, else the algorithm's default space."""
        params = self.params
        if not params:
            name = str(self.config.algo.name)
            params = self.spaces.get(name)
            if params is None:
                raise ConfigError(f"hydra/sweeper=optuna has no default space for algo '{name}' "
                                  f"(spaces for {sorted(self.spaces)}): set hydra.sweeper.params")
        return [f"{key!s}={value}" for key, value in params.items()]

    def _space(self, arguments: list[str]) -> tuple[dict, dict]:
        self._process_searchspace_config()
        overrides = self._parse_sweeper_params_config() + list(arguments)
        parsed_space, fixed = create_params_from_overrides(overrides)
        space = dict(self.search_space_distributions or {})
        space.update(parsed_space)
        for name in fixed:  # a value on the command line pins the key
            space.pop(name, None)
        return space, fixed

    def _grid(self, space: dict) -> None:
        if isinstance(self.sampler, functools.partial) and self.sampler.func == optuna.samplers.GridSampler:
            choices = {name: self._to_grid_sampler_choices(d) for name, d in space.items()}
            self.sampler = self.sampler(choices)
            self.n_trials = min(self.n_trials, math.prod(len(v) for v in choices.values()))

    # ------------------------------------------------------------------ the loop
    def sweep(self, arguments: list[str]) -> None:
        space, fixed = self._space(arguments)
        check_space(self.config, space, fixed, self.batch)
        directions = self._get_directions()
        if directions != ["maximize"]:
            raise ConfigError(f"config key 'hydra.sweeper.direction' = {directions} is invalid: must "
                              "be maximize (the objective is a return)")
        self._grid(space)
        study = optuna.create_study(study_name=self.study_name, storage=self.storage,
                                    sampler=self.sampler, directions=directions, load_if_exists=True)
        log.info(f"Study {study.study_name}: {type(self.sampler).__name__}, {self.n_trials} trials, "
                 f"{self.batch} per job, objective {self.objective} over seeds, space "
                 f"{ {k: str(v) for k, v in space.items()} }")
        self.records: list[dict] = []
        remaining = self.n_trials
        while remaining > 0:
            size = min(remaining, self.batch * self.n_jobs)
            trials = [study.ask() for _ in range(size)]
            self._configure_trials(trials, space, fixed)  # suggests every trial's values
            groups = [trials[i:i + self.batch] for i in range(0, size, self.batch)]
            if self.batch > 1:
                jobs = [batched_overrides([t.params for t in group], fixed) for group in groups]
            else:
                jobs = [[f"{k}={v}" for k, v in {**t.params, **fixed}.items()] for t in trials]
            returns = self.launcher.launch(jobs, initial_job_idx=self.job_idx)
            self.job_idx += len(returns)
            failures = sum(self._tell(study, group, ret) for group, ret in zip(groups, returns))
            remaining -= size
            self._write_results(study)
            if failures / size > self.max_failure_rate:
                for ret in returns:
                    ret.return_value  # noqa: B018 - re-raises the job's own error
                raise RuntimeError(f"{failures} of {size} trials failed (NaN objective), more than "
                                   f"hydra.sweeper.max_failure_rate={self.max_failure_rate}")

    def _tell(self, study, trials: list, ret) -> int:
        """Tell each trial of one job its own config's objective; returns the failed trials."""
        values = ret.return_value  # raises the job's error
        values = list(values) if isinstance(values, (list, tuple)) else [values]
        if len(values) != len(trials):
            raise RuntimeError(f"a job of {len(trials)} trials returned {len(values)} values")
        job_dir = OmegaConf.select(ret.hydra_cfg, "hydra.runtime.output_dir") if ret.hydra_cfg else None
        failed = 0
        for config, (trial, value) in enumerate(zip(trials, values)):
            value = float(value)
            if math.isfinite(value):
                study.tell(trial, value)
            else:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                failed += 1
            log.info(f"trial {trial.number}: {self.objective} {value:.6g}  {trial.params}"
                     + (f"  (job {job_dir}, config {config})" if self.batch > 1 else f"  ({job_dir})"))
            self.records.append({"number": trial.number, "value": value if math.isfinite(value) else None,
                                 "params": dict(trial.params), "job": job_dir,
                                 "config": config if self.batch > 1 else None})
        return failed

    def _write_results(self, study) -> None:
        completed = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        results: dict = {"name": "optuna", "objective": self.objective, "direction": "maximize",
                         "sampler": type(self.sampler).__name__, "batch": self.batch,
                         "jobs": self.job_idx, "trials_done": len(self.records)}
        if completed:
            best = study.best_trial
            results.update(best_params=dict(best.params), best_value=best.value, best_trial=best.number)
        results["trials"] = self.records
        path = Path(str(self.config.hydra.sweep.dir)) / "optimization_results.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(OmegaConf.create(results), path)
