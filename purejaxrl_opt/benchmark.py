"""Benchmark suites: results with confidence intervals, reference numbers and the machine named.

    python -m purejaxrl_opt.benchmark suite=quick                # classic control, PPO/TRPO/GRPO
    python -m purejaxrl_opt.benchmark suite=full                 # + MinAtar, longer budgets
    python -m purejaxrl_opt.benchmark suite=quick dry_run=true   # entries and budgets, no training
    python -m purejaxrl_opt.benchmark suite=full hydra.run.dir=DIR   # again after a crash: finished
                                                                     # entries are read back (reuse)

A suite (``conf/benchmark/<name>.yaml``) lists entries -- algo, env, total_timesteps, seeds, extra
training overrides -- with the published reference numbers and their sources. Every entry is composed
exactly as ``python -m purejaxrl_opt.train algo=A env=E ...`` composes it (Hydra's compose on the same
``conf/config.yaml``, so ``conf/tuned/<algo>_<env>.yaml`` applies) and trained by the same
:func:`purejaxrl_opt.train.run_from_config`, seeds vmapped, one entry after another in this process,
into ``<run dir>/<entry>/`` (its ``summary.json``, ``metrics.csv``, ``config.yaml``). Then, in the run
dir:

* ``table.md`` / ``table.csv``: per entry the IQM, mean and median over seeds of the final returns
  (``summary.json``'s ``final_return_per_seed``: each seed's mean over ``eval_episodes`` episodes)
  with 95% bootstrap CIs (:mod:`purejaxrl_opt.host.stats`), the reference number and its source, compile
  s, run s, env steps/s, and the machine (CPU model, cores, device, jax version);
* ``learning_curves.png``: one panel per env, per entry the IQM over seeds of the training return
  against env steps with a 95% CI band;
* ``probability_of_improvement.png`` (and a table in ``table.md``): P(X > Y) with a 95% CI for every
  pair of algorithms run on the same env, and aggregated over the envs they share;
* ``results.json``: all of it, machine-readable.

Every entry's config is composed and validated before the first one trains.
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import sys
import time
import traceback
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from purejaxrl_opt import train  # first: sets the CLI's default XLA flags before JAX initialises

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from purejaxrl_opt.host import artifacts  # noqa: E402
from purejaxrl_opt.config.schema import ALGORITHMS, ConfigError  # noqa: E402
from purejaxrl_opt.host.settings import parse_settings  # noqa: E402

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
SUITE_DIR = CONF_DIR / "benchmark"
SUITE_KEYS = {"description", "seed", "num_seeds", "train_overrides", "entries"}
ENTRY_KEYS = {"name", "algo", "env", "total_timesteps", "num_seeds", "seed", "overrides", "reference"}
REFERENCE_KEYS = {"value", "what", "source"}
# keys an entry sets itself (the entry's fields); an override of them would silently change the entry
OWN_KEYS = ("algo", "env", "total_timesteps", "num_seeds", "seed")
CURVE_POINTS = 100
CURVE_METRIC = "return_mean"


@dataclass
class Reference:
    value: float
    what: str
    source: str


@dataclass
class Entry:
    name: str
    algo: str
    env: str
    total_timesteps: int
    num_seeds: int
    seed: int
    overrides: list[str] = field(default_factory=list)
    references: list[Reference] = field(default_factory=list)

    @property
    def seeds(self) -> list[int]:
        return list(range(self.seed, self.seed + self.num_seeds))

    def train_overrides(self, extra: list[str]) -> list[str]:
        # the CLI's defaults apart from: no final checkpoint (a suite writes many runs; set
        # checkpoint.final=true in train_overrides to keep them), and the entry's own fields last
        return (["checkpoint.final=false"] + list(self.overrides) + list(extra)
                + [f"algo={self.algo}", f"env={self.env}", f"total_timesteps={self.total_timesteps}",
                   f"num_seeds={self.num_seeds}", f"seed={self.seed}"])


@dataclass
class Suite:
    name: str
    path: Path
    description: str
    entries: list[Entry]


# --------------------------------------------------------------------------------------------------
# suite files


def available_suites() -> list[str]:
    return sorted(p.stem for p in SUITE_DIR.glob("*.yaml"))


def _choices(group: str) -> list[str]:
    """The files of a config group, nested ones by their path (``env=playground/<id>``)."""
    root = CONF_DIR / group
    return sorted(p.relative_to(root).with_suffix("").as_posix() for p in root.rglob("*.yaml"))


def _is_env_id(env: str) -> bool:
    """Whether ``env`` is a gymnax or token env id (served as ``env=<id>`` without a file)."""
    from purejaxrl_opt.envs.registry import split_id

    try:
        split_id(env)
    except ConfigError:
        return False
    return True


def suite_path(suite: str) -> Path:
    if not isinstance(suite, str) or not suite:
        raise ConfigError(f"config key 'suite' = {suite!r} is invalid: must be one of "
                          f"{available_suites()} or the path of a suite file")
    path = SUITE_DIR / f"{suite}.yaml"
    if path.is_file():
        return path
    if suite.endswith((".yaml", ".yml")) and Path(suite).is_file():
        return Path(suite)
    raise ConfigError(f"config key 'suite' = {suite!r} is invalid: must be one of {available_suites()} "
                      "(conf/benchmark/<name>.yaml) or the path of a suite file")


def _int(where: str, value: Any, low: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigError(f"suite key '{where}' = {value!r} is invalid: must be an int >= {low}")
    return value


def _strings(where: str, value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and "=" in v for v in value):
        raise ConfigError(f"suite key '{where}' = {value!r} is invalid: must be a list of "
                          "'key=value' training overrides")
    return list(value)


def _references(where: str, value: Any) -> list[Reference]:
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    out = []
    for i, item in enumerate(items):
        here = f"{where}[{i}]" if isinstance(value, list) else where
        if not isinstance(item, dict) or set(item) - REFERENCE_KEYS or not {"value", "source"} <= set(item):
            raise ConfigError(f"suite key '{here}' = {item!r} is invalid: a reference is a mapping with "
                              "'value' (a number), 'source' (where it is published) and 'what' (what the "
                              "number is), or null when no published number can be cited")
        number = item["value"]
        if not isinstance(number, (int, float)) or isinstance(number, bool) or not math.isfinite(number):
            raise ConfigError(f"suite key '{here}.value' = {number!r} is invalid: must be a number")
        out.append(Reference(float(number), str(item.get("what", "")), str(item["source"])))
    return out


def load_suite(suite: str, num_seeds: int | None = None, seed: int | None = None,
               only: list[str] | None = None) -> Suite:
    """Read and check a suite file; ``num_seeds``/``seed`` replace every entry's, ``only`` keeps those
    entries. Errors name the key, the entry and the allowed values."""
    path = suite_path(suite)
    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    if not isinstance(raw, dict):
        raise ConfigError(f"suite file {path} must be a mapping with an 'entries' list")
    unknown = sorted(set(raw) - SUITE_KEYS)
    if unknown:
        raise ConfigError(f"suite key '{unknown[0]}' is unknown; allowed: {sorted(SUITE_KEYS)}")
    default_seed = _int("seed", raw.get("seed", 0), 0)
    default_num = _int("num_seeds", raw.get("num_seeds", 16), 1)
    common = _strings("train_overrides", raw.get("train_overrides"))
    items = raw.get("entries")
    if not isinstance(items, list) or not items:
        raise ConfigError(f"suite key 'entries' in {path} is invalid: must be a non-empty list")
    algos, envs = sorted(ALGORITHMS), _choices("env")
    entries, names = [], set()
    for i, item in enumerate(items):
        where = f"entries[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"suite key '{where}' = {item!r} is invalid: must be a mapping")
        unknown = sorted(set(item) - ENTRY_KEYS)
        if unknown:
            raise ConfigError(f"suite key '{where}.{unknown[0]}' is unknown; allowed: {sorted(ENTRY_KEYS)}")
        if item.get("algo") not in algos:
            raise ConfigError(f"suite key '{where}.algo' = {item.get('algo')!r} is invalid: must be one "
                              f"of {algos}")
        env = item.get("env")
        # an id without a file (a gymnax id, '<library>/<id>') is served by hydra_plugins/purejaxrl_opt_envs;
        # a library's id is checked by the env registry when the entry is composed and checked (check_entry)
        if env not in envs and not (isinstance(env, str) and ("/" in env or _is_env_id(env))):
            raise ConfigError(f"suite key '{where}.env' = {env!r} is invalid: must be one of {envs}, a gymnax "
                              "or token env id, or '<library>/<id>' (any id of an env library)")
        name = item.get("name") or f"{item['algo']}_{item['env']}"
        if not isinstance(name, str) or not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise ConfigError(f"suite key '{where}.name' = {name!r} is invalid: must be a non-empty name "
                              "of letters, digits, '-', '_' and '.' (it names the entry's directory)")
        if name in names:
            raise ConfigError(f"suite key '{where}.name' = {name!r} is invalid: two entries are named "
                              f"{name!r}; give one a 'name'")
        names.add(name)
        overrides = _strings(f"{where}.overrides", item.get("overrides")) + common
        for override in overrides:
            key = override.split("=", 1)[0].lstrip("+~")
            if key in OWN_KEYS:
                raise ConfigError(f"suite key '{where}.overrides' sets '{key}': set the entry's own "
                                  f"'{key}' instead")
        entries.append(Entry(
            name=name, algo=item["algo"], env=item["env"],
            total_timesteps=_int(f"{where}.total_timesteps", item.get("total_timesteps"), 1),
            num_seeds=num_seeds if num_seeds is not None else _int(
                f"{where}.num_seeds", item.get("num_seeds", default_num), 1),
            seed=seed if seed is not None else _int(f"{where}.seed", item.get("seed", default_seed), 0),
            overrides=overrides, references=_references(f"{where}.reference", item.get("reference"))))
    if only is not None:
        missing = sorted(set(only) - names)
        if missing:
            raise ConfigError(f"config key 'only' names {missing}, not entries of suite {suite!r}: "
                              f"must be among {[e.name for e in entries]}")
        entries = [e for e in entries if e.name in set(only)]
    return Suite(path.stem, path, str(raw.get("description", "")), entries)


# --------------------------------------------------------------------------------------------------
# composition: the training CLI's own


def compose_entry(entry: Entry, extra: list[str] = ()) -> DictConfig:
    """The config ``python -m purejaxrl_opt.train <the entry's overrides>`` would run (Hydra's compose
    on conf/config.yaml; inside this module's Hydra app it reuses the app's search path)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    overrides = entry.train_overrides(list(extra))
    try:
        if GlobalHydra.instance().is_initialized():
            return compose(config_name="config", overrides=overrides)
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            return compose(config_name="config", overrides=overrides)
    except HydraException as error:
        raise ConfigError(f"entry {entry.name!r}: its overrides {overrides} do not compose: {error}") from None


