"""Run one configuration: build, compile, train all lanes, evaluate, write artifacts.

Lanes are independent agents trained by one compiled function: ``num_seeds`` seeds, times the
configs of an in-compile sweep (:mod:`purejaxrl_opt.host.sweep`; config-major, lane ``c * num_seeds + s``).
Seed lane ``s`` uses ``PRNGKey(seed + s)`` in every config, so lane ``s`` of a multi-seed run is the
run with ``seed=seed+s``. Training runs as jitted chunks of updates (one compile serves every chunk
length, the bounds are traced) so progress can be reported and checkpoints saved between chunks; the
next chunk is dispatched before the previous one is read or saved, so the host never stalls the
device. Chunk boundaries include every checkpoint update, and outputs are bitwise identical for any
chunking, with or without checkpoints, and after a resume (tested).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from purejaxrl_opt.core import algos
from purejaxrl_opt.formats import checkpoint
from purejaxrl_opt.host import rundir, sweep
from purejaxrl_opt.host.chunks import chunk_stops, compile_chunked, compile_in_turn, run_chunks
from purejaxrl_opt.host.artifacts import (make_summary, memory_report, plot_learning_curve, write_json_atomic,
                                     write_metrics_csv)
from purejaxrl_opt.core.stages import evaluation
from purejaxrl_opt.core.algos.base import Algorithm, Loop, host_metrics, init_loop, run_updates
from purejaxrl_opt.config.schema import RunConfig
from purejaxrl_opt.formats.checkpoint import CheckpointConfig
from purejaxrl_opt.core.models.networks import count_params


@dataclass
class RunResult:
    summary: dict
    loop: Loop  # final training state of every lane (leading axis = lane)
    eval_returns: np.ndarray  # [lanes, eval_episodes]


def loop_shape(algo: Algorithm, keys, hparams) -> Loop:
    """Shapes and dtypes of the lane-vmapped training state (traced, nothing compiled)."""
    return jax.eval_shape(jax.vmap(partial(init_loop, algo)), keys, hparams)


def _one_lane_updates(algo: Algorithm):
    """The updates of a run of one lane, computed unbatched on the lane's state (the carry keeps its
    lane axis of 1). A ``vmap`` over one lane makes every product a batched product with a unit batch
    axis, which XLA:CPU runs slower: PPO CartPole at 64 envs x 128 steps, one agent, 73 ms an update
    through the vmapped chunk vs 64 ms unbatched, measured in one process). Floats
    differ from the vmapped program's in the last bits; init and evaluation stay vmapped."""

    def updates(loop: Loop, start, stop) -> Loop:
        lane = jax.tree_util.tree_map(lambda x: x[0], loop)
        return jax.tree_util.tree_map(lambda x: x[None], run_updates(algo, lane, start, stop))

    return updates


class Compiled:
    """The three jitted, lane-vmapped pieces of a run, compiled ahead of time.

    With an active ``layout`` (:mod:`purejaxrl_opt.host.parallel`) they are ``shard_map``s over its mesh,
    compiled with the mesh's in/out shardings; ``data_algo`` is the data-parallel algorithm.
    """

    def __init__(self, algo: Algorithm, keys: jax.Array, hparams: dict, layout=None, data_algo=None):
        from purejaxrl_opt.host.parallel import lane_updates

        start = time.perf_counter()
        lane_loop = layout.lane_loop if layout is not None else "vmap"
        active = layout is not None and (layout.active or data_algo is not None)
        self.layout = layout if active else None
        if self.layout is not None:
            self._compile_sharded(algo, keys, hparams, data_algo)
            self.seconds = time.perf_counter() - start
            return
        self.specs = None
        updates = lane_updates(algo, lane_loop)
        if jax.tree_util.tree_leaves(keys)[0].shape[0] == 1:
            updates = _one_lane_updates(algo)
        evaluate = jax.jit(jax.vmap(partial(evaluation.final_returns, algo)))
        self.init, self.updates, _, self.evaluate = compile_chunked(
            jax.vmap(partial(init_loop, algo)), updates, keys, hparams, extra=(evaluate.lower,))
        self.seconds = time.perf_counter() - start

    def _compile_sharded(self, algo, keys, hparams, data_algo) -> None:
        from purejaxrl_opt.host import parallel

        layout = self.layout
        init, updates, evaluate, self.specs, shape = parallel.sharded_functions(
            layout, algo, keys, hparams, data_algo)
        lane, rep = layout.lane_sharding, layout.replicated
        loop_sh = parallel.shardings(layout, self.specs)
        self.init, self.updates, self.evaluate = compile_in_turn(  # each compiles while the next is lowered
            lambda: jax.jit(init, in_shardings=(lane, lane), out_shardings=loop_sh).lower(keys, hparams),
            lambda: jax.jit(updates, in_shardings=(loop_sh, rep, rep), out_shardings=loop_sh).lower(
                shape, jnp.int32(0), jnp.int32(1)),
            lambda: jax.jit(evaluate, in_shardings=(loop_sh,), out_shardings=lane).lower(shape))

    def place_inputs(self, keys, hparams):
        """Keys and hparams on the mesh (a no-op without a layout)."""
        if self.layout is None:
            return keys, hparams
        from purejaxrl_opt.host import parallel

        lane = self.layout.lane_sharding
        return (parallel.put(keys, lane),
                parallel.put(hparams, jax.tree_util.tree_map(lambda _: lane, hparams)))

    def place_loop(self, loop):
        """A restored (host) Loop on the mesh (a no-op without a layout)."""
        if self.layout is None or loop is None:
            return loop
        from purejaxrl_opt.host import parallel

        return parallel.place(self.layout, loop, self.specs)


