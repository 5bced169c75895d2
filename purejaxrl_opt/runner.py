"""Run one configuration: build, compile, train all lanes, evaluate, write artifacts.

Lanes are independent agents trained by one compiled function: ``num_seeds`` seeds, times the
configs of an in-compile sweep (:mod:`purejaxrl_opt.sweep`; config-major, lane ``c * num_seeds + s``).
Seed lane ``s`` uses ``PRNGKey(seed + s)`` in every config, so lane ``s`` of a multi-seed run is the
run with ``seed=seed+s``. Training runs as jitted chunks of updates (one compile serves every chunk
length, the bounds are traced) so progress can be reported and checkpoints saved between chunks; the
next chunk is dispatched before the previous one is read or saved, so the host never stalls the
device. Chunk boundaries include every checkpoint update, and outputs are bitwise identical for any
chunking, with or without checkpoints, and after a resume (tested).
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from purejaxrl_opt import algos, checkpoint, sweep
from purejaxrl_opt.algos.base import Algorithm, Loop, evaluate_loop, init_loop, run_updates
from purejaxrl_opt.config import RunConfig
from purejaxrl_opt.networks import count_params


@dataclass
class RunResult:
    summary: dict
    loop: Loop  # final training state of every lane (leading axis = lane)
    eval_returns: np.ndarray  # [lanes, eval_episodes]


@dataclass(frozen=True)
class CheckpointSettings:
    every_updates: int = 0  # save every N updates (0 = never)
    final: bool = True  # save after the last update (what `purejaxrl_opt.evaluate` loads)
    keep: int | None = None  # keep only the newest K checkpoints (None = all)

    @property
    def enabled(self) -> bool:
        return self.every_updates > 0 or self.final


def lane_keys(seed: int, num_seeds: int) -> jax.Array:
    return jax.vmap(jax.random.PRNGKey)(jnp.arange(seed, seed + num_seeds, dtype=jnp.uint32))


def lane_hparams(algo: Algorithm, num_lanes: int) -> dict:
    return jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (num_lanes,) + x.shape),
                                  algo.default_hparams())


def loop_shape(algo: Algorithm, keys, hparams) -> Loop:
    """Shapes and dtypes of the lane-vmapped training state (traced, nothing compiled)."""
    return jax.eval_shape(jax.vmap(partial(init_loop, algo)), keys, hparams)


class Compiled:
    """The three jitted, lane-vmapped pieces of a run, compiled ahead of time.

    With an active ``layout`` (:mod:`purejaxrl_opt.parallel`) they are ``shard_map``s over its mesh,
    compiled with the mesh's in/out shardings; ``data_algo`` is the data-parallel algorithm.
    """

    def __init__(self, algo: Algorithm, keys: jax.Array, hparams: dict, layout=None, data_algo=None):
        start = time.perf_counter()
        active = layout is not None and (layout.active or data_algo is not None)
        self.layout = layout if active else None
        if self.layout is not None:
            self._compile_sharded(algo, keys, hparams, data_algo)
            self.seconds = time.perf_counter() - start
            return
        self.specs = None
        self.init = jax.jit(jax.vmap(partial(init_loop, algo))).lower(keys, hparams).compile()
        shape = loop_shape(algo, keys, hparams)
        self.updates = jax.jit(jax.vmap(partial(run_updates, algo), in_axes=(0, None, None))).lower(
            shape, jnp.int32(0), jnp.int32(1)).compile()
        self.evaluate = jax.jit(jax.vmap(partial(evaluate_loop, algo))).lower(shape).compile()
        self.seconds = time.perf_counter() - start

    def _compile_sharded(self, algo, keys, hparams, data_algo) -> None:
        from purejaxrl_opt import parallel

        layout = self.layout
        init, updates, evaluate, self.specs, shape = parallel.sharded_functions(
            layout, algo, keys, hparams, data_algo)
        lane, rep = layout.lane_sharding, layout.replicated
        loop_sh = parallel.shardings(layout, self.specs)
        self.init = jax.jit(init, in_shardings=(lane, lane), out_shardings=loop_sh).lower(
            keys, hparams).compile()
        self.updates = jax.jit(updates, in_shardings=(loop_sh, rep, rep), out_shardings=loop_sh).lower(
            shape, jnp.int32(0), jnp.int32(1)).compile()
        self.evaluate = jax.jit(evaluate, in_shardings=(loop_sh,), out_shardings=lane).lower(
            shape).compile()

    def place_inputs(self, keys, hparams):
        """Keys and hparams on the mesh (a no-op without a layout)."""
        if self.layout is None:
            return keys, hparams
        from purejaxrl_opt import parallel

        lane = self.layout.lane_sharding
        return (parallel.put(keys, lane),
                parallel.put(hparams, jax.tree_util.tree_map(lambda _: lane, hparams)))

    def place_loop(self, loop):
        """A restored (host) Loop on the mesh (a no-op without a layout)."""
        if self.layout is None or loop is None:
            return loop
        from purejaxrl_opt import parallel

        return parallel.place(self.layout, loop, self.specs)


def _to_host(tree):
    from purejaxrl_opt import parallel

    return parallel.to_host(tree)


def chunk_sizes(num_updates: int, num_chunks: int) -> list[int]:
    num_chunks = max(1, min(num_chunks, num_updates))
    base = math.ceil(num_updates / num_chunks)
    sizes = [base] * (num_updates // base)
    if num_updates % base:
        sizes.append(num_updates % base)
    return sizes


def chunk_stops(num_updates: int, num_chunks: int, checkpoint_every: int = 0, start: int = 0,
                doubling: bool = False) -> list[int]:
    """Update counts after which a chunk ends: the ``num_chunks`` progress grid (:func:`chunk_sizes`),
    every multiple of ``checkpoint_every``, and the end; only those after ``start``. ``doubling``
    adds every power of two: with a budget of env steps (GRPO) ``num_updates`` is only a bound and
    the run may end long before it, so progress is also reported at 1, 2, 4, ... updates."""
    stops = set(np.cumsum(chunk_sizes(num_updates, num_chunks)).tolist())
    if doubling and num_chunks > 1:
        stops |= {1 << k for k in range(max(num_updates, 1).bit_length()) if 1 << k < num_updates}
    if checkpoint_every > 0:
        stops |= set(range(checkpoint_every, num_updates, checkpoint_every))
    return sorted(s for s in stops | {num_updates} if s > start)


def train_lanes(compiled: Compiled, keys, hparams, num_updates: int, num_chunks: int,
                on_chunk=None, *, loop: Loop | None = None, checkpoint_every: int = 0,
                on_checkpoint=None, finished=None) -> tuple[Loop, float]:
    """Run every update in chunks, from ``loop`` (a restored state) or from a fresh init.

    ``on_chunk(metrics, updates_done, seconds)`` runs after each chunk with host metrics;
    ``on_checkpoint(loop, updates_done)`` after each chunk ending on a multiple of
    ``checkpoint_every`` and after the last one. Both run once the *next* chunk is dispatched.
    ``finished(loop) -> bool`` (algorithms with a budget of env steps): once a chunk's state is
    finished, later chunks would change nothing, so no more are dispatched; the last dispatched one
    counts as the last (progress, final checkpoint at its update count).
    """
    start = time.perf_counter()
    place_inputs = getattr(compiled, "place_inputs", None)
    if place_inputs is not None:
        keys, hparams = place_inputs(keys, hparams)
        loop = compiled.place_loop(loop)
    if loop is None:
        loop, done = compiled.init(keys, hparams), 0
    else:
        # the most advanced lane: lanes that spent their budget (GRPO) stopped counting earlier
        done = int(np.asarray(loop.update_idx).max())
    callbacks = on_chunk is not None or on_checkpoint is not None

    def _after(chunk_loop: Loop, updates_done: int, last: bool = False) -> None:
        if on_chunk is not None:
            metrics = _to_host(chunk_loop.metrics)  # waits for this chunk only
            on_chunk(metrics, num_updates if last else updates_done, time.perf_counter() - start)
        if on_checkpoint is not None and (updates_done == num_updates or last or (
                checkpoint_every > 0 and updates_done % checkpoint_every == 0)):
            on_checkpoint(chunk_loop, updates_done)

    pending = None  # (loop, done) of the previous chunk, handled after the next one is dispatched
    stops = chunk_stops(num_updates, num_chunks if callbacks else 1, checkpoint_every, done,
                        doubling=finished is not None)
    for stop in stops:
        loop = compiled.updates(loop, jnp.int32(done), jnp.int32(stop))
        done = stop
        if callbacks:
            if pending is not None:
                _after(*pending)
                if finished is not None and finished(pending[0]):
                    break  # the chunk just dispatched changes nothing: it ends the run
            pending = (loop, done)
    jax.block_until_ready(loop)
    if pending is not None:
        _after(loop, done, last=True) if done < num_updates else _after(*pending)
    return loop, time.perf_counter() - start


def execute(run: RunConfig, out_dir: str | os.PathLike, loggers=(), num_chunks: int = 1,
            plan: sweep.SweepPlan | None = None, checkpoints: CheckpointSettings | None = None,
            resume: bool = False, parallel=None) -> RunResult:
    """Train every lane of ``run`` (x ``plan``'s configs) and write ``metrics.csv``, ``summary.json``
    and ``learning_curve.png`` into ``out_dir``.

    ``checkpoints`` (default: none) saves the training state into ``out_dir/checkpoints``;
    ``resume`` continues from the latest checkpoint there. Every check that can fail on bad input
    (no checkpoint, a mismatching or corrupt one, a fresh run over existing checkpoints) runs before
    anything is compiled or written; so does the device layout check. ``parallel``
    (:class:`purejaxrl_opt.parallel.ParallelSettings`, default lanes=auto, data=1) shards the lanes
    over the local devices and/or runs each agent data parallel over ``data`` devices.
    """
    from purejaxrl_opt import parallel as par

    out_dir = Path(out_dir)
    env = algos.make_env(run)
    algo = algos.make_algorithm(run, env)
    lanes = sweep.lanes(run, plan)
    layout = par.make_layout(parallel if parallel is not None else par.ParallelSettings(), run,
                             len(lanes))
    data_algo = algos.make_algorithm(run, env, axis_name=par.DATA) if layout.data > 1 else None
    keys = jax.vmap(jax.random.PRNGKey)(jnp.asarray([lane.seed for lane in lanes], jnp.uint32))
    hparams = {k: jnp.asarray(v) for k, v in sweep.lane_hparams(run, plan).items()}
    shape = loop_shape(algo, keys, hparams)  # global shapes, the same with or without a layout
    checkpoints = checkpoints or CheckpointSettings(every_updates=0, final=False)
    fingerprint = checkpoint.fingerprint(run, plan, shape)
    restored, start_update = None, 0
    if resume:
        restored, start_update = checkpoint.restore(out_dir, fingerprint, shape)
    elif checkpoints.enabled and checkpoint.available_steps(out_dir):
        raise checkpoint.CheckpointError(
            f"{checkpoint.checkpoint_dir(out_dir)} already holds checkpoints "
            f"{checkpoint.available_steps(out_dir)}; continue that run with resume={out_dir} or "
            "choose another run dir (nothing was overwritten)")

    main = par.is_main_process()  # with jax.distributed, only process 0 writes and logs
    loggers = loggers if main else ()
    if main:
        out_dir.mkdir(parents=True, exist_ok=True)
    for logger in loggers:
        logger.start(run, algo, out_dir, lanes=lanes, plan=plan, start_update=start_update)
    compiled = Compiled(algo, keys, hparams, layout, data_algo)
    for logger in loggers:
        logger.compiled(compiled.seconds)

    def on_chunk(metrics, updates_done, seconds):
        for logger in loggers:
            logger.progress(metrics, updates_done, algo.num_updates, seconds, start_update=start_update)

    evaluation = {k: getattr(run, k) for k in checkpoint.EVAL_ONLY_KEYS}  # defaults of the evaluate CLI
    saver = (checkpoint.Checkpointer(out_dir, fingerprint, checkpoints.keep, {"evaluation": evaluation})
             if checkpoints.enabled and main else None)
    multi_process = jax.process_count() > 1

    def on_checkpoint(loop, updates_done):
        if updates_done < algo.num_updates or checkpoints.final or (
                checkpoints.every_updates and updates_done % checkpoints.every_updates == 0):
            if multi_process:  # a collective: every process gathers, process 0 saves
                loop = _to_host(loop)
            if saver is not None:
                saver.save(loop, updates_done)

    try:
        loop, run_seconds = train_lanes(
            compiled, keys, hparams, algo.num_updates, num_chunks, on_chunk, loop=restored,
            checkpoint_every=checkpoints.every_updates,
            on_checkpoint=on_checkpoint if checkpoints.enabled else None,
            finished=lanes_finished(algo) if algo.lane_active is not None else None)
    finally:
        if saver is not None:
            saver.close()
    eval_returns = np.asarray(_to_host(compiled.evaluate(loop)))
    metrics = jax.tree_util.tree_map(np.asarray, _to_host(loop.metrics))
    num_params = count_params(jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype),
                                                     algo.param_fn(loop.algo_state)))
    summary = make_summary(run, algo, metrics, eval_returns, compiled.seconds, run_seconds, num_params,
                           lanes=lanes, plan=plan, start_update=start_update,
                           parallel_layout=layout.describe())
    summary["memory"] = memory_report(compiled)
    token_examples = None
    if algo.spec.vocab is not None:
        token_stats, token_examples = token_evaluation(algo, _to_host(loop))
        summary.update(token_stats)
    if not main:
        return RunResult(summary, loop, eval_returns)
    if token_examples is not None:
        (out_dir / "examples.txt").write_text(token_examples)
    write_metrics_csv(out_dir / "metrics.csv", run, metrics, hparams, lanes=lanes, plan=plan)
    write_json_atomic(out_dir / "summary.json", summary)
    _plot_learning_curve(out_dir, summary, metrics)
    for logger in loggers:
        logger.finish(summary, metrics, out_dir)
    return RunResult(summary, loop, eval_returns)


def lanes_finished(algo: Algorithm):
    """``finished(loop) -> bool``: no lane of ``loop`` may run another update (``algo.lane_active``)."""
    active = jax.jit(jax.vmap(algo.lane_active))

    def finished(loop: Loop) -> bool:
        return not bool(np.any(np.asarray(_to_host(active(loop.algo_state)))))

    return finished


def final_env_steps(metrics: dict) -> np.ndarray:
    """Env steps consumed by each lane: the last recorded value of the cumulative ``env_steps``
    (rows of updates a lane did not run are NaN), 0 for a lane with none."""
    steps = np.asarray(metrics["env_steps"], np.float64)
    return np.where(np.isfinite(steps), steps, -np.inf).max(axis=1).clip(min=0.0)


def updates_run(metrics: dict) -> np.ndarray:
    """Updates each lane ran (rows with a recorded ``env_steps``)."""
    return np.isfinite(np.asarray(metrics["env_steps"])).sum(axis=1)


def memory_report(compiled: Compiled) -> dict:
    """Memory of the compiled update function by XLA's own accounting (all lanes; ``update_total_bytes``
    = arguments + outputs + temporaries - aliased, an upper bound of what it holds live at once) and
    the process's peak resident set size so far, in bytes."""
    import resource

    report = {}
    try:
        stats = compiled.updates.memory_analysis()
        report.update(update_argument_bytes=int(stats.argument_size_in_bytes),
                      update_output_bytes=int(stats.output_size_in_bytes),
                      update_temp_bytes=int(stats.temp_size_in_bytes),
                      update_alias_bytes=int(stats.alias_size_in_bytes))
        report["update_total_bytes"] = (report["update_argument_bytes"] + report["update_output_bytes"]
                                        + report["update_temp_bytes"] - report["update_alias_bytes"])
    except Exception:  # noqa: BLE001 - not every backend reports it
        pass
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    report["process_max_rss_bytes"] = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale)
    return report


