"""Benchmark suites as data: entries, seeds, budgets and references, run and tabulated.

A suite (``conf/benchmark/<name>.yaml``, run by ``python -m purejaxrl_opt.benchmark suite=<name>``)
lists entries, each an env, a budget (``total_timesteps``) and seeds, of one of three kinds:

* ours, trained here: ``algo`` and extra training ``overrides``, composed exactly as ``python -m
  purejaxrl_opt.train algo=A env=E ...`` composes them (Hydra's compose on the same
  ``conf/config.yaml``, so ``conf/tuned/<algo>_<env>.yaml`` applies) and trained by the training
  CLI's ``run_from_config`` (passed in as ``train_fn``), seeds vmapped, into ``<run dir>/<entry>/``;
* ours, stored: the same plus ``stored: {reader, path, options}``, a finished run read back by a
  reader of :mod:`purejaxrl_opt.host.readers` (``use_stored=false`` trains it instead);
* a peer: ``peer: {label, command}`` and ``stored``: another code's run in its own environment.
  ``command`` (its runner in ``experiments/peer_*.py``) runs when the output the reader reads is
  missing; the reader turns that output into the same per-seed record as ours.

References orient each entry: a published number (``value``, ``what``, ``source``) or one measured
in this repository (``file`` + dotted ``key`` of a JSON results file, e.g. the random policy's
return). Then, in the run dir:

* ``table.md`` / ``table.csv``: per entry the final return of each seed, the IQM, mean and median
  over seeds with 95% bootstrap CIs (:mod:`purejaxrl_opt.host.stats`), the late training return
  (:func:`purejaxrl_opt.host.stats.late_training_return`), the references, compile s, run s, env
  steps/s, where each entry's numbers come from, and the machine;
* ``learning_curves.png``: one panel per env, per entry with a training curve the IQM over seeds of
  the training return against env steps with a 95% CI band;
* ``probability_of_improvement.png`` (and a table in ``table.md``): P(X > Y) with a 95% CI for every
  pair of algorithms run on the same env, and aggregated over the envs they share;
* ``results.json``: all of it, machine-readable, with the commit and the command.

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

from omegaconf import DictConfig, OmegaConf

from purejaxrl_opt.host import artifacts
from purejaxrl_opt.config.schema import ALGORITHMS, ConfigError
from purejaxrl_opt.host.settings import parse_settings

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
SUITE_DIR = CONF_DIR / "benchmark"
SUITE_KEYS = {"description", "seed", "num_seeds", "train_overrides", "entries"}
ENTRY_KEYS = {"name", "algo", "env", "total_timesteps", "num_seeds", "seed", "overrides", "reference", "peer",
              "stored"}
REFERENCE_KEYS = {"value", "file", "key", "what", "source"}
PEER_KEYS = {"label", "command"}
STORED_KEYS = {"reader", "path", "options"}
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
class Stored:
    """A finished run read back instead of trained: ``reader`` (a name in host/readers.py) on
    ``path`` (relative to the repository root; may hold ``{seed}``), with the reader's ``options``."""
    reader: str
    path: str
    options: dict = field(default_factory=dict)


@dataclass
class Peer:
    """Another code's run of the entry's env and budget, in its own environment: ``command`` (its
    runner, from the repository root; empty where it cannot run here) writes what the entry's
    ``stored`` reader reads."""
    label: str
    command: str = ""


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
    peer: Peer | None = None
    stored: Stored | None = None

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
        measured = isinstance(item, dict) and {"file", "key"} <= set(item) and "value" not in item
        if (not isinstance(item, dict) or set(item) - REFERENCE_KEYS
                or not (measured or {"value", "source"} <= set(item) and not {"file", "key"} & set(item))):
            raise ConfigError(f"suite key '{here}' = {item!r} is invalid: a reference is a mapping with "
                              "'value' (a number), 'source' (where it is published) and 'what' (what the "
                              "number is); or 'file' (a JSON results file of this repository) and 'key' (the "
                              "dotted key of the number in it) with 'what'; or null when no number can be cited")
        if measured:
            from purejaxrl_opt.host import readers

            try:
                item = {**item, "value": readers.json_value(item["file"], item["key"]),
                        "source": item.get("source", item["file"])}
            except (OSError, KeyError, TypeError, ValueError) as error:
                raise ConfigError(f"suite key '{here}': no number at key {item['key']!r} of {item['file']}: "
                                  f"{type(error).__name__}: {error}") from None
        number = item["value"]
        if not isinstance(number, (int, float)) or isinstance(number, bool) or not math.isfinite(number):
            raise ConfigError(f"suite key '{here}.value' = {number!r} is invalid: must be a number")
        out.append(Reference(float(number), str(item.get("what", "")), str(item["source"])))
    return out


