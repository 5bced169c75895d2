"""Collect every run below a directory into one table and learning-curve plots (the library of
``python -m purejaxrl_opt.report``, whose page says what it writes)."""

from __future__ import annotations

import csv
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from purejaxrl_opt.config.flat import flatten
from purejaxrl_opt.host import stats

# config keys that identify a lane, not a configuration (pooled over), or do not affect training
NOT_CONFIG = ("seed", "num_seeds", "eval_episodes", "eval_deterministic")


@dataclass
class Group:
    """The seeds of one (algo, env, config), pooled over jobs and lanes; a seed seen twice (the same
    agent trained by two jobs) counts once."""

    algo: str
    env: str
    config: dict  # flat dotted config (NOT_CONFIG removed)
    members: dict = field(default_factory=dict)  # seed -> (final return, (env_steps, metric) or None)
    rates: list = field(default_factory=list)  # env steps/s of each contributing job
    jobs: list = field(default_factory=list)
    duplicates: int = 0

    @property
    def key(self) -> str:
        return json.dumps(self.config, sort_keys=True, default=str)

    @property
    def seeds(self) -> list:
        return list(self.members)

    @property
    def final_returns(self) -> list:
        return [final for final, _ in self.members.values()]

    @property
    def curves(self) -> list:
        return [curve for _, curve in self.members.values() if curve is not None]

    def add(self, seed: int, final_return: float, curve) -> None:
        if seed in self.members:
            self.duplicates += 1
        else:
            self.members[seed] = (final_return, curve)

    def merge(self, other: "Group") -> None:
        for seed, (final, curve) in other.members.items():
            self.add(seed, final, curve)
        self.rates += other.rates
        self.jobs += other.jobs


def _base_config(summary: dict) -> dict:
    if "config" in summary:
        # lists as tuples: values that group runs must be hashable
        config = {k: tuple(v) if isinstance(v, list) else v for k, v in flatten(summary["config"]).items()}
    else:  # a summary from before the config was recorded: what it does say
        config = {"algo.name": summary["algo"], "env.id": summary["env"],
                  "total_timesteps": summary.get("total_timesteps")}
        config.update({f"algo.{k}": v for k, v in summary.get("hparams", {}).items()})
    return {k: v for k, v in config.items() if k not in NOT_CONFIG}


def groups_from_run(summary: dict, metrics: dict | None, metric: str = "return_mean",
                    job: str = "") -> list[Group]:
    """The groups of one run: one, or one per in-compile sweep config.

    ``metrics`` is ``name -> [lanes, num_updates]`` (or ``None``: no curves).
    """
    base = _base_config(summary)
    per_lane = summary["final_return_per_seed"]
    if "sweep" in summary:
        lanes = summary["sweep"]["lanes"]
        configs = {c["config"]: c["values"] for c in summary["sweep"]["configs"]}
    else:
        lanes = [{"lane": i, "config": 0, "seed": summary["seed"] + i} for i in range(len(per_lane))]
        configs = {0: {}}
    groups = {}
    for index, values in configs.items():
        config = dict(base)
        config.update(values)
        groups[index] = Group(summary["algo"], summary["env"], config, jobs=[job],
                              rates=[summary.get("env_steps_per_second", math.nan)])
    for lane in lanes:
        curve = None
        if metrics is not None and metric in metrics:
            xs = np.asarray(metrics["env_steps"][lane["lane"]], float)
            ran = np.isfinite(xs)  # GRPO: no row for the updates after a lane's budget was spent
            curve = (xs[ran], np.asarray(metrics[metric][lane["lane"]], float)[ran])
        groups[lane["config"]].add(lane["seed"], per_lane[lane["lane"]], curve)
    return list(groups.values())


def read_metrics_csv(path: Path) -> dict | None:
    """``name -> [lanes, num_updates]`` from a run's ``metrics.csv`` (rows are lane-major)."""
    if not path.exists():
        return None
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        return None
    lanes: list[list[dict]] = []
    for row in rows:
        if int(row["update"]) == 0:
            lanes.append([])
        lanes[-1].append(row)
    names = [n for n in rows[0] if n not in ("seed", "update")]

    def _value(text: str) -> float:
        return float(text) if text != "" else math.nan

    # lanes may have run different numbers of updates (GRPO's budget): NaN after a lane's last row
    width = max(len(lane) for lane in lanes)

    def _column(name, lane):
        return [_value(r[name]) for r in lane] + [math.nan] * (width - len(lane))

    return {n: np.array([_column(n, lane) for lane in lanes]) for n in names}


