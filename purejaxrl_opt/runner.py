"""Run one configuration: build, compile, train all lanes, evaluate, write artifacts.

Lanes are independent agents trained by one compiled function: ``num_seeds`` seeds (lane ``i`` uses
``PRNGKey(seed + i)``, so lane ``i`` of a multi-seed run is the run with ``seed=seed+i``). Training
runs as jitted chunks of updates (one compile serves every chunk length) so progress can be reported
between chunks; the next chunk is dispatched before the previous one's progress is read, so the host
never stalls the device. Outputs are bitwise identical for any chunking (tested).
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import tempfile
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from purejaxrl_opt import algos
from purejaxrl_opt.algos.base import Algorithm, Loop, evaluate_loop, init_loop, run_updates
from purejaxrl_opt.config import RunConfig
from purejaxrl_opt.networks import count_params


@dataclass
class RunResult:
    summary: dict
    loop: Loop  # final training state of every lane (leading axis = lane)
    eval_returns: np.ndarray  # [lanes, eval_episodes]


def lane_keys(seed: int, num_seeds: int) -> jax.Array:
    return jax.vmap(jax.random.PRNGKey)(jnp.arange(seed, seed + num_seeds, dtype=jnp.uint32))


def lane_hparams(algo: Algorithm, num_lanes: int) -> dict:
    return jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (num_lanes,) + x.shape),
                                  algo.default_hparams())


class Compiled:
    """The three jitted, lane-vmapped pieces of a run, compiled ahead of time."""

    def __init__(self, algo: Algorithm, keys: jax.Array, hparams: dict):
        start = time.perf_counter()
        self.init = jax.jit(jax.vmap(partial(init_loop, algo))).lower(keys, hparams).compile()
        loop_shape = jax.eval_shape(jax.vmap(partial(init_loop, algo)), keys, hparams)
        self.updates = jax.jit(jax.vmap(partial(run_updates, algo), in_axes=(0, None, None))).lower(
            loop_shape, jnp.int32(0), jnp.int32(1)).compile()
        self.evaluate = jax.jit(jax.vmap(partial(evaluate_loop, algo))).lower(loop_shape).compile()
        self.seconds = time.perf_counter() - start


def chunk_sizes(num_updates: int, num_chunks: int) -> list[int]:
    num_chunks = max(1, min(num_chunks, num_updates))
    base = math.ceil(num_updates / num_chunks)
    sizes = [base] * (num_updates // base)
    if num_updates % base:
        sizes.append(num_updates % base)
    return sizes


def train_lanes(compiled: Compiled, keys, hparams, num_updates: int, num_chunks: int,
                on_chunk=None) -> tuple[Loop, float]:
    """Run every update in chunks; ``on_chunk(loop, updates_done, seconds)`` after each chunk."""
    start = time.perf_counter()
    loop = compiled.init(keys, hparams)
    done = 0
    pending = None  # (loop, done) of the previous chunk, read after the next one is dispatched
    for size in chunk_sizes(num_updates, num_chunks):
        loop = compiled.updates(loop, jnp.int32(done), jnp.int32(done + size))
        done += size
        if on_chunk is not None:
            if pending is not None:
                on_chunk(*pending, time.perf_counter() - start)
            pending = (loop.metrics, done)
    jax.block_until_ready(loop)
    if on_chunk is not None and pending is not None:
        on_chunk(*pending, time.perf_counter() - start)
    return loop, time.perf_counter() - start


def execute(run: RunConfig, out_dir: str | os.PathLike, loggers=(), num_chunks: int = 1) -> RunResult:
    """Train ``run.num_seeds`` lanes of ``run`` and write ``metrics.csv`` and ``summary.json``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    algo = algos.make_algorithm(run)
    keys = lane_keys(run.seed, run.num_seeds)
    hparams = lane_hparams(algo, run.num_seeds)
    for logger in loggers:
        logger.start(run, algo, out_dir)

    compiled = Compiled(algo, keys, hparams)
    for logger in loggers:
        logger.compiled(compiled.seconds)

    def on_chunk(metrics, updates_done, seconds):
        for logger in loggers:
            logger.progress(metrics, updates_done, algo.num_updates, seconds)

    loop, run_seconds = train_lanes(compiled, keys, hparams, algo.num_updates, num_chunks, on_chunk)
    eval_returns = np.asarray(compiled.evaluate(loop))
    metrics = jax.tree_util.tree_map(np.asarray, loop.metrics)
    num_params = count_params(jax.tree_util.tree_map(lambda x: x[0], algo.param_fn(loop.algo_state)))
    summary = make_summary(run, algo, metrics, eval_returns, compiled.seconds, run_seconds, num_params)
    write_metrics_csv(out_dir / "metrics.csv", run, metrics, hparams)
    write_json_atomic(out_dir / "summary.json", summary)
    for logger in loggers:
        logger.finish(summary, metrics, out_dir)
    return RunResult(summary, loop, eval_returns)


