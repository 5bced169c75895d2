"""Log sinks, all fed from the same host-side metrics pytree (never from inside jit).

A sink implements ``start(run, algo, out_dir, lanes=, plan=, start_update=)``, ``compiled(seconds)``,
``progress(metrics, updates_done, num_updates, seconds, start_update=)`` and
``finish(summary, metrics, out_dir)``; ``metrics`` is ``name -> [lanes, num_updates]`` (NaN where not
yet written or undefined); ``lanes`` are :class:`purejaxrl_opt.sweep.Lane` (seed, sweep config);
``start_update`` > 0 when the run was resumed from a checkpoint.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from purejaxrl_opt.config import LoggerConfig, parse_section
from purejaxrl_opt.errors import ConfigError


class Sink:
    def start(self, run, algo, out_dir: Path, lanes=None, plan=None, start_update: int = 0) -> None: ...
    def compiled(self, seconds: float) -> None: ...
    def progress(self, metrics: dict, updates_done: int, num_updates: int, seconds: float,
                 start_update: int = 0) -> None: ...
    def finish(self, summary: dict, metrics: dict, out_dir: Path) -> None: ...


def _recent_return(metrics: dict, updates_done: int, window: int = 10) -> float:
    values = np.asarray(metrics["return_mean"])[:, max(0, updates_done - window):updates_done]
    return float(np.nanmean(values)) if np.isfinite(values).any() else math.nan


class Console(Sink):
    """One line at start, one after compiling, one at the end; progress as a bar (TTY) or lines."""

    def __init__(self, progress: str = "auto", stream=None, line_every_seconds: float = 10.0):
        self.stream = stream or sys.stdout
        tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.mode = {"auto": "bar" if tty else "lines"}.get(progress, progress)
        # plain progress lines (not a TTY) at most this often: short runs stay quiet (start, compile
        # and final lines only), long ones report
        self.line_every_seconds = line_every_seconds
        self._last_line = 0.0

    def _print(self, text: str, end: str = "\n") -> None:
        print(text, end=end, file=self.stream, flush=True)

    def start(self, run, algo, out_dir, lanes=None, plan=None, start_update=0):
        from purejaxrl_opt.artifacts import describe_device

        configs = f"{plan.num_configs} config(s) ({plan.mode} over {', '.join(plan.keys)}) x " if plan else ""
        self._print(f"[purejaxrl_opt] {run.algo.name} on {run.env.id}: {configs}{run.num_seeds} seed(s) "
                    f"x {run.total_timesteps:,} env steps ({algo.num_updates} updates) "
                    f"on {describe_device()} -> {out_dir}")
        if start_update:
            self._print(f"[purejaxrl_opt] resuming from the checkpoint at update {start_update}")
        # every lane's budget of env steps: with one (GRPO) the run ends there, num_updates is a bound
        self._budget = (run.total_timesteps * (len(lanes) if lanes else run.num_seeds)
                        if getattr(algo, "lane_active", None) is not None else None)

    def compiled(self, seconds):
        self._print(f"[purejaxrl_opt] compiled in {seconds:.1f}s")

    def progress(self, metrics, updates_done, num_updates, seconds, start_update=0):
        if self.mode == "off":
            return
        if self.mode == "lines":
            if updates_done >= num_updates or seconds - self._last_line < self.line_every_seconds:
                return
            self._last_line = seconds
        env_steps = np.asarray(metrics["env_steps"])

        def _steps(upto):  # cumulative steps of every lane after update upto-1 (NaN: lane done)
            return float(np.sum(np.nan_to_num(np.fmax.accumulate(env_steps[:, :upto], axis=1)[:, -1])))

        steps = _steps(updates_done)
        done, done_before = updates_done / num_updates, start_update / num_updates
        if getattr(self, "_budget", None):  # the share of the budget spent, if further
            done = max(done, min(steps / self._budget, 1.0))
            done_before = max(done_before, min(_steps(start_update) / self._budget, 1.0)
                              if start_update > 0 else 0.0)
        if start_update > 0:  # rate and ETA of this process only
            steps -= _steps(start_update)
        rate = steps / max(seconds, 1e-9)
        eta = seconds * (1.0 - done) / max(done - done_before, 1e-9)
        text = (f"update {updates_done}/{num_updates}  return {_recent_return(metrics, updates_done):.2f}"
                f"  {rate:,.0f} steps/s  eta {eta:.0f}s")
        if self.mode == "bar":
            filled = int(30 * done)
            end = "\n" if updates_done == num_updates else ""
            self._print(f"\r[{'#' * filled}{'.' * (30 - filled)}] {text}", end=end)
        else:
            self._print(f"[purejaxrl_opt] {text}")

    def finish(self, summary, metrics, out_dir):
        for config in summary.get("sweep", {}).get("configs", []):
            values = ", ".join(f"{k}={v:g}" for k, v in config["values"].items())
            self._print(f"[purejaxrl_opt]   config {config['config']} ({values}): final return "
                        f"{config['final_return_mean']:.2f} ± {config['final_return_std']:.2f}")
        lanes = "seed(s)" if "sweep" not in summary else f"lanes ({summary['num_seeds']} seed(s) per config)"
        self._print(
            f"[purejaxrl_opt] final return {summary['final_return_mean']:.2f} "
            f"± {summary['final_return_std']:.2f} over {summary['num_lanes']} {lanes}; "
            f"{summary['env_steps_per_second']:,.0f} env steps/s (compile {summary['compile_seconds']:.1f}s, "
            f"run {summary['run_seconds']:.1f}s); results in {out_dir}")


class WandB(Sink):
    """Weights & Biases, live: config at start, every chunk's new rows as the run goes, then the
    summary and the learning-curve PNG.

    One W&B run per job. Per-lane curves are logged as ``<lane>/<metric>`` (``seed_3/return_mean``,
    or ``cfg1_seed_3/return_mean`` in an in-compile sweep) and their mean and std over the lanes as
    ``mean/<metric>`` and ``std/<metric>`` (per config in a sweep: ``cfg1/mean/<metric>``); the W&B
    step is the update and every metric is plotted against ``env_steps`` (the lanes' mean cumulative
    env steps). ``group`` ties the jobs of one Hydra sweep together (the train entry point sets it to
    the sweep dir in multirun mode). Offline mode needs no network and no API key (sync later with
    ``wandb sync``).

    Rows reach W&B at every progress report (each chunk of updates), so a long run's dashboard fills
    as it trains; W&B's service writes them to the run's ``.wandb`` log at least every
    :data:`FLUSH_SECONDS` (its default is 15 s), so a run killed with SIGKILL keeps every row handed
    over more than that before the kill. The run's W&B id and the last update handed over are kept in
    ``RUN_DIR/wandb_run.json``: ``resume=RUN_DIR`` continues the same W&B run and logs from the
    checkpoint it resumes from. A resumed run recomputes the updates after its checkpoint bitwise, so
    a row that reached the killed run's log before the kill is logged again with the same values,
    and W&B, whose steps only increase, keeps one of them; no update is missing.
    """

    MODES = ("online", "offline", "disabled")
    STATE_FILE = "wandb_run.json"
    FLUSH_SECONDS = 0.25  # W&B's x_transaction_log_flush_interval: rows on disk within this

    def __init__(self, project: str = "purejaxrl_opt", entity: str | None = None, mode: str = "offline",
                 group: str | None = None, tags: list[str] | None = None, dir: str | None = None,
                 name: str | None = None, offline_fallback: bool = False):
        if mode not in self.MODES:
            raise ConfigError(f"config key 'logger.mode' = {mode!r} is invalid: must be one of "
                              f"{list(self.MODES)}")
        if mode == "online" and not _has_wandb_credentials():
            if not offline_fallback:
                raise ConfigError(
                    "config key 'logger.mode' = 'online' needs W&B credentials (WANDB_API_KEY or "
                    "`wandb login`); use logger.mode=offline to log without a network, or "
                    "logger.offline_fallback=true to fall back to offline when no key is found")
            print("[purejaxrl_opt] no W&B credentials found: logging offline "
                  "(logger.offline_fallback=true); sync later with `wandb sync`", file=sys.stderr)
            mode = "offline"
        self.kwargs = dict(project=project, entity=entity, mode=mode, group=group, tags=tags,
                           dir=dir, name=name)
        self.wandb_run = None

    def start(self, run, algo, out_dir, lanes=None, plan=None, start_update=0):
        import wandb

        from purejaxrl_opt.artifacts import config_dict, write_json_atomic
        from purejaxrl_opt.sweep import lanes as make_lanes

        kwargs = {k: v for k, v in self.kwargs.items() if v is not None}
        if "dir" not in kwargs and not os.environ.get("WANDB_DIR"):
            kwargs["dir"] = str(out_dir)
        if "dir" in kwargs:
            Path(kwargs["dir"]).mkdir(parents=True, exist_ok=True)
        kwargs.setdefault("name", f"{run.algo.name}-{run.env.id}-s{run.seed}")
        kwargs.setdefault("group", f"{run.algo.name}-{run.env.id}")
        config = config_dict(run)
        if plan is not None:
            config["sweep"] = plan.to_dict()
        config["run_dir"] = str(out_dir)
        self.state_path = Path(out_dir) / self.STATE_FILE
        previous = _read_json(self.state_path) if start_update > 0 else None
        if previous is not None:  # resume: the same W&B run, from the checkpoint
            kwargs.update(id=previous["id"], resume="allow")
            self.next_update = start_update
        else:
            from wandb.sdk.lib.runid import generate_id

            kwargs["id"] = generate_id()
            self.next_update = 0
        self.run_id = kwargs["id"]
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.state_path, {"id": self.run_id, "logged_through": self.next_update - 1})
        settings = wandb.Settings(x_transaction_log_flush_interval=self.FLUSH_SECONDS)
        self.wandb_run = wandb.init(config=config, settings=settings, **kwargs)
        self.wandb_run.define_metric("env_steps")
        self.wandb_run.define_metric("*", step_metric="env_steps")
        self.lanes = lanes or make_lanes(run, plan)
        self.start_update = start_update

    def compiled(self, seconds):
        self.wandb_run.summary["compile_seconds"] = seconds

    def _groups(self) -> dict[str, list[int]]:
        """Lanes whose mean/std are logged together: all of them, or each sweep config's."""
        if not any(lane.values for lane in self.lanes):
            return {"": [lane.index for lane in self.lanes]}
        configs = sorted({lane.config for lane in self.lanes})
        return {f"cfg{c}/": [lane.index for lane in self.lanes if lane.config == c] for c in configs}

    def _log_rows(self, metrics: dict, upto: int) -> None:
        """Log updates ``next_update .. upto-1`` (those some lane ran) and record how far W&B has them."""
        from purejaxrl_opt.artifacts import write_json_atomic

        names = [n for n in metrics if n != "env_steps"]
        groups = self._groups()
        upto = min(upto, metrics["env_steps"].shape[1])
        for update in range(self.next_update, upto):
            if not np.isfinite(metrics["env_steps"][:, update]).any():
                continue  # no lane ran this update (GRPO: every budget spent before)
            row: dict[str, Any] = {"update": update,
                                   "env_steps": float(np.nanmean(metrics["env_steps"][:, update]))}
            for name in names:
                column = metrics[name][:, update]
                for lane in self.lanes:
                    if np.isfinite(column[lane.index]):
                        row[f"{lane.label}/{name}"] = float(column[lane.index])
                for prefix, members in groups.items():
                    values = column[members]
                    if np.isfinite(values).any():
                        row[f"{prefix}mean/{name}"] = float(np.nanmean(values))
                        row[f"{prefix}std/{name}"] = float(np.nanstd(values))
            self.wandb_run.log(row, step=update, commit=True)  # sent now, not held for the next step
        if upto > self.next_update:
            self.next_update = upto
            write_json_atomic(self.state_path, {"id": self.run_id, "logged_through": upto - 1})

    def progress(self, metrics, updates_done, num_updates, seconds, start_update=0):
        self._log_rows(metrics, updates_done)

    def finish(self, summary, metrics, out_dir):
        self._log_rows(metrics, metrics["env_steps"].shape[1])
        for key, value in summary.items():
            if isinstance(value, (int, float, str)):
                self.wandb_run.summary[key] = value
        self.wandb_run.summary["final_return_per_seed"] = summary["final_return_per_seed"]
        for config in summary.get("sweep", {}).get("configs", []):
            for key in ("final_return_mean", "final_return_std", "final_return_ci95"):
                self.wandb_run.summary[f"cfg{config['config']}/{key}"] = config[key]
        plot = Path(out_dir) / "learning_curve.png"
        if plot.exists():
            import wandb

            self.wandb_run.log({"learning_curve": wandb.Image(str(plot))})
        self.wandb_run.finish()


