"""``env=<library>/<id>`` for every id a library registers (hydra_plugins/purejaxrl_opt_envs): an id
without a file of its own composes to conf/env/any.yaml with that id, its tuned file (if any) still
applies, and a bad id or library is refused by the env registry before anything is compiled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from purejaxrl_opt.config.schema import ConfigError, from_dictconfig
from purejaxrl_opt.envs import registry
from purejaxrl_opt.train import run_from_config
from tests.conftest import compose

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = ("navix", "xminigrid", "jumanji", "craftax", "playground", "brax")


def test_an_id_without_a_file_composes_on_every_library():
    """The generated config is the same for every id (conf/env/any.yaml with the id; Playground's and
    Brax's with normalize_obs true, as their PPO does), so one id per library (the last it registers,
    without a file or a tuned file) stands for all of them; the registry checks the id."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    any_env = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "env" / "any.yaml"))
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        for library in LIBRARIES:
            name = registry.ids(library)[-1]
            assert not (ROOT / "conf" / "env" / library / f"{name}.yaml").exists()
            assert not list((ROOT / "conf" / "tuned").glob(f"*_{library}/{name}.yaml"))
            env_id = f"{library}/{name}"
            cfg = hydra_compose(config_name="config", overrides=[f"env={env_id}", "algo=trpo"])
            normalize_obs = library in ("playground", "brax")
            assert OmegaConf.to_container(cfg.env) == {**any_env, "id": env_id, "normalize_obs": normalize_obs}
            assert from_dictconfig(cfg).env.id == env_id


def test_an_id_without_a_file_keeps_its_tuned_file():
    assert not (ROOT / "conf" / "env" / "navix" / "Navix-DoorKey-8x8-v0.yaml").exists()
    cfg = compose("algo=ppo", "env=navix/Navix-DoorKey-8x8-v0")
    tuned = OmegaConf.load(ROOT / "conf" / "tuned" / "ppo_navix" / "Navix-DoorKey-8x8-v0.yaml")
    assert cfg.env.id == "navix/Navix-DoorKey-8x8-v0" and cfg.total_timesteps == tuned.total_timesteps
    assert cfg.algo.num_envs == tuned.algo.num_envs and cfg.env.params.max_steps_in_episode == 640
    # a file of the name wins over the generated config (any.yaml: normalize_obs false)
    assert compose("env=Pendulum-v1").env.normalize_obs is True


@pytest.mark.parametrize("override, fragment", [
    ("env=navix/Navix-Nope-v0", "navix has no env 'Navix-Nope-v0'; closest: ["),
    ("env=jumanji/Snake-v9", "jumanji has no env 'Snake-v9'; closest: ['Snake-v1'"),
    ("env=jumanji/Snake-v9", "its ids: ['Snake-v1', 'Game2048-v1'"),
    ("env=nolib/CartPole-v1", "unknown library 'nolib': must be '<library>/<id>' with a library among ["),
])
def test_an_unknown_id_or_library_is_refused_listing_what_exists(override, fragment):
    with pytest.raises(ConfigError) as info:
        from_dictconfig(compose(override))
    assert fragment in str(info.value)
    if "navix" in override:
        assert all(f"'{name}'" in str(info.value) for name in registry.ids("navix"))


def test_an_id_without_a_file_trains_one_update(tmp_path):
    name = "Navix-Empty-5x5-v0"
    assert not (ROOT / "conf" / "env" / "navix" / f"{name}.yaml").exists()
    cfg = compose(f"env=navix/{name}", "num_seeds=1", "total_timesteps=32", "algo.num_envs=4",
                  "algo.num_steps=8", "algo.num_minibatches=1", "algo.update_epochs=1", "logger=none",
                  "checkpoint.final=false", "progress.mode=off", "network.hidden_sizes=[8]",
                  "network.cnn_channels=[4]")
    run_from_config(cfg, str(tmp_path))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["env"] == f"navix/{name}" and summary["env_steps"] == 32
    rows = (tmp_path / "metrics.csv").read_text().strip().splitlines()
    assert len(rows) == 2  # the header and the one update
