"""experiments/device_check.py: the measurement plan covers every env x algorithm at 1/8/32/1024 lanes,
heavy measurements never displace an env when the budget runs out, every planned config validates,
and the script runs end to end on the CPU and writes its JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))


def test_plan_covers_every_env_and_algo_at_every_lane_count_widest_first():
    import device_check as dc

    full = dc.plan(small=False)
    assert len(full) == len(set(full)) == len(dc.ENVS) * len(dc.ALGOS) * 4
    for env_id in dc.ENVS:
        for algo in dc.ALGOS:
            assert {lanes for e, a, lanes in full if (e, a) == (env_id, algo)} == {1, 8, 32, 1024}
    # the first round (1 and 1024 lanes) of every env comes before any middle point
    first_middle = min(i for i, (_, _, lanes) in enumerate(full) if lanes in (8, 32))
    assert {(e, a) for e, a, lanes in full[:first_middle]} == {(e, a) for e in dc.ENVS for a in dc.ALGOS}
    small = dc.plan(small=True)
    assert {e for e, _, _ in small} == set(dc.ENVS) and max(lanes for *_, lanes in small) == 2
    # --lanes: one round per given lane count, in that order
    assert dc.plan(False, ["Breakout-MinAtar"], ["ppo"], [1024, 32]) == [("Breakout-MinAtar", "ppo", 1024),
                                                                        ("Breakout-MinAtar", "ppo", 32)]


def test_every_planned_config_validates():
    pytest.importorskip("mujoco_playground")
    pytest.importorskip("craftax")
    import device_check as dc

    for env_id, algo, lanes in dc.plan(small=False) + dc.plan(small=True):
        run = dc.run_config(env_id, algo, lanes, updates=3, small=lanes <= 2)
        assert run.num_seeds == lanes and run.algo.name == algo
    for env_id, lanes in dc.SYNC_CHECK:
        run = dc.run_config(env_id, dc.SYNC_ALGO, lanes, updates=3, small=False)
        assert run.algo.name == "grpo" and run.algo.check_every == 1


def test_small_run_writes_its_json(tmp_path):
    """The device script's dry run on the CPU, in the fast tier: two small compiles of CartPole PPO."""
    out = tmp_path / "check.json"
    env = dict(os.environ, DEVICE_CHECK_SMALL="1", JAX_PLATFORMS="cpu")
    subprocess.run([sys.executable, str(ROOT / "experiments" / "device_check.py"), "--out", str(out),
                    "--envs", "CartPole-v1", "--algos", "ppo", "--no-peers"], check=True, env=env, cwd=ROOT, timeout=900)
    payload = json.loads(out.read_text())
    assert payload["implementations"] == {"backend": "cpu", "conv_impl": "patch", "recurrent_grad": "fused"}
    assert [r["lanes"] for r in payload["results"]] == [1, 2] and not payload["failed"]
    for record in payload["results"]:
        # one timed update of every lane: 4 envs x 8 steps each
        assert record["env_steps_timed"] == 32 * record["lanes"] and record["env_steps_per_s"] > 0


def test_conv_impl_option_reaches_the_network_config():
    import device_check as dc

    assert dc.run_config("Breakout-MinAtar", "ppo", 32, updates=3, small=False).network.conv_impl == "auto"
    for impl in ("lax", "patch"):
        run = dc.run_config("Breakout-MinAtar", "ppo", 32, updates=3, small=False, conv_impl=impl)
        assert run.network.conv_impl == impl and run.num_seeds == 32


PUREJAXRL = ROOT / "experiments" / "peers" / "purejaxrl"


