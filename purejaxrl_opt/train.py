"""Hydra entry point: compose -> validate -> build -> compile -> train -> write artifacts.

    python -m purejaxrl_opt.train algo=ppo env=CartPole-v1 seed=0 num_seeds=8 total_timesteps=500000
    python -m purejaxrl_opt.train -m algo=ppo,trpo seed=0,1          # Hydra multirun sweep

Every run writes ``summary.json``, ``metrics.csv`` and the resolved config (``.hydra/``) into its
Hydra run directory. Configuration errors stop the run before anything is compiled or written.
"""

from __future__ import annotations

import os
import sys


def _default_xla_flags() -> None:
    """On CPU-only installs, compile with LLVM optimisation level 1 unless the user chose one.

    Measured on the CartPole PPO run: compile 9.1 s -> 7.0 s, identical training throughput. Set
    before JAX initialises its backend; a user's own ``--xla_backend_optimization_level`` wins.
    """
    import importlib.util

    flags = os.environ.get("XLA_FLAGS", "")
    has_gpu_plugin = any(importlib.util.find_spec(name) is not None for name in
                         ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin", "libtpu"))
    if "xla_backend_optimization_level" not in flags and not has_gpu_plugin:
        os.environ["XLA_FLAGS"] = (flags + " --xla_backend_optimization_level=1").strip()


_default_xla_flags()

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from purejaxrl_opt.config import ConfigError, from_dictconfig

PROGRESS_MODES = ("auto", "bar", "lines", "off")


def run_from_config(cfg: DictConfig, out_dir: str):
    """Validate ``cfg`` and execute it into ``out_dir``; returns the runner's result."""
    from purejaxrl_opt import loggers, runner

    run = from_dictconfig(cfg)
    progress = OmegaConf.select(cfg, "progress.mode", default="auto")
    if progress not in PROGRESS_MODES:
        raise ConfigError(f"config key 'progress.mode' = {progress!r} is invalid: must be one of "
                          f"{list(PROGRESS_MODES)}")
    chunks = OmegaConf.select(cfg, "progress.chunks", default=10)
    if not isinstance(chunks, int) or chunks < 1:
        raise ConfigError(f"config key 'progress.chunks' = {chunks!r} is invalid: must be an int >= 1")
    logger_cfg = OmegaConf.to_container(cfg.logger, resolve=True) if "logger" in cfg else {}
    sinks = loggers.make_loggers(logger_cfg, progress)
    return runner.execute(run, out_dir, sinks, num_chunks=chunks if progress != "off" else 1)


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    try:
        result = run_from_config(cfg, HydraConfig.get().runtime.output_dir)
    except ConfigError as error:
        print(f"purejaxrl_opt: configuration error: {error}", file=sys.stderr)
        sys.exit(2)
    return result.summary["final_return_mean"]


if __name__ == "__main__":
    main()
