"""conf/tuned/<algo>_playground/<task>.yaml: ``env=playground/<task>`` composes Playground's env node
(normalised observations) and, for every algorithm, its tuned file (command-line overrides still win,
``~tuned`` drops it); PPO's files include Playground's mapped config (``/playground_ppo/<task>``) and
state only their deliberate differences; the composed config validates."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

pytest.importorskip("mujoco_playground")

from tests.conftest import ROOT, compose as _compose  # noqa: E402

TASKS = ("CartpoleBalance", "PendulumSwingup", "AcrobotSwingup")
ALGOS = ("ppo", "trpo", "grpo")


def _leaves(tree, prefix=""):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("task", TASKS)
def test_env_file_and_tuned_file_compose(task, algo):
    from purejaxrl_opt.config.schema import from_dictconfig

    tuned_path = ROOT / "conf" / "tuned" / f"{algo}_playground" / f"{task}.yaml"
    tuned = OmegaConf.to_container(OmegaConf.load(tuned_path))
    cfg = _compose([f"algo={algo}", f"env=playground/{task}"])
    assert cfg.env.id == f"playground/{task}" and cfg.env.normalize_obs is True
    if algo == "ppo":
        assert tuned.pop("defaults") == [f"/playground_ppo/{task}", "_self_"]
        assert cfg.algo.num_steps == 480 and cfg.algo.lr == 1e-3  # from the mapped node
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
    from purejaxrl_opt.core.algos.ppo import PPOConfig

    assert plain.algo.num_envs == PPOConfig().num_envs and plain.total_timesteps == 500000


def test_brax_config_keeps_playgrounds_tuned_keys_and_scales_three(tmp_path):
    """experiments/peer_brax_ppo.py: the peer's config is Playground's brax_ppo_config with
    only num_envs, batch_size (num_envs / 2: 16 unrolls per env per training step, as at 2048 / 1024),
    num_timesteps and num_evals changed; and a stopped peer's log yields its finished seeds only."""
    import sys

    sys.path.insert(0, str(ROOT / "experiments"))
    import peer_brax_ppo as sbs
    from purejaxrl_opt.host import readers
    from mujoco_playground.config import dm_control_suite_params

    configs = sbs.brax_config("CartpoleBalance", 32, 153_600)
    tuned, scaled = configs["tuned"], configs["scaled"]
    assert tuned == dict(dm_control_suite_params.brax_ppo_config("CartpoleBalance"))
    changed = {k for k in tuned if tuned[k] != scaled[k]}
    assert changed == {"num_envs", "batch_size", "num_timesteps", "num_evals"}
    assert (scaled["batch_size"] * scaled["num_minibatches"] / scaled["num_envs"]
            == tuned["batch_size"] * tuned["num_minibatches"] / tuned["num_envs"] == 16)
    assert scaled["num_evals"] == 2  # one evaluation block: 32/2 x 30 x 32 x 10 resets = 153,600 steps
    # brax 0.14.2's training/sps multiplies one timed training_epoch call's steps by num_resets_per_eval
    # (10 here), whose loop runs outside the timed call: the suite's reader divides it back out
    assert scaled["num_resets_per_eval"] == 10
    with pytest.raises(SystemExit, match="multiple of Brax's evaluation block, 153600"):
        sbs.brax_config("CartpoleBalance", 32, 100_000)
    log = tmp_path / "peer.log"
    log.write_text("noise\nbrax CartpoleBalance seed 7 step 0: eval 319.4 sps nan wall 421.17 s\n"
                   "brax CartpoleBalance seed 7 step 153600: eval 740.6 sps 714 wall 2502.47 s\n"
                   "brax CartpoleBalance seed 8 step 0: eval 300.0 sps nan wall 10.0 s\n")
    record = sbs.record_from_log(log, "CartpoleBalance", 153_600, 32)
    assert record["seeds"] == [7] and record["per_seed"][0]["final_return"] == 740.6
    assert record["per_seed"][0]["env_steps_per_s"] == 714.0
    stored = tmp_path / "brax.json"
    stored.write_text(json.dumps({**record, "per_seed": record["per_seed"] * 1}))
    read = readers.brax_ppo_json(stored, [7], {})
    assert read["final_returns"] == [740.6] and read["env_steps_per_s"] == 71.4