def _to_host(tree):
    from purejaxrl_opt.host import parallel

    return parallel.to_host(tree)


def train_lanes(compiled: Compiled, keys, hparams, num_updates: int, num_chunks: int,
                on_chunk=None, *, loop: Loop | None = None, checkpoint_every: int = 0,
                on_checkpoint=None, finished=None, final_checkpoint: bool = True,
                align: int = 1) -> tuple[Loop, float]:
    """Run every update in chunks (:func:`purejaxrl_opt.host.chunks.run_chunks`), from ``loop`` (a
    restored state) or from a fresh init.

    ``on_chunk(metrics, updates_done, seconds)`` runs after each chunk with host metrics;
    ``on_checkpoint(loop, updates_done)`` after each chunk ending on a multiple of
    ``checkpoint_every`` and, with ``final_checkpoint``, after the last one. Both run once the *next*
    chunk is dispatched. ``finished(loop) -> bool`` (algorithms with a budget of env steps): once a
    chunk's state is finished, later chunks would change nothing, so no more are dispatched; the last
    dispatched one counts as the last (progress, final checkpoint at its update count). ``align``:
    the algorithm's ``check_every`` (progress chunks end on whole blocks, :func:`chunk_stops`).

    Returns the final loop and the training seconds: from the start through the last update's end,
    without the work done after it (the last progress report, the final checkpoint).
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

    def _after(chunk_loop: Loop, updates_done: int, last: bool) -> None:
        if on_chunk is not None:
            metrics = host_metrics(_to_host(chunk_loop.metrics))  # waits for this chunk only
            on_chunk(metrics, num_updates if last else updates_done, time.perf_counter() - start)
        final = updates_done == num_updates or last
        if on_checkpoint is not None and ((final and final_checkpoint) or (
                not final and checkpoint_every > 0 and updates_done % checkpoint_every == 0)):
            on_checkpoint(chunk_loop, updates_done)

    stops = chunk_stops(num_updates, num_chunks if callbacks else 1, checkpoint_every, done,
                        doubling=finished is not None, align=align)
    # training time: init and every update (with the progress reads and periodic checkpoints made
    # between chunks); the last chunk's progress line and final checkpoint are written after it
    return run_chunks(compiled.updates, loop, stops, done, _after if callbacks else None, finished, start)


def update_reached(loop: Loop) -> int:
    """The update count of the most advanced lane: the name of ``loop``'s checkpoint. A run with a
    budget of env steps (GRPO) may stop before the chunk boundary it was dispatched to."""
    return int(np.asarray(_to_host(loop.update_idx)).max())


def execute(run: RunConfig, out_dir: str | os.PathLike, loggers=(), num_chunks: int = 1,
            plan: sweep.SweepPlan | None = None, checkpoints: CheckpointConfig | None = None,
            resume: bool = False, parallel=None, resume_step: int | None = None,
            on_validated=None) -> RunResult:
    """Train every lane of ``run`` (x ``plan``'s configs) and write ``metrics.csv``, ``summary.json``
    and ``learning_curve.png`` into ``out_dir``.

    ``checkpoints`` (default: none) saves the training state into ``out_dir/checkpoints``;
    ``resume`` continues from the latest checkpoint there (``resume_step``: from the checkpoint of that
    update; the later ones are removed first, the run writes them again). ``out_dir`` is locked for
    this run (:func:`purejaxrl_opt.host.rundir.lock`: a directory in use by another run is refused). Every
    check that can fail on bad input (a directory in use, no checkpoint, a mismatching or corrupt one,
    a fresh run over existing checkpoints, a checkpoint directory that cannot be written) runs before
    anything is compiled or written; so does the device layout check. Then ``on_validated(out_dir)``
    runs (the CLI records the run's config there). ``parallel``
    (:class:`purejaxrl_opt.host.parallel.ParallelConfig`, default lanes=auto, data=1) shards the lanes
    over the local devices and/or runs each agent data parallel over ``data`` devices.

    The results are written before the final checkpoint: a final checkpoint that cannot be written
    (CheckpointWriteError) leaves ``summary.json`` and ``metrics.csv`` of the finished training on
    disk; a periodic one, ``metrics.csv`` of the updates done so far (unless the directory holds a
    finished run's ``summary.json``).
    """
    from purejaxrl_opt.host import parallel as par

    out_dir = Path(out_dir)
    env = algos.make_env(run)
    algo = algos.make_algorithm(run, env)
    lanes = sweep.lanes(run, plan)
    layout = par.make_layout(parallel if parallel is not None else par.ParallelConfig(), run,
                             len(lanes))
    data_algo = algos.make_algorithm(run, env, axis_name=par.DATA) if layout.data > 1 else None
    keys, hparams = sweep.lane_inputs(run, plan)
    shape = loop_shape(algo, keys, hparams)  # global shapes, the same with or without a layout
    checkpoints = checkpoints or CheckpointConfig(every_updates=0, final=False)
    fingerprint = checkpoint.fingerprint(run, plan, shape)
    main = par.is_main_process()  # with jax.distributed, only process 0 writes and logs
    lock = rundir.lock(out_dir) if main else None
    try:
        restored, start_update, superseded = None, 0, []
        if resume:
            restored, start_update = _restore_for_resume(out_dir, fingerprint, shape, resume_step)
            superseded = [s for s in checkpoint.available_steps(out_dir) if s > start_update]
        elif checkpoints.enabled and checkpoint.available_steps(out_dir):
            raise checkpoint.CheckpointError(
                f"{checkpoint.checkpoint_dir(out_dir)} already holds checkpoints "
                f"{checkpoint.available_steps(out_dir)}; continue that run with resume={out_dir} or "
                "choose another run dir (nothing was overwritten)")
        if checkpoints.enabled and main:
            checkpoint.check_writable(out_dir)
        if superseded and main:
            checkpoint.remove_steps(out_dir, superseded)
        if on_validated is not None and main:
            on_validated(out_dir)
        return _train(run, out_dir, loggers if main else (), num_chunks, plan, checkpoints, algo, lanes,
                      layout, data_algo, keys, hparams, fingerprint, restored, start_update, main,
                      superseded)
    finally:
        if lock is not None:
            lock.release()
            rundir.discard_if_empty(out_dir)


def _restore_for_resume(out_dir: Path, fingerprint: dict, shape, resume_step: int | None):
    try:
        return checkpoint.restore(out_dir, fingerprint, shape, resume_step)
    except checkpoint.CorruptCheckpointError as error:
        steps = checkpoint.available_steps(out_dir)
        older = [s for s in steps if s < (resume_step or steps[-1])]
        hint = (f"\nResume from an older checkpoint with resume_step=N (N one of {older}); the "
                "checkpoints after it are then written again." if older else "")
        raise checkpoint.CorruptCheckpointError(f"{error}{hint}") from None


def _train(run, out_dir, loggers, num_chunks, plan, checkpoints, algo, lanes, layout, data_algo, keys,
           hparams, fingerprint, restored, start_update, main, superseded) -> RunResult:
    if main:
        out_dir.mkdir(parents=True, exist_ok=True)
    if superseded:
        print(f"[purejaxrl_opt] removed the checkpoints {superseded} after update {start_update} "
              "(this run writes them again)")
    for logger in loggers:
        logger.start(run, algo, out_dir, lanes=lanes, plan=plan, start_update=start_update)
    compiled = Compiled(algo, keys, hparams, layout, data_algo)
    for logger in loggers:
        logger.compiled(compiled.seconds)

    def on_chunk(metrics, updates_done, seconds):
        for logger in loggers:
            logger.progress(metrics, updates_done, algo.num_updates, seconds, start_update=start_update)

    eval_defaults = {k: getattr(run, k) for k in checkpoint.EVAL_ONLY_KEYS}  # defaults of the evaluate CLI
    saver = (checkpoint.Checkpointer(out_dir, fingerprint, checkpoints.keep, {"evaluation": eval_defaults})
             if checkpoints.enabled and main else None)
    multi_process = jax.process_count() > 1

    def save(loop) -> None:
        step = update_reached(loop)
        if multi_process:  # a collective: every process gathers, process 0 saves
            loop = _to_host(loop)
        if saver is not None:
            saver.save(loop, step)

    def on_checkpoint(loop, updates_done):  # the periodic ones; the final one is saved below
        try:
            save(loop)
        except checkpoint.CheckpointWriteError:
            if main and not (out_dir / "summary.json").exists():  # the updates done so far
                write_metrics_csv(out_dir / "metrics.csv", run, host_metrics(_to_host(loop.metrics)),
                                  hparams, lanes=lanes, plan=plan)
            raise

    try:
        loop, run_seconds = train_lanes(
            compiled, keys, hparams, algo.num_updates, num_chunks, on_chunk, loop=restored,
            checkpoint_every=checkpoints.every_updates,
            on_checkpoint=on_checkpoint if checkpoints.every_updates > 0 else None,
            finished=lanes_finished(algo) if algo.lane_active is not None else None,
            final_checkpoint=False, align=algo.check_every)
        eval_returns = np.asarray(_to_host(compiled.evaluate(loop)))
        metrics = host_metrics(_to_host(loop.metrics))
        num_params = count_params(jax.tree_util.tree_map(
            lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), algo.param_fn(loop.algo_state)))
        summary = make_summary(run, algo, metrics, eval_returns, compiled.seconds, run_seconds, num_params,
                               lanes=lanes, plan=plan, start_update=start_update,
                               parallel_layout=layout.describe())
        summary["memory"] = memory_report(compiled)
        reached = update_reached(loop)
        if start_update > 0 and reached == start_update:
            # a finished run resumed: nothing trained, this is a new final evaluation of it
            summary.update(_original_timing(out_dir), reevaluated=True)
        token_examples = None
        if algo.spec.vocab is not None:
            token_stats, token_examples = evaluation.token_accuracy(algo, _to_host(loop))
            summary.update(token_stats)
        if main:
            if token_examples is not None:
                (out_dir / "examples.txt").write_text(token_examples)
            write_metrics_csv(out_dir / "metrics.csv", run, metrics, hparams, lanes=lanes, plan=plan)
            write_json_atomic(out_dir / "summary.json", summary)
            plot_learning_curve(out_dir, summary, metrics)
            for logger in loggers:
                logger.finish(summary, metrics, out_dir)
        # after the results, so that a checkpoint that cannot be written costs none of them
        if checkpoints.final or (checkpoints.every_updates and reached % checkpoints.every_updates == 0):
            save(loop)
    finally:
        if saver is not None:
            saver.close()
    return RunResult(summary, loop, eval_returns)


def _original_timing(out_dir: Path) -> dict:
    """compile/run seconds and env steps/s of the run's own ``summary.json`` (when there is one)."""
    import json

    try:
        previous = json.loads((out_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return {key: previous[key] for key in ("compile_seconds", "run_seconds", "env_steps_per_second")
            if key in previous}


def lanes_finished(algo: Algorithm):
    """``finished(loop) -> bool``: no lane of ``loop`` may run another update (``algo.lane_active``)."""
    active = jax.jit(jax.vmap(algo.lane_active))

    def finished(loop: Loop) -> bool:
        return not bool(np.any(np.asarray(_to_host(active(loop.algo_state)))))

    return finished
