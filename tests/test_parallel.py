"""Multi-device execution on simulated CPU devices (purejaxrl_opt/host/parallel.py).

The device count must be set before JAX initialises, and this pytest process already has one CPU
device, so the multi-device checks run in a subprocess with
``XLA_FLAGS=--xla_force_host_platform_device_count=4``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import pytest

from purejaxrl_opt.host import parallel
from purejaxrl_opt.config.schema import ConfigError
from purejaxrl_opt.core.algos.ppo import PPOConfig
from tests.conftest import TEST_XLA_FLAGS, small_run

ROOT = Path(__file__).resolve().parents[1]


def run_with_devices(code: str, devices: int = 4, timeout: int = 240) -> str:
    # the suite's compile-time flags (tests/conftest.py): these programs compile far more than they run
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT),
               XLA_FLAGS=f"--xla_force_host_platform_device_count={devices} " + " ".join(TEST_XLA_FLAGS))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


# one agent's data-parallel training on a 1 x `data` mesh, for the subprocess scripts below; they
# define `run` first
DATA_PARALLEL_PRELUDE = """
import jax, numpy as np
from jax.sharding import Mesh
from purejaxrl_opt.core import algos
from purejaxrl_opt.host import parallel, runner, sweep
from purejaxrl_opt.core.algos.ppo import PPOConfig
from purejaxrl_opt.core.algos.trpo import TRPOConfig
from tests.conftest import small_run


def train(run, data):
    algo, data_algo = algos.make_algorithm(run), algos.make_algorithm(run, axis_name="data")
    keys, hparams = sweep.lane_inputs(run)
    devices = np.asarray(jax.devices()[:data], dtype=object).reshape(1, data)
    layout = parallel.Layout(Mesh(devices, ("lanes", "data")), 1, data)
    compiled = runner.Compiled(algo, keys, hparams, layout, data_algo)
    loop, _ = runner.train_lanes(compiled, keys, hparams, algo.num_updates, 2)
    return loop, np.asarray(compiled.evaluate(loop))