def _read_json(path: Path) -> dict | None:
    import json

    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def read_wandb_file(path) -> list:
    """Every record of a W&B run's transaction log (``run-<id>.wandb``, e.g. an offline run's) as
    W&B's own protobuf ``Record`` messages, read without a network or an API key.

    The log is a sequence of 32 KiB blocks after a 7-byte header (``:W&B``, magic, version); each
    block holds chunks with a 7-byte header (crc32, length, type: full / first / middle / last), and
    a record too long for one block is split over several chunks.
    """
    import struct

    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B transaction log (header {data[:7]!r})")
    block, pos, pending, payloads = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # block trailer: padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:  # zero padding to the block's end
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:
            payloads.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            payloads.append(pending + chunk)
            pending = b""
    records = []
    for payload in payloads:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        records.append(record)
    return records


def read_wandb_history(path) -> list[dict]:
    """The history rows (``wandb.log`` calls) of a W&B transaction log: ``{key: value}`` with
    ``_step``; values decoded from their JSON."""
    import json

    rows = []
    for record in read_wandb_file(path):
        if record.WhichOneof("record_type") != "history":
            continue
        row = {}
        for item in record.history.item:
            key = item.key or "/".join(item.nested_key)
            row[key] = json.loads(item.value_json)
        rows.append(row)
    return rows


def _has_wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        import wandb

        return bool(wandb.api.api_key)
    except Exception:  # noqa: BLE001 - any failure to find a key means no key
        return False


def make_loggers(cfg: LoggerConfig | dict | None, progress: str) -> list[Sink]:
    """Sinks from the ``logger`` config section (:class:`purejaxrl_opt.config.LoggerConfig`, or its
    mapping): ``kind`` is none | console | wandb.

    ``none`` still prints the start, compile and final lines (so a run says where its results are),
    but no progress and no external logger.
    """
    cfg = parse_section(LoggerConfig, cfg, "logger")
    if cfg.kind == "none":
        return [Console("off")]
    if cfg.kind == "console":
        return [Console(progress)]
    wandb_args = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "kind"}
    wandb_args["tags"] = list(cfg.tags) if cfg.tags is not None else None
    return [Console(progress), WandB(**wandb_args)]
