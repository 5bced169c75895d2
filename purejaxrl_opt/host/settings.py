"""Everything a training run is given, parsed and checked once before anything compiles
(``python -m purejaxrl_opt.train``): the run config (:mod:`purejaxrl_opt.config.schema`) and the
sections the host reads around it (progress, checkpoints, resume, devices, logger, sweep)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from purejaxrl_opt.config.schema import (CheckpointConfig, LoggerConfig, ParallelConfig, ProgressConfig,
                                         RunConfig, SweepConfig, _check, _raw, from_dictconfig,
                                         parse_section)
from purejaxrl_opt.formats import checkpoint


@dataclass(frozen=True)
class Settings:
    """Everything a training run is given, parsed and checked once (``python -m purejaxrl_opt.train``)."""

    run: RunConfig
    progress: ProgressConfig
    checkpoint: CheckpointConfig
    resume: str | None  # a run dir with at least one checkpoint
    parallel: ParallelConfig
    logger: LoggerConfig
    sweep: SweepConfig
    resume_step: int | None = None  # the checkpoint (update) to resume from; None = the newest


# keys consumed outside the training function (logging, output, launch), each a section type
OUTER_SECTIONS: dict[str, type] = {"progress": ProgressConfig, "checkpoint": CheckpointConfig,
                                   "parallel": ParallelConfig, "logger": LoggerConfig,
                                   "sweep": SweepConfig}


def parse_parallel(cfg: Any) -> ParallelConfig:
    """Only the ``parallel`` section: read before JAX starts (jax.distributed needs to come first)."""
    return parse_section(ParallelConfig, _raw(cfg).get("parallel"), "parallel")


def parse_settings(cfg: Any) -> Settings:
    """Validate a composed Hydra config into :class:`Settings`; every error is a ConfigError."""
    raw = _raw(cfg)
    run = from_dictconfig(raw)
    sections = {name: parse_section(cls, raw.get(name), name) for name, cls in OUTER_SECTIONS.items()}
    resume, resume_step = raw.get("resume"), raw.get("resume_step")
    if resume_step is not None:
        _check(isinstance(resume_step, int) and not isinstance(resume_step, bool) and resume_step >= 1,
               "resume_step", resume_step, "null or the update (an int >= 1) of a checkpoint of the "
               "run dir given by resume")
        _check(resume is not None, "resume_step", resume_step, "null unless resume=RUN_DIR is set")
    if resume is not None:
        _check(isinstance(resume, str), "resume", resume, "an existing run directory")
        checkpoint.check_resume_dir(resume, resume_step)
    return Settings(run=run, resume=resume, resume_step=resume_step, **sections)
