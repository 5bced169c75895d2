"""Shared fixtures: small configs and one compiled PPO run reused across tests."""

from __future__ import annotations

import os

# keep tests on CPU and deterministic even where an accelerator is present
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# mujoco picks its OpenGL backend once, when first imported, and test modules import brax or Playground
# at collection, in file order: choose it as the Playground adapter does, before any of them
from purejaxrl_opt.envs.opengl import set_headless_gl  # noqa: E402

set_headless_gl()

import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

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


ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
# the CLI's config of a tiny run: PPO on CartPole, 2 seeds, 8 updates (a compile and a few seconds)
TINY = ["env=CartPole-v1", "algo=ppo", "num_seeds=2", "total_timesteps=4096", "eval_episodes=4"]


def _flat(items) -> list[str]:
    """Strings and lists of strings, in order, as one list."""
    return [s for item in items for s in ([item] if isinstance(item, str) else item)]


def compose_config(config_name: str, overrides, *, conf: Path = CONF, return_hydra_config: bool = False):
    """``conf/<config_name>.yaml`` with ``overrides`` as the CLI's Hydra composes it, unvalidated;
    ``return_hydra_config`` keeps the ``hydra`` section (launchers, sweepers)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(conf), version_base=None):
        return hydra_compose(config_name=config_name, overrides=list(overrides),
                             return_hydra_config=return_hydra_config)


def compose(*overrides, config_name: str = "config", conf: Path = CONF, return_hydra_config: bool = False):
    """The training CLI's config (conf/config.yaml with ``overrides``, each a string or a list of
    strings) as Hydra composes it, unvalidated."""
    return compose_config(config_name, _flat(overrides), conf=conf, return_hydra_config=return_hydra_config)


def cli_environment(**extra: str) -> dict:
    """This session's environment (JAX on CPU, the XLA cache and flags set above) for a CLI subprocess,
    so that it compiles the programs of this process and finds them in the cache; plus ``extra``."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **extra)
    # W&B runs made in a test process export their service's address: a CLI run that inherited it
    # would attach to that service, which keeps a killed child's run "in use"
    env.pop("WANDB_SERVICE", None)
    # a machine that sets PYTHONDONTWRITEBYTECODE would make every CLI process compile the package's
    # source again (~0.5 s each); the first one writes the bytecode, the others read it
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


@pytest.fixture(scope="session")
def cli_env() -> dict:
    """:func:`cli_environment` with W&B offline (a CLI run that logs to W&B never reaches a server)."""
    return cli_environment(WANDB_MODE="offline")


def cli(*args, module: str = "purejaxrl_opt.train", env: dict | None = None, timeout: int = 300,
        preexec_fn=None) -> subprocess.CompletedProcess:
    """``python -m <module> <args>`` (each a string or a list of strings) from the repository root in
    ``env`` (default :func:`cli_environment`), its output captured."""
    return subprocess.run([sys.executable, "-m", module, *_flat(args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, preexec_fn=preexec_fn,
                          env=cli_environment() if env is None else env)


@pytest.fixture()
def no_compile(monkeypatch):
    """Any compile of the runner fails the test: bad input must be refused before it."""
    from purejaxrl_opt.host import runner

    def _refuse(*args, **kwargs):
        raise AssertionError("compiled despite bad input")

    monkeypatch.setattr(runner, "Compiled", _refuse)


def small_run(algo=None, env_id="CartPole-v1", **run_kwargs) -> RunConfig:
    run = RunConfig(algo=algo or PPOConfig(), env=EnvConfig(id=env_id), **run_kwargs)
    run.validate()
    return run


@pytest.fixture(scope="session")
def cartpole_ppo_result():
    """PPO on CartPole, 2 seeds x 60k steps, trained through the runner (chunked, as the CLI does)."""
    from purejaxrl_opt.host import runner

    run = small_run(num_seeds=2, total_timesteps=60_000, eval_episodes=8)
    out = tempfile.mkdtemp(prefix="pjo_ppo_")
    return run, runner.execute(run, out, loggers=(), num_chunks=3), out


@pytest.fixture(scope="session")
def key():
    return jax.random.PRNGKey(0)
