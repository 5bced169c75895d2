"""Hydra entry point: compose -> validate -> build -> compile -> train -> write artifacts.

    python -m purejaxrl_opt.train algo=ppo env=CartPole-v1 seed=0 num_seeds=8 total_timesteps=500000
    python -m purejaxrl_opt.train -m algo=ppo,trpo seed=0,1          # Hydra multirun sweep
    python -m purejaxrl_opt.train -m hydra/launcher=parallel algo=ppo,trpo   # jobs in parallel (joblib)
    python -m purejaxrl_opt.train sweep.vmap='{algo.lr: [1e-4, 3e-4]}'       # in-compile sweep
    python -m purejaxrl_opt.train checkpoint.every_updates=50                # then, after a crash:
    python -m purejaxrl_opt.train checkpoint.every_updates=50 resume=RUN_DIR

Every run writes ``summary.json``, ``metrics.csv``, ``learning_curve.png``, its final checkpoint and
the resolved config (``.hydra/``) into its Hydra run directory (a resumed run: into ``RUN_DIR``).
Configuration errors stop the run before anything is compiled or written.
"""

from __future__ import annotations

import os
import sys


from purejaxrl_opt.xla_flags import set_default_xla_flags

set_default_xla_flags()

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from purejaxrl_opt.checkpoint import CheckpointError
from purejaxrl_opt.config import ConfigError, check_section_keys, from_dictconfig

PROGRESS_MODES = ("auto", "bar", "lines", "off")


def checkpoint_settings(cfg: DictConfig):
    from purejaxrl_opt.runner import CheckpointSettings

    section = OmegaConf.to_container(cfg.checkpoint, resolve=True) if "checkpoint" in cfg else {}
    section = dict(section or {})
    allowed = {"every_updates", "final", "keep"}
    check_section_keys("checkpoint", section, allowed)
    every = section.get("every_updates", 0)
    if not isinstance(every, int) or isinstance(every, bool) or every < 0:
        raise ConfigError(f"config key 'checkpoint.every_updates' = {every!r} is invalid: must be an "
                          "int >= 0 (0 = no periodic checkpoints)")
    final = section.get("final", True)
    if not isinstance(final, bool):
        raise ConfigError(f"config key 'checkpoint.final' = {final!r} is invalid: must be a bool")
    keep = section.get("keep")
    if keep is not None and (not isinstance(keep, int) or isinstance(keep, bool) or keep < 1):
        raise ConfigError(f"config key 'checkpoint.keep' = {keep!r} is invalid: must be null or an "
                          "int >= 1")
    return CheckpointSettings(every, final, keep)


def resume_dir(cfg: DictConfig) -> str | None:
    """The run dir to continue, checked to hold at least one finished checkpoint."""
    from purejaxrl_opt import checkpoint

    resume = OmegaConf.select(cfg, "resume", default=None)
    if resume is None:
        return None
    if not isinstance(resume, str) or not os.path.isdir(resume):
        raise ConfigError(f"config key 'resume' = {resume!r} is invalid: must be an existing run "
                          "directory")
    if not checkpoint.available_steps(resume):
        raise ConfigError(f"config key 'resume' = {resume!r}: no checkpoint in "
                          f"{checkpoint.checkpoint_dir(resume)} (a run writes checkpoints with "
                          "checkpoint.every_updates=N, and its final one with checkpoint.final=true)")
    return resume


def _default_wandb_group(logger_cfg: dict) -> dict:
    """In a Hydra multirun, the jobs of one sweep share a W&B group (unless one was given)."""
    if logger_cfg.get("kind") == "wandb" and logger_cfg.get("group") is None and HydraConfig.initialized():
        hydra_cfg = HydraConfig.get()
        if str(hydra_cfg.mode) == "RunMode.MULTIRUN":
            logger_cfg = {**logger_cfg, "group": "sweep-" + str(hydra_cfg.sweep.dir).replace("/", "_")}
    return logger_cfg


def run_from_config(cfg: DictConfig, out_dir: str):
    """Validate ``cfg`` and execute it into ``out_dir`` (or the ``resume`` dir); returns the result.

    Every check of the input (config keys and values, the sweep, checkpoint settings, the resume dir,
    W&B credentials) runs here or in the runner before anything is compiled.
    """
    from purejaxrl_opt import parallel

    # several processes (parallel.coordinator or the environment / SLURM): before JAX uses a device,
    # so before the env/network modules are imported
    parallel.initialize_distributed(
        OmegaConf.to_container(cfg.parallel, resolve=True) if "parallel" in cfg else None)
    from purejaxrl_opt import loggers, runner, sweep
    run = from_dictconfig(cfg)
    progress = OmegaConf.select(cfg, "progress.mode", default="auto")
    if progress not in PROGRESS_MODES:
        raise ConfigError(f"config key 'progress.mode' = {progress!r} is invalid: must be one of "
                          f"{list(PROGRESS_MODES)}")
    chunks = OmegaConf.select(cfg, "progress.chunks", default=10)
    if not isinstance(chunks, int) or chunks < 1:
        raise ConfigError(f"config key 'progress.chunks' = {chunks!r} is invalid: must be an int >= 1")
    sweep_cfg = OmegaConf.to_container(cfg.sweep, resolve=True) if "sweep" in cfg else None
    plan = sweep.plan_from_config(sweep_cfg, run)
    checkpoints = checkpoint_settings(cfg)
    resume = resume_dir(cfg)
    section = OmegaConf.to_container(cfg.parallel, resolve=True) if "parallel" in cfg else None
    parallel_settings = parallel.settings_from_config(section)
    logger_cfg = OmegaConf.to_container(cfg.logger, resolve=True) if "logger" in cfg else {}
    sinks = loggers.make_loggers(_default_wandb_group(dict(logger_cfg or {})), progress)
    return runner.execute(run, resume or out_dir, sinks, num_chunks=chunks if progress != "off" else 1,
                          plan=plan, checkpoints=checkpoints, resume=resume is not None,
                          parallel=parallel_settings)


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    # Hydra sets the root logger to INFO; JAX's backend probing ("Unable to initialize backend
    # 'tpu'") is not news to a user
    import logging

    logging.getLogger("jax").setLevel(logging.WARNING)
    try:
        result = run_from_config(cfg, HydraConfig.get().runtime.output_dir)
    except ConfigError as error:
        print(f"purejaxrl_opt: configuration error: {error}", file=sys.stderr)
        sys.exit(2)
    except CheckpointError as error:
        print(f"purejaxrl_opt: checkpoint error: {error}", file=sys.stderr)
        sys.exit(2)
    return result.summary["final_return_mean"]


if __name__ == "__main__":
    main()