def _peer(where: str, value: Any) -> Peer | None:
    if value is None:
        return None
    if (not isinstance(value, dict) or set(value) - PEER_KEYS or not isinstance(value.get("label"), str)
            or not isinstance(value.get("command", ""), str)):
        raise ConfigError(f"suite key '{where}' = {value!r} is invalid: a peer is a mapping with 'label' (its "
                          "name in the tables) and 'command' (its runner's command line, run from the "
                          "repository root when its output is missing; empty where it cannot run here)")
    return Peer(value["label"], value.get("command", ""))


def _stored(where: str, value: Any) -> Stored | None:
    from purejaxrl_opt.host import readers

    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - STORED_KEYS or not {"reader", "path"} <= set(value):
        raise ConfigError(f"suite key '{where}' = {value!r} is invalid: must be a mapping with 'reader' (one "
                          f"of {sorted(readers.READERS)}), 'path' and optionally 'options'")
    if value["reader"] not in readers.READERS:
        raise ConfigError(f"suite key '{where}.reader' = {value['reader']!r} is invalid: must be one of "
                          f"{sorted(readers.READERS)}")
    if not isinstance(value.get("options", {}), dict):
        raise ConfigError(f"suite key '{where}.options' = {value['options']!r} is invalid: must be a mapping")
    return Stored(value["reader"], str(value["path"]), dict(value.get("options") or {}))


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
        peer = _peer(f"{where}.peer", item.get("peer"))
        stored = _stored(f"{where}.stored", item.get("stored"))
        if peer is not None:
            if stored is None:
                raise ConfigError(f"suite key '{where}.stored' is missing: a peer entry names the reader of "
                                  "its runner's output (stored: {reader, path, options})")
            if "algo" in item or "overrides" in item:
                raise ConfigError(f"suite key '{where}': a peer entry has no 'algo' or 'overrides' (it is not "
                                  "trained by this package); its 'peer.label' names it")
        elif item.get("algo") not in algos:
            raise ConfigError(f"suite key '{where}.algo' = {item.get('algo')!r} is invalid: must be one "
                              f"of {algos}")
        env = item.get("env")
        # an id without a file (a gymnax id, '<library>/<id>') is served by hydra_plugins/purejaxrl_opt_envs;
        # a library's id is checked by the env registry when the entry is composed and checked (check_entry)
        if env not in envs and not (isinstance(env, str) and ("/" in env or _is_env_id(env))):
            raise ConfigError(f"suite key '{where}.env' = {env!r} is invalid: must be one of {envs}, a gymnax "
                              "or token env id, or '<library>/<id>' (any id of an env library)")
        name = item.get("name") or (f"{item['algo']}_{item['env']}" if peer is None else None)
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
            name=name, algo=peer.label if peer else item["algo"], env=item["env"], peer=peer, stored=stored,
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
    return f"{r[name]:.2f} [{r[name + '_ci_low']:.2f}, {r[name + '_ci_high']:.2f}]"


def late_mean(r: dict) -> float | None:
    """The mean over seeds of the late training return (stats.late_training_return), or None."""
    values = [x for x in r.get("late_training_return") or [] if x is not None]
    return sum(values) / len(values) if values else None


TABLE_COLUMNS = ["entry", "algo", "env", "total_timesteps", "num_seeds", "seeds",
                 "iqm", "iqm_ci_low", "iqm_ci_high", "mean", "mean_ci_low", "mean_ci_high",
                 "median", "median_ci_low", "median_ci_high", "final_returns",
                 "late_training_return", "reference", "reference_what", "reference_source", "source",
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
                " ".join("" if x is None else f"{x:.6g}" for x in r.get("late_training_return") or []),
                " | ".join(f"{ref['value']:g}" for ref in refs),
                " | ".join(ref["what"] for ref in refs), " | ".join(ref["source"] for ref in refs),
                r.get("source", ""),
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
              f"(`summary.json` `final_return_per_seed`; a peer's or stored entry: as listed under "
              f"'Sources'); IQM / mean / median over seeds with {pct} percentile bootstrap CIs ({reps} "
              "resamples of the seeds)",
              "- late training return: per seed, the mean return of the episodes that ended in the last "
              "10% of its updates (host/stats.py late_training_return), mean over seeds",
              "- env steps/s: all seeds of the entry together, compile excluded", "",
              f"| entry | algo | env | env steps | seeds | per seed | IQM [{pct} CI] | mean [{pct} CI] | "
              f"median [{pct} CI] | late training return | reference | compile s | run s | env steps/s |",
              "|---|---|---|---:|---|---|---:|---:|---:|---:|---|---:|---:|---:|"]
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
            f"({seeds[0]}-{seeds[-1]}) | {', '.join(f'{x:.2f}' for x in r.get('final_returns') or [])} | "
            f"{_ci(r, 'iqm')} | {_ci(r, 'mean')} | {_ci(r, 'median')} | {_num(late_mean(r), 2)} | "
            f"{'; '.join(marks) or '—'} | {_num(r.get('compile_s'))} | {_num(r.get('run_s'))} | "
            f"{_num(r.get('env_steps_per_s'), 0)} |")
    if notes:
        lines += ["", "References (published numbers, or measured here where the source is a results "
                      "file; for orientation: other code, budgets, seeds and evaluation protocols; a single "
                      "published run has no CI):", ""]
        lines += [f"{i + 1}. {ref.value:g}: {ref.what} — {ref.source}" for i, ref in enumerate(notes)]
    lines += ["", "Sources (how each entry's final return was measured, and where it was read):", ""]
    lines += [f"- {r['name']}: {r['source']}" + (f"; {r['what']}" if r.get("what") else "")
              + (f"; runner: `{r['peer_command']}`" if r.get("peer_command") else "") for r in results]
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


