"""Sweeps: the plans (grid, zip, random; bad sweeps refused), one in-process in-compile sweep (its
summary, lanes, metrics.csv, offline W&B run, and evaluate's GIF into that run), Hydra multirun (the
shipped launcher configs, basic and submitit_local launchers) and the report over a sweep dir.

Runs are tiny (CartPole, a few thousand env steps). Subprocess runs share a persistent XLA compile
cache (same program -> compiled once).
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import purejaxrl_opt.train  # noqa: F401 - XLA flags of the CLI, set before JAX starts
from purejaxrl_opt.host import report, sweep
from purejaxrl_opt import evaluate
from purejaxrl_opt.config.schema import ConfigError, from_dictconfig
from tests.conftest import TINY, cli, compose

ROOT = Path(__file__).resolve().parents[1]


# =====================================================================================================
# sweep plans (no compile)
# =====================================================================================================
@pytest.fixture(scope="module")
def base_run():
    return from_dictconfig(compose(TINY))


def test_grid_zip_and_random_plans(base_run):
    grid = sweep.plan_from_config({"vmap": {"algo.lr": [1e-3, 3e-4], "algo.clip_eps": [0.1, 0.2, 0.3]}},
                                  base_run)
    assert grid.num_configs == 6 and grid.configs[1] == {"algo.lr": 1e-3, "algo.clip_eps": 0.2}
    zipped = sweep.plan_from_config({"vmap": {"algo.lr": [1e-3, 3e-4], "algo.clip_eps": [0.1, 0.2]},
                                     "mode": "zip"}, base_run)
    assert zipped.configs == ({"algo.lr": 1e-3, "algo.clip_eps": 0.1}, {"algo.lr": 3e-4, "algo.clip_eps": 0.2})
    spec = {"random": {"algo.lr": {"low": 1e-4, "high": 1e-2, "log": True}}, "num_samples": 5, "seed": 3}
    drawn = sweep.plan_from_config(spec, base_run)
    assert drawn == sweep.plan_from_config(spec, base_run)  # reproducible
    assert drawn.num_configs == 5 and all(1e-4 <= c["algo.lr"] <= 1e-2 for c in drawn.configs)
    assert sweep.plan_from_config({"vmap": None}, base_run) is None

    lanes = sweep.lanes(base_run, zipped)  # config-major, the same seeds in every config
    assert [(lane.config, lane.seed) for lane in lanes] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    hparams = sweep.lane_hparams(base_run, zipped)
    np.testing.assert_array_equal(hparams["lr"], np.float32([1e-3, 1e-3, 3e-4, 3e-4]))
    np.testing.assert_array_equal(hparams["ent_coef"], np.float32([base_run.algo.ent_coef] * 4))


@pytest.mark.parametrize("section, message", [
    ({"vmap": {}}, "'sweep.vmap' is empty"),
    ({"vmap": {"algo.lr": []}}, "empty list"),
    ({"vmap": {"algo.nope": [1.0]}}, "'algo.nope' does not exist"),
    ({"vmap": {"lr": [1.0]}}, "'lr' does not exist"),
    ({"vmap": {"algo.num_envs": [2, 4]}}, "Hydra multirun"),
    ({"vmap": {"network.hidden_sizes": [[32]]}}, "Hydra multirun"),
    ({"vmap": {"env.id": ["Acrobot-v1"]}}, "Hydra multirun"),
    ({"vmap": {"algo.lr": [1e-3, -1.0]}}, "'algo.lr' = -1.0"),
    ({"vmap": {"algo.lr": ["fast"]}}, "finite number"),
    ({"vmap": {"algo.lr": [1e-3], "algo.gamma": [0.9, 0.99]}, "mode": "zip"}, "equal length"),
    ({"vmap": {"algo.lr": [1e-3]}, "mode": "cube"}, "'sweep.mode'"),
    ({"vmap": {"algo.lr": [1e-3]}, "random": {"algo.lr": {"low": 0.1, "high": 0.2}}}, "choose one"),
    ({"random": {"algo.lr": {"low": 0.2, "high": 0.1}}}, "low < high"),
    ({"random": {}}, "'sweep.random' is empty"),
    ({"grid": {}}, "unknown config key 'sweep.grid'"),
])
def test_bad_sweeps_are_refused(base_run, section, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        sweep.plan_from_config(section, base_run)


# =====================================================================================================
# one in-process in-compile sweep, logged to W&B offline (shared by the tests below)
# =====================================================================================================
def read_wandb_records(path: Path) -> list:
    """Records of a W&B transaction log (``run-*.wandb``), read with the project's reader."""
    from purejaxrl_opt.host.loggers import read_wandb_file

    return read_wandb_file(path)


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory):
    from purejaxrl_opt.train import run_from_config

    out = tmp_path_factory.mktemp("sweep_run")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_DIR", str(out / "wandb_root"))
        patch.setenv("WANDB_SILENT", "true")
        (out / "wandb_root").mkdir()
        cfg = compose(TINY + ["logger=wandb", "logger.mode=offline", "progress.mode=lines",
                              "progress.chunks=3", "sweep.vmap={algo.lr: [0.001, 0.0003], algo.clip_eps: [0.1, 0.3]}",
                              "sweep.mode=zip"])
        result = run_from_config(cfg, str(out / "run"))
    return out, result, cfg


