"""Log sinks, all fed from the same host-side metrics pytree (never from inside jit).

A sink implements ``start(run, algo, out_dir)``, ``compiled(seconds)``,
``progress(metrics, updates_done, num_updates, seconds)`` and ``finish(summary, metrics, out_dir)``;
``metrics`` is ``name -> [lanes, num_updates]`` (NaN where not yet written or undefined).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from purejaxrl_opt.config import ConfigError


class Sink:
    def start(self, run, algo, out_dir: Path) -> None: ...
    def compiled(self, seconds: float) -> None: ...
    def progress(self, metrics: dict, updates_done: int, num_updates: int, seconds: float) -> None: ...
    def finish(self, summary: dict, metrics: dict, out_dir: Path) -> None: ...


def _recent_return(metrics: dict, updates_done: int, window: int = 10) -> float:
    values = np.asarray(metrics["return_mean"])[:, max(0, updates_done - window):updates_done]
    return float(np.nanmean(values)) if np.isfinite(values).any() else math.nan


class Console(Sink):
    """One line at start, one after compiling, one at the end; progress as a bar (TTY) or lines."""

    def __init__(self, progress: str = "auto", stream=None):
        self.stream = stream or sys.stdout
        tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.mode = {"auto": "bar" if tty else "lines"}.get(progress, progress)

    def _print(self, text: str, end: str = "\n") -> None:
        print(text, end=end, file=self.stream, flush=True)

    def start(self, run, algo, out_dir):
        from purejaxrl_opt.runner import describe_device

        self._print(f"[purejaxrl_opt] {run.algo.name} on {run.env.id}: {run.num_seeds} seed(s) "
                    f"x {run.total_timesteps:,} env steps ({algo.num_updates} updates) "
                    f"on {describe_device()} -> {out_dir}")

    def compiled(self, seconds):
        self._print(f"[purejaxrl_opt] compiled in {seconds:.1f}s")

    def progress(self, metrics, updates_done, num_updates, seconds):
        if self.mode == "off":
            return
        steps = float(np.nansum(np.asarray(metrics["env_steps"])[:, updates_done - 1]))
        rate = steps / max(seconds, 1e-9)
        eta = seconds * (num_updates - updates_done) / max(updates_done, 1)
        text = (f"update {updates_done}/{num_updates}  return {_recent_return(metrics, updates_done):.2f}"
                f"  {rate:,.0f} steps/s  eta {eta:.0f}s")
        if self.mode == "bar":
            filled = int(30 * updates_done / num_updates)
            end = "\n" if updates_done == num_updates else ""
            self._print(f"\r[{'#' * filled}{'.' * (30 - filled)}] {text}", end=end)
        else:
            self._print(f"[purejaxrl_opt] {text}")

    def finish(self, summary, metrics, out_dir):
        self._print(
            f"[purejaxrl_opt] final return {summary['final_return_mean']:.2f} "
            f"± {summary['final_return_std']:.2f} over {summary['num_seeds']} seed(s); "
            f"{summary['env_steps_per_second']:,.0f} env steps/s (compile {summary['compile_seconds']:.1f}s, "
            f"run {summary['run_seconds']:.1f}s); results in {out_dir}")


class WandB(Sink):
    """Weights & Biases: config, per-lane per-update metrics, summary; offline mode needs no network.

    One W&B run per job; per-lane curves are logged as ``seed_<s>/<metric>`` and their mean as
    ``mean/<metric>`` against ``update``; ``group`` ties the jobs of one sweep together.
    """

    MODES = ("online", "offline", "disabled")

    def __init__(self, project: str = "purejaxrl_opt", entity: str | None = None, mode: str = "offline",
                 group: str | None = None, tags: list[str] | None = None, dir: str | None = None,
                 name: str | None = None):
        if mode not in self.MODES:
            raise ConfigError(f"config key 'logger.mode' = {mode!r} is invalid: must be one of "
                              f"{list(self.MODES)}")
        if mode == "online":
            _require_wandb_credentials()
        self.kwargs = dict(project=project, entity=entity, mode=mode, group=group, tags=tags,
                           dir=dir, name=name)
        self.wandb_run = None

    def start(self, run, algo, out_dir):
        import wandb
        from purejaxrl_opt.runner import config_dict

        kwargs = {k: v for k, v in self.kwargs.items() if v is not None}
        kwargs.setdefault("dir", str(out_dir))
        kwargs.setdefault("name", f"{run.algo.name}-{run.env.id}-s{run.seed}")
        kwargs.setdefault("group", f"{run.algo.name}-{run.env.id}")
        self.wandb_run = wandb.init(config=config_dict(run), **kwargs)
        self.seeds = list(range(run.seed, run.seed + run.num_seeds))

    def compiled(self, seconds):
        self.wandb_run.summary["compile_seconds"] = seconds

    def finish(self, summary, metrics, out_dir):
        names = [n for n in metrics if n != "env_steps"]
        lanes, num_updates = metrics["env_steps"].shape
        for update in range(num_updates):
            row: dict[str, Any] = {"update": update,
                                   "env_steps": float(np.nanmean(metrics["env_steps"][:, update]))}
            for name in names:
                column = metrics[name][:, update]
                for lane, seed in enumerate(self.seeds):
                    if np.isfinite(column[lane]):
                        row[f"seed_{seed}/{name}"] = float(column[lane])
                if np.isfinite(column).any():
                    row[f"mean/{name}"] = float(np.nanmean(column))
            self.wandb_run.log(row, step=update)
        for key, value in summary.items():
            if isinstance(value, (int, float, str)):
                self.wandb_run.summary[key] = value
        self.wandb_run.summary["final_return_per_seed"] = summary["final_return_per_seed"]
        plot = Path(out_dir) / "learning_curve.png"
        if plot.exists():
            import wandb

            self.wandb_run.log({"learning_curve": wandb.Image(str(plot))})
        self.wandb_run.finish()


def _require_wandb_credentials() -> None:
    import os

    if os.environ.get("WANDB_API_KEY"):
        return
    try:
        import wandb

        if wandb.api.api_key:
            return
    except Exception:  # noqa: BLE001 - any failure to find a key means no key
        pass
    raise ConfigError("config key 'logger.mode' = 'online' needs W&B credentials (WANDB_API_KEY or "
                      "`wandb login`); use logger.mode=offline to log without a network")


def make_loggers(cfg: dict, progress: str) -> list[Sink]:
    """Sinks from the ``logger`` config section: ``kind`` is none | console | wandb.

    ``none`` still prints the start, compile and final lines (so a run says where its results are),
    but no progress and no external logger.
    """
    cfg = dict(cfg or {})
    kind = cfg.pop("kind", "console")
    if kind == "none":
        return [Console("off")]
    if kind == "console":
        return [Console(progress)]
    if kind == "wandb":
        return [Console(progress), WandB(**cfg)]
    raise ConfigError(f"config key 'logger.kind' = {kind!r} is invalid: must be one of "
                      "['none', 'console', 'wandb']")
