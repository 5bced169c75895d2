"""A run's whole life through the CLI, as a user runs it, on any library (tests/test_env_*.py call it).

``lifecycle(...)`` runs, each as its own ``python -m`` process with the user's defaults (final checkpoint
on) and a shared XLA compilation cache (so the later processes do not compile again):

1. ``purejaxrl_opt.train``: the uninterrupted run -> summary.json, metrics.csv, a final checkpoint;
2. ``purejaxrl_opt.evaluate RUN --gif``: the checkpoint's returns equal summary.json's final returns;
   a GIF where the library renders here, else a refusal (rc 2) naming why, before anything compiles;
3. the same training again into another directory, SIGKILLed once its first checkpoint is on disk;
4. ``purejaxrl_opt.train ... resume=DIR``: metrics.csv is byte for byte the uninterrupted run's.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT, cli, cli_environment


def _checkpoints(run_dir: Path) -> list[int]:
    directory = run_dir / "checkpoints"
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.is_dir() and p.name.isdigit())


def lifecycle(tmp: Path, overrides: list[str], *, gif: bool | str, every_updates: int, kill: bool = True,
              timeout: int = 900) -> dict:
    """Run the four steps above for the training ``overrides``; returns what each step left for the
    caller's own assertions: ``{"summary", "evaluation", "gif", "evaluate_stderr", "run", "resumed"}``.
    ``gif``: True = this library renders (a GIF is asserted), False = it cannot (a refusal is asserted),
    ``"if-renderable"`` = it renders where OpenGL is found, else refuses naming that."""
    env = cli_environment(WANDB_MODE="offline")
    args = list(overrides) + ["progress.mode=off", "logger=none", f"checkpoint.every_updates={every_updates}"]
    run_dir = tmp / "run"
    trained = cli(args, f"hydra.run.dir={run_dir}", env=env, timeout=timeout)
    assert trained.returncode == 0, trained.stderr[-4000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (run_dir / "metrics.csv").stat().st_size > 0
    final = summary["num_updates"]
    assert _checkpoints(run_dir)[-1] == final, (_checkpoints(run_dir), final)
    assert not list(run_dir.rglob("*orbax-checkpoint-tmp*")), "a temporary checkpoint was left behind"

    out = {"summary": summary, "run": run_dir, "gif": None}
    episodes = str(summary["eval_episodes"])
    gif_path = tmp / "episode.gif"
    evaluate_args = [str(run_dir), "--episodes", episodes, "--no-wandb"]
    evaluated = cli(evaluate_args, "--gif", str(gif_path), module="purejaxrl_opt.evaluate", env=env, timeout=timeout)
    if evaluated.returncode == 2 and gif is not True:
        # refused before anything compiled: the reason named, nothing half-written
        assert "--gif" in evaluated.stderr and "Traceback" not in evaluated.stderr, evaluated.stderr[-4000:]
        assert not gif_path.exists()
        out["evaluate_stderr"] = evaluated.stderr
        assert gif is False or "OpenGL" in evaluated.stderr or "MUJOCO_GL" in evaluated.stderr
        evaluated = cli(evaluate_args, module="purejaxrl_opt.evaluate", env=env, timeout=timeout)
    elif gif is False:
        raise AssertionError(f"--gif was not refused: rc {evaluated.returncode}, {evaluated.stderr[-2000:]}")
    else:
        assert evaluated.returncode == 0, evaluated.stderr[-4000:]
        assert gif_path.read_bytes()[:6] in (b"GIF87a", b"GIF89a"), f"{gif_path} is not a GIF"
        out["gif"] = gif_path
    assert evaluated.returncode == 0, evaluated.stderr[-4000:]
    evaluation = json.loads((run_dir / "eval" / f"update_{final}_{episodes}ep.json").read_text())
    # the checkpoint's policy, the lanes' own evaluation keys: summary.json's numbers again
    assert [lane["mean"] for lane in evaluation["lanes"]] == summary["final_return_per_seed"]
    out["evaluation"] = evaluation
    if not kill:
        return out

    killed_dir = tmp / "killed"
    with open(tmp / "killed.log", "w") as log:
        process = subprocess.Popen([sys.executable, "-m", "purejaxrl_opt.train", *args,
                                    f"hydra.run.dir={killed_dir}"], env=env, cwd=ROOT, stdout=log,
                                   stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while not _checkpoints(killed_dir) and process.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL, (
        "the run ended before it could be killed: " + (tmp / "killed.log").read_text()[-2000:])
    at_kill = _checkpoints(killed_dir)
    assert at_kill and at_kill[-1] < final and not (killed_dir / "summary.json").exists()
    resumed = cli(args, f"resume={killed_dir}", f"hydra.run.dir={tmp / 'resume_invocation'}", env=env, timeout=timeout)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert (killed_dir / "metrics.csv").read_bytes() == (run_dir / "metrics.csv").read_bytes()
    resumed_summary = json.loads((killed_dir / "summary.json").read_text())
    assert resumed_summary["final_return_per_seed"] == summary["final_return_per_seed"]
    assert resumed_summary["resumed_from_update"] == at_kill[-1]
    out["resumed"] = resumed_summary
    return out


# --------------------------------------------------------------------------- the matrix
# One env of every library x every algorithm that runs on it, each with the user's defaults (tuned
# files included) and only what a smoke run changes: one seed, a budget of a few updates, smaller
# batches where the defaults are sized for hours. GRPO's budget counts real steps (an update rolls
# num_groups x group_size whole episodes), so its episodes are capped where the library's limit is long.
SMALL_GRPO = ["algo.num_groups=2", "algo.group_size=4", "algo.num_minibatches=2", "algo.update_epochs=1"]
MATRIX: dict[str, dict] = {
    "gymnax": {"env": "Pendulum-v1", "gif": True, "algos": {
        "ppo": ["algo.num_envs=4", "algo.num_minibatches=4", "total_timesteps=2560"],
        "trpo": ["algo.num_envs=4", "total_timesteps=5120"],
        "grpo": SMALL_GRPO + ["total_timesteps=8000"]}},
    "tokens": {"env": "Addition-v0", "gif": False, "algos": {
        "ppo": ["algo.num_envs=16", "total_timesteps=640"],
        "grpo": ["algo.num_groups=4", "algo.group_size=4", "total_timesteps=640"]}},
    "playground": {"env": "playground/CartpoleBalance", "gif": "if-renderable", "algos": {
        "ppo": ["algo.num_envs=8", "algo.num_steps=32", "algo.num_minibatches=4", "algo.update_epochs=2",
                "total_timesteps=1280", "eval_episodes=2", "+env.params.episode_length=100"],
        "trpo": ["algo.num_envs=8", "algo.num_steps=32", "total_timesteps=1280", "eval_episodes=2",
                 "+env.params.episode_length=100"],
        "grpo": SMALL_GRPO + ["algo.max_episode_steps=25", "total_timesteps=1000", "eval_episodes=2",
                              "+env.params.episode_length=100"]}},
    "craftax": {"env": "craftax/Craftax-Classic-Symbolic-v1", "gif": True, "algos": {
        "ppo": ["algo.num_envs=8", "algo.num_steps=16", "algo.num_minibatches=2", "total_timesteps=640",
                "eval_episodes=2"],
        "trpo": ["algo.num_envs=4", "algo.num_steps=32", "total_timesteps=640", "eval_episodes=2"],
        "grpo": SMALL_GRPO + ["algo.max_episode_steps=32", "total_timesteps=1000", "eval_episodes=2"]}},
    "navix": {"env": "navix/Navix-Empty-5x5-v0", "gif": True, "algos": {
        "ppo": ["algo.num_steps=32", "total_timesteps=1280"],
        "trpo": ["algo.num_steps=32", "total_timesteps=1280"],
        "grpo": SMALL_GRPO + ["total_timesteps=4000"]}},
    "xminigrid": {"env": "xminigrid/MiniGrid-Empty-5x5", "gif": True, "algos": {
        "ppo": ["algo.num_steps=32", "total_timesteps=1280"],
        "trpo": ["algo.num_steps=32", "total_timesteps=1280"],
        "grpo": SMALL_GRPO + ["total_timesteps=4000"]}},
    "jumanji": {"env": "jumanji/Snake-v1", "gif": False, "algos": {
        "ppo": ["algo.num_envs=8", "algo.num_steps=16", "total_timesteps=1280", "eval_episodes=2"],
        "trpo": ["algo.num_steps=32", "total_timesteps=1280", "eval_episodes=2"],
        "grpo": SMALL_GRPO + ["algo.max_episode_steps=64", "total_timesteps=2000", "eval_episodes=2"]}},
}
# The fast tier (the README's test command, which must stay under ~8 minutes on 2 cores): GRPO through
# train and evaluate --gif on Navix (kill + resume: the slow tier's runs of every library; the resume
# path itself is algorithm-agnostic host code); PPO's whole life, kill + resume included, on CartPole is
# tests/test_kill_and_resume.py's, and a gymnax GIF through evaluate's entry point is tests/test_sweep.py's.
# Everything else is the slow tier: TRPO's CLI runs on every library (TRPO's update is checked in-process
# end to end in tests/test_trpo.py; the CLI around it is the same host code), Jumanji's PPO run, and
# Playground and Craftax (minutes of compile on 2 cores), whose specific paths (zero-size checkpoint
# leaves, host rendering, Craftax's textures) have fast in-process tests in their own files.
FAST: dict[tuple[str, str], bool] = {("navix", "grpo"): False}


def matrix_params(library: str) -> list:
    import pytest

    slow = (pytest.mark.slow, pytest.mark.timeout(2400))  # four CLI processes, compiles of minutes
    return [pytest.param(algo, id=algo, marks=() if (library, algo) in FAST else slow)
            for algo in MATRIX[library]["algos"]]


def check_library(library: str, algo: str, tmp: Path) -> dict:
    """The whole life of a small run of ``algo`` on ``library``'s env through the CLI (:func:`lifecycle`)."""
    entry = MATRIX[library]
    overrides = [f"env={entry['env']}", f"algo={algo}", "num_seeds=1", "seed=7"] + entry["algos"][algo]
    return lifecycle(tmp, overrides, gif=entry["gif"], every_updates=1, kill=FAST.get((library, algo), True))
