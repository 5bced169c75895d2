"""Log sinks, all fed from the same host-side metrics pytree (never from inside jit).

A sink implements ``start(run, algo, out_dir, lanes=, plan=, start_update=)``, ``compiled(seconds)``,
``progress(metrics, updates_done, num_updates, seconds, start_update=)`` and
``finish(summary, metrics, out_dir)``; ``metrics`` is ``name -> [lanes, num_updates]`` (NaN where not
yet written or undefined); ``lanes`` are :class:`purejaxrl_opt.host.sweep.Lane` (seed, sweep config);
``start_update`` > 0 when the run was resumed from a checkpoint.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
import math
import os
import sys
import time
from pathlib import Path
from typing import ClassVar

import numpy as np

from purejaxrl_opt.config.schema import _check, one_of, parse_section
from purejaxrl_opt.config.errors import ConfigError


# the ``logger`` section of a run (composed in host/settings.py): which sinks make_loggers builds
@dataclass(frozen=True)
class LoggerConfig:
    kind: str = "console"  # none | console | wandb
    # wandb only
    project: str = "purejaxrl_opt"
    entity: str | None = None
    mode: str = "offline"
    group: str | None = None
    tags: tuple[str, ...] | None = None
    dir: str | None = None
    name: str | None = None
    offline_fallback: bool = False
    # W&B's system metrics (CPU/GPU/memory sampled every 15 s) and its copy of the console: off by
    # default, they cost CPU time beside the training (experiments/bench_logging.py)
    system_stats: bool = False
    capture_console: bool = False
    # log every n-th update's row to W&B (and the run's last): 0 = auto, ceil(updates / 1000) (W&B's
    # charts show at most ~1500 points a line; each row costs the W&B client CPU time). metrics.csv
    # keeps every update.
    every_updates: int = 0

    KINDS: ClassVar[tuple[str, ...]] = ("none", "console", "wandb")
    WANDB_MODES: ClassVar[tuple[str, ...]] = ("online", "offline", "disabled")

    def validate(self, prefix: str = "logger") -> None:
        one_of(f"{prefix}.kind", self.kind, self.KINDS)
        one_of(f"{prefix}.mode", self.mode, self.WANDB_MODES)
        _check(isinstance(self.every_updates, int) and self.every_updates >= 0, f"{prefix}.every_updates",
               self.every_updates, "an int >= 0 (0 = auto: ceil(updates / 1000))")


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
    """One line at start, one after compiling, one at the end; progress as a bar (a terminal) or
    lines (anything else, at most every ``line_every_seconds``).

    The bar (:class:`purejaxrl_opt.host.progress.Bar`) counts the env steps of every lane: done of the
    run's total, env steps per second of this process and the time left, then the update and the
    recent return. ``progress="auto"`` draws it when ``stream`` is a terminal.
    """

    def __init__(self, progress: str = "auto", stream=None, line_every_seconds: float = 10.0):
        from purejaxrl_opt.host.progress import is_terminal

        self.stream = stream or sys.stdout
        self.mode = {"auto": "bar" if is_terminal(self.stream) else "lines"}.get(progress, progress)
        # plain progress lines (not a TTY) at most this often: short runs stay quiet (start, compile
        # and final lines only), long ones report
        self.line_every_seconds = line_every_seconds
        self._last_line = 0.0
        self._bar, self._bar_closed = None, False
        self._desc = None

    def _print(self, text: str, end: str = "\n") -> None:
        from purejaxrl_opt.host.progress import write

        write(text, self.stream, end=end)  # above the bars, if any are drawn

    def start(self, run, algo, out_dir, lanes=None, plan=None, start_update=0):
        from purejaxrl_opt.host.artifacts import describe_device

        configs = f"{plan.num_configs} config(s) ({plan.mode} over {', '.join(plan.keys)}) x " if plan else ""
        self._print(f"[purejaxrl_opt] {run.algo.name} on {run.env.id}: {configs}{run.num_seeds} seed(s) "
                    f"x {run.total_timesteps:,} env steps ({algo.num_updates} updates) "
                    f"on {describe_device()} -> {out_dir}")
        if start_update:
            self._print(f"[purejaxrl_opt] resuming from the checkpoint at update {start_update}")
        # every lane's budget of env steps: with one (GRPO) the run ends there, num_updates is a bound
        self._budget = (run.total_timesteps * (len(lanes) if lanes else run.num_seeds)
                        if getattr(algo, "lane_active", None) is not None else None)
        self._desc = f"{run.algo.name} {run.env.id}"

    def compiled(self, seconds):
        self._print(f"[purejaxrl_opt] compiled in {seconds:.1f}s")
        self._training_started = time.time()  # the bar's clock (drawn at the first report)

    def progress(self, metrics, updates_done, num_updates, seconds, start_update=0):
        if self.mode == "off":
            return
        if self.mode == "lines":
            if updates_done >= num_updates or seconds - self._last_line < self.line_every_seconds:
                return
            self._last_line = seconds
        env_steps = np.asarray(metrics["env_steps"])

        def _steps(upto):  # cumulative steps of every lane after update upto-1 (NaN: lane done)
            if upto <= 0:
                return 0.0
            return float(np.sum(np.nan_to_num(np.fmax.accumulate(env_steps[:, :upto], axis=1)[:, -1])))

        if self.mode == "bar":
            if not self._bar_closed:
                self._progress_bar(metrics, _steps, updates_done, num_updates, start_update)
            return
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
        self._print(f"[purejaxrl_opt] {text}")

    def _progress_bar(self, metrics, _steps, updates_done, num_updates, start_update):
        from purejaxrl_opt.host.progress import Bar

        steps = _steps(updates_done)
        if self._bar is None:  # the total and the steps done before this process, once
            # a fixed number of updates: every update is the same number of env steps
            self._total = getattr(self, "_budget", None) or (steps * num_updates / max(updates_done, 1))
            self._bar = Bar(self._total, unit="env steps", desc=self._desc, stream=self.stream,
                            initial=_steps(start_update), enabled=True,
                            started_at=getattr(self, "_training_started", None))
        total = max(self._total, steps)  # a budget run may end one update past its budget
        postfix = f"update {updates_done}/{num_updates}, return {_recent_return(metrics, updates_done):.2f}"
        if updates_done >= num_updates:  # the last report: a budget run ends where it ended
            total = steps
        self._bar.update_to(steps, total=total, postfix=postfix)
        if updates_done >= num_updates:
            self._bar.close()
            self._bar, self._bar_closed = None, True

    def finish(self, summary, metrics, out_dir):
        if self._bar is not None:
            self._bar.close()
            self._bar = None
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


class _Background:
    """Runs jobs in order on one daemon thread, so that a slow sink (W&B's service under load takes
    milliseconds per row) never stalls the training loop that calls it. The first job that raises
    stops the rest; its error is re-raised by :meth:`check` and :meth:`close`. Jobs still queued when
    the interpreter exits (a run that raised mid-training) are run by an ``atexit`` drain first."""

    def __init__(self, name: str):
        import atexit
        import queue
        import threading

        self._queue: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()
        self._drain = lambda: self.close(raise_error=False, timeout=60.0)
        atexit.register(self._drain)

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            if self._error is None:
                try:
                    job()
                except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
                    self._error = error

    def submit(self, job) -> None:
        self.check()
        self._queue.put(job)

    def wait(self) -> None:
        """Block until every job submitted so far has run (re-raises a job's error)."""
        import threading

        done = threading.Event()
        self._queue.put(done.set)
        while not done.wait(0.05):
            if not self._thread.is_alive() or self._error is not None:
                break  # a failed job: the queued ones (this one too) are skipped
        self.check()

    def check(self) -> None:
        if self._error is not None:
            raise self._error

    def close(self, raise_error: bool = True, timeout: float | None = None) -> None:
        import atexit

        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout)
        atexit.unregister(self._drain)
        if raise_error:
            self.check()