def token_evaluation(algo: Algorithm, loop: Loop) -> tuple[dict, str]:
    """Held-out accuracy of every lane's final policy (greedy and sampled answers to the same
    ``eval_episodes`` test-split prompts) and a text of example answers (lane 0, greedy)."""
    from purejaxrl_opt.algos.base import token_generations
    from purejaxrl_opt.token_envs import format_answers

    def _lane(loop: Loop):
        actor_params, _ = algo.policy(loop.algo_state)
        greedy = token_generations(algo, actor_params, loop.eval_key, greedy=True)
        sampled = token_generations(algo, actor_params, loop.eval_key, greedy=False)
        return greedy, sampled.correct

    greedy, sampled_correct = jax.tree_util.tree_map(np.asarray, jax.jit(jax.vmap(_lane))(loop))
    per_lane = greedy.correct.mean(axis=1)
    per_lane_sampled = sampled_correct.mean(axis=1)
    stats = {"eval_accuracy": float(per_lane.mean()),
             "eval_accuracy_per_seed": [float(x) for x in per_lane],
             "eval_accuracy_sampled": float(per_lane_sampled.mean()),
             "eval_accuracy_sampled_per_seed": [float(x) for x in per_lane_sampled],
             "eval_prompts": int(greedy.correct.shape[1]), "eval_split": "test"}
    lines = ["# held-out (test-split) prompts and the greedy answers of lane 0's final policy"]
    lines += format_answers(greedy.obs[0, 0], greedy.action[0].T, greedy.lengths[0], greedy.correct[0],
                            32)
    return stats, "\n".join(lines) + "\n"