def test_peer_plan_and_configs_match_purejaxrl():
    import device_check as dc

    assert dc.peer_plan(small=False) == [(e, n) for n in (1, 32, 1024) for e in ("CartPole-v1", "Breakout-MinAtar")]
    for env_id in dc.PEER_ENVS:
        theirs = dc.purejaxrl_config(env_id, updates=10, small=False)
        ours = dc.peer_run_config(env_id, 32, updates=10, small=False)
        assert ours.num_seeds == 32 and ours.network.cnn_channels == () and ours.network.hidden_sizes == (64, 64)
        assert (ours.algo.num_envs, ours.algo.num_steps, ours.algo.num_minibatches, ours.algo.update_epochs,
                ours.algo.lr, ours.network.activation) == (
            theirs["NUM_ENVS"], theirs["NUM_STEPS"], theirs["NUM_MINIBATCHES"], theirs["UPDATE_EPOCHS"], theirs["LR"],
            theirs["ACTIVATION"])
        # the same number of updates on both sides
        assert theirs["TOTAL_TIMESTEPS"] // (theirs["NUM_ENVS"] * theirs["NUM_STEPS"]) == 10


def test_refuses_at_once_without_the_purejaxrl_checkout(tmp_path):
    out = tmp_path / "check.json"
    proc = subprocess.run([sys.executable, str(ROOT / "experiments" / "device_check.py"), "--out", str(out),
                           "--purejaxrl", str(tmp_path / "missing")], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, DEVICE_CHECK_SMALL="1", JAX_PLATFORMS="cpu"), timeout=120)
    assert proc.returncode != 0 and not out.exists()
    assert "git clone https://github.com/luchris429/purejaxrl" in proc.stderr and "missing" in proc.stderr


@pytest.mark.skipif(not (PUREJAXRL / "purejaxrl" / "ppo.py").is_file(),
                    reason="no PureJaxRL checkout at experiments/peers/purejaxrl (experiments/peer_purejaxrl.py)")
def test_small_peer_comparison_writes_both_sides(tmp_path):
    out = tmp_path / "check.json"
    env = dict(os.environ, DEVICE_CHECK_SMALL="1", JAX_PLATFORMS="cpu")
    subprocess.run([sys.executable, str(ROOT / "experiments" / "device_check.py"), "--out", str(out), "--peers-only",
                    "--envs", "CartPole-v1", "--lanes", "1"], check=True, env=env, cwd=ROOT, timeout=300)
    payload = json.loads(out.read_text())
    assert not payload["failed"] and payload["results"] == [] and payload["peers"]["brax"] is None
    (pair,) = payload["peers"]["purejaxrl"]
    # one update of 4 envs x 8 steps on each side
    assert pair["ours"]["env_steps_timed"] == pair["purejaxrl"]["env_steps_timed"] == 32
    assert pair["ratio"] == pytest.approx(pair["ours"]["env_steps_per_s"] / pair["purejaxrl"]["env_steps_per_s"],
                                          rel=1e-2)


@pytest.mark.slow  # builds Go1's MJX env and compiles both trainers on the CPU (minutes)
def test_go1_check_runs_both_sides_end_to_end_on_cpu(tmp_path):
    """experiments/device_check_go1.py --small: Brax's PPO and ours on Go1JoystickFlatTerrain (its
    asymmetric critic on privileged_state) train one Brax evaluation block each and both curves land in
    the results file."""
    pytest.importorskip("mujoco_playground")
    pytest.importorskip("brax")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("MENAGERIE_ROOT", None)
    subprocess.run([sys.executable, str(ROOT / "experiments" / "device_check_go1.py"), "--small",
                    "--out", str(tmp_path)], check=True, env=env, cwd=ROOT, timeout=1800)
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results["sides"]) == {"brax", "ours"} and results["steps"] == 6400
    for name, side in results["sides"].items():
        assert side["rc"] == 0, (name, side["log_tail"])
        assert side["curve"] and side["curve"][-1]["env_steps"] >= 6400 and side["env_steps_per_s"] > 0
        assert all(abs(p["return"]) < 1e6 for p in side["curve"])
    summary = json.loads((tmp_path / "run_ppo" / "summary.json").read_text())
    assert summary["config"]["env"]["params"]["critic_obs_key"] == "privileged_state"
    assert (tmp_path / "results.md").exists()