"""


CHECKS = {
    # 4 lanes over 4 devices: every lane's metrics, params and eval returns are those of the
    # unsharded run of the same lane (the single-seed run of that seed). Another program (shard_map
    # over 4 devices vs one jit), so floats within a tolerance; 4 updates are too few for a
    # last-bit difference to flip a sampled action
    "lanes": """
        import tempfile
        import jax, numpy as np
        from purejaxrl_opt.core import algos
        from purejaxrl_opt.host import parallel, runner, sweep
        from tests.conftest import small_run
        assert len(jax.devices()) == 4
        run = small_run(num_seeds=4, total_timesteps=2048, eval_episodes=2)
        sharded = runner.execute(run, tempfile.mkdtemp(), num_chunks=2,
                                 parallel=parallel.ParallelConfig("auto"))
        assert sharded.summary["parallel"] == {"devices": 4, "lane_shards": 4, "data": 1}
        assert len(sharded.loop.algo_state.params["actor"]["params"]["Dense_0"]["kernel"]
                   .sharding.device_set) == 4
        train = jax.jit(jax.vmap(algos.make_train(run)))  # unsharded, one lane at a time
        keys = sweep.lane_keys(range(run.seed, run.seed + run.num_seeds))
        for lane in range(4):
            ref = train(keys[lane:lane + 1])
            for name, values in ref.metrics.items():
                np.testing.assert_allclose(np.asarray(values),
                                           np.asarray(sharded.loop.metrics[name])[lane:lane + 1],
                                           rtol=1e-4, atol=1e-6, err_msg=name)
            np.testing.assert_allclose(np.asarray(ref.eval_returns), sharded.eval_returns[lane:lane + 1],
                                       rtol=1e-5)
            jax.tree_util.tree_map(
                lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b)[lane:lane + 1],
                                                        rtol=1e-4, atol=1e-6),
                ref.loop.algo_state.params, sharded.loop.algo_state.params)
        pass
    """,
    # one agent's 8 envs over 4 devices == the same agent on one device (update_epochs=1,
    # num_minibatches=1, so minibatch composition is irrelevant), within float tolerance: the
    # cross-device mean is another summation order
    "data_ppo": """
        run = small_run(PPOConfig(num_envs=8, num_steps=32, update_epochs=1, num_minibatches=1),
                        num_seeds=1, total_timesteps=8 * 32 * 4, eval_episodes=4)

        one, one_eval = train(run, 1)
        four, four_eval = train(run, 4)
        env_state = four.algo_state.env.obs
        assert env_state.shape[1] == 8 and len(env_state.sharding.device_set) == 4
        jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6),
                               one.algo_state.params, four.algo_state.params)
        for name in one.metrics:
            np.testing.assert_allclose(np.asarray(one.metrics[name]), np.asarray(four.metrics[name]),
                                       rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_array_equal(np.asarray(one.metrics["episodes"]),
                                      np.asarray(four.metrics["episodes"]))
        np.testing.assert_array_equal(one_eval, four_eval)
        print("DATA_OK", float(np.nanmax(np.abs(np.asarray(one.metrics["value_loss"])
                                                 - np.asarray(four.metrics["value_loss"])))))
    """,
    # Brax's in-loss GAE over unrolls (algo.recompute_advantages): the same agreement; the advantage
    # normalisation's statistics are those of the global minibatch
    "data_ppo_unrolls": """
        run = small_run(PPOConfig(num_envs=8, num_steps=32, update_epochs=1, num_minibatches=1, unroll_length=8,
                                  recompute_advantages=True),
                        num_seeds=1, total_timesteps=8 * 32 * 4, eval_episodes=4)
        (one, _), (four, _) = train(run, 1), train(run, 4)
        jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6),
                               one.algo_state.params, four.algo_state.params)
        for name in one.metrics:
            np.testing.assert_allclose(np.asarray(one.metrics[name]), np.asarray(four.metrics[name]),
                                       rtol=1e-4, atol=1e-5, err_msg=name)
    """,
    # the layout rules and the layout errors, raised before compiling (no training here)
    "layouts": """
        import tempfile
        from purejaxrl_opt.host import parallel, runner
        from purejaxrl_opt.config.schema import ConfigError, NetworkConfig
        from purejaxrl_opt.core.algos.ppo import PPOConfig
        from tests.conftest import small_run
        run = small_run(PPOConfig(num_envs=4, num_steps=32, num_minibatches=2, update_epochs=2), num_seeds=2)
        # auto: the largest number of equal lane blocks that fits the devices (per data group)
        for lanes, data, shards in [(1, 1, 1), (2, 1, 2), (3, 1, 3), (4, 1, 4), (6, 1, 3), (8, 1, 4),
                                    (7, 1, 1), (3, 2, 1), (4, 2, 2), (6, 2, 2)]:
            layout = parallel.make_layout(parallel.ParallelConfig("auto", data), run, lanes)
            assert layout.describe() == {"devices": shards * data, "lane_shards": shards, "data": data}
        assert parallel.make_layout(parallel.ParallelConfig("off"), run, 8).describe()["devices"] == 1
        for bad, settings, words in [
                (run, parallel.ParallelConfig("auto", 8), "only 4 device"),
                (run, parallel.ParallelConfig("auto", 3), "does not divide the 4 devices"),
                (small_run(PPOConfig(num_envs=6), num_seeds=2), parallel.ParallelConfig("off", 4),
                 "num_envs"),
                # recurrent: minibatches of whole env sequences from each device's 2 envs, not 4
                (small_run(PPOConfig(num_envs=4, num_minibatches=4), num_seeds=2,
                           network=NetworkConfig(recurrent="gru")), parallel.ParallelConfig("auto", 2),
                 "num_minibatches must divide 2"),
                # recompute_advantages: minibatches of whole unrolls from each device's 4 unrolls, not 8
                (small_run(PPOConfig(num_envs=4, num_steps=32, num_minibatches=8, unroll_length=16,
                                     recompute_advantages=True), num_seeds=2),
                 parallel.ParallelConfig("auto", 2), "num_minibatches must divide 4")]:
            try:
                runner.execute(bad, tempfile.mkdtemp(), parallel=settings)
            except ConfigError as error:
                assert words in str(error), error
            else:
                raise AssertionError(f"no error for {settings}")
        pass
    """,
    # execute() with parallel.data=2 on 4 devices (2 lane shards x 2)
    "runner": """
        import tempfile
        import numpy as np
        from purejaxrl_opt.host import parallel, runner
        from purejaxrl_opt.config.schema import ConfigError
        from purejaxrl_opt.core.algos.ppo import PPOConfig
        from tests.conftest import small_run
        ppo = PPOConfig(num_envs=4, num_steps=32, num_minibatches=2, update_epochs=2)
        run = small_run(ppo, num_seeds=2, total_timesteps=4 * 32 * 3, eval_episodes=2)
        result = runner.execute(run, tempfile.mkdtemp(), parallel=parallel.ParallelConfig("auto", 2))
        assert result.summary["parallel"] == {"devices": 4, "lane_shards": 2, "data": 2}
        assert np.isfinite(result.loop.metrics["value_loss"]).all()
        pass
    """,
}


def _run_checks(names: list[str]) -> str:
    """The named 4-device checks in one subprocess (one interpreter and JAX start instead of one per
    test); each check's outcome (OK or its traceback) is printed under its name."""
    functions = "".join(f"\ndef check_{name}():\n" + textwrap.indent(textwrap.dedent(CHECKS[name]), "    ")
                        for name in names)
    driver = textwrap.dedent("""
        import traceback
        for name in %r:
            try:
                globals()["check_" + name]()
                print(f"CHECK {name} OK", flush=True)
            except Exception:
                print(f"CHECK {name} FAILED\\n{traceback.format_exc()}END {name}", flush=True)
    """) % (names,)
    return run_with_devices(DATA_PARALLEL_PRELUDE + functions + driver, timeout=560)


