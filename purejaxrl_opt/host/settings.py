"""Everything a training run is given, parsed and checked once before anything compiles
(``python -m purejaxrl_opt.train``): the run config (:mod:`purejaxrl_opt.config.schema`) and the
sections the host reads around it, each defined beside the code that reads it (progress: host/progress.py,
checkpoint: formats/checkpoint.py, parallel: host/parallel.py, logger: host/loggers.py, sweep:
host/sweep.py). The top-level keys a run may have are derived from :class:`Settings` and
:class:`~purejaxrl_opt.config.schema.RunConfig`, never listed by hand."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from purejaxrl_opt.config.schema import RunConfig, _check, _raw, check_top_level, from_dictconfig, parse_section
from purejaxrl_opt.formats import checkpoint
from purejaxrl_opt.formats.checkpoint import CheckpointConfig
from purejaxrl_opt.host.loggers import LoggerConfig
from purejaxrl_opt.host.parallel import ParallelConfig
from purejaxrl_opt.host.progress import ProgressConfig
from purejaxrl_opt.host.sweep import SweepConfig


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


# the sections read outside the training function (logging, output, launch): Settings' fields whose type
# is a section class (built by parse_section), by name
OUTER_SECTIONS: dict[str, type] = {
    f.name: cls for f in dataclasses.fields(Settings)
    if dataclasses.is_dataclass(cls := globals().get(str(f.type))) and cls is not RunConfig}
# top-level keys of a composed config that are not RunConfig's: Settings' other fields, and Hydra's own
# (out_dir: older recorded configs)
OUTER_KEYS: frozenset[str] = frozenset(
    {f.name for f in dataclasses.fields(Settings) if f.name != "run"} | {"hydra", "out_dir"})
# every top-level key of a training run's config
TOP_LEVEL_KEYS: frozenset[str] = frozenset({f.name for f in dataclasses.fields(RunConfig)} | OUTER_KEYS)


def parse_parallel(cfg: Any) -> ParallelConfig:
    """Only the ``parallel`` section: read before JAX starts (jax.distributed needs to come first)."""
    return parse_section(ParallelConfig, _raw(cfg).get("parallel"), "parallel")


def parse_settings(cfg: Any) -> Settings:
    """Validate a composed Hydra config into :class:`Settings`; every error is a ConfigError."""
    raw = _raw(cfg)
    check_top_level(raw, TOP_LEVEL_KEYS)
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
