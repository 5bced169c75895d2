"""Shared fixtures: small configs and one compiled PPO run reused across tests."""

from __future__ import annotations

import os

# keep tests on CPU and deterministic even where an accelerator is present
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import tempfile  # noqa: E402

# Tests build the same programs many times (a run and its chunked, resumed or swept twin, CLI runs of
# one config): XLA's persistent cache, keyed by the program itself, compiles each once per test
# session (per xdist worker). Set in the environment before JAX starts, so the CLI subprocesses the
# tests launch share it too. A fresh directory per session: nothing carries over between sessions.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", tempfile.mkdtemp(prefix="pjo_xla_cache_"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

# Tests compile far more than they run: most programs train a few thousand steps. LLVM at -O0 halves
# XLA:CPU's compile time (PPO CartPole: 10.8 s at the default level, 8.0 s at 1, 4.8 s at 0) and runs
# small programs ~4x slower, a net saving of minutes over the suite. A level the user set wins; CLI
# subprocesses inherit it, so a test and the CLI run it launches compile the same program.
# XLA:CPU's older (non-"fusion emitter") kernel generator compiles the same programs in half the time
# (PPO CartPole, -O0: 7.3 s -> 3.4 s) and ran them as fast (7.5 s for 60k steps either way).
TEST_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")
for _flag in TEST_XLA_FLAGS:
    if _flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()

import jax  # noqa: E402
import pytest  # noqa: E402

from purejaxrl_opt.config.schema import EnvConfig, RunConfig  # noqa: E402
from purejaxrl_opt.core.algos.ppo import PPOConfig  # noqa: E402


def compose(*overrides: str):
    """The training CLI's config (conf/config.yaml with ``overrides``) as Hydra composes it, unvalidated."""
    from pathlib import Path

    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        return hydra_compose(config_name="config", overrides=list(overrides))


def small_run(algo=None, env_id="CartPole-v1", **run_kwargs) -> RunConfig:
    run = RunConfig(algo=algo or PPOConfig(), env=EnvConfig(id=env_id), **run_kwargs)
    run.validate()
    return run


@pytest.fixture(scope="session")
def cartpole_ppo_result():
    """PPO on CartPole, 2 seeds x 60k steps, trained through the runner (chunked, as the CLI does)."""
    import tempfile

    from purejaxrl_opt.host import runner

    run = small_run(num_seeds=2, total_timesteps=60_000, eval_episodes=8)
    out = tempfile.mkdtemp(prefix="pjo_ppo_")
    return run, runner.execute(run, out, loggers=(), num_chunks=3), out


@pytest.fixture(scope="session")
def key():
    return jax.random.PRNGKey(0)
