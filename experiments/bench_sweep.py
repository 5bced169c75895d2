"""In-compile sweep vs. separate runs, and the cost of progress reporting and checkpoints.

(1) An N-config in-compile sweep (``sweep.vmap`` over ``algo.lr``: N x seeds lanes, ONE compile)
    against N separate runs of the same configs (one compile each), wall seconds for build +
    compile + train + final evaluation, in this process (so Python/JAX start-up, which separate CLI
    runs would each pay too, is not counted: the ratio is conservative).
(2) Training throughput of one compiled run with progress off (one chunk), with progress on
    (``progress.chunks`` chunks, a lines-mode console) and with periodic checkpoints, median of
    ``--repeats`` alternating runs, and whether the outputs are bitwise identical.

    python experiments/bench_sweep.py --configs 4 --seeds 2 --total-timesteps 20000

Writes ``experiments/results/bench_sweep.json``.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import purejaxrl_opt.train  # noqa: F401 - the CLI's XLA flags, set before JAX starts
import jax
import jax.numpy as jnp
import numpy as np

from purejaxrl_opt.core import algos
from purejaxrl_opt.formats import checkpoint
from purejaxrl_opt.host import sweep
from purejaxrl_opt.config.schema import algo_config, EnvConfig, RunConfig, with_overrides
from purejaxrl_opt.host.loggers import Console
from purejaxrl_opt.host.runner import Compiled, loop_shape, train_lanes


def _run_seconds(run: RunConfig, plan) -> tuple[float, float, np.ndarray]:
    """Build, compile, train and evaluate every lane; returns (total s, compile s, final returns)."""
    start = time.perf_counter()
    algo = algos.make_algorithm(run)
    lanes = sweep.lanes(run, plan)
    keys = jax.vmap(jax.random.PRNGKey)(jnp.asarray([lane.seed for lane in lanes], jnp.uint32))
    hparams = {k: jnp.asarray(v) for k, v in sweep.lane_hparams(run, plan).items()}
    compiled = Compiled(algo, keys, hparams)
    loop, _ = train_lanes(compiled, keys, hparams, algo.num_updates, 1)
    returns = np.asarray(compiled.evaluate(loop)).mean(axis=1)
    return time.perf_counter() - start, compiled.seconds, returns


def bench_sweep(run: RunConfig, values: list[float]) -> dict:
    plan = sweep.plan_from_config({"vmap": {"algo.lr": values}}, run)
    sweep_total, sweep_compile, sweep_returns = _run_seconds(run, plan)
    separate = [_run_seconds(with_overrides(run, lr=v), None) for v in values]
    separate_total = sum(s[0] for s in separate)
    # the same agents either way: lane c*S+s of the sweep is seed s of config c's separate run
    max_diff = float(np.max(np.abs(sweep_returns - np.concatenate([s[2] for s in separate]))))
    return {
        "num_configs": len(values), "values": {"algo.lr": values}, "seeds_per_config": run.num_seeds,
        "sweep_seconds": round(sweep_total, 3), "sweep_compile_seconds": round(sweep_compile, 3),
        "separate_seconds": round(separate_total, 3),
        "separate_compile_seconds": [round(s[1], 3) for s in separate],
        "separate_over_sweep": round(separate_total / sweep_total, 3),
        "final_returns_max_abs_diff_sweep_vs_separate": max_diff,
    }


def bench_progress(run: RunConfig, chunks: int, checkpoint_every: int, repeats: int) -> dict:
    algo = algos.make_algorithm(run)
    keys = jax.vmap(jax.random.PRNGKey)(jnp.arange(run.seed, run.seed + run.num_seeds, dtype=jnp.uint32))
    hparams = {k: jnp.asarray(v) for k, v in sweep.lane_hparams(run, None).items()}
    compiled = Compiled(algo, keys, hparams)
    console = Console("lines", io.StringIO())

    def on_chunk(metrics, done, seconds):
        console.progress(metrics, done, algo.num_updates, seconds)

    def off():
        return train_lanes(compiled, keys, hparams, algo.num_updates, 1)

    def on():
        return train_lanes(compiled, keys, hparams, algo.num_updates, chunks, on_chunk)

    def with_checkpoints():
        directory = tempfile.mkdtemp(prefix="bench_ckpt_")
        saver = checkpoint.Checkpointer(directory, checkpoint.fingerprint(run, None, loop_shape(algo, keys, hparams)))
        try:
            return train_lanes(compiled, keys, hparams, algo.num_updates, chunks, on_chunk,
                               checkpoint_every=checkpoint_every, on_checkpoint=saver.save)
        finally:
            saver.close()
            shutil.rmtree(directory, ignore_errors=True)

    variants = {"progress_off": off, "progress_on": on, "progress_and_checkpoints": with_checkpoints}
    seconds = {name: [] for name in variants}
    outputs = {}
    for name, fn in variants.items():  # warm-up (and the outputs compared below)
        outputs[name] = jax.device_get(fn()[0])
    names = list(variants)
    for repeat in range(repeats):  # the order rotates so no variant always runs first
        for name in names[repeat % 3:] + names[:repeat % 3]:
            seconds[name].append(variants[name]()[1])
    median = {name: statistics.median(v) for name, v in seconds.items()}
    best = {name: min(v) for name, v in seconds.items()}
    leaves = {name: jax.tree_util.tree_leaves(out) for name, out in outputs.items()}
    identical = all(a.tobytes() == b.tobytes() for name in ("progress_on", "progress_and_checkpoints")
                    for a, b in zip(leaves["progress_off"], leaves[name]))
    env_steps = float(np.asarray(outputs["progress_off"].env_steps).sum())

    def _overhead(stat: dict, name: str) -> float:
        return round(100 * (stat[name] / stat["progress_off"] - 1), 2)

    def _paired(name: str) -> float:
        """Median over repeats of (variant / progress off) timed back to back: robust to drift."""
        return round(100 * (statistics.median(
            a / b for a, b in zip(seconds[name], seconds["progress_off"])) - 1), 2)

    return {
        "num_updates": algo.num_updates, "chunks": chunks, "checkpoint_every_updates": checkpoint_every,
        "repeats": repeats, "seconds": {k: [round(x, 4) for x in v] for k, v in seconds.items()},
        "median_seconds": {k: round(v, 4) for k, v in median.items()},
        "min_seconds": {k: round(v, 4) for k, v in best.items()},
        "env_steps_per_second_median": {k: round(env_steps / v) for k, v in median.items()},
        # paired: each repeat times the variants back to back; the median of their ratios is the
        # estimate least disturbed by other processes on a shared machine
        "progress_overhead_percent_paired_median": _paired("progress_on"),
        "progress_and_checkpoint_overhead_percent_paired_median": _paired("progress_and_checkpoints"),
        "progress_overhead_percent_min": _overhead(best, "progress_on"),
        "progress_overhead_percent_median": _overhead(median, "progress_on"),
        "progress_and_checkpoint_overhead_percent_min": _overhead(best, "progress_and_checkpoints"),
        "progress_and_checkpoint_overhead_percent_median": _overhead(median, "progress_and_checkpoints"),
        "outputs_bitwise_identical": identical,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--configs", type=int, default=4, help="N: learning rates in the sweep")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--total-timesteps", type=int, default=20000)
    parser.add_argument("--progress-timesteps", type=int, default=200000,
                        help="env steps per agent of the run used for the progress measurement")
    parser.add_argument("--chunks", type=int, default=10, help="progress chunks (conf: progress.chunks)")
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "bench_sweep.json"))
    args = parser.parse_args(argv)

    base = RunConfig(algo=algo_config("ppo")(), env=EnvConfig(args.env), num_seeds=args.seeds,
                     total_timesteps=args.total_timesteps, eval_episodes=8)
    base.validate()
    values = [float(f"{v:.3g}") for v in np.geomspace(1e-4, 3e-3, args.configs)]
    result = {"device": f"{jax.devices()[0].device_kind} ({jax.devices()[0].platform})",
              "jax_version": jax.__version__, "env": args.env, "algo": "ppo",
              "total_timesteps": args.total_timesteps,
              "command": " ".join([sys.executable.split("/")[-1], *sys.argv])}
    print(f"sweep: {args.configs} configs x {args.seeds} seeds vs {args.configs} separate runs ...", flush=True)
    result["sweep_vs_separate"] = bench_sweep(base, values)
    print(json.dumps(result["sweep_vs_separate"], indent=2), flush=True)
    progress_run = RunConfig(algo=base.algo, env=base.env, num_seeds=args.seeds,
                             total_timesteps=args.progress_timesteps, eval_episodes=8)
    print(f"progress/checkpoint cost on a {args.progress_timesteps:,}-step run ...", flush=True)
    result["progress"] = bench_progress(progress_run, args.chunks, args.checkpoint_every, args.repeats)
    print(json.dumps(result["progress"], indent=2), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
