"""Each default is written once: ``algo=<name>`` composes the defaults of the algorithm's config class
(there is no conf/algo/), ``env=<gymnax id>`` without a file composes conf/env/any.yaml with that id,
and the lists of keys are derived from the dataclasses (hydra_plugins/purejaxrl_opt_envs, host/settings.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.config.schema import ALGORITHMS, EnvConfig, RunConfig, algo_config
from tests.conftest import compose

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_algo_group_is_the_config_class_defaults(name):
    cls = algo_config(name)
    assert cls.__module__ == ALGORITHMS[name] and cls().name == name
    # ~tuned: the node alone, as a file holding every default would compose it
    cfg = compose(f"algo={name}", "env=CartPole-v1", "~tuned")
    assert OmegaConf.to_container(cfg.algo) == dataclasses.asdict(cls())
    assert list(cfg.algo) == [f.name for f in dataclasses.fields(cls)]
    assert not (ROOT / "conf" / "algo").exists()


def test_unknown_algo_and_env_name_what_is_allowed():
    from hydra.errors import MissingConfigException

    with pytest.raises(MissingConfigException) as info:
        compose("algo=nope")
    assert all(name in str(info.value) for name in ALGORITHMS)
    from purejaxrl_opt.config.schema import from_dictconfig

    with pytest.raises(ConfigError, match=r"config key 'env.id' = 'CartPole-v9' is invalid: must be one of "
                                          r"\['CartPole-v1'.*'Breakout-MinAtar'.*'Addition-v0'"):
        from_dictconfig(compose("env=CartPole-v9"))


def test_gymnax_id_without_a_file_is_any_yaml_with_that_id_and_keeps_its_tuned_file():
    any_env = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "env" / "any.yaml"))
    assert not (ROOT / "conf" / "env" / "Breakout-MinAtar.yaml").exists()
    cfg = compose("env=Breakout-MinAtar")
    assert OmegaConf.to_container(cfg.env) == {**any_env, "id": "Breakout-MinAtar"}
    # conf/tuned/ppo_Breakout-MinAtar.yaml still applies
    tuned = OmegaConf.load(ROOT / "conf" / "tuned" / "ppo_Breakout-MinAtar.yaml")
    assert cfg.total_timesteps == tuned.total_timesteps


def test_key_lists_are_derived_from_the_dataclasses():
    from purejaxrl_opt.host import loggers, settings, sweep
    from purejaxrl_opt.host.lm import runner as lm_runner

    run_keys = {f.name for f in dataclasses.fields(RunConfig)}
    outer = {f.name for f in dataclasses.fields(settings.Settings)} - {"run"}
    assert settings.TOP_LEVEL_KEYS == run_keys | outer | {"hydra", "out_dir"}
    assert lm_runner.TOP_KEYS == settings.TOP_LEVEL_KEYS | {"model", "lm"}
    assert set(settings.OUTER_SECTIONS) == {"progress", "checkpoint", "parallel", "logger", "sweep"}
    assert loggers.WandB.MODES == loggers.LoggerConfig.WANDB_MODES
    # every top-level key of the run (eval_every, init_from, ...) is swept with multirun, not in-compile
    run = RunConfig(algo=algo_config("ppo")(), env=EnvConfig(id="CartPole-v1"))
    for key in sorted(run_keys - {"algo"}):
        with pytest.raises(ConfigError, match=f"sweep key '{key}' cannot be swept inside one compile"):
            sweep.plan_from_config({"vmap": {key: [1, 2]}}, run)