def check_entry(entry: Entry, cfg: DictConfig) -> None:
    try:
        parse_settings(cfg)  # every key and value, as the CLI checks them
    except ConfigError as error:
        raise ConfigError(f"entry {entry.name!r}: {error}") from None
    sweep = OmegaConf.select(cfg, "sweep", default=None) or {}
    if sweep.get("vmap") is not None or sweep.get("random") is not None:
        raise ConfigError(f"entry {entry.name!r}: sweep.vmap/sweep.random are set; a suite entry is one "
                          "configuration over seeds (list the configurations as entries)")
    if OmegaConf.select(cfg, "resume", default=None) is not None:
        raise ConfigError(f"entry {entry.name!r}: 'resume' is set; the benchmark resumes by itself "
                          "(reuse=true with hydra.run.dir=<the suite's run dir>)")


# --------------------------------------------------------------------------------------------------
# the machine


def machine() -> dict:
    import jax

    from purejaxrl_opt.host.artifacts import describe_device

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {"cpu": cpu, "cpu_count": os.cpu_count(), "cpus_usable": usable, "device": describe_device(),
            "jax": jax.__version__, "python": platform.python_version(), "platform": platform.platform(),
            "host": platform.node(), "xla_flags": os.environ.get("XLA_FLAGS", "")}