def collect(root: str | Path, metric: str = "return_mean") -> list[Group]:
    """Every run below ``root``, pooled into groups of identical configs (seeds merged)."""
    pooled: dict[str, Group] = {}
    for path in sorted(Path(root).rglob("summary.json")):
        try:
            summary = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            print(f"[report] skipping {path}: {error}", file=sys.stderr)
            continue
        metrics = read_metrics_csv(path.parent / "metrics.csv")
        for group in groups_from_run(summary, metrics, metric, job=str(path.parent)):
            if group.key in pooled:
                pooled[group.key].merge(group)
            else:
                pooled[group.key] = group
    for group in pooled.values():
        if group.duplicates:
            print(f"[report] {group.algo} on {group.env}: {group.duplicates} seed(s) found in more than "
                  "one run; each counted once", file=sys.stderr)
    return sorted(pooled.values(), key=lambda g: (g.env, g.algo, g.key))


def swept_keys(groups: list[Group]) -> list[str]:
    """Config keys whose value differs between groups of the same algo and env."""
    keys = set()
    by_pair: dict[tuple, list[Group]] = {}
    for group in groups:
        by_pair.setdefault((group.algo, group.env), []).append(group)
    for members in by_pair.values():
        for key in set().union(*(g.config for g in members)):
            if len({json.dumps(g.config.get(key), default=str) for g in members}) > 1:
                keys.add(key)
    return sorted(keys - {"algo.name", "env.id"})


def _stats(values: list[float]) -> tuple[float, float, float | None]:
    array = np.asarray(values, float)
    n = array.size
    std = float(array.std(ddof=1)) if n > 1 else 0.0
    return float(array.mean()), std, stats.t_half_width(array, 0.95)


def table(groups: list[Group]) -> tuple[list[str], list[dict]]:
    keys = swept_keys(groups)
    rows = []
    for group in groups:
        mean, std, ci = _stats(group.final_returns)
        rows.append({"algo": group.algo, "env": group.env,
                     **{k: group.config.get(k, "") for k in keys},
                     "num_seeds": len(group.final_returns), "final_return_mean": mean,
                     "final_return_std": std, "final_return_ci95": ci,
                     "env_steps_per_second": float(np.nanmean(group.rates)) if group.rates else math.nan,
                     "num_jobs": len(set(group.jobs))})
    return ["algo", "env", *keys, "num_seeds", "final_return_mean", "final_return_std",
            "final_return_ci95", "env_steps_per_second", "num_jobs"], rows


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, tuple):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    return str(value)


