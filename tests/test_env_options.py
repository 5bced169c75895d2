"""Env options (``env.params``) are checked before anything is built or compiled, on every library, by
one mechanism (purejaxrl_opt/envs/options.py): an unknown name lists the allowed ones, a wrong type or
a value out of range names ``env.params.<key>``, the value and what is allowed."""

from __future__ import annotations

import numpy as np
import pytest

from purejaxrl_opt import envs
from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.train import run_from_config
from tests.conftest import compose


@pytest.mark.parametrize("env_id, options, fragment", [
    # gymnax: EnvParams fields, typed by their defaults
    ("CartPole-v1", {"gravity": "heavy"}, "'env.params.gravity' = 'heavy' is invalid for CartPole-v1: must be a "
                                          "finite number"),
    ("CartPole-v1", {"gravity": float("nan")}, "'env.params.gravity' = nan"),
    ("CartPole-v1", {"max_steps_in_episode": "abc"}, "'env.params.max_steps_in_episode' = 'abc' is invalid for "
                                                     "CartPole-v1: must be an int >= 1"),
    ("CartPole-v1", {"max_steps_in_episode": -5}, "'env.params.max_steps_in_episode' = -5"),
    ("CartPole-v1", {"max_steps_in_episode": 2.5}, "'env.params.max_steps_in_episode' = 2.5"),
    ("Breakout-MinAtar", {"max_steps_in_episode": True}, "'env.params.max_steps_in_episode' = True"),
    ("Asterix-MinAtar", {"ramping": "yes"}, "'env.params.ramping' = 'yes' is invalid for Asterix-MinAtar: must "
                                            "be true or false"),
    ("MemoryChain-bsuite", {"memory_length": 0}, "'env.params.memory_length' = 0"),
    ("Acrobot-v1", {"available_torque": [1.0, -1.0]}, "'env.params.available_torque' = [1.0, -1.0] is invalid "
                                                      "for Acrobot-v1: must be a list of numbers of shape [3]"),
    ("CartPole-v1", {"gravit": 9.8}, "unknown config key 'env.params.gravit' for CartPole-v1; allowed: "
                                     "['force_mag', 'gravity',"),
    # Jumanji: the adapter's options and the constructor's, typed by its annotations
    ("jumanji/Snake-v1", {"num_rows": -3}, "'env.params.num_rows' = -3 is invalid for jumanji/Snake-v1: must "
                                           "be an int >= 1"),
    ("jumanji/Snake-v1", {"num_cols": "wide"}, "'env.params.num_cols' = 'wide'"),
    ("jumanji/Snake-v1", {"num_rows": 1, "num_cols": 1}, "the board needs at least 2 cells"),
    ("jumanji/Game2048-v1", {"board_size": 1}, "'env.params.board_size' = 1 is invalid for jumanji/Game2048-v1: "
                                               "must be an int >= 2"),
    ("jumanji/Maze-v0", {"max_steps_in_episode": 0}, "'env.params.max_steps_in_episode' = 0"),
    ("jumanji/Snake-v1", {"action_mask": "no"}, "'env.params.action_mask' = 'no'"),
    ("jumanji/Snake-v1", {"rows": 5}, "unknown config key 'env.params.rows' for jumanji/Snake-v1; allowed: "
                                      "['action_mask', 'max_steps_in_episode', 'num_cols', 'num_rows']"),
    # the adapters that had their own checks keep them, through the same mechanism
    ("navix/Navix-Empty-5x5-v0", {"flatten": "yes"}, "'env.params.flatten' = 'yes'"),
    ("xminigrid/MiniGrid-Empty-6x6", {"view_size": 4}, "'env.params.view_size' = 4 is invalid for "
                                                       "xminigrid/MiniGrid-Empty-6x6: must be an odd int >= 3"),
    ("craftax/Craftax-Classic-Symbolic-v1", {"spawn_cow_chance": -0.5}, "'env.params.spawn_cow_chance' = -0.5"),
    ("craftax/Craftax-Classic-Symbolic-v1", {"max_steps_in_episode": 0}, "'env.params.max_steps_in_episode' = 0"),
])
def test_a_bad_option_is_refused_naming_the_key(env_id, options, fragment):
    with pytest.raises(ConfigError) as info:
        envs.make(env_id, options)
    assert fragment in str(info.value)


def test_good_options_reach_the_library():
    env, params, spec = envs.make("CartPole-v1", {"gravity": 10, "max_steps_in_episode": np.int64(7)})
    assert params.gravity == 10.0 and isinstance(params.gravity, float) and params.max_steps_in_episode == 7
    assert spec.max_steps == 7
    _, params, _ = envs.make("Acrobot-v1", {"available_torque": [-2, 0, 2]})
    np.testing.assert_array_equal(np.asarray(params.available_torque), [-2.0, 0.0, 2.0])
    _, params, _ = envs.make("Asterix-MinAtar", {"shot_cool_down": 0})  # 0 = a shot every step
    assert params.shot_cool_down == 0
    env, params, spec = envs.make("jumanji/Snake-v1", {"num_rows": 1, "num_cols": 3, "max_steps_in_episode": 9})
    assert env._env.board_shape == (1, 3) and spec.max_steps == 9


@pytest.mark.parametrize("override, fragment", [
    ("+env.params.gravity=heavy", "'env.params.gravity' = 'heavy'"),
    ("+env.params.max_steps_in_episode=-5", "'env.params.max_steps_in_episode' = -5"),
])
def test_the_cli_refuses_a_bad_gymnax_option_before_compiling(tmp_path, override, fragment):
    with pytest.raises(ConfigError) as info:
        run_from_config(compose(override, "logger=none"), str(tmp_path))
    assert fragment in str(info.value)
    assert not (tmp_path / "summary.json").exists() and not (tmp_path / "metrics.csv").exists()
