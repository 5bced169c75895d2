"""What logging costs a run: the same training with logging off, console + CSV, and W&B offline.

    python experiments/bench_logging.py --seeds 4 --total-timesteps 500000 --chunks 10 --repeats 3

One small but real run (PPO on CartPole-v1, the shipped config) is executed with
:func:`purejaxrl_opt.host.runner.execute` in this process, ``--repeats`` times per mode, the modes
interleaved (off, console, wandb, off, console, ...) so that the load of a shared machine falls on
all of them alike:

* ``off``: ``logger=none progress.mode=off`` -- one chunk, no progress, the artifacts only
  (metrics.csv, summary.json, the plot and the final checkpoint are written in every mode);
* ``console``: ``logger=console`` with ``--chunks`` chunks (the progress bar, or lines when not a
  terminal: what a user gets by default);
* ``wandb``: ``logger=wandb logger.mode=offline`` (the console too), every chunk's rows logged live.

Three figures per mode: the **CPU seconds** of the run (this process's threads plus W&B's service
process: what logging adds where cores are scarce, and much less noisy than wall time on a shared
machine), the **wall time** of the whole run (build, compile, training, final
evaluation, artifacts, loggers' start and finish), as the median over the repeats and as its ratio
to ``off``; and the **seconds the run's thread spent inside the loggers** (every sink call timed),
over the wall time of that run -- a direct measurement, much less noisy than the difference of two
wall times on a shared machine (W&B's own work runs on its background thread and in its service
process: it shows in the wall time, not here). By default every run after a warm-up loads its
compiled programs from JAX's persistent cache, so the wall time is mostly training and the ratio
is the conservative one (a run that compiles hides W&B's start behind the compile). Writes
``experiments/results/bench_logging.json`` (with the commit, the command and the load average).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


import purejaxrl_opt.train  # noqa: F401 - the CLI's XLA flags, set before JAX starts

ROOT = Path(__file__).resolve().parents[1]
MODES = {
    "off": ["logger=none", "progress.mode=off"],
    "console": ["logger=console"],
    "wandb": ["logger=wandb", "logger.mode=offline"],
}


class Timed:
    """A sink whose every call is timed (seconds accumulated per method)."""

    def __init__(self, sink):
        self.sink, self.seconds = sink, {}

    def __getattr__(self, name):
        method = getattr(self.sink, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

        return timed


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose, initialize_config_dir

    with initialize_config_dir(str(ROOT / "conf"), version_base=None):
        return hydra_compose("config", overrides=overrides)


def cpu_seconds() -> tuple[float, float]:
    """CPU seconds (user + system) of this process (every thread) and of its live child processes
    (W&B's service, which one process keeps from its first ``wandb.init`` to its exit)."""
    import psutil

    me = psutil.Process()
    own = me.cpu_times()
    children = 0.0
    for child in me.children(recursive=True):
        try:
            times = child.cpu_times()
            children += times.user + times.system
        except psutil.Error:
            pass
    return own.user + own.system, children


def run_once(mode: str, base: list[str], out_dir: Path) -> dict:
    from purejaxrl_opt.host import loggers, runner
    from purejaxrl_opt.host.settings import parse_settings

    settings = parse_settings(compose(base + MODES[mode]))
    own_before, children_before = cpu_seconds()
    start = time.perf_counter()
    sinks = [Timed(s) for s in loggers.make_loggers(settings.logger, settings.progress.mode)]
    result = runner.execute(settings.run, out_dir, sinks, num_chunks=settings.progress.num_chunks,
                            checkpoints=settings.checkpoint)
    wall = time.perf_counter() - start
    own_after, children_after = cpu_seconds()
    in_loggers = {}
    for sink in sinks:
        for name, seconds in sink.seconds.items():
            in_loggers[name] = in_loggers.get(name, 0.0) + seconds
    return {"wall_s": wall, "compile_s": result.summary["compile_seconds"],
            "train_s": result.summary["run_seconds"], "logger_s": sum(in_loggers.values()),
            "logger_s_by_call": in_loggers, "cpu_s": own_after - own_before,
            "service_cpu_s": max(children_after - children_before, 0.0),
            "final_return_mean": result.summary["final_return_mean"],
            "num_updates": result.summary["num_updates"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--total-timesteps", type=int, default=500_000)
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", default="off,console,wandb")
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results" / "bench_logging.json"))
    parser.add_argument("--no-compile-cache", action="store_true",
                        help="compile every run (default: JAX's persistent cache in a temp dir, filled by "
                             "the warm-up run, so every measured run loads the same compiled programs and "
                             "its wall time is mostly training: the conservative denominator)")
    args = parser.parse_args(argv)
    import provenance

    stamp = provenance.stamp()  # the code measured: before anything can change the tree

    modes = args.modes.split(",")
    base = ["algo=ppo", "env=CartPole-v1", f"num_seeds={args.seeds}",
            f"total_timesteps={args.total_timesteps}", f"progress.chunks={args.chunks}"]
    runs = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_compile_cache:
            import jax

            jax.config.update("jax_compilation_cache_dir", str(Path(tmp) / "xla_cache"))
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        os.environ["WANDB_DIR"] = str(Path(tmp) / "wandb")
        os.environ.setdefault("WANDB_SILENT", "true")
        Path(os.environ["WANDB_DIR"]).mkdir()
        run_once("off", base, Path(tmp) / "warmup")  # imports and first-use costs, not counted
        for repeat in range(args.repeats):
            for mode in modes:
                result = run_once(mode, base, Path(tmp) / f"{mode}_{repeat}")
                runs[mode].append(result)
                print(f"[bench_logging] {mode:8s} repeat {repeat}: wall {result['wall_s']:.2f}s "
                      f"(compile {result['compile_s']:.2f}s, train {result['train_s']:.2f}s), "
                      f"cpu {result['cpu_s']:.2f}s + service {result['service_cpu_s']:.2f}s, "
                      f"in loggers {result['logger_s']:.3f}s "
                      f"{ {k: round(v, 3) for k, v in result['logger_s_by_call'].items()} }", flush=True)
    off_wall = statistics.median(r["wall_s"] for r in runs["off"]) if "off" in runs else None
    off_cpu = statistics.median(r["cpu_s"] + r["service_cpu_s"] for r in runs["off"]) if "off" in runs else None
    summary = {}
    for mode, results in runs.items():
        wall = statistics.median(r["wall_s"] for r in results)
        share = statistics.median(r["logger_s"] / r["wall_s"] for r in results)
        summary[mode] = {
            "wall_s_median": wall, "train_s_median": statistics.median(r["train_s"] for r in results),
            "wall_ratio_to_off": wall / off_wall if off_wall else None,
            "logger_share_of_wall_median": share,
            "logger_s_median": statistics.median(r["logger_s"] for r in results),
            "cpu_s_median": (cpu := statistics.median(r["cpu_s"] + r["service_cpu_s"] for r in results)),
            "cpu_ratio_to_off": cpu / off_cpu if off_cpu else None,
        }
        ratio = f"{summary[mode]['wall_ratio_to_off']:.3f}" if off_wall else "-"
        cpu_ratio = f"{summary[mode]['cpu_ratio_to_off']:.3f}" if off_cpu else "-"
        print(f"[bench_logging] {mode:8s}: wall median {wall:.2f}s, ratio to off {ratio}; CPU median "
              f"{cpu:.2f}s (process + W&B service), ratio to off {cpu_ratio}; "
              f"time in loggers {100 * share:.2f}% of the wall time")
    out = {**stamp, "load_average": provenance.load_average(), "cpu_count": os.cpu_count(),
           "config": base, "modes": {m: MODES[m] for m in modes}, "repeats": args.repeats,
           "compile_cache": not args.no_compile_cache,
           "summary": summary, "runs": runs}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"[bench_logging] load average {provenance.load_average()}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