def markdown(columns: list[str], rows: list[dict]) -> str:
    keys = columns[2:columns.index("num_seeds")]
    head = ["algo", "env", *keys, "seeds", "final return (mean ± std)", "95% CI", "env steps/s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["algo"], row["env"], *(_text(row[k]) for k in keys), str(row["num_seeds"]),
                 f"{row['final_return_mean']:.2f} ± {row['final_return_std']:.2f}",
                 ("—" if row["final_return_ci95"] is None else f"± {row['final_return_ci95']:.2f}"),
                 f"{row['env_steps_per_second']:,.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _label(group: Group, keys: list[str]) -> str:
    parts = [group.algo] + [f"{k.split('.', 1)[-1]}={_text(group.config[k])}" for k in keys
                            if k in group.config]
    return " ".join(parts)


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average over ``window`` updates along the last axis, ignoring NaNs."""
    if window <= 1:
        return values
    finite = np.isfinite(values)
    kernel = np.ones(window)
    conv = lambda x: np.apply_along_axis(lambda r: np.convolve(r, kernel)[:r.size], -1, x)  # noqa: E731
    total, count = conv(np.where(finite, values, 0.0)), conv(finite.astype(float))
    with np.errstate(invalid="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def auto_window(groups: list[Group]) -> int:
    """About 2% of the run's updates (1 for short runs)."""
    lengths = [len(y) for g in groups for _, y in g.curves]
    return max(1, (max(lengths) if lengths else 0) // 50)


def plot_learning_curves(groups: list[Group], path: str | Path, metric: str = "return_mean",
                         window: int | None = None) -> None:
    """One panel per env, one line per group: mean over seeds and a shaded 95% CI band; each seed's
    curve is first smoothed over ``window`` updates (default: :func:`auto_window`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = sorted({g.env for g in groups})
    keys = swept_keys(groups)
    window = auto_window(groups) if window is None else window
    fig, axes = plt.subplots(1, max(len(envs), 1), figsize=(5.5 * max(len(envs), 1), 4), squeeze=False)
    for ax, env in zip(axes[0], envs):
        for group in (g for g in groups if g.env == env and g.curves):
            length = min(len(y) for _, y in group.curves)
            ys = smooth(np.stack([y[:length] for _, y in group.curves]), window)
            xs = np.nanmean(np.stack([x[:length] for x, _ in group.curves]), axis=0)
            with np.errstate(all="ignore"), _quiet_nan_warnings():
                mean = np.nanmean(ys, axis=0)
                count = np.sum(np.isfinite(ys), axis=0)
                if ys.shape[0] > 1:
                    from scipy.stats import t as student_t  # imported where needed: ~0.6 s

                    t_factor = student_t.ppf(0.975, np.maximum(count - 1, 1))  # Student-t per point
                    band = np.where(count > 1, t_factor, np.nan) * np.nanstd(ys, axis=0, ddof=1) / np.sqrt(count)
                else:
                    band = 0 * mean
            line, = ax.plot(xs, mean, label=f"{_label(group, keys)} (n={ys.shape[0]})")
            ax.fill_between(xs, mean - band, mean + band, color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_title(env)
        ax.set_xlabel("env steps (per agent)")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    smoothing = f"; each seed smoothed over {window} updates" if window > 1 else ""
    fig.suptitle(f"mean over seeds with a 95% CI band{smoothing}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


class _quiet_nan_warnings:
    def __enter__(self):
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("ignore", category=RuntimeWarning)

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)


def git_commit(exclude: tuple[str, ...] = ()) -> str | None:
    """The commit of the checkout this package runs from (``+dirty`` with uncommitted changes to
    tracked files outside the ``exclude`` paths, relative to the repository root); None outside a git
    checkout (an installed wheel)."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    pathspec = ["--", ".", *(f":(exclude){p}" for p in exclude)] if exclude else []
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True,
                              text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", *pathspec], cwd=root,
                               capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "") if head else None


def write_report(root: str | Path, out: str | Path | None = None, metric: str = "return_mean",
                 window: int | None = None, commit: str | None = None, command: str | None = None) -> dict:
    """Write ``report.csv``, ``report.md`` and ``learning_curves.png``; returns their paths. ``report.md``
    ends with the code's ``commit`` and the ``command`` that wrote it, where given."""
    out = Path(out or root)
    out.mkdir(parents=True, exist_ok=True)
    groups = collect(root, metric)
    if not groups:
        raise FileNotFoundError(f"no summary.json below {root}")
    columns, rows = table(groups)
    with open(out / "report.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows({k: _text(v) if isinstance(v, tuple) else v for k, v in row.items()}
                         for row in rows)
    note = ("\nFinal return: mean ± std over seeds of each policy's final deterministic evaluation; "
            "95% CI = Student-t, t(0.975, n-1) std / sqrt(n) over the n seeds (— for one seed). env steps/s: all lanes of a job, compile excluded.\n")
    # where the table came from: the code's commit and the command that wrote it
    made = (f"\ncommit: {commit}\n" if commit else "") + (f"command: `{command}`\n" if command else "")
    (out / "report.md").write_text(markdown(columns, rows) + note + made)
    plot_learning_curves(groups, out / "learning_curves.png", metric, window)
    return {"csv": out / "report.csv", "markdown": out / "report.md", "plot": out / "learning_curves.png",
            "groups": len(groups)}
