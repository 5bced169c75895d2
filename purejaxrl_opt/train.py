"""Hydra entry point: compose -> validate -> build -> compile -> train -> write artifacts.

    python -m purejaxrl_opt.train algo=ppo env=CartPole-v1 seed=0 num_seeds=8 total_timesteps=500000
    python -m purejaxrl_opt.train -m algo=ppo,trpo seed=0,1          # Hydra multirun sweep
    python -m purejaxrl_opt.train -m hydra/launcher=parallel algo=ppo,trpo   # jobs in parallel (joblib)
    python -m purejaxrl_opt.train sweep.vmap='{algo.lr: [1e-4, 3e-4]}'       # in-compile sweep
    python -m purejaxrl_opt.train -m hydra/sweeper=optuna sweep.batch=8 hydra.sweeper.n_trials=32
                                                                  # search: 8 suggestions per compile
    python -m purejaxrl_opt.train checkpoint.every_updates=50                # then, after a crash:
    python -m purejaxrl_opt.train checkpoint.every_updates=50 resume=RUN_DIR
    python -m purejaxrl_opt.train algo=grpo env=lm/countdown model.path=MODEL  # a language model

Every run writes ``summary.json``, ``metrics.csv``, ``learning_curve.png``, its final checkpoint and
the resolved config (``.hydra/``) into its Hydra run directory (a resumed run: into ``RUN_DIR``, whose
recorded config stays the original run's). Errors in the input (the config, a run directory in use by
another run or that cannot be written, a mismatching or corrupt checkpoint) stop the run with one line
on stderr (exit status 2) before anything is compiled or written: Hydra writes nothing itself
(``hydra.output_subdir: null``, no log file), the config is recorded once the run has been validated
and holds the directory (purejaxrl_opt/host/rundir.py), and a run directory the refused run created is
removed again. A checkpoint that cannot be written ends the process at once (exit status 1, one line;
the results written so far stay, see runner.execute). ``main`` returns the run's objective
(``sweep.objective``: the mean, or the IQM, of the seeds' final returns), which is what Hydra's
sweepers optimise; see purejaxrl_opt/host/search.py.
"""

from __future__ import annotations

import dataclasses
import os
import sys


from purejaxrl_opt.host.xla_flags import set_default_xla_flags

set_default_xla_flags()

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from purejaxrl_opt.host import rundir
from purejaxrl_opt.formats.checkpoint import CheckpointError, CheckpointWriteError
from purejaxrl_opt.config.schema import ConfigError
from purejaxrl_opt.host.loggers import LoggerConfig
from purejaxrl_opt.host.settings import parse_parallel, parse_settings


def _default_wandb_group(logger: LoggerConfig) -> LoggerConfig:
    """In a Hydra multirun, the jobs of one sweep share a W&B group (unless one was given)."""
    if logger.kind == "wandb" and logger.group is None and HydraConfig.initialized():
        hydra_cfg = HydraConfig.get()
        if str(hydra_cfg.mode) == "RunMode.MULTIRUN":
            return dataclasses.replace(logger, group="sweep-" + str(hydra_cfg.sweep.dir).replace("/", "_"))
    return logger


def run_from_config(cfg: DictConfig, out_dir: str, on_validated=None):
    """Validate ``cfg`` and execute it into ``out_dir`` (or the ``resume`` dir); returns the result.

    Every check of the input (config.parse_settings: every section; then the sweep against the
    algorithm, W&B credentials, the device layout, the run directory's lock and checkpoints in the
    runner) runs before anything is compiled; ``on_validated(out_dir)`` runs once they all passed (a
    fresh run only: a resumed one keeps the original run's record).
    """
    from purejaxrl_opt.host import parallel

    # several processes (parallel.coordinator or the environment / SLURM): before JAX uses a device,
    # so before the env/network modules are imported
    parallel.initialize_distributed(parse_parallel(cfg))
    from purejaxrl_opt.host import loggers, runner, sweep

    settings = parse_settings(cfg)
    plan = sweep.plan_from_config(settings.sweep, settings.run)
    sinks = loggers.make_loggers(_default_wandb_group(settings.logger), settings.progress.mode)
    return runner.execute(settings.run, settings.resume or out_dir, sinks,
                          num_chunks=settings.progress.num_chunks, plan=plan,
                          checkpoints=settings.checkpoint, resume=settings.resume is not None,
                          parallel=settings.parallel, resume_step=settings.resume_step,
                          on_validated=None if settings.resume else on_validated)


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    # Hydra sets the root logger to INFO; JAX's backend probing ("Unable to initialize backend
    # 'tpu'") is not news to a user
    import logging

    logging.getLogger("jax").setLevel(logging.WARNING)
    out_dir = HydraConfig.get().runtime.output_dir
    try:
        from purejaxrl_opt.host.lm import runner as lm_runner

        if lm_runner.is_lm_run(cfg):  # env=lm/<task>: GRPO or PPO on a pretrained language model
            from purejaxrl_opt.host import parallel

            parallel.initialize_distributed(parse_parallel(cfg))  # before JAX uses a device
            return lm_runner.main(cfg, HydraConfig.get().runtime.output_dir)
        batched = _batched_search_job(cfg)
        result = run_from_config(cfg, out_dir, on_validated=lambda d: rundir.write_hydra_record(d, cfg))
    except ConfigError as error:
        _refused(f"configuration error: {error}", out_dir)
    except CheckpointError as error:
        _refused(f"checkpoint error: {error}", out_dir)
    except rundir.RunDirError as error:
        _refused(str(error), out_dir)
    except CheckpointWriteError as error:
        # the results so far are on disk; a chunk of updates may still be running on the device,
        # and a normal exit would wait for it
        rundir.discard_if_empty(out_dir)
        print(f"purejaxrl_opt: checkpoint write failed: {error}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    finally:
        rundir.discard_if_empty(out_dir)  # a resume's own (empty) Hydra run dir
    from purejaxrl_opt.host import sweep

    # the objective (sweep.objective over the seeds' final returns); a job of a batched search
    # returns one value per suggestion it trained (purejaxrl_opt/host/search.py tells each its own)
    return sweep.run_objective(result.summary, str(cfg.sweep.objective), per_config=batched)


def _refused(message: str, out_dir: str):
    """One line on stderr and exit status 2; the run dir is removed if this process created it and
    nothing was written into it."""
    rundir.discard_if_empty(out_dir)
    print(f"purejaxrl_opt: {message}", file=sys.stderr)
    sys.exit(2)


def _batched_search_job(cfg: DictConfig) -> bool:
    """Whether this run is a job of a batched search (``sweep.batch > 1``); ``sweep.batch`` means
    nothing outside ``-m hydra/sweeper=optuna``, so there it is refused."""
    from purejaxrl_opt.config.schema import parse_section
    from purejaxrl_opt.host.sweep import SweepConfig

    section = parse_section(SweepConfig, cfg.get("sweep"), "sweep")
    if section.batch == 1:
        return False
    target = str(OmegaConf.select(HydraConfig.get(), "sweeper._target_", default=""))
    if not target.endswith(".BatchedOptunaSweeper"):
        raise ConfigError(f"config key 'sweep.batch' = {section.batch} is invalid here: batches of "
                          "suggestions need the search sweeper, python -m purejaxrl_opt.train -m "
                          "hydra/sweeper=optuna sweep.batch=K ...; a plain run or grid is sweep.batch=1")
    return True


if __name__ == "__main__":
    main()
