"""Checkpoint and resume on MuJoCo Playground: the MJX state carries arrays with no elements (e.g.
``data.act`` of shape ``(n, 32, 0)``, ``contact.*``), which orbax refuses to write; the checkpoint keeps
them by shape (purejaxrl_opt/formats/checkpoint.py). PPO and TRPO, the tuned Playground configs with a tiny
budget: checkpointed at update 2 of 4, restored, trained on -> bitwise the uninterrupted run (every
leaf of the final training state, the metrics included). One compile per algorithm, reused by both runs.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")
if importlib.util.find_spec("mujoco_playground") is None:  # (found, not imported: ~3 s at collection)
    pytest.skip("mujoco_playground is not installed", allow_module_level=True)

import jax  # noqa: E402

from purejaxrl_opt.core import algos
from purejaxrl_opt.formats import checkpoint
from purejaxrl_opt.host import runner, sweep  # noqa: E402
from purejaxrl_opt.config.schema import from_dictconfig  # noqa: E402

from conftest import compose  # noqa: E402

SMALL = {"ppo": ["algo.num_envs=4", "algo.num_steps=16", "algo.num_minibatches=2", "algo.update_epochs=1"],
         "trpo": ["algo.num_envs=4", "algo.num_steps=16"]}


@pytest.mark.slow  # a Playground compile per algorithm (~100 s each on 2 CPU cores)
@pytest.mark.parametrize("algo_name", ["ppo", "trpo"])
def test_playground_checkpoint_resume_is_bitwise(algo_name, tmp_path):
    run = from_dictconfig(compose(f"algo={algo_name}", "env=playground/CartpoleBalance", "num_seeds=1",
                                  "total_timesteps=256", "eval_episodes=1", *SMALL[algo_name]))
    algo = algos.make_algorithm(run)
    assert algo.num_updates == 4
    keys, hparams = sweep.lane_inputs(run, None)
    shape = runner.loop_shape(algo, keys, hparams)
    empty = [leaf.shape for leaf in jax.tree_util.tree_leaves(shape) if int(np.prod(leaf.shape)) == 0]
    assert empty, "the MJX state has no zero-size arrays: this test no longer checks them"
    fingerprint = checkpoint.fingerprint(run, None, shape)
    compiled = runner.Compiled(algo, keys, hparams)

    saver = checkpoint.Checkpointer(tmp_path, fingerprint)
    full, _ = runner.train_lanes(compiled, keys, hparams, algo.num_updates, 4, checkpoint_every=2,
                                 on_checkpoint=lambda loop, _: saver.save(loop, runner.update_reached(loop)))
    saver.close()
    assert checkpoint.available_steps(tmp_path) == [2, 4]

    restored, step = checkpoint.restore(tmp_path, fingerprint, shape, step=2)
    assert step == 2
    resumed, _ = runner.train_lanes(compiled, keys, hparams, algo.num_updates, 4, loop=restored)
    final, _ = checkpoint.restore(tmp_path, fingerprint, shape)  # the final checkpoint, zero-size leaves too
    for a, b, c in zip(*(jax.tree_util.tree_leaves(jax.device_get(t)) for t in (full, resumed, final))):
        a, b, c = np.asarray(a), np.asarray(b), np.asarray(c)
        assert a.shape == b.shape == c.shape and a.dtype == b.dtype == c.dtype
        assert a.tobytes() == b.tobytes() == c.tobytes()