@pytest.fixture(scope="module")
def four_devices():
    """Lane sharding over 4 devices (the fast tier's multi-device check)."""
    return _run_checks(["lanes", "layouts"])


@pytest.fixture(scope="module")
def four_devices_data():
    """Data parallelism over 4 devices: two more programs per check, so the slow tier."""
    return _run_checks(["data_ppo", "data_ppo_unrolls", "runner"])


def _check(output: str, name: str) -> None:
    if f"CHECK {name} OK" not in output:
        start = output.find(f"CHECK {name} FAILED")
        raise AssertionError(output[start:output.find(f"END {name}", start)] if start >= 0 else output[-3000:])


def test_lane_sharding_gives_the_per_lane_results(four_devices):
    _check(four_devices, "lanes")


def test_device_layouts_and_their_errors_before_compiling(four_devices):
    _check(four_devices, "layouts")


@pytest.mark.slow  # two compiles over 4 devices; the layouts are checked in the fast tier above
def test_data_parallel_ppo_matches_one_device_on_the_same_batch(four_devices_data):
    _check(four_devices_data, "data_ppo")


@pytest.mark.slow
def test_data_parallel_ppo_with_in_loss_gae_matches_one_device(four_devices_data):
    _check(four_devices_data, "data_ppo_unrolls")


@pytest.mark.slow
def test_data_parallel_through_the_runner_and_layout_errors(four_devices_data):
    _check(four_devices_data, "runner")


@pytest.mark.slow
def test_data_parallel_trpo_matches_one_device_on_the_same_batch():
    """TRPO's 8 envs over 4 devices == the same data-parallel code on a 1-device mesh (critic_epochs=1,
    critic_minibatches=1, fvp_subsample=1: no per-device sampling), within float tolerance; the
    line search takes the same decisions (backtracks, kl) everywhere."""
    out = run_with_devices(DATA_PARALLEL_PRELUDE + textwrap.dedent("""
        run = small_run(TRPOConfig(num_envs=8, num_steps=32, critic_epochs=1, critic_minibatches=1,
                                   fvp_subsample=1.0),
                        num_seeds=1, total_timesteps=8 * 32 * 4, eval_episodes=4)

        (one, _), (four, _) = train(run, 1), train(run, 4)
        assert len(four.algo_state.env.obs.sharding.device_set) == 4
        jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
                               one.algo_state.actor_params, four.algo_state.actor_params)
        jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
                               one.algo_state.critic_params, four.algo_state.critic_params)
        for name in one.metrics:
            np.testing.assert_allclose(np.asarray(one.metrics[name]), np.asarray(four.metrics[name]),
                                       rtol=1e-4, atol=1e-5, err_msg=name)
        for name in ("backtracks", "episodes", "nan_steps"):
            np.testing.assert_array_equal(np.asarray(one.metrics[name]),
                                          np.asarray(four.metrics[name]), err_msg=name)
        assert (np.asarray(four.metrics["backtracks"]) >= 0).any()  # some steps were accepted
        print("TRPO_DATA_OK", np.asarray(four.metrics["backtracks"]).ravel().tolist())
    """))
    assert "TRPO_DATA_OK" in out


def test_one_device_layout_is_inactive_and_settings_are_validated():
    run = small_run(num_seeds=3)
    layout = parallel.make_layout(parallel.ParallelConfig(), run, 3, devices=jax.devices()[:1])
    assert not layout.active and layout.describe() == {"devices": 1, "lane_shards": 1, "data": 1}
    with pytest.raises(ConfigError, match="parallel.lanes"):
        parallel.settings_from_config({"lanes": "all"})
    with pytest.raises(ConfigError, match="parallel.data"):
        parallel.settings_from_config({"data": 0})
    with pytest.raises(ConfigError, match="parallel.bogus"):
        parallel.settings_from_config({"bogus": 1})
    with pytest.raises(ConfigError, match="parallel.lane_loop.*vmap.*map"):
        parallel.settings_from_config({"lane_loop": "scan"})
    with pytest.raises(ConfigError, match="only 1 device"):
        parallel.make_layout(parallel.ParallelConfig("auto", 2), small_run(PPOConfig()), 1,
                             devices=jax.devices()[:1])


