"""What one chunk boundary costs: one execution of the CLI's compiled update program, measured directly.

    python experiments/bench_execution.py --repeats 6

``bench_chunks.py`` compares whole runs with 1, 10 or 40 chunks; their differences (a few percent) are
of the size of the run-to-run spread, so a cost per boundary read off them is mostly noise. This
benchmark times the cost itself, in one process, on PPO CartPole-v1 (the shipped config, 2 seeds):
per repeat, one execution of ``--block`` updates (time per update), then ``--block`` executions of one
update each (time per execution), each blocked until done, as the runner's pipelined chunks never are
(an upper bound). The difference is the fixed cost of an execution: dispatch, the loop's entry and
exit, and the blocking read. ``--layout cli`` compiles with the CLI's device layout (lanes sharded
over host devices), ``--layout none`` on one device. Writes experiments/results/bench_execution.json
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
    parser.add_argument("--block", type=int, default=40, help="updates per long execution and 1-update executions per repeat")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--layout", choices=["none", "cli"], default="none")
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results" / "bench_execution.json"))
    args = parser.parse_args(argv)
    import provenance

    stamp = provenance.stamp()
    import jax
    import jax.numpy as jnp
    from bench_logging import compose
    from purejaxrl_opt.core import algos
    from purejaxrl_opt.host import parallel, runner, sweep
    from purejaxrl_opt.host.settings import parse_settings

    overrides = ["algo=ppo", "env=CartPole-v1", f"num_seeds={args.seeds}", "logger=none"]
    run = parse_settings(compose(overrides)).run
    env = algos.make_env(run)
    algo = algos.make_algorithm(run, env)
    keys, hparams = sweep.lane_inputs(run, None)
    layout = (parallel.make_layout(parallel.ParallelConfig(), run, len(sweep.lanes(run, None)))
              if args.layout == "cli" else None)
    compiled = runner.Compiled(algo, keys, hparams, layout)
    memory = compiled.updates.memory_analysis()
    keys, hparams = compiled.place_inputs(keys, hparams)
    loop = jax.block_until_ready(compiled.init(keys, hparams))

    def execute(loop, start, count):
        return jax.block_until_ready(compiled.updates(loop, jnp.int32(start), jnp.int32(start + count)))

    needed = args.block * (2 * args.repeats + 1)
    if needed > algo.num_updates:
        raise SystemExit(f"--block x (2 x --repeats + 1) = {needed} updates > the run's {algo.num_updates}")
    loop, done = execute(loop, 0, args.block), args.block  # first-use costs, not counted
    per_update, per_execution = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        loop, done = execute(loop, done, args.block), done + args.block
        per_update.append((time.perf_counter() - start) / args.block)
        start = time.perf_counter()
        for _ in range(args.block):
            loop, done = execute(loop, done, 1), done + 1
        per_execution.append((time.perf_counter() - start) / args.block)
    update_ms = statistics.median(per_update) * 1e3
    execution_ms = statistics.median(per_execution) * 1e3
    summary = {"update_ms_in_long_execution": update_ms, "one_update_execution_ms": execution_ms,
               "fixed_cost_per_execution_ms": execution_ms - update_ms,
               "temp_mb": memory.temp_size_in_bytes / 1e6, "argument_mb": memory.argument_size_in_bytes / 1e6}
    print(f"[bench_execution] layout {args.layout}: {update_ms:.2f} ms per update inside a {args.block}-update "
          f"execution, {execution_ms:.2f} ms per 1-update execution: {execution_ms - update_ms:.2f} ms fixed "
          f"cost per execution (program temporaries {summary['temp_mb']:.2f} MB)", flush=True)
    out = {**stamp, "load_average": provenance.load_average(), "cpu_count": os.cpu_count(), "config": overrides,
           "layout": layout.describe() if layout is not None else "one device",
           "block": args.block, "repeats": args.repeats, "summary": summary,
           "per_update_s": per_update, "per_execution_s": per_execution}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"[bench_execution] wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