def describe_machine(info: dict) -> str:
    return (f"{info['cpu']}, {info['cpus_usable']} of {info['cpu_count']} cores usable; {info['device']}; "
            f"jax {info['jax']}, Python {info['python']}, {info['platform']}"
            + (f"; XLA_FLAGS={info['xla_flags']}" if info["xla_flags"] else ""))


# --------------------------------------------------------------------------------------------------
# statistics of the finished entries


def name_seed(seed: int, *names: str) -> int:
    """The bootstrap seed of an entry (or a pair of them) follows its names, not its position: the
    same runs give the same CIs whichever entries (``only=...``) share the invocation."""
    return seed + zlib.crc32("|".join(names).encode()) % 2**16


def entry_statistics(returns: list[float], reps: int, level: float, seed: int) -> dict:
    from purejaxrl_opt.host import stats

    out = {}
    for name in ("iqm", "mean", "median"):
        out.update(stats.stratified_bootstrap_ci(returns, name, reps=reps, level=level, seed=seed).as_dict(name))
    return out


def learning_curve(metrics: dict | None, reps: int, level: float, seed: int) -> dict | None:
    """IQM over seeds of the training return vs env steps (per agent) and its bootstrap band.

    Each seed's curve is averaged over a trailing window of ~2% of the updates and carried forward
    over updates where no episode ended (the latest known return of that agent); points before every
    seed has finished an episode are left out; at most ``CURVE_POINTS`` points are plotted."""
    import numpy as np

    from purejaxrl_opt.host import report, stats

    if not metrics or CURVE_METRIC not in metrics:
        return None
    ys = np.asarray(metrics[CURVE_METRIC], float)
    xs = np.asarray(metrics["env_steps"], float).mean(axis=0)
    ys = report.smooth(ys, max(1, ys.shape[1] // 50))
    for t in range(1, ys.shape[1]):
        ys[:, t] = np.where(np.isfinite(ys[:, t]), ys[:, t], ys[:, t - 1])
    valid = np.all(np.isfinite(ys), axis=0)
    if not valid.any():
        return None
    index = np.flatnonzero(valid)
    index = index[np.unique(np.linspace(0, index.size - 1, min(CURVE_POINTS, index.size)).round().astype(int))]
    mid, low, high = stats.iqm_curve_ci(ys[:, index], reps=reps, level=level, seed=seed)
    return {"env_steps": xs[index].tolist(), "iqm": mid.tolist(), "ci_low": low.tolist(),
            "ci_high": high.tolist()}


def improvement_pairs(results: list[dict], reps: int, level: float, seed: int) -> list[dict]:
    """P(X > Y) for every two entries of different algorithms on the same env (suite order), and per
    algorithm pair aggregated over every env where each has exactly one entry (rliable's average over
    tasks, runs resampled within each task)."""
    import numpy as np

    from purejaxrl_opt.host import stats

    done = [r for r in results if r.get("final_returns")]
    rows = []
    for i, a in enumerate(done):
        for b in done[i + 1:]:
            if a["env"] != b["env"] or a["algo"] == b["algo"]:
                continue
            ci = stats.probability_of_improvement_ci(a["final_returns"], b["final_returns"], reps=reps, level=level,
                                                     seed=name_seed(seed, a["name"], b["name"]))
            rows.append({"x": a["name"], "y": b["name"], "x_algo": a["algo"], "y_algo": b["algo"],
                         "envs": [a["env"]], "p": ci.value, "ci_low": ci.low, "ci_high": ci.high})
    by_env: dict[str, dict[str, list]] = {}
    for r in done:
        by_env.setdefault(r["env"], {}).setdefault(r["algo"], []).append(r)
    algos = list(dict.fromkeys(r["algo"] for r in done))
    for i, x in enumerate(algos):
        for y in algos[i + 1:]:
            envs = [env for env, per in by_env.items() if len(per.get(x, ())) == 1 and len(per.get(y, ())) == 1]
            if len(envs) < 2:
                continue
            xs = [np.asarray(by_env[e][x][0]["final_returns"]) for e in envs]
            ys = [np.asarray(by_env[e][y][0]["final_returns"]) for e in envs]
            ci = stats.probability_of_improvement_ci(xs, ys, reps=reps, level=level,
                                                     seed=name_seed(seed, x, y, *envs))
            rows.append({"x": x, "y": y, "x_algo": x, "y_algo": y, "envs": envs, "p": ci.value,
                         "ci_low": ci.low, "ci_high": ci.high})
    return rows


# --------------------------------------------------------------------------------------------------
# outputs


def _num(x: Any, digits: int = 1) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _ci(r: dict, name: str) -> str:
    if name not in r:
        return "failed" if r.get("error") else ""
    return f"{r[name]:.1f} [{r[name + '_ci_low']:.1f}, {r[name + '_ci_high']:.1f}]"


TABLE_COLUMNS = ["entry", "algo", "env", "total_timesteps", "num_seeds", "seeds",
                 "iqm", "iqm_ci_low", "iqm_ci_high", "mean", "mean_ci_low", "mean_ci_high",
                 "median", "median_ci_low", "median_ci_high", "final_returns",
                 "reference", "reference_what", "reference_source",
                 "compile_s", "run_s", "env_steps_per_s", "machine", "error"]


def write_table_csv(path: Path, results: list[dict], machine_text: str) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(TABLE_COLUMNS)
        for r in results:
            refs = r["references"]
            writer.writerow([
                r["name"], r["algo"], r["env"], r["total_timesteps"], r["num_seeds"],
                f"{r['seeds'][0]}-{r['seeds'][-1]}",
                *[r.get(k, "") for k in ("iqm", "iqm_ci_low", "iqm_ci_high", "mean", "mean_ci_low",
                                         "mean_ci_high", "median", "median_ci_low", "median_ci_high")],
                " ".join(f"{x:.6g}" for x in r.get("final_returns") or []),
                " | ".join(f"{ref['value']:g}" for ref in refs),
                " | ".join(ref["what"] for ref in refs), " | ".join(ref["source"] for ref in refs),
                r.get("compile_s", ""), r.get("run_s", ""), r.get("env_steps_per_s", ""), machine_text,
                r.get("error", "")])


def table_markdown(suite: Suite, results: list[dict], pairs: list[dict], info: dict, level: float,
                   reps: int, command: str) -> str:
    pct = f"{100 * level:g}%"
    lines = [f"# Benchmark suite `{suite.name}`", ""]
    if suite.description:
        lines += [suite.description.strip(), ""]
    lines += [f"- machine: {describe_machine(info)}",
              f"- command: `{command}`",
              f"- commit: {artifacts.git_commit() or 'unknown'}",
              f"- finished: {time.strftime('%Y-%m-%d %H:%M:%S')}",
              f"- final return of a seed: its final policy's mean return over `eval_episodes` episodes "
              f"(`summary.json` `final_return_per_seed`); IQM / mean / median over seeds with {pct} "
              f"percentile bootstrap CIs ({reps} resamples of the seeds)",
              "- env steps/s: all seeds of the entry together, compile excluded", "",
              f"| entry | algo | env | env steps | seeds | IQM [{pct} CI] | mean [{pct} CI] | "
              f"median [{pct} CI] | reference | compile s | run s | env steps/s |",
              "|---|---|---|---:|---|---:|---:|---:|---|---:|---:|---:|"]
    notes: list[Reference] = []
    for r in results:
        marks = []
        for ref in r["references"]:
            reference = Reference(**ref)
            if reference not in notes:
                notes.append(reference)
            marks.append(f"{ref['value']:g} [{notes.index(reference) + 1}]")
        seeds = r["seeds"]
        lines.append(
            f"| {r['name']} | {r['algo']} | {r['env']} | {r['total_timesteps']:,} | {len(seeds)} "
            f"({seeds[0]}-{seeds[-1]}) | {_ci(r, 'iqm')} | {_ci(r, 'mean')} | {_ci(r, 'median')} | "
            f"{'; '.join(marks) or '—'} | {_num(r.get('compile_s'))} | {_num(r.get('run_s'))} | "
            f"{_num(r.get('env_steps_per_s'), 0)} |")
    if notes:
        lines += ["", "References (published numbers, for orientation: other code, budgets, seeds and "
                      "evaluation protocols; a single published run has no CI):", ""]
        lines += [f"{i + 1}. {ref.value:g}: {ref.what} — {ref.source}" for i, ref in enumerate(notes)]
    failed = [r for r in results if r.get("error")]
    if failed:
        lines += ["", "Failed entries:", ""] + [f"- {r['name']}: {r['error']}" for r in failed]
    if pairs:
        lines += ["", f"## Probability of improvement (P(X > Y) over seeds, {pct} CI)", "",
                  "P(X > Y) = P(a seed of X ends above a seed of Y) + P(tie) / 2 (Mann-Whitney); over "
                  "several envs, the average of the per-env probabilities (rliable). 0.5 = no "
                  "difference; a CI that excludes 0.5 is a difference at that level.", "",
                  "| X | Y | envs | P(X > Y) | CI |", "|---|---|---|---:|---|"]
        lines += [f"| {p['x']} | {p['y']} | {', '.join(p['envs'])} | {p['p']:.3f} | "
                  f"[{p['ci_low']:.3f}, {p['ci_high']:.3f}] |" for p in pairs]
    return "\n".join(lines) + "\n"


def plot_curves(path: Path, results: list[dict], level: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(dict.fromkeys(r["env"] for r in results if r.get("curve")))
    if not envs:
        return
    cols = min(3, len(envs))
    rows = math.ceil(len(envs) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.8 * rows), squeeze=False)
    for ax, env in zip(axes.flat, envs):
        for r in (r for r in results if r["env"] == env and r.get("curve")):
            c = r["curve"]
            line, = ax.plot(c["env_steps"], c["iqm"], label=f"{r['name']} (n={len(r['seeds'])})")
            ax.fill_between(c["env_steps"], c["ci_low"], c["ci_high"], color=line.get_color(), alpha=0.2,
                            linewidth=0)
        ax.set_title(env)
        ax.set_xlabel("env steps (per agent)")
        ax.set_ylabel("training return (IQM over seeds)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(envs):]:
        ax.axis("off")
    fig.suptitle(f"IQM over seeds with a {100 * level:g}% bootstrap CI band", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_improvement(path: Path, pairs: list[dict], level: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not pairs:
        return
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(pairs) + 1.2))
    labels = []
    for i, p in enumerate(reversed(pairs)):
        envs = p["envs"][0] if len(p["envs"]) == 1 else f"{len(p['envs'])} envs"
        labels.append(f"P({p['x']} > {p['y']})  [{envs}]")
        ax.plot([p["ci_low"], p["ci_high"]], [i, i], color="tab:blue", linewidth=6, alpha=0.45,
                solid_capstyle="butt")
        ax.plot([p["p"]], [i], "o", color="black", markersize=4)
    ax.axvline(0.5, color="grey", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(pairs)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_xlabel(f"probability of improvement ({100 * level:g}% bootstrap CI)")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------------------------------
# running


def _print(text: str) -> None:
    from purejaxrl_opt.host.progress import write

    write(f"[benchmark] {text}")  # above the suite's progress bar, if one is drawn


def dry_run_text(suite: Suite) -> str:
    lines = [f"suite {suite.name!r} ({suite.path}): {len(suite.entries)} entries", "",
             f"{'entry':<28} {'algo':<5} {'env':<20} {'steps/seed':>11} {'seeds':>11} {'env steps':>13}"]
    total = 0
    for e in suite.entries:
        steps = e.total_timesteps * e.num_seeds
        total += steps
        lines.append(f"{e.name:<28} {e.algo:<5} {e.env:<20} {e.total_timesteps:>11,} "
                     f"{f'{e.seed}-{e.seed + e.num_seeds - 1}':>11} {steps:>13,}")
    lines += ["", f"total budget: {total:,} env steps (upper bounds for episode-based algorithms); "
              "every entry's config composed and validated"]
    return "\n".join(lines)


def _reusable(entry_dir: Path, cfg: DictConfig) -> dict | None:
    summary, saved = entry_dir / "summary.json", entry_dir / "config.yaml"
    if not (summary.is_file() and saved.is_file()):
        return None
    if OmegaConf.to_container(OmegaConf.load(saved), resolve=True) != OmegaConf.to_container(cfg, resolve=True):
        return None
    return json.loads(summary.read_text())


def run_suite(suite: Suite, out_dir: str | os.PathLike, train_overrides: list[str] = (),
              reuse: bool = True, reps: int = 5000, curve_reps: int = 1000, level: float = 0.95,
              seed: int = 0, command: str = "") -> dict:
    """Train every entry (after composing and validating all of them), then write the tables and
    plots into ``out_dir``; returns the results (also written to ``results.json``)."""
    from purejaxrl_opt.host import report

    out_dir = Path(out_dir)
    configs = []
    for entry in suite.entries:  # every error before anything trains
        cfg = compose_entry(entry, train_overrides)
        check_entry(entry, cfg)
        configs.append(cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    info = machine()
    _print(f"suite {suite.name!r}: {len(suite.entries)} entries -> {out_dir}")
    _print(f"machine: {describe_machine(info)}")
    results = []
    from purejaxrl_opt.host.progress import Bar

    # on a terminal: the suite's env steps (every entry's budget) done, rate and time left, above
    # each entry's training bar
    budgets = [e.total_timesteps * e.num_seeds for e in suite.entries]
    bar = Bar(sum(budgets), unit="env steps", desc=f"suite {suite.name}")
    for index, (entry, cfg) in enumerate(zip(suite.entries, configs)):
        entry_dir = out_dir / entry.name
        bar.update_to(sum(budgets[:index]), postfix=f"entry {index + 1}/{len(suite.entries)} {entry.name}")
        result = {"name": entry.name, "algo": entry.algo, "env": entry.env,
                  "total_timesteps": entry.total_timesteps, "num_seeds": entry.num_seeds,
                  "seeds": entry.seeds, "overrides": entry.train_overrides(list(train_overrides)),
                  "references": [vars(r) for r in entry.references], "dir": entry.name}
        summary = _reusable(entry_dir, cfg) if reuse else None
        if summary is not None:
            _print(f"[{index + 1}/{len(suite.entries)}] {entry.name}: finished run found in {entry_dir}, "
                   "read back")
            bar.add_initial(budgets[index])  # done, but not at this process's rate
        else:
            _print(f"[{index + 1}/{len(suite.entries)}] {entry.name}: {entry.algo} on {entry.env}, "
                   f"{entry.total_timesteps:,} steps x seeds {entry.seed}-{entry.seeds[-1]}")
            entry_dir.mkdir(parents=True, exist_ok=True)
            (entry_dir / "summary.json").unlink(missing_ok=True)
            try:
                summary = train.run_from_config(cfg, entry_dir).summary
                OmegaConf.save(cfg, entry_dir / "config.yaml")  # written last: marks a finished run
            except ConfigError:
                raise
            except Exception as error:  # noqa: BLE001 - one failed entry must not cost the others
                traceback.print_exc()
                result["error"] = f"{type(error).__name__}: {error}"
                summary = None
        if summary is not None:
            returns = [float(x) for x in summary["final_return_per_seed"]]
            result.update(final_returns=returns, compile_s=summary["compile_seconds"],
                          run_s=summary["run_seconds"], env_steps_per_s=summary["env_steps_per_second"],
                          env_steps=summary["env_steps"], device=summary.get("device"))
            entry_seed = name_seed(seed, entry.name)
            result.update(entry_statistics(returns, reps, level, entry_seed))
            metrics = report.read_metrics_csv(entry_dir / "metrics.csv")
            result["curve"] = learning_curve(metrics, curve_reps, level, entry_seed)
            _print(f"{entry.name}: IQM {_ci(result, 'iqm')}, mean {_ci(result, 'mean')} "
                   f"({100 * level:g}% CIs)")
        results.append(result)
    bar.update_to(sum(budgets))
    bar.close()
    pairs = improvement_pairs(results, reps, level, seed)
    machine_text = describe_machine(info)
    out = {"suite": suite.name, "suite_file": str(suite.path), "description": suite.description,
           "machine": info, "command": command, "bootstrap": {"reps": reps, "curve_reps": curve_reps,
                                                            "level": level, "seed": seed},
           "entries": results, "probability_of_improvement": pairs}
    (out_dir / "results.json").write_text(json.dumps(out, indent=2) + "\n")
    write_table_csv(out_dir / "table.csv", results, machine_text)
    (out_dir / "table.md").write_text(table_markdown(suite, results, pairs, info, level, reps, command))
    plot_curves(out_dir / "learning_curves.png", results, level)
    plot_improvement(out_dir / "probability_of_improvement.png", pairs, level)
    _print(f"wrote {out_dir / 'table.md'}")
    return out


def _settings(cfg: DictConfig) -> dict:
    allowed = {"suite", "dry_run", "only", "num_seeds", "seed", "train_overrides", "reuse", "bootstrap"}
    unknown = sorted(set(cfg) - allowed - {"hydra"})
    if unknown:
        raise ConfigError(f"unknown config key '{unknown[0]}'; allowed: {sorted(allowed)}")
    raw = OmegaConf.to_container(cfg, resolve=False)
    boot = dict(raw.get("bootstrap") or {})
    unknown = sorted(set(boot) - {"reps", "curve_reps", "level", "seed"})
    if unknown:
        raise ConfigError(f"unknown config key 'bootstrap.{unknown[0]}'; allowed: "
                          "['curve_reps', 'level', 'reps', 'seed']")
    for key in ("reps", "curve_reps"):
        value = boot.get(key, 1000)
        if not isinstance(value, int) or isinstance(value, bool) or value < 100:
            raise ConfigError(f"config key 'bootstrap.{key}' = {value!r} is invalid: must be an int >= 100")
    level = boot.get("level", 0.95)
    if not isinstance(level, float) or not 0.5 <= level < 1.0:
        raise ConfigError(f"config key 'bootstrap.level' = {level!r} is invalid: must be a float in [0.5, 1)")
    for key in ("num_seeds", "seed"):
        value = raw.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < (1 if key == "num_seeds" else 0)):
            raise ConfigError(f"config key '{key}' = {value!r} is invalid: must be null or an int >= "
                              f"{1 if key == 'num_seeds' else 0}")
    only = raw.get("only")
    if only is not None and (not isinstance(only, list) or not all(isinstance(o, str) for o in only)):
        raise ConfigError(f"config key 'only' = {only!r} is invalid: must be null or a list of entry names")
    extra = raw.get("train_overrides") or []
    if not isinstance(extra, list) or not all(isinstance(o, str) and "=" in o for o in extra):
        raise ConfigError(f"config key 'train_overrides' = {extra!r} is invalid: must be a list of "
                          "'key=value' training overrides")
    for override in extra:
        key = override.split("=", 1)[0].lstrip("+~")
        if key in OWN_KEYS:
            # every entry sets these itself, after the overrides: a budget given here would be
            # silently replaced by the entry's
            where = {"num_seeds": "num_seeds=N", "seed": "seed=S"}.get(key)
            instead = (f"use the benchmark's own {where}" if where else
                       f"each entry sets its own '{key}' (in the suite file; a copy of it can be passed "
                       "as suite=<path>)")
            raise ConfigError(f"config key 'train_overrides' sets '{key}', which the suite's entries "
                              f"set themselves: {instead}")
    for flag in ("dry_run", "reuse"):
        if not isinstance(raw.get(flag), bool):
            raise ConfigError(f"config key '{flag}' = {raw.get(flag)!r} is invalid: must be true or false")
    return {"suite": raw.get("suite"), "dry_run": raw["dry_run"], "only": only,
            "num_seeds": raw.get("num_seeds"), "seed": raw.get("seed"), "train_overrides": extra,
            "reuse": raw["reuse"], "reps": boot.get("reps", 5000), "curve_reps": boot.get("curve_reps", 1000),
            "level": level, "boot_seed": boot.get("seed", 0)}


@hydra.main(version_base=None, config_path="../conf", config_name="benchmark")
def main(cfg: DictConfig) -> None:
    import logging

    logging.getLogger("jax").setLevel(logging.WARNING)
    try:
        s = _settings(cfg)
        suite = load_suite(s["suite"], s["num_seeds"], s["seed"], s["only"])
        if s["dry_run"]:
            for entry in suite.entries:
                check_entry(entry, compose_entry(entry, s["train_overrides"]))
            print(dry_run_text(suite))
            return
        command = "python -m purejaxrl_opt.benchmark " + " ".join(HydraConfig.get().overrides.task)
        out = run_suite(suite, HydraConfig.get().runtime.output_dir, s["train_overrides"], s["reuse"],
                        s["reps"], s["curve_reps"], s["level"], s["boot_seed"], command.strip())
    except ConfigError as error:
        print(f"purejaxrl_opt.benchmark: configuration error: {error}", file=sys.stderr)
        sys.exit(2)
    if any(r.get("error") for r in out["entries"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