def dry_run_text(suite: Suite, use_stored: bool = True) -> str:
    lines = [f"suite {suite.name!r} ({suite.path}): {len(suite.entries)} entries", "",
             f"{'entry':<28} {'algo':<5} {'env':<20} {'steps/seed':>11} {'seeds':>11} {'env steps':>13}  source"]
    total = 0
    for e in suite.entries:
        steps = e.total_timesteps * e.num_seeds
        trains = e.peer is None and not (use_stored and e.stored is not None)
        total += steps if trains else 0
        lines.append(f"{e.name:<28} {e.algo:<5} {e.env:<20} {e.total_timesteps:>11,} "
                     f"{f'{e.seed}-{e.seed + e.num_seeds - 1}':>11} {steps:>13,}  {_source(e, use_stored)}")
    lines += ["", f"total budget trained here: {total:,} env steps (upper bounds for episode-based "
              "algorithms); every trained entry's config composed and validated"]
    return "\n".join(lines)


def _source(entry: Entry, use_stored: bool) -> str:
    if entry.peer is not None:
        return f"peer, read from {entry.stored.path}" + ("" if entry.peer.command else " (stored; no runner here)")
    if use_stored and entry.stored is not None:
        return f"stored run, read from {entry.stored.path}"
    return "trained"


def _reusable(entry_dir: Path, cfg: DictConfig) -> dict | None:
    summary, saved = entry_dir / "summary.json", entry_dir / "config.yaml"
    if not (summary.is_file() and saved.is_file()):
        return None
    if OmegaConf.to_container(OmegaConf.load(saved), resolve=True) != OmegaConf.to_container(cfg, resolve=True):
        return None
    return json.loads(summary.read_text())


def _run_peer(entry: Entry) -> None:
    """The peer's runner, when the output its reader reads is missing; its failure is the entry's."""
    import shlex
    import subprocess

    from purejaxrl_opt.host import readers

    paths = [readers.resolve(entry.stored.path.format(seed=s)) for s in entry.seeds]
    if all(p.exists() for p in paths):
        return
    if not entry.peer.command:
        raise FileNotFoundError(f"peer output {entry.stored.path} is missing and the entry names no command "
                                "to produce it")
    argv = shlex.split(entry.peer.command)
    argv = [sys.executable if a == "python" and k == 0 else a for k, a in enumerate(argv)]
    _print(f"{entry.name}: running the peer: {entry.peer.command}")
    subprocess.run(argv, cwd=readers.ROOT, check=True)