def make_summary(run: RunConfig, algo: Algorithm, metrics: dict, eval_returns: np.ndarray,
                 compile_seconds: float, run_seconds: float, num_params: int) -> dict:
    per_seed = eval_returns.mean(axis=1)
    env_steps = metrics["env_steps"][:, -1]  # cumulative, per lane
    lanes = per_seed.shape[0]
    std = float(per_seed.std(ddof=1)) if lanes > 1 else 0.0
    return {
        "algo": run.algo.name,
        "env": run.env.id,
        "seed": run.seed,
        "num_seeds": run.num_seeds,
        "seeds": list(range(run.seed, run.seed + run.num_seeds)),
        "total_timesteps": run.total_timesteps,
        "num_updates": algo.num_updates,
        "env_steps": int(env_steps.mean()),
        "env_steps_per_seed": [int(x) for x in env_steps],
        "final_return_mean": float(per_seed.mean()),
        "final_return_std": std,
        "final_return_ci95": float(1.96 * std / math.sqrt(lanes)) if lanes > 1 else 0.0,
        "final_return_per_seed": [float(x) for x in per_seed],
        "eval_episodes": run.eval_episodes,
        "eval_deterministic": run.eval_deterministic,
        "compile_seconds": round(compile_seconds, 3),
        "run_seconds": round(run_seconds, 3),
        # all lanes together, compile excluded
        "env_steps_per_second": float(env_steps.sum() / run_seconds),
        "num_params": num_params,
        "hparams": {k: getattr(run.algo, k) for k in run.algo.SWEEPABLE},
        "device": describe_device(),
        "jax_version": jax.__version__,
        "host": platform.node(),
    }


def describe_device() -> str:
    devices = jax.devices()
    return f"{len(devices)}x {devices[0].device_kind} ({devices[0].platform})"


def write_metrics_csv(path: Path, run: RunConfig, metrics: dict, hparams: dict) -> None:
    """One row per (seed, update); swept hyperparameter values per lane go in extra columns."""
    names = ["env_steps"] + sorted(k for k in metrics if k != "env_steps")
    swept = sorted(k for k, v in hparams.items() if np.unique(np.asarray(v)).size > 1)
    lanes, num_updates = metrics["env_steps"].shape
    hp = {k: np.asarray(hparams[k]) for k in swept}

    def _rows():
        for lane in range(lanes):
            for update in range(num_updates):
                yield ([run.seed + lane, update] + [float(hp[k][lane]) for k in swept]
                       + [_fmt(metrics[n][lane, update]) for n in names])

    with _atomic(path) as handle:
        writer = csv.writer(handle)
        writer.writerow(["seed", "update"] + swept + names)
        writer.writerows(_rows())


def _fmt(x: float) -> Any:
    x = float(x)
    return "" if math.isnan(x) else (int(x) if x.is_integer() and abs(x) < 2**53 else f"{x:.6g}")


class _atomic:
    """Write a text file via a temp file + rename: readers never see a half-written file."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def __enter__(self):
        fd, self.tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        self.handle = os.fdopen(fd, "w", newline="")
        return self.handle

    def __exit__(self, exc_type, *_):
        self.handle.close()
        if exc_type is None:
            os.chmod(self.tmp, 0o644)
            os.replace(self.tmp, self.path)
        else:
            os.unlink(self.tmp)


def write_json_atomic(path: Path, data: dict) -> None:
    with _atomic(path) as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")


def config_dict(run: RunConfig) -> dict:
    return asdict(run)