def _plot_learning_curve(out_dir: Path, summary: dict, metrics: dict) -> None:
    from purejaxrl_opt import report

    try:
        report.plot_learning_curves(report.groups_from_run(summary, metrics), out_dir / "learning_curve.png")
    except Exception as error:  # noqa: BLE001 - a plot must never cost a finished run its results
        print(f"[purejaxrl_opt] could not plot the learning curve: {error}")


def _aggregate(per_seed: np.ndarray) -> dict:
    n = per_seed.shape[0]
    std = float(per_seed.std(ddof=1)) if n > 1 else 0.0
    return {"final_return_mean": float(per_seed.mean()), "final_return_std": std,
            "final_return_ci95": float(1.96 * std / math.sqrt(n)) if n > 1 else 0.0}


def make_summary(run: RunConfig, algo: Algorithm, metrics: dict, eval_returns: np.ndarray,
                 compile_seconds: float, run_seconds: float, num_params: int,
                 lanes: list | None = None, plan: sweep.SweepPlan | None = None,
                 start_update: int = 0, parallel_layout: dict | None = None) -> dict:
    """``final_return_*`` aggregate every lane; with a sweep, ``sweep.configs`` has them per config."""
    per_lane = eval_returns.mean(axis=1)
    env_steps = final_env_steps(metrics)  # cumulative, per lane
    # a resumed run's timing covers only the updates this process ran
    steps_before = (final_env_steps({"env_steps": metrics["env_steps"][:, :start_update]})
                    if start_update > 0 else 0.0)
    summary = {
        "algo": run.algo.name,
        "env": run.env.id,
        "seed": run.seed,
        "num_seeds": run.num_seeds,
        "seeds": list(range(run.seed, run.seed + run.num_seeds)),
        "total_timesteps": run.total_timesteps,
        "num_updates": int(updates_run(metrics).max()),
        "max_updates": algo.num_updates,  # rows of the metrics buffer (= num_updates but for GRPO)
        "updates_per_seed": [int(x) for x in updates_run(metrics)],  # per lane
        "env_steps": int(env_steps.mean()),
        "env_steps_per_seed": [int(x) for x in env_steps],  # per lane
        **_aggregate(per_lane),
        "final_return_per_seed": [float(x) for x in per_lane],  # per lane
        "eval_episodes": run.eval_episodes,
        "eval_deterministic": run.eval_deterministic,
        "compile_seconds": round(compile_seconds, 3),
        "run_seconds": round(run_seconds, 3),
        # all lanes together, compile excluded
        "env_steps_per_second": float(np.sum(env_steps - steps_before) / max(run_seconds, 1e-9)),
        "num_params": num_params,
        "hparams": {k: getattr(run.algo, k) for k in run.algo.SWEEPABLE},
        "num_lanes": int(per_lane.shape[0]),
        "resumed_from_update": start_update,
        "config": config_dict(run),
        "device": describe_device(),
        "parallel": parallel_layout,
        "jax_version": jax.__version__,
        "host": platform.node(),
    }
    if plan is not None:
        lanes = lanes or sweep.lanes(run, plan)
        configs = []
        for index, values in enumerate(plan.configs):
            members = [lane.index for lane in lanes if lane.config == index]
            configs.append({"config": index, "values": dict(values), **_aggregate(per_lane[members]),
                            "final_return_per_seed": [float(per_lane[m]) for m in members],
                            "env_steps_per_seed": [int(env_steps[m]) for m in members]})
        summary["sweep"] = {**plan.to_dict(), "num_configs": plan.num_configs,
                            "lanes": [{"lane": lane.index, "config": lane.config, "seed": lane.seed,
                                       **lane.values} for lane in lanes],
                            "configs": configs}
    return summary


