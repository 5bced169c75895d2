"""The chunked driver: one compiled program advanced over traced bounds, in chunks.

A chunked computation is a pair of pure functions, ``init(*args) -> carry`` and ``advance(carry,
start, stop) -> carry`` (steps ``start .. stop-1``; the bounds are traced int32, so one compile serves
every chunk length and the results are bitwise the same in one call or in many). RL training
(:func:`purejaxrl_opt.host.runner.train_lanes`: updates of every lane) and supervised warm starts
(:func:`purejaxrl_opt.host.sft.run_sft`: blocks of Adam steps) both run through :func:`run_chunks`:
each chunk is dispatched before the previous one is read (progress) or saved (checkpoints), so the
host never stalls the device.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import Future, ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

from purejaxrl_opt.host import xla_flags


def chunk_sizes(num_updates: int, num_chunks: int) -> list[int]:
    num_chunks = max(1, min(num_chunks, num_updates))
    base = math.ceil(num_updates / num_chunks)
    sizes = [base] * (num_updates // base)
    if num_updates % base:
        sizes.append(num_updates % base)
    return sizes


def chunk_stops(num_updates: int, num_chunks: int, checkpoint_every: int = 0, start: int = 0,
                doubling: bool = False, align: int = 1) -> list[int]:
    """Update counts after which a chunk ends: the ``num_chunks`` progress grid (:func:`chunk_sizes`),
    every multiple of ``checkpoint_every``, and the end; only those after ``start``. ``doubling``
    adds every power of two: with a budget of env steps (GRPO) ``num_updates`` is only a bound and
    the run may end long before it, so progress is also reported at 1, 2, 4, ... updates.

    ``align = k > 1`` (an update loop that tests its condition once per block of ``k`` updates,
    :func:`purejaxrl_opt.core.algos.base.run_budgeted_updates`, blocks counted from each chunk's start):
    each progress stop moves up to the first whole block after the chunk before it, or goes where
    that passes the next fixed stop, as a chunk ending mid-block computes the rest of the block
    masked, for nothing. The end and the checkpoint multiples stay where they are."""
    progress = set(np.cumsum(chunk_sizes(num_updates, num_chunks)).tolist())
    if doubling and num_chunks > 1:
        progress |= {1 << k for k in range(max(num_updates, 1).bit_length()) if 1 << k < num_updates}
    fixed = {num_updates}
    if checkpoint_every > 0:
        fixed |= set(range(checkpoint_every, num_updates, checkpoint_every))
    stops, previous = [], start
    for stop in sorted(s for s in progress | fixed if s > start):
        if stop not in fixed:
            stop = previous + -(-(stop - previous) // align) * align
            if stop <= previous or stop >= min(f for f in fixed if f > previous):
                continue
        if not stops or stop > stops[-1]:
            stops.append(stop)
            previous = stop
    return stops


def compile_lowered(lowered):
    """``lowered.compile()`` with :func:`purejaxrl_opt.host.xla_flags.cpu_compile_options` (on the CPU:
    YNNPACK's products), or without them where XLA cannot compile the program with them."""
    options = xla_flags.cpu_compile_options()
    if options:
        try:
            return lowered.compile(compiler_options=options)
        except jax.errors.JaxRuntimeError as err:
            if xla_flags.YNN_UNSUPPORTED not in str(err):
                raise
    return lowered.compile()


class Compiler:
    """Compiles lowered programs on worker threads while the caller traces and lowers the next one.

    XLA compiles without holding the GIL, so a run's programs (init, the chunked updates, the final
    evaluation) compile alongside each other and alongside the Python tracing of the ones after them;
    the compiled programs are the same (experiments/bench_compile.py times the CLI's compile against
    another checkout). Use as a context manager; :meth:`submit` returns a future whose ``result()`` is
    the compiled program (or raises the compile's error)."""

    def __init__(self, max_workers: int = 3):
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="xla-compile")

    def submit(self, lowered) -> Future:
        return self._pool.submit(compile_lowered, lowered)

    def __enter__(self) -> "Compiler":
        return self

    def __exit__(self, *exc) -> None:
        # on an error, compiles not yet started are dropped; a running one finishes (seconds)
        self._pool.shutdown(wait=True, cancel_futures=exc[0] is not None)


def compile_in_turn(*lowerings) -> list:
    """Each of ``lowerings`` (a function ``() -> jax.stages.Lowered``) lowered in order and compiled on a
    worker thread (:class:`Compiler`) while the next is lowered; the compiled programs, in order."""
    with Compiler(max_workers=len(lowerings)) as compiler:
        futures = [compiler.submit(lower()) for lower in lowerings]
        return [future.result() for future in futures]


def compile_chunked(init, advance, *args, extra=()):
    """``init`` and ``advance`` compiled ahead of time for ``init(*args)``'s carry:
    ``(init, advance, carry shape, *extra)`` (the shape as ``jax.ShapeDtypeStruct`` leaves, nothing
    run). ``extra``: functions ``shape -> jax.stages.Lowered`` of more programs over the carry (the
    runner's final evaluation), compiled alongside (:func:`compile_in_turn`)."""
    carry = {}  # the carry's shape, traced while init compiles

    def lower_advance():
        carry["shape"] = jax.eval_shape(init, *args)
        return jax.jit(advance).lower(carry["shape"], jnp.int32(0), jnp.int32(1))

    compiled = compile_in_turn(lambda: jax.jit(init).lower(*args), lower_advance,
                               *[lambda lower=lower: lower(carry["shape"]) for lower in extra])
    return (*compiled[:2], carry["shape"], *compiled[2:])


def run_chunks(advance, carry, stops, done: int = 0, after=None, finished=None,
               start: float | None = None):
    """``carry = advance(carry, done, stop)`` for every ``stop`` of ``stops`` (increasing, after
    ``done``); returns ``(carry, seconds)``: from ``start`` (a ``time.perf_counter()``, default now)
    through the last chunk's end.

    ``after(carry, done, last)`` runs for every chunk once the *next* one is dispatched (reading
    ``carry`` waits for that chunk only); the last chunk's (``last=True``) after the clock stops.
    ``finished(carry) -> bool``, checked on each chunk ``after`` ran on (so only with ``after``): once
    true, later chunks would change nothing; none is dispatched, and the one in flight is the last.
    """
    start = time.perf_counter() if start is None else start
    pending = None  # (carry, done) of the previous chunk, handled after the next one is dispatched
    for stop in stops:
        carry, done = advance(carry, jnp.int32(done), jnp.int32(stop)), stop
        if after is not None:
            if pending is not None:
                after(*pending, False)
                if finished is not None and finished(pending[0]):
                    break  # the chunk just dispatched changes nothing: it ends the run
            pending = (carry, done)
    carry = jax.block_until_ready(carry)
    seconds = time.perf_counter() - start
    if after is not None and pending is not None:
        after(carry, done, True)
    return carry, seconds