def test_sweep_trains_every_config_in_one_compile(sweep_run):
    out, result, _ = sweep_run
    summary = json.loads((out / "run" / "summary.json").read_text())
    assert summary["num_lanes"] == 4 and summary["num_seeds"] == 2
    configs = summary["sweep"]["configs"]
    assert [c["values"] for c in configs] == [{"algo.lr": 0.001, "algo.clip_eps": 0.1},
                                              {"algo.lr": 0.0003, "algo.clip_eps": 0.3}]
    assert [(lane["config"], lane["seed"], lane["algo.lr"]) for lane in summary["sweep"]["lanes"]] == [
        (0, 0, 0.001), (0, 1, 0.001), (1, 0, 0.0003), (1, 1, 0.0003)]
    for config in configs:
        per_seed = np.asarray(config["final_return_per_seed"])
        assert config["final_return_mean"] == pytest.approx(per_seed.mean())
        assert config["final_return_std"] == pytest.approx(per_seed.std(ddof=1))
    assert summary["final_return_per_seed"] == configs[0]["final_return_per_seed"] + configs[1]["final_return_per_seed"]
    # each lane really trained with its own values: the logged (annealed) learning rate starts at lr
    np.testing.assert_allclose(result.loop.metrics["learning_rate"][:, 0], [1e-3, 1e-3, 3e-4, 3e-4], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(result.loop.hparams["clip_eps"]), np.float32([0.1, 0.1, 0.3, 0.3]))
    assert (out / "run" / "learning_curve.png").stat().st_size > 1000


def test_a_sweep_lane_is_the_run_with_those_values(sweep_run):
    """Config 1's lanes train the agents of a plain run with lr=0.0003, clip_eps=0.3. Another program
    (4 lanes and traced hyperparameters vs 2 lanes): float sums may round differently, and RL turns
    last-bit differences into different runs, so only the first updates are compared, with a
    tolerance."""
    import jax

    from purejaxrl_opt.core import algos
    from purejaxrl_opt.core.algos.base import make_train
    from purejaxrl_opt.host.sweep import lane_keys

    _, result, _ = sweep_run
    run = from_dictconfig(compose(TINY + ["algo.lr=0.0003", "algo.clip_eps=0.3"]))
    separate = jax.jit(jax.vmap(make_train(algos.make_algorithm(run))))(lane_keys(range(run.seed, run.seed + run.num_seeds)))
    swept = {k: np.asarray(v)[2:] for k, v in result.loop.metrics.items()}
    np.testing.assert_allclose(swept["return_mean"][:, 0], np.asarray(separate.metrics["return_mean"])[:, 0],
                               rtol=1e-6)
    for name in ("policy_loss", "value_loss", "approx_kl", "learning_rate"):
        np.testing.assert_allclose(swept[name][:, :3], np.asarray(separate.metrics[name])[:, :3],
                                   rtol=1e-4, atol=1e-6, err_msg=name)


