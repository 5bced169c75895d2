"""What running in chunks costs: the same compiled training, in 1, 10 or 40 chunks of updates.

    python experiments/bench_chunks.py --seeds 2 --total-timesteps 3000000 --repeats 3

The CLI runs training as ``progress.chunks`` jitted calls of ``run_updates`` (traced bounds: one
compile serves every chunk), and reads each chunk's metrics back to the host for its progress report
and W&B rows while the next chunk runs (:func:`purejaxrl_opt.host.runner.train_lanes`). This benchmark
compiles PPO on CartPole-v1 (the shipped config) once, with the CLI's device layout, and times ``train_lanes`` with every chunk
count, the counts interleaved and counterbalanced per repeat (1, 10, 40, then 40, 10, 1, ...) so that a
shared machine's load and any drift within a repeat fall on all of them alike; with more than one chunk a no-op ``on_chunk`` makes the runner read every
chunk's metrics to the host, as a logger would. Figures: the median training seconds per count, its
ratio to one chunk, and the cost per chunk boundary. Writes ``experiments/results/bench_chunks.json``
(commit, command, load average).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path


import purejaxrl_opt.train  # noqa: F401 - the CLI's XLA flags, set before JAX starts

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--total-timesteps", type=int, default=3_000_000)
    parser.add_argument("--chunks", type=int, nargs="+", default=[1, 10, 40])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results" / "bench_chunks.json"))
    args = parser.parse_args(argv)
    import provenance

    stamp = provenance.stamp()
    import jax
    import numpy as np
    from bench_logging import compose
    from purejaxrl_opt.core import algos
    from purejaxrl_opt.host import parallel, runner, sweep
    from purejaxrl_opt.host.settings import parse_settings

    overrides = ["algo=ppo", "env=CartPole-v1", f"num_seeds={args.seeds}",
                 f"total_timesteps={args.total_timesteps}", "logger=none"]
    run = parse_settings(compose(overrides)).run
    env = algos.make_env(run)
    algo = algos.make_algorithm(run, env)
    keys, hparams = sweep.lane_inputs(run, None)
    # the CLI's device layout (lanes=auto: lanes sharded over the host devices, one per core)
    layout = parallel.make_layout(parallel.ParallelConfig(), run, len(sweep.lanes(run, None)))
    compiled = runner.Compiled(algo, keys, hparams, layout)
    print(f"[bench_chunks] compiled in {compiled.seconds:.1f}s; {algo.num_updates} updates x {args.seeds} "
          f"lanes; layout {layout.describe()}", flush=True)
    reads = {"n": 0}

    def on_chunk(metrics, updates_done, seconds):  # what a logger gets: host metrics of every chunk
        reads["n"] += 1

    runner.train_lanes(compiled, keys, hparams, algo.num_updates, 1)  # first-use costs, not counted
    seconds = {n: [] for n in args.chunks}
    finals = {}
    for repeat in range(args.repeats):
        # counterbalanced: 1, 10, 40, then 40, 10, 1, ... (a run's position in a repeat can matter on
        # a machine whose clock or memory state drifts under sustained load)
        for n in (args.chunks if repeat % 2 == 0 else args.chunks[::-1]):
            reads["n"] = 0
            loop, train_s = runner.train_lanes(compiled, keys, hparams, algo.num_updates, n,
                                               on_chunk if n > 1 else None)
            seconds[n].append(train_s)
            finals[n] = np.asarray(jax.device_get(loop.metrics["return_mean"]))
            print(f"[bench_chunks] repeat {repeat} chunks {n:3d}: train {train_s:.2f}s "
                  f"({reads['n']} host reads)", flush=True)
    base = statistics.median(seconds[args.chunks[0]])
    summary = {}
    for n in args.chunks:
        median = statistics.median(seconds[n])
        summary[n] = {"train_s_median": median, "ratio_to_first": median / base,
                      "seconds_per_extra_chunk": (median - base) / max(n - args.chunks[0], 1),
                      "same_metrics_as_first": bool(np.array_equal(finals[n], finals[args.chunks[0]],
                                                                   equal_nan=True))}
        print(f"[bench_chunks] chunks {n:3d}: median {median:.2f}s, ratio {median / base:.3f}, "
              f"{summary[n]['seconds_per_extra_chunk'] * 1000:+.0f} ms per extra chunk; metrics "
              f"bitwise equal to {args.chunks[0]} chunk(s): {summary[n]['same_metrics_as_first']}")
    out = {**stamp, "load_average": provenance.load_average(), "cpu_count": os.cpu_count(), "config": overrides,
           "layout": layout.describe(),
           "num_updates": int(algo.num_updates), "compile_s": compiled.seconds, "repeats": args.repeats,
           "summary": summary, "train_s": seconds}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"[bench_chunks] load average {provenance.load_average()}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