def describe_device() -> str:
    devices = jax.devices()
    return f"{len(devices)}x {devices[0].device_kind} ({devices[0].platform})"


def write_metrics_csv(path: Path, run: RunConfig, metrics: dict, hparams: dict,
                      lanes: list | None = None, plan: sweep.SweepPlan | None = None) -> None:
    """One row per (lane, update), lane-major; swept hyperparameter values per lane go in extra
    columns (named like the hyperparameter, e.g. ``lr``; the values as given in the sweep)."""
    names = ["env_steps"] + sorted(k for k in metrics if k != "env_steps")
    lanes_n, num_updates = metrics["env_steps"].shape
    if plan is not None:
        lanes = lanes or sweep.lanes(run, plan)
        swept = list(plan.hparam_names)
        hp = {name: [lane.values[key] for lane in lanes] for name, key in zip(swept, plan.keys)}
        seeds = [lane.seed for lane in lanes]
    else:
        swept = sorted(k for k, v in hparams.items() if np.unique(np.asarray(v)).size > 1)
        hp = {k: [float(x) for x in np.asarray(hparams[k])] for k in swept}
        seeds = [lane.seed for lane in lanes] if lanes else [run.seed + i for i in range(lanes_n)]

    def _rows():
        for lane in range(lanes_n):
            for update in range(num_updates):
                if math.isnan(float(metrics["env_steps"][lane, update])):
                    continue  # an update this lane did not run (its budget was spent)
                yield ([seeds[lane], update] + [_fmt(hp[k][lane]) for k in swept]
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