def test_metrics_csv_carries_swept_values_per_row(sweep_run):
    out, result, _ = sweep_run
    with open(out / "run" / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    header = list(rows[0])
    assert header[:5] == ["seed", "update", "lr", "clip_eps", "env_steps"]
    num_updates = result.summary["num_updates"]
    assert len(rows) == 4 * num_updates
    lane_of = [(r["seed"], r["lr"], r["clip_eps"]) for r in rows[::num_updates]]
    assert lane_of == [("0", "0.001", "0.1"), ("1", "0.001", "0.1"), ("0", "0.0003", "0.3"), ("1", "0.0003", "0.3")]


def test_wandb_offline_run_holds_config_history_summary_and_plot(sweep_run):
    out, result, _ = sweep_run
    runs = list((out / "wandb_root" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    records = read_wandb_records(next(runs[0].glob("run-*.wandb")))
    config, history, summary, group = {}, [], {}, None
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "run":
            group = record.run.run_group
            config.update({i.key: json.loads(i.value_json) for i in record.run.config.update})
        elif kind == "config":
            config.update({i.key: json.loads(i.value_json) for i in record.config.update})
        elif kind == "history":
            history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
        elif kind == "summary":
            summary.update({i.key or "/".join(i.nested_key): i.value_json for i in record.summary.update})
    assert group == "ppo-CartPole-v1"
    assert config["algo"]["name"] == "ppo" and config["sweep"]["keys"] == ["algo.lr", "algo.clip_eps"]
    rows = [h for h in history if "cfg0_seed_0/return_mean" in h or "cfg1_seed_1/policy_loss" in h]
    assert len(rows) == result.summary["num_updates"]
    assert {"cfg1/mean/return_mean", "cfg1/std/return_mean", "update", "env_steps"} <= set(rows[-1])
    assert rows[-1]["cfg1_seed_1/policy_loss"] == pytest.approx(float(result.loop.metrics["policy_loss"][3, -1]))
    images = [h for h in history if h.get("learning_curve/_type") == "image-file"]
    assert len(images) == 1 and (runs[0] / "files" / images[0]["learning_curve/path"]).exists()
    assert float(summary["final_return_mean"]) == pytest.approx(result.summary["final_return_mean"])
    assert list(runs[0].glob("files/media/images/learning_curve*.png"))
    # by default W&B neither copies the console (the run printed progress lines) nor samples the system
    assert not (runs[0] / "files" / "output.log").exists()
    assert not any(record.WhichOneof("record_type") == "stats" for record in records)


# evaluate's GIF is written in the fast tier by test_evaluate_gif_goes_to_the_same_wandb_run
@pytest.mark.slow
def test_gif_of_one_episode(sweep_run, tmp_path):
    pytest.importorskip("pygame", reason="classic-control rendering needs pygame")
    from purejaxrl_opt.core import algos

    _, result, cfg = sweep_run
    algo = algos.make_algorithm(from_dictconfig(cfg))
    path = evaluate.write_gif(algo, result.loop, lane=2, path=tmp_path / "episode.gif")
    from PIL import Image

    with Image.open(path) as image:
        assert image.n_frames > 5


def test_evaluate_gif_goes_to_the_same_wandb_run(sweep_run, tmp_path, monkeypatch):
    """``evaluate RUN_DIR --gif``: the video and the returns reach the training's W&B run (its id from
    RUN_DIR/wandb_run.json, its wandb dir although WANDB_DIR is no longer set), one step after the
    learning-curve image, read back from the offline log."""
    pytest.importorskip("pygame", reason="classic-control rendering needs pygame")
    from purejaxrl_opt.host.loggers import read_wandb_history

    out, result, _ = sweep_run
    run_dir = out / "run"
    state = json.loads((run_dir / "wandb_run.json").read_text())
    num_updates = result.summary["num_updates"]
    assert state["logged_through"] == num_updates - 1 and state["last_step"] == num_updates
    monkeypatch.delenv("WANDB_DIR", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    gif, returns = tmp_path / "episode.gif", tmp_path / "returns.json"
    assert evaluate.main([str(run_dir), "--gif", str(gif), "--lane", "1", "--out", str(returns)]) == 0
    logs = list((out / "wandb_root" / "wandb").glob(f"offline-run-*-{state['id']}/run-{state['id']}.wandb"))
    assert len(logs) == 2  # the training's and evaluate's, both of the one W&B run
    rows = {log: read_wandb_history(log) for log in logs}
    (added,) = [log for log, history in rows.items() if any("episode_video/_type" in r for r in history)]
    (row,) = rows[added]
    assert row["episode_video/_type"] == "video-file" and row["_step"] == num_updates + 1
    video = added.parent / "files" / row["episode_video/path"]
    assert video.read_bytes() == gif.read_bytes()  # the GIF itself, not a re-encoding
    summary = {}
    for record in read_wandb_records(added):
        if record.WhichOneof("record_type") == "summary":
            summary.update({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                            for i in record.summary.update})
    expected = json.loads(returns.read_text())
    assert summary["evaluate/mean_return"] == pytest.approx(expected["mean"])
    assert summary["evaluate/checkpoint_update"] == num_updates
    assert json.loads((run_dir / "wandb_run.json").read_text())["last_step"] == num_updates + 1


# =====================================================================================================
# Hydra multirun (basic launcher, submitit_local) and the report over a sweep dir
# =====================================================================================================
MULTI = ["env=CartPole-v1", "algo=ppo", "num_seeds=1", "total_timesteps=2048", "eval_episodes=2",
         "progress.mode=off", "checkpoint.final=false", "seed=0,1"]


@pytest.mark.parametrize("launcher, target", [
    ("parallel", "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"),
    ("local", "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"),
    ("slurm", "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"),
])
def test_shipped_launcher_configs_compose(launcher, target):
    from hydra import compose as hydra_compose, initialize_config_dir

    with initialize_config_dir(str(ROOT / "conf"), version_base=None):
        cfg = hydra_compose("config", overrides=[f"hydra/launcher={launcher}"], return_hydra_config=True)
    assert cfg.hydra.launcher._target_ == target


@pytest.fixture(scope="module")
def basic_multirun(tmp_path_factory, cli_env):
    sweep_dir = tmp_path_factory.mktemp("multirun")
    done = cli(["-m", *MULTI, f"hydra.sweep.dir={sweep_dir}"], env=cli_env)
    assert done.returncode == 0, done.stderr[-3000:]
    return sweep_dir


# a Hydra multirun through the CLI; the search sweeper's multirun runs in the fast tier
# (tests/test_search.py)
@pytest.mark.slow
def test_multirun_basic_launcher_writes_each_job(basic_multirun):
    jobs = sorted(p.parent.name for p in basic_multirun.rglob("summary.json"))
    assert jobs == ["0_ppo_CartPole-v1_s0", "1_ppo_CartPole-v1_s1"]
    for job in jobs:
        assert (basic_multirun / job / "metrics.csv").exists()
        assert (basic_multirun / job / ".hydra" / "config.yaml").exists()


@pytest.mark.slow  # the multirun above
def test_report_pools_the_seeds_of_a_sweep(basic_multirun, sweep_run, tmp_path):
    paths = report.write_report(basic_multirun, tmp_path / "multi")
    with open(paths["csv"], newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 1 and rows[0]["num_seeds"] == "2" and rows[0]["algo"] == "ppo"
    returns = [json.loads((basic_multirun / j / "summary.json").read_text())["final_return_mean"]
               for j in ("0_ppo_CartPole-v1_s0", "1_ppo_CartPole-v1_s1")]
    assert float(rows[0]["final_return_mean"]) == pytest.approx(np.mean(returns))
    assert float(rows[0]["final_return_std"]) == pytest.approx(np.std(returns, ddof=1))
    assert paths["plot"].stat().st_size > 1000

    sweep_out, *_ = sweep_run  # an in-compile sweep: one row per config, swept keys as columns
    done = subprocess.run([sys.executable, "-m", "purejaxrl_opt.report", str(sweep_out / "run"), "--out",
                           str(tmp_path / "vmapped")], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    markdown = (tmp_path / "vmapped" / "report.md").read_text()
    assert markdown.splitlines()[0] == ("| algo | env | algo.clip_eps | algo.lr | seeds | final return (mean ± std) "
                                        "| 95% CI | env steps/s |")
    assert len([line for line in markdown.splitlines() if line.startswith("| ppo |")]) == 2
    # it names what made it: the code's commit and the command, as typed
    assert re.search(r"^commit: [0-9a-f]{12}", markdown, re.M), markdown[-400:]
    assert f"command: `python -m purejaxrl_opt.report {sweep_out / 'run'} --out {tmp_path / 'vmapped'}`" in markdown


@pytest.mark.slow  # the basic launcher above checks the multirun path in the fast tier
def test_multirun_submitit_local_launcher(cli_env, tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="hydra-submitit-launcher not installed")
    done = cli(["-m", "hydra/launcher=local", *MULTI, f"hydra.sweep.dir={tmp_path}"], env=cli_env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.parent.name for p in tmp_path.rglob("summary.json")) == [
        "0_ppo_CartPole-v1_s0", "1_ppo_CartPole-v1_s1"]
    assert (tmp_path / ".submitit").is_dir()
