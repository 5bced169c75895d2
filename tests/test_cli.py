"""The Hydra CLI: artifacts, overrides, and bad input failing early with a clear message."""

from __future__ import annotations

import pytest

from purejaxrl_opt.config.schema import ConfigError, EnvConfig, RunConfig, from_dictconfig
from purejaxrl_opt.core.algos.ppo import PPOConfig
from tests.conftest import TINY, cli, compose
from tests import cli_lifecycle


# A CLI run's artifacts (summary.json, metrics.csv, the resolved config, the console lines) are checked
# on the uninterrupted CLI run of tests/test_kill_and_resume.py (test_a_cli_run_writes_its_artifacts).


@pytest.mark.parametrize("override, fragment", [
    ("algo.num_minibatches=3", "'algo.num_minibatches' = 3"),
    ("total_timesteps=100", "'total_timesteps' = 100"),
    ("algo.lr=fast", "'algo.lr' = 'fast'"),
    ("algo.clip_eps=-0.1", "'algo.clip_eps' = -0.1"),
    ("algo.anneal_lr=1", "'algo.anneal_lr' = 1"),
    ("+algo.not_a_key=1", "unknown config key 'algo.not_a_key'"),
    ("network.activation=softsign", "'network.activation' = 'softsign'"),
    ("progress.mode=loud", "'progress.mode' = 'loud'"),
])
def test_bad_values_fail_before_compiling_without_artifacts(tmp_path, override, fragment):
    from purejaxrl_opt.train import run_from_config

    with pytest.raises(ConfigError) as info:
        run_from_config(compose(override), str(tmp_path))
    assert fragment in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_bad_value_from_the_command_line_exits_cleanly(tmp_path):
    out = tmp_path / "bad"
    proc = cli("algo.num_minibatches=3", "logger=none", f"hydra.run.dir={out}", timeout=120)
    assert proc.returncode == 2
    assert "configuration error" in proc.stderr and "num_minibatches" in proc.stderr
    assert "Traceback" not in proc.stderr and "compiled" not in proc.stdout
    assert not (out / "summary.json").exists() and not (out / "metrics.csv").exists()


def test_unknown_algo_or_env_group_lists_options(tmp_path):
    proc = cli("algo=nope", f"hydra.run.dir={tmp_path}", timeout=120)
    assert proc.returncode != 0 and "algo/nope" in proc.stderr and "ppo" in proc.stderr
    proc = cli("env=CartPole-v9", f"hydra.run.dir={tmp_path}", timeout=120)
    assert proc.returncode != 0 and "CartPole-v1" in proc.stderr


def test_unknown_top_level_key_is_refused():
    from purejaxrl_opt.host.settings import parse_settings

    with pytest.raises(ConfigError, match=r"unknown config key 'num_seed'; allowed top-level keys: \[.*'logger'.*"
                                          r"'num_seeds'.*'resume_step'.*'total_timesteps'"):
        parse_settings({"algo": {"name": "ppo"}, "env": {"id": "CartPole-v1"}, "num_seed": 3})


def test_validation_messages_name_key_value_and_allowed():
    run = RunConfig(algo=PPOConfig(num_minibatches=5), env=EnvConfig(id="CartPole-v1"))
    with pytest.raises(ConfigError) as info:
        run.validate()
    text = str(info.value)
    assert "num_minibatches" in text and "5" in text and "divisor" in text and "512" in text
    with pytest.raises(ConfigError, match="env.id"):
        RunConfig(algo=PPOConfig(), env=EnvConfig(id="Nope-v0")).validate()
    with pytest.raises(ConfigError, match="env.params.not_a_field"):
        from purejaxrl_opt import envs

        envs.make("CartPole-v1", {"not_a_field": 1})


def test_whole_numbers_in_float_notation_are_ints_and_fractions_are_refused():
    # YAML reads 1e5 as 100000.0; a budget is a count, so a whole float is taken as that int
    run = from_dictconfig(compose("total_timesteps=1e5", "algo.num_envs=4.0"))
    assert run.total_timesteps == 100000 and isinstance(run.total_timesteps, int)
    assert run.algo.num_envs == 4 and isinstance(run.algo.num_envs, int)
    with pytest.raises(ConfigError, match=r"'total_timesteps' = 100000.5 .*an int"):
        from_dictconfig(compose("total_timesteps=100000.5"))


@pytest.mark.parametrize("overrides, error, message", [
    (["sweep.vmap={}"], ConfigError, "'sweep.vmap' is empty"),
    (["sweep.vmap={algo.bogus: [1, 2]}"], ConfigError, "'algo.bogus' does not exist"),
    (["sweep.vmap={algo.num_envs: [2, 4]}"], ConfigError, "Hydra multirun"),
    (["resume=/nonexistent/run"], ConfigError, "must be an existing run directory"),
    (["checkpoint.every_updates=-1"], ConfigError, "'checkpoint.every_updates'"),
    (["progress.mode=loud"], ConfigError, "'progress.mode'"),
    (["logger=wandb", "+logger.colour=red"], ConfigError, "unknown config key 'logger.colour'"),
])
def test_bad_input_fails_before_compiling(no_compile, tmp_path, overrides, error, message):
    from purejaxrl_opt.train import run_from_config

    with pytest.raises(error, match=message.replace("(", r"\(")):
        run_from_config(compose(TINY + overrides), str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_unknown_launcher_is_a_clear_error(cli_env, tmp_path):
    done = cli(["-m", "hydra/launcher=nope", "seed=0,1", f"hydra.sweep.dir={tmp_path}"], env=cli_env)
    assert done.returncode != 0
    assert "Could not find 'hydra/launcher/nope'" in done.stderr and "parallel" in done.stderr
    assert not list(tmp_path.rglob("summary.json"))


@pytest.mark.parametrize("algo", cli_lifecycle.matrix_params("gymnax"))
def test_cli_train_evaluate_gif_kill_and_resume(algo, tmp_path):
    """Through the CLI with a user's defaults: train, evaluate (--gif), SIGKILL after a checkpoint,
    resume= -> metrics.csv bitwise the uninterrupted run's (tests/cli_lifecycle.py)."""
    cli_lifecycle.check_library("gymnax", algo, tmp_path)

