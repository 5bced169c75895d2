"""Checkpoint, SIGKILL, resume through the CLI: a run killed mid-training and resumed is bitwise the
uninterrupted run (metrics.csv, the final training state, its W&B rows); the uninterrupted run's
artifacts; the evaluate CLI on its checkpoint; checkpoints of another config, corrupt or unfinished
ones refused (nothing written), as are a resume without a checkpoint and a fresh run over one.

Runs are tiny (CartPole, 100 updates); the CLI processes share the session's XLA compile cache.
"""

from __future__ import annotations

import csv
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import purejaxrl_opt.train  # noqa: F401 - XLA flags of the CLI, set before JAX starts
from purejaxrl_opt import evaluate
from purejaxrl_opt.config.schema import ConfigError, from_dictconfig
from purejaxrl_opt.formats import checkpoint
from purejaxrl_opt.formats.checkpoint import CheckpointError
from purejaxrl_opt.host import sweep
from tests.conftest import ROOT, TINY, cli, compose

KILL = ["env=CartPole-v1", "algo=ppo", "num_seeds=2", "total_timesteps=51200", "eval_episodes=4"]


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory, cli_env):
    """(uninterrupted run dir, killed-then-resumed run dir, killed run's console output)."""
    base = tmp_path_factory.mktemp("kill")
    reference = cli(KILL + ["progress.mode=off", f"hydra.run.dir={base / 'reference'}"], env=cli_env)
    assert reference.returncode == 0, reference.stderr[-3000:]
    (base / "reference.log").write_text(reference.stdout)

    run_dir = base / "run"
    # logged to W&B offline (into the run dir) as it trains: the rows must survive the kill
    args = KILL + ["progress.mode=lines", "progress.chunks=7", "checkpoint.every_updates=10",
                   "logger=wandb", "logger.mode=offline"]
    log = open(base / "killed.log", "w")
    process = subprocess.Popen([sys.executable, "-m", "purejaxrl_opt.train", *args,
                                f"hydra.run.dir={run_dir}"], env=cli_env, cwd=ROOT, stdout=log,
                               stderr=subprocess.STDOUT)
    deadline = time.time() + 240

    from purejaxrl_opt.host.loggers import read_wandb_history

    def _rows_on_disk() -> int:  # history rows in the run's offline W&B log so far
        try:
            return sum(len(read_wandb_history(log)) for log in run_dir.glob("wandb/offline-run-*/run-*.wandb"))
        except (OSError, ValueError, IndexError):
            return 0

    while ((not checkpoint.available_steps(run_dir) or _rows_on_disk() < 10) and process.poll() is None
           and time.time() < deadline):
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    logged_at_kill = _rows_on_disk()
    process.wait()
    log.close()
    assert process.returncode == -signal.SIGKILL, "the run ended before it could be killed mid-training"
    assert not (run_dir / "summary.json").exists()
    steps_at_kill = checkpoint.available_steps(run_dir)
    assert steps_at_kill and steps_at_kill[-1] < 100

    resumed = cli(args + [f"resume={run_dir}", f"hydra.run.dir={base / 'resume_invocation'}"], env=cli_env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return base / "reference", run_dir, steps_at_kill, resumed.stdout, logged_at_kill


def test_a_cli_run_writes_its_artifacts(killed_and_resumed):
    """The uninterrupted CLI run: summary.json's fields, one metrics.csv row per lane and update, the
    resolved config in .hydra, and the console's compile and final lines."""
    out = killed_and_resumed[0]
    summary = json.loads((out / "summary.json").read_text())
    required = ["algo", "env", "seed", "num_seeds", "total_timesteps", "env_steps", "final_return_mean",
                "final_return_std", "final_return_per_seed", "compile_seconds", "run_seconds",
                "env_steps_per_second", "num_params"]
    assert all(k in summary for k in required), set(required) - set(summary)
    assert (summary["algo"], summary["env"], summary["seed"], summary["num_seeds"]) == ("ppo", "CartPole-v1", 0, 2)
    assert summary["env_steps"] == 51200 and len(summary["final_return_per_seed"]) == 2
    # actor 4-64-64-2 + critic 4-64-64-1
    assert summary["num_params"] == (4 * 64 + 64 + 64 * 64 + 64 + 64 * 2 + 2) + (
        4 * 64 + 64 + 64 * 64 + 64 + 64 + 1)
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    resolved = yaml.safe_load((out / ".hydra" / "config.yaml").read_text())
    batch = resolved["algo"]["num_envs"] * resolved["algo"]["num_steps"]
    assert len(rows) == 2 * 51200 // batch and {r["seed"] for r in rows} == {"0", "1"}
    for column in ("update", "env_steps", "return_mean", "approx_kl", "clip_frac", "entropy",
                   "value_loss", "policy_loss"):
        assert column in rows[0]
    stdout = (out.parent / "reference.log").read_text()
    assert "compiled in" in stdout and "final return" in stdout


def test_killed_and_resumed_run_is_bitwise_the_uninterrupted_run(killed_and_resumed):
    reference, run_dir, steps_at_kill, stdout, _ = killed_and_resumed
    assert f"resuming from the checkpoint at update {steps_at_kill[-1]}" in stdout
    assert "final return" in stdout
    assert (reference / "metrics.csv").read_bytes() == (run_dir / "metrics.csv").read_bytes()
    ref_summary = json.loads((reference / "summary.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["resumed_from_update"] == steps_at_kill[-1]
    assert summary["final_return_per_seed"] == ref_summary["final_return_per_seed"]
    # the complete final training state: params, optimizer and env states, keys, metrics
    *_, ref_loop, ref_step = evaluate.load(reference)
    *_, loop, step = evaluate.load(run_dir)
    assert ref_step == step == 100
    import jax

    ref_leaves, leaves = jax.tree_util.tree_leaves(ref_loop), jax.tree_util.tree_leaves(loop)
    assert len(ref_leaves) == len(leaves)
    for a, b in zip(ref_leaves, leaves):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    # periodic checkpoints before and after the kill, and the final one
    assert set(range(10, 100, 10)) | {100} <= set(checkpoint.available_steps(run_dir))


def test_wandb_rows_survive_the_kill_and_the_resume_continues_the_same_run(killed_and_resumed):
    """Rows reach W&B at every chunk: the killed process's offline log holds every update up to its
    last progress report (at least up to the checkpoint it resumes from), the resumed process logs
    into the same W&B run id from the next update, and together they hold updates 0..99 once each,
    with the values of metrics.csv."""
    from purejaxrl_opt.host.loggers import read_wandb_history

    _, run_dir, steps_at_kill, _, logged_at_kill = killed_and_resumed
    state = json.loads((run_dir / "wandb_run.json").read_text())
    assert state["logged_through"] == 99
    logs = sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(logs) == 2 and all(log.name == f"run-{state['id']}.wandb" for log in logs), logs
    killed, resumed = ([row for row in read_wandb_history(log) if "update" in row] for log in logs)
    killed_steps, resumed_steps = [r["_step"] for r in killed], [r["_step"] for r in resumed]
    # the rows on disk before the kill survive it, in order from update 0
    assert killed_steps == list(range(len(killed_steps))) and len(killed_steps) >= logged_at_kill >= 10
    # the resumed process logs from its checkpoint to the end; a row in both logs has the same values
    assert resumed_steps == list(range(steps_at_kill[-1], 100))
    assert sorted(set(killed_steps) | set(resumed_steps)) == list(range(100))  # no update missing
    by_step = {r["_step"]: r for r in killed}
    for row in resumed:
        if row["_step"] in by_step:
            twin = by_step[row["_step"]]
            assert {k: v for k, v in row.items() if not k.startswith("_")} == \
                {k: v for k, v in twin.items() if not k.startswith("_")}
    with open(run_dir / "metrics.csv", newline="") as handle:
        csv_rows = [r for r in csv.DictReader(handle) if r["seed"] == "1"]
    for row in killed + resumed:
        reference = csv_rows[row["update"]]
        if reference["return_mean"]:  # NaN (no episode ended in that update) is not logged
            # metrics.csv keeps 6 significant digits
            assert row["seed_1/return_mean"] == pytest.approx(float(reference["return_mean"]), rel=1e-5)
        assert row["env_steps"] == float(reference["env_steps"])


def test_evaluate_cli_reproduces_the_final_returns(killed_and_resumed, cli_env, tmp_path):
    reference, *_ = killed_and_resumed
    out = tmp_path / "returns.json"
    done = cli([str(reference), "--out", str(out)], module="purejaxrl_opt.evaluate", env=cli_env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    summary = json.loads((reference / "summary.json").read_text())
    assert result["checkpoint_update"] == 100 and result["episodes"] == 4
    assert [lane["mean"] for lane in result["lanes"]] == summary["final_return_per_seed"]
    assert all(len(lane["returns"]) == 4 for lane in result["lanes"])
    missing = cli([str(tmp_path)], module="purejaxrl_opt.evaluate", env=cli_env)
    assert missing.returncode == 2 and "no checkpoint in" in missing.stderr


@pytest.fixture()
def copied_run(killed_and_resumed, tmp_path):
    reference, *_ = killed_and_resumed
    copy = tmp_path / "copy"
    shutil.copytree(reference, copy)
    return copy


def _restore(run_dir: Path, overrides: list[str]):
    from purejaxrl_opt.core import algos
    from purejaxrl_opt.host.runner import loop_shape
    import jax
    import jax.numpy as jnp

    run = from_dictconfig(compose(overrides))
    algo = algos.make_algorithm(run)
    lanes = sweep.lanes(run, None)
    keys = jax.vmap(jax.random.PRNGKey)(jnp.asarray([lane.seed for lane in lanes], jnp.uint32))
    hparams = {k: jnp.asarray(v) for k, v in sweep.lane_hparams(run, None).items()}
    shape = loop_shape(algo, keys, hparams)
    return checkpoint.restore(run_dir, checkpoint.fingerprint(run, None, shape), shape)


def _snapshot(directory: Path) -> dict:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.rglob("*")}


@pytest.mark.parametrize("overrides, named", [
    (["network.hidden_sizes=[32]"], "network.hidden_sizes: checkpoint has [64, 64], this run has [32]"),
    (["algo=trpo"], "algo.name: checkpoint has 'ppo', this run has 'trpo'"),
    (["env=Acrobot-v1"], "env.id: checkpoint has 'CartPole-v1', this run has 'Acrobot-v1'"),
    (["total_timesteps=25600"], "total_timesteps: checkpoint has 51200, this run has 25600"),
])
def test_a_mismatching_checkpoint_is_refused_naming_the_difference(copied_run, overrides, named):
    before = _snapshot(copied_run)
    with pytest.raises(CheckpointError) as error:
        _restore(copied_run, KILL + overrides)
    assert named in str(error.value) and "Nothing was written" in str(error.value)
    assert _snapshot(copied_run) == before
    _restore(copied_run, KILL)  # the matching config still restores


def test_a_corrupt_checkpoint_is_refused(copied_run):
    step_dir = copied_run / "checkpoints" / "100"
    data_files = sorted((p for p in (step_dir / "state").rglob("*") if p.is_file() and p.parent.name == "d"),
                        key=lambda p: p.stat().st_size)
    victim = data_files[-1]
    raw = bytearray(victim.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    victim.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="corrupt"):
        _restore(copied_run, KILL)
    (step_dir / "manifest" / "metadata").write_text("{not json")
    with pytest.raises(CheckpointError, match="corrupt or unreadable"):
        _restore(copied_run, KILL)


def test_unfinished_checkpoints_are_invisible(tmp_path):
    (tmp_path / "checkpoints" / "30.orbax-checkpoint-tmp-1234").mkdir(parents=True)
    (tmp_path / "checkpoints" / "20").mkdir()
    assert checkpoint.available_steps(tmp_path) == [20]


def test_resume_without_checkpoint_and_fresh_run_over_checkpoints(no_compile, tmp_path, copied_run):
    from purejaxrl_opt.train import run_from_config

    with pytest.raises(ConfigError, match="no checkpoint in"):
        run_from_config(compose(TINY + [f"resume={tmp_path}"]), str(tmp_path / "run"))
    before = _snapshot(copied_run)
    with pytest.raises(CheckpointError, match="already holds checkpoints"):
        run_from_config(compose(KILL), str(copied_run))
    with pytest.raises(CheckpointError, match="network.hidden_sizes"):
        run_from_config(compose(KILL + ["network.hidden_sizes=[8]", f"resume={copied_run}"]), str(tmp_path))
    assert _snapshot(copied_run) == before