class WandB(Sink):
    """Weights & Biases, live: config at start, every chunk's new rows as the run goes, then the
    summary and the learning-curve PNG; ``python -m purejaxrl_opt.evaluate RUN_DIR --gif`` adds the
    episode video and the evaluation's returns to the same W&B run (:func:`log_to_run`).

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
    over more than that before the kill. Every call into W&B (``wandb.init``, the rows, the summary)
    runs on one background thread, in order: ``wandb.init`` (seconds: it starts W&B's service) runs
    while the training program compiles, and the rows of a chunk are handed over while the next
    chunk trains; :meth:`compiled` waits for ``wandb.init`` (a W&B error stops the run before it
    trains) and :meth:`finish` for everything. The run's W&B id, project, mode and dir and the
    last update handed over are kept in ``RUN_DIR/wandb_run.json``: ``resume=RUN_DIR`` continues the
    same W&B run and logs from the checkpoint it resumes from. A resumed run recomputes the updates
    after its checkpoint bitwise, so a row that reached the killed run's log before the kill is
    logged again with the same values, and W&B, whose steps only increase, keeps one of them; no
    update is missing.
    """

    MODES = LoggerConfig.WANDB_MODES
    STATE_FILE = "wandb_run.json"
    FLUSH_SECONDS = 0.25  # W&B's x_transaction_log_flush_interval: rows on disk within this
    MAX_AUTO_ROWS = 1000  # logger.every_updates=0: about this many rows a run

    # the logger section's defaults (LoggerConfig), written once there
    def __init__(self, project: str = LoggerConfig.project, entity: str | None = LoggerConfig.entity,
                 mode: str = LoggerConfig.mode, group: str | None = LoggerConfig.group,
                 tags: list[str] | None = None, dir: str | None = LoggerConfig.dir,
                 name: str | None = LoggerConfig.name, offline_fallback: bool = LoggerConfig.offline_fallback,
                 system_stats: bool = LoggerConfig.system_stats,
                 capture_console: bool = LoggerConfig.capture_console,
                 every_updates: int = LoggerConfig.every_updates):
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
        self.system_stats, self.capture_console = system_stats, capture_console
        self.every_updates = every_updates
        self.wandb_run = None
        self._worker: _Background | None = None

    def start(self, run, algo, out_dir, lanes=None, plan=None, start_update=0):
        from purejaxrl_opt.host.artifacts import config_dict
        from purejaxrl_opt.host.sweep import lanes as make_lanes

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
            kwargs["id"] = _new_run_id()
            self.next_update = 0
        self.run_id = kwargs["id"]
        # rows of updates u with (u + 1) % stride == 0, and the last: the same set whether or not
        # the run was resumed
        self.stride = self.every_updates or max(1, -(-int(algo.num_updates) // self.MAX_AUTO_ROWS))
        # where the run lives, for the processes that add to it later (resume, evaluate --gif)
        self.state = {"id": self.run_id, "logged_through": self.next_update - 1,
                      "project": kwargs.get("project"), "entity": kwargs.get("entity"),
                      "mode": kwargs.get("mode"), "group": kwargs.get("group"), "name": kwargs.get("name"),
                      "dir": str(Path(kwargs.get("dir") or os.environ["WANDB_DIR"]).absolute())}
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        self._write_state()
        self.lanes = lanes or make_lanes(run, plan)
        self.start_update = start_update
        self._init_done = False
        self._worker = _Background("wandb-logger")
        self._worker.submit(lambda: self._init(config, kwargs))

    def _init(self, config: dict, kwargs: dict) -> None:  # on the worker thread
        import wandb

        settings = _settings(wandb, self.system_stats, self.capture_console)
        self.wandb_run = wandb.init(config=config, settings=settings, **kwargs)
        self.wandb_run.define_metric("env_steps")
        self.wandb_run.define_metric("*", step_metric="env_steps")

    def _write_state(self) -> None:
        from purejaxrl_opt.host.artifacts import write_json_atomic

        write_json_atomic(self.state_path, self.state)

    def compiled(self, seconds):
        self._worker.wait()  # wandb.init ran during the compile; its errors stop the run here
        self._worker.submit(lambda: self.wandb_run.summary.__setitem__("compile_seconds", seconds))

    def _groups(self) -> dict[str, list[int]]:
        """Lanes whose mean/std are logged together: all of them, or each sweep config's."""
        if not any(lane.values for lane in self.lanes):
            return {"": [lane.index for lane in self.lanes]}
        configs = sorted({lane.config for lane in self.lanes})
        return {f"cfg{c}/": [lane.index for lane in self.lanes if lane.config == c] for c in configs}

    def _log_rows(self, metrics: dict, upto: int, last_ran: int | None = None) -> None:
        """Hand updates ``next_update .. upto-1`` to the worker, which logs those some lane ran and
        records how far W&B has them. Only those columns are copied: the training loop goes on."""
        upto = min(upto, metrics["env_steps"].shape[1])
        first = self.next_update
        if upto <= first:
            return
        last = metrics["env_steps"].shape[1] - 1
        keep = {u for u in range(first, upto) if (u + 1) % self.stride == 0 or u == last}
        # at the end, the last update some lane ran (with GRPO's budget of env steps it can come
        # before the last one): logged too unless a stride row of an earlier chunk already was it
        if last_ran is not None and (last_ran >= first or (last_ran + 1) % self.stride):
            keep.add(last_ran)
        keep = sorted(keep)
        columns = {name: np.array(values[:, keep]) for name, values in metrics.items()}
        self.next_update = upto
        self._worker.submit(lambda: self._log_columns(columns, keep, upto))

    def _log_columns(self, columns: dict, updates: list[int], upto: int) -> None:  # on the worker thread
        for update, row in zip(updates, self._rows(columns, updates)):
            if row is not None:  # None: no lane ran this update (GRPO: every budget spent before)
                self.wandb_run.log(row, step=update, commit=True)  # sent now, not held back
        self.state["logged_through"] = upto - 1
        self._write_state()

    def _rows(self, columns: dict, updates: list[int]) -> list:
        """One W&B row per column (update ``updates[i]``) of ``columns`` (``name -> [lanes, updates]``;
        None where no lane ran it): the lanes' finite values and, per group, the mean and std over
        its lanes' finite values. The means and stds are computed for every update at once and the
        rows filled from Python lists: well under a microsecond per value, where a numpy call per
        value (tens of microseconds) cost more than W&B itself."""
        import warnings

        env_steps = columns["env_steps"]
        ran = np.isfinite(env_steps).any(axis=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns, skipped below
            mean_steps = np.nanmean(env_steps, axis=0)
        rows = [{"update": update, "env_steps": step} if ok else None
                for update, ok, step in zip(updates, ran.tolist(), mean_steps.tolist())]
        labels = [(lane.index, f"{lane.label}/") for lane in self.lanes]
        for name, values in columns.items():
            if name == "env_steps":
                continue
            finite = np.isfinite(values)
            keyed = [(label + name, index) for index, label in labels]
            by_update, finite_by_update = values.T.tolist(), finite.T.tolist()
            for row, lane_values, lane_finite in zip(rows, by_update, finite_by_update):
                if row is not None:
                    for key, index in keyed:
                        if lane_finite[index]:
                            row[key] = lane_values[index]
            for prefix, members in self._groups().items():
                some = finite[members].any(axis=0).tolist()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    means = np.nanmean(values[members], axis=0).tolist()
                    stds = np.nanstd(values[members], axis=0).tolist()
                for row, ok, mean, std in zip(rows, some, means, stds):
                    if row is not None and ok:
                        row[f"{prefix}mean/{name}"] = mean
                        row[f"{prefix}std/{name}"] = std
        return rows

    def progress(self, metrics, updates_done, num_updates, seconds, start_update=0):
        self._log_rows(metrics, updates_done)

    def finish(self, summary, metrics, out_dir):
        ran = np.flatnonzero(np.isfinite(metrics["env_steps"]).any(axis=0))
        self._log_rows(metrics, metrics["env_steps"].shape[1], int(ran[-1]) if len(ran) else None)
        self._worker.submit(lambda: self._finish(summary, Path(out_dir)))
        self._worker.close()

    def _finish(self, summary: dict, out_dir: Path) -> None:  # on the worker thread
        for key, value in summary.items():
            if isinstance(value, (int, float, str)):
                self.wandb_run.summary[key] = value
        self.wandb_run.summary["final_return_per_seed"] = summary["final_return_per_seed"]
        for config in summary.get("sweep", {}).get("configs", []):
            for key in ("final_return_mean", "final_return_std", "final_return_ci95"):
                self.wandb_run.summary[f"cfg{config['config']}/{key}"] = config[key]
        plot = out_dir / "learning_curve.png"
        if plot.exists():
            import wandb

            step = self.state["logged_through"] + 1  # after every update's row
            self.wandb_run.log({"learning_curve": wandb.Image(str(plot))}, step=step)
            self.state["last_step"] = step
            self._write_state()
        self.wandb_run.finish()


class LMWandB:
    """W&B for a language-model run (:mod:`purejaxrl_opt.host.lm.runner`): the run's config at start,
    every ``logger.every_updates``-th update's row of ``metrics.csv`` (and the last; the W&B step is
    the update), each held-out evaluation as ``held_out/<metric>``, the final results in the run's
    summary and the sample of prompts, completions and rewards (``examples.jsonl``) as the
    ``wandb.Table`` ``samples``. Every call is made on the training loop's thread (a language-model
    update takes seconds; a row costs W&B milliseconds). The run's W&B id is kept in
    ``RUN_DIR/wandb_run.json``, as :class:`WandB` does: ``resume=RUN_DIR`` continues the same W&B run
    from its checkpoint (the rows after it are logged again with the same values; W&B keeps one)."""

    def __init__(self, cfg: LoggerConfig):
        args = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "kind"}
        args["tags"] = list(cfg.tags) if cfg.tags is not None else None
        self.settings = WandB(**args)  # the same checks (mode, credentials) and W&B arguments
        self.wandb_run = None

    def start(self, config: dict, out_dir, name: str, group: str, start_update: int, num_updates: int) -> None:
        import wandb

        kwargs = {k: v for k, v in self.settings.kwargs.items() if v is not None}
        if "dir" not in kwargs and not os.environ.get("WANDB_DIR"):
            kwargs["dir"] = str(out_dir)
        if "dir" in kwargs:
            Path(kwargs["dir"]).mkdir(parents=True, exist_ok=True)
        kwargs.setdefault("name", name)
        kwargs.setdefault("group", group)
        self.state_path = Path(out_dir) / WandB.STATE_FILE
        previous = _read_json(self.state_path) if start_update > 0 else None
        kwargs.update(id=previous["id"], resume="allow") if previous is not None else kwargs.update(id=_new_run_id())
        self.stride = self.settings.every_updates or max(1, -(-num_updates // WandB.MAX_AUTO_ROWS))
        self.num_updates = num_updates
        state = {"id": kwargs["id"], "project": kwargs.get("project"), "entity": kwargs.get("entity"),
                 "mode": kwargs.get("mode"), "group": kwargs.get("group"), "name": kwargs.get("name"),
                 "dir": str(Path(kwargs.get("dir") or os.environ["WANDB_DIR"]).absolute())}
        from purejaxrl_opt.host.artifacts import write_json_atomic

        Path(out_dir).mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.state_path, state)
        settings = _settings(wandb, self.settings.system_stats, self.settings.capture_console)
        self.wandb_run = wandb.init(config={**config, "run_dir": str(out_dir)}, settings=settings, **kwargs)

    def row(self, row: dict) -> None:
        """One update's row (``update``: 1-based, the W&B step)."""
        update = int(row["update"])
        if update % self.stride == 0 or update == self.num_updates:
            self.wandb_run.log({k: v for k, v in row.items()}, step=update)

    def evaluation(self, result: dict) -> None:
        """A held-out evaluation (``update``: after how many updates; 0 = before training)."""
        self.wandb_run.log({f"held_out/{k}": v for k, v in result.items() if k != "update"},
                           step=int(result["update"]))

    def finish(self, summary: dict, examples: list[dict]) -> None:
        """The final results and the ``samples`` table (one row per example; a chat prompt as its JSON)."""
        import json

        import wandb

        for key, value in summary.items():
            if isinstance(value, (int, float, str)):
                self.wandb_run.summary[key] = value
        for key, value in summary.get("held_out_after", {}).items():
            self.wandb_run.summary[f"held_out/{key}"] = value
        names = sorted({k for e in examples for k in e} - {"split", "update", "prompt", "completion", "reward"})
        columns = ["split", "update", "prompt", "completion", "reward", *names]
        table = wandb.Table(columns=columns, data=[
            [e.get("split"), e.get("update"),
             e["prompt"] if isinstance(e["prompt"], str) else json.dumps(e["prompt"]),
             e["completion"], e["reward"], *[e.get(n) for n in names]] for e in examples])
        self.wandb_run.log({"samples": table}, step=self.num_updates)
        self.wandb_run.finish()


def _new_run_id() -> str:
    """A W&B run id as W&B makes them (8 characters of a-z0-9), without importing wandb here:
    its import (seconds on a loaded machine) happens on the logging thread, during the compile."""
    import secrets
    import string

    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


def log_to_run(run_dir, media: dict | None = None, summary: dict | None = None) -> dict | None:
    """Add to the W&B run a training run logged to (its ``RUN_DIR/wandb_run.json``): ``media``
    (``name -> path`` of a GIF/MP4 video or a PNG image) as one history row after the run's last
    step, ``summary`` (``key -> value``) into the run's summary. The run is resumed by its id, with
    the project, entity, mode and dir it was made with (offline: a new ``offline-run-*-<id>`` dir
    under the same ``wandb/`` dir, which ``wandb sync`` merges into the run). Returns the updated
    state (``last_step``: the row's step), or None when the run dir has no W&B run (or it was made
    with ``mode=disabled``)."""
    state_path = Path(run_dir) / WandB.STATE_FILE
    state = _read_json(state_path)
    if state is None or state.get("mode") == "disabled":
        return None
    import wandb

    from purejaxrl_opt.host.artifacts import write_json_atomic

    kwargs = {k: state[k] for k in ("project", "entity", "mode", "group", "name", "dir")
              if state.get(k) is not None}
    if "dir" in kwargs:
        Path(kwargs["dir"]).mkdir(parents=True, exist_ok=True)
    settings = _settings(wandb, system_stats=False, capture_console=False)  # a few seconds of upload
    wandb_run = wandb.init(id=state["id"], resume="allow", settings=settings, **kwargs)
    try:
        if media:
            row = {}
            for name, path in media.items():
                suffix = Path(path).suffix.lower()
                row[name] = (wandb.Image(str(path)) if suffix in (".png", ".jpg", ".jpeg")
                             else wandb.Video(str(path)))
            step = max(state.get("logged_through", -1), state.get("last_step", -1)) + 1
            wandb_run.log(row, step=step)
            state["last_step"] = step
        for key, value in (summary or {}).items():
            wandb_run.summary[key] = value
    finally:
        wandb_run.finish()
    write_json_atomic(state_path, state)
    return state


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


def _settings(wandb, system_stats: bool, capture_console: bool):
    """W&B's settings for a run of this project: rows flushed to disk within ``WandB.FLUSH_SECONDS``
    (a killed run keeps them); W&B's system-metrics sampler and its console capture only when asked
    for (``logger.system_stats``, ``logger.capture_console``): both run beside the training and, on a
    machine with few cores, take CPU time from it."""
    return wandb.Settings(x_transaction_log_flush_interval=WandB.FLUSH_SECONDS,
                          x_disable_stats=not system_stats,
                          console="auto" if capture_console else "off")


def make_loggers(cfg: LoggerConfig | dict | None, progress: str) -> list[Sink]:
    """Sinks from the ``logger`` config section (:class:`LoggerConfig`, or its
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