def run_suite(suite: Suite, out_dir: str | os.PathLike, train_overrides: list[str] = (),
              reuse: bool = True, reps: int = 5000, curve_reps: int = 1000, level: float = 0.95,
              seed: int = 0, command: str = "", train_fn=None, use_stored: bool = True) -> dict:
    """Train every entry of ours (after composing and validating all of them), read every peer's
    output and, with ``use_stored``, every stored run; then write the tables and plots into
    ``out_dir``; returns the results (also written to ``results.json``). ``train_fn(cfg, out_dir)``
    is the training CLI's ``run_from_config`` (passed in: this layer does not import the CLIs)."""
    from purejaxrl_opt.host import readers

    out_dir = Path(out_dir)
    configs = []
    for entry in suite.entries:  # every error before anything trains
        cfg = None
        if entry.peer is None:
            cfg = compose_entry(entry, train_overrides)
            check_entry(entry, cfg)
        configs.append(cfg)
    trained = [e.peer is None and not (use_stored and e.stored is not None) for e in suite.entries]
    if any(trained) and train_fn is None:
        raise ValueError("run_suite: entries to train and no train_fn (the training CLI's run_from_config)")
    out_dir.mkdir(parents=True, exist_ok=True)
    info = machine()
    _print(f"suite {suite.name!r}: {len(suite.entries)} entries -> {out_dir}")
    _print(f"machine: {describe_machine(info)}")
    results = []
    from purejaxrl_opt.host.progress import Bar

    # on a terminal: the suite's env steps (every trained entry's budget) done, rate and time left,
    # above each entry's training bar
    budgets = [e.total_timesteps * e.num_seeds * t for e, t in zip(suite.entries, trained)]
    bar = Bar(sum(budgets), unit="env steps", desc=f"suite {suite.name}")
    for index, (entry, cfg) in enumerate(zip(suite.entries, configs)):
        entry_dir = out_dir / entry.name
        bar.update_to(sum(budgets[:index]), postfix=f"entry {index + 1}/{len(suite.entries)} {entry.name}")
        result = {"name": entry.name, "algo": entry.algo, "env": entry.env,
                  "total_timesteps": entry.total_timesteps, "num_seeds": entry.num_seeds,
                  "seeds": entry.seeds, "references": [vars(r) for r in entry.references], "dir": entry.name,
                  "source": _source(entry, use_stored)}
        if entry.peer is None:
            result["overrides"] = entry.train_overrides(list(train_overrides))
        else:
            result["peer_command"] = entry.peer.command
        record = None
        try:
            if not trained[index]:
                if entry.peer is not None:
                    _run_peer(entry)
                _print(f"[{index + 1}/{len(suite.entries)}] {entry.name}: {result['source']}")
                record = readers.read(entry.stored.reader, entry.stored.path, entry.seeds, entry.stored.options)
                bar.add_initial(budgets[index])
            elif reuse and _reusable(entry_dir, cfg) is not None:
                _print(f"[{index + 1}/{len(suite.entries)}] {entry.name}: finished run found in {entry_dir}, "
                       "read back")
                record = readers.run_dir(entry_dir, entry.seeds, {})
                bar.add_initial(budgets[index])  # done, but not at this process's rate
            else:
                _print(f"[{index + 1}/{len(suite.entries)}] {entry.name}: {entry.algo} on {entry.env}, "
                       f"{entry.total_timesteps:,} steps x seeds {entry.seed}-{entry.seeds[-1]}")
                entry_dir.mkdir(parents=True, exist_ok=True)
                (entry_dir / "summary.json").unlink(missing_ok=True)
                train_fn(cfg, entry_dir)
                OmegaConf.save(cfg, entry_dir / "config.yaml")  # written last: marks a finished run
                record = readers.run_dir(entry_dir, entry.seeds, {})
        except ConfigError:
            raise
        except Exception as error:  # noqa: BLE001 - one failed entry must not cost the others
            traceback.print_exc()
            result["error"] = f"{type(error).__name__}: {error}"
        if record is not None:
            returns = record["final_returns"]
            result.update(final_returns=returns, what=record["what"], compile_s=record["compile_s"],
                          run_s=record["run_s"], env_steps_per_s=record["env_steps_per_s"],
                          late_training_return=record["late_training_return"], extra=record["extra"])
            entry_seed = name_seed(seed, entry.name)
            result.update(entry_statistics(returns, reps, level, entry_seed))
            result["curve"] = learning_curve(record["metrics"], curve_reps, level, entry_seed)
            _print(f"{entry.name}: IQM {_ci(result, 'iqm')}, mean {_ci(result, 'mean')} "
                   f"({100 * level:g}% CIs)")
        results.append(result)
    bar.update_to(sum(budgets))
    bar.close()
    pairs = improvement_pairs(results, reps, level, seed)
    machine_text = describe_machine(info)
    out = {"suite": suite.name, "suite_file": str(suite.path), "description": suite.description,
           "machine": info, "command": command, "commit": artifacts.git_commit() or "unknown",
           "bootstrap": {"reps": reps, "curve_reps": curve_reps, "level": level, "seed": seed},
           "entries": results, "probability_of_improvement": pairs}
    (out_dir / "results.json").write_text(json.dumps(out, indent=2) + "\n")
    write_table_csv(out_dir / "table.csv", results, machine_text)
    (out_dir / "table.md").write_text(table_markdown(suite, results, pairs, info, level, reps, command))
    plot_curves(out_dir / "learning_curves.png", results, level)
    plot_improvement(out_dir / "probability_of_improvement.png", pairs, level)
    _print(f"wrote {out_dir / 'table.md'}")
    return out
