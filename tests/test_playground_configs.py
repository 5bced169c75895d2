"""conf/env/playground/<task>.yaml and conf/tuned/<algo>_playground/<task>.yaml: ``env=playground/<task>``
composes the env file and, for every algorithm, its tuned file (command-line overrides still win,
``~tuned`` drops it); the composed config validates."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

pytest.importorskip("mujoco_playground")

ROOT = Path(__file__).resolve().parents[1]
TASKS = ("CartpoleBalance", "PendulumSwingup", "AcrobotSwingup")
ALGOS = ("ppo", "trpo", "grpo")


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return compose(config_name="config", overrides=overrides)


def _leaves(tree, prefix=""):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("task", TASKS)
def test_env_file_and_tuned_file_compose(task, algo):
    from purejaxrl_opt.config import from_dictconfig

    tuned_path = ROOT / "conf" / "tuned" / f"{algo}_playground" / f"{task}.yaml"
    tuned = OmegaConf.to_container(OmegaConf.load(tuned_path))
    cfg = _compose([f"algo={algo}", f"env=playground/{task}"])
    assert cfg.env.id == f"playground/{task}" and cfg.env.normalize_obs is True
    leaves = dict(_leaves(tuned))
    assert leaves, tuned_path
    for key, value in leaves.items():
        assert OmegaConf.select(cfg, key) == value, key
    run = from_dictconfig(cfg)  # validates every key (and the env id through the adapter's ids)
    assert run.algo.name == algo and run.total_timesteps == tuned["total_timesteps"]


def test_command_line_wins_and_tuned_can_be_dropped():
    cfg = _compose(["algo=ppo", "env=playground/CartpoleBalance", "algo.lr=0.123"])
    assert cfg.algo.lr == 0.123
    plain = _compose(["algo=ppo", "env=playground/CartpoleBalance", "~tuned"])
    algo_default = OmegaConf.load(ROOT / "conf" / "algo" / "ppo.yaml")
    assert plain.algo.num_envs == algo_default.num_envs and plain.total_timesteps == 500000
