"""Run artifacts: ``summary.json``, ``metrics.csv``, the learning-curve plot, written atomically.

Plain Python on host arrays, after training (nothing here is traced).
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import jax
import numpy as np

from purejaxrl_opt.host import stats, sweep
from purejaxrl_opt.host.report import git_commit  # noqa: F401 - the runners' and suites' import
from purejaxrl_opt.config.schema import RunConfig


def memory_report(compiled) -> dict:
    """Memory of the compiled chunk of updates (all lanes, the periodic evaluation inside it; the
    ``update_*`` names are kept) by XLA's own accounting (``update_total_bytes``
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


def plot_learning_curve(out_dir: Path, summary: dict, metrics: dict) -> None:
    from purejaxrl_opt.host import report

    try:
        report.plot_learning_curves(report.groups_from_run(summary, metrics), out_dir / "learning_curve.png")
    except Exception as error:  # noqa: BLE001 - a plot must never cost a finished run its results
        print(f"[purejaxrl_opt] could not plot the learning curve: {error}")


def _aggregate(per_seed: np.ndarray) -> dict:
    """Mean, std and the Student-t 95% CI half-width over ``n`` seeds (``None`` for one seed)."""
    n = per_seed.shape[0]
    std = float(per_seed.std(ddof=1)) if n > 1 else 0.0
    return {"final_return_mean": float(per_seed.mean()), "final_return_std": std,
            "final_return_ci95": stats.t_half_width(per_seed, 0.95), "final_return_n": int(n),
            "final_return_ci_method": "student-t"}


def final_env_steps(metrics: dict) -> np.ndarray:
    """Env steps consumed by each lane: the last recorded value of the cumulative ``env_steps``
    (rows of updates a lane did not run are NaN), 0 for a lane with none."""
    steps = np.asarray(metrics["env_steps"], np.float64)
    return np.where(np.isfinite(steps), steps, -np.inf).max(axis=1).clip(min=0.0)


def updates_run(metrics: dict) -> np.ndarray:
    """Updates each lane ran (rows with a recorded ``env_steps``)."""
    return np.isfinite(np.asarray(metrics["env_steps"])).sum(axis=1)


def make_summary(run: RunConfig, algo, metrics: dict, eval_returns: np.ndarray,
                 compile_seconds: float, run_seconds: float, num_params: int,
                 lanes: list | None = None, plan: sweep.SweepPlan | None = None,
                 start_update: int = 0, parallel_layout: dict | None = None) -> dict:
    """``final_return_*`` aggregate every lane; with a sweep, ``sweep.configs`` has them per config.
    ``hparams``: every sweepable hyperparameter's value per lane (lane order), as trained."""
    lanes = lanes or sweep.lanes(run, plan)
    config_runs = sweep.config_runs(run, plan)
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
        "commit": git_commit(),  # the code that produced these numbers
        "hparams": {k: [getattr(config_runs[lane.config].algo, k) for lane in lanes]
                    for k in run.algo.SWEEPABLE},
        "num_lanes": int(per_lane.shape[0]),
        "resumed_from_update": start_update,
        "config": config_dict(run),
        "device": describe_device(),
        "parallel": parallel_layout,
        "jax_version": jax.__version__,
        "host": platform.node(),
    }
    if plan is not None:
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