@pytest.mark.slow  # for the fast tier's time; the lane vmap and the lane shards keep fast checks here
def test_lane_loop_map_gives_each_lane_its_single_seed_run(tmp_path):
    """``parallel.lane_loop=map`` runs a device's lanes one after another (lax.map), each the
    unbatched program of a one-lane run: lane k of a 2-seed run agrees with the vmapped lane k (params
    and every metric; the program sits inside a loop there, so floats agree within a tolerance: last
    bits differ), which is the single-seed run of seed + k (tests/test_ppo.py,
    test_same_seed_same_numbers_and_lane_equals_single_seed_run)."""
    import numpy as np

    from purejaxrl_opt.host import runner

    config = PPOConfig(num_envs=4, num_steps=32, num_minibatches=2, update_epochs=2)
    run = small_run(config, num_seeds=2, total_timesteps=4 * 32 * 4, eval_episodes=2)
    mapped = runner.execute(run, tmp_path / "map", loggers=(), num_chunks=2,
                            parallel=parallel.ParallelConfig("off", lane_loop="map"))
    vmapped = runner.execute(run, tmp_path / "vmap", loggers=(), num_chunks=2,
                             parallel=parallel.ParallelConfig("off"))
    assert mapped.summary["parallel"]["lane_loop"] == "map"

    def close(a, b):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)

    jax.tree_util.tree_map(lambda a, b: close(np.asarray(a), np.asarray(b)),
                           mapped.loop.algo_state.params, vmapped.loop.algo_state.params)
    for name, values in vmapped.loop.metrics.items():
        close(np.asarray(mapped.loop.metrics[name]), np.asarray(values))
    np.testing.assert_array_equal(np.asarray(mapped.loop.metrics["episodes"]),
                                  np.asarray(vmapped.loop.metrics["episodes"]))
    assert not np.array_equal(np.asarray(mapped.loop.metrics["return_mean"])[0],
                              np.asarray(mapped.loop.metrics["return_mean"])[1])  # two different lanes


WORKER = """
import os, sys
from purejaxrl_opt.host import parallel
port, pid, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
info = parallel.initialize_distributed({"coordinator": f"127.0.0.1:{port}", "num_processes": 2,
                                        "process_id": pid, "init_timeout_s": 60})
import jax, numpy as np
from purejaxrl_opt.host import runner
from purejaxrl_opt.core.algos.ppo import PPOConfig
from purejaxrl_opt.formats.checkpoint import CheckpointConfig
from tests.conftest import small_run
assert jax.process_count() == 2 and len(jax.devices()) == 2, jax.devices()
run = small_run(PPOConfig(num_envs=4, num_steps=32, num_minibatches=2, update_epochs=2), num_seeds=1,
                total_timesteps=4 * 32 * 3, eval_episodes=2)
result = runner.execute(run, out, num_chunks=2, parallel=parallel.ParallelConfig("auto", 2),
                        checkpoints=CheckpointConfig(final=True))
assert result.summary["parallel"] == {"devices": 2, "lane_shards": 1, "data": 2}
params = parallel.to_host(result.loop.algo_state.params)
flat = np.concatenate([np.asarray(x).ravel() for x in jax.tree_util.tree_leaves(params)])
np.save(os.path.join(os.path.dirname(out), f"params_{pid}.npy"), flat)
print("WORKER_OK", pid)
"""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_two_processes_train_one_data_parallel_agent(tmp_path):
    """jax.distributed on 127.0.0.1 (gloo CPU collectives): one agent's envs split over the two
    processes' devices; both end with identical params, only process 0 writes artifacts."""
    import numpy as np

    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    env.pop("XLA_FLAGS", None)
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(port), str(pid), str(tmp_path / f"out{pid}")],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for pid in (0, 1)]
    try:
        logs = [proc.communicate(timeout=240)[0] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for pid, (proc, log) in enumerate(zip(procs, logs)):
        assert proc.returncode == 0 and f"WORKER_OK {pid}" in log, log[-3000:]
    np.testing.assert_array_equal(np.load(tmp_path / "params_0.npy"), np.load(tmp_path / "params_1.npy"))
    assert {p.name for p in (tmp_path / "out0").iterdir()} >= {"summary.json", "metrics.csv", "checkpoints"}
    assert not (tmp_path / "out1").exists()  # process 1 wrote nothing


def test_unreachable_coordinator_is_a_clear_error_within_the_timeout():
    import time

    start = time.monotonic()
    with pytest.raises(ConfigError, match="unreachable after 2 s"):
        parallel.initialize_distributed({"coordinator": f"127.0.0.1:{_free_port()}",
                                         "num_processes": 2, "process_id": 1, "init_timeout_s": 2})
    assert time.monotonic() - start < 10
    with pytest.raises(ConfigError, match="process_id"):
        parallel.initialize_distributed({"coordinator": "127.0.0.1:1", "num_processes": 2,
                                         "process_id": 2})
