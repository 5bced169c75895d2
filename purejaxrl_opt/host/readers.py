"""Readers of finished runs for the benchmark suites: our run directories and peers' outputs.

A suite entry that is not trained in the suite's process (a peer's run in its own environment, or a
stored run of ours) names a reader and the path it reads (``stored: {reader, path, options}`` in the
suite file). Every reader returns the same record, so the suite's statistics (:mod:`.stats`) and
tables treat all entries alike:

* ``seeds``: ``[S]`` ints; ``final_returns``: ``[S]`` floats, each seed's final policy's return as
  that side measures it (the reader's ``what`` says how);
* ``env_steps_per_s``, ``compile_s``, ``run_s``: floats or None;
* ``late_training_return``: ``[S]`` floats (or None entries) from :func:`.stats.late_training_return`,
  or None where the side logs no training return per update;
* ``metrics``: ``name -> [S, updates]`` arrays for the learning curve, or None;
* ``extra``: what else the side recorded (alternative evaluations, timings), kept in results.json.

A path may hold ``{seed}`` (one file per seed) and is relative to the repository root.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Callable

import numpy as np

from purejaxrl_opt.config.schema import ConfigError
from purejaxrl_opt.host import stats

ROOT = Path(__file__).resolve().parents[2]


def resolve(path: str) -> Path:
    return (ROOT / path) if not Path(path).is_absolute() else Path(path)


def _record(seeds, finals, what: str, **more) -> dict:
    record = {"seeds": [int(s) for s in seeds], "final_returns": [float(x) for x in finals], "what": what,
              "env_steps_per_s": None, "compile_s": None, "run_s": None, "late_training_return": None,
              "metrics": None, "extra": {}}
    record.update(more)
    return record


def _late_from_metrics(metrics: dict | None, fraction: float) -> list | None:
    if not metrics or "return_mean" not in metrics:
        return None
    episodes = metrics.get("episodes")
    return [stats.late_training_return(metrics["return_mean"][i],
                                       None if episodes is None else episodes[i], fraction)
            for i in range(metrics["return_mean"].shape[0])]


# --------------------------------------------------------------------------------------------- ours
def run_dir(path: Path, seeds: list[int], options: dict) -> dict:
    """A run directory of ``python -m purejaxrl_opt.train`` (``summary.json``, ``metrics.csv``): the
    seeds' final evaluation (``final_return_per_seed``: the mean over ``eval_episodes`` episodes)."""
    from purejaxrl_opt.host import report

    summary = json.loads((path / "summary.json").read_text())
    metrics = report.read_metrics_csv(path / "metrics.csv")
    return _record(summary["seeds"], summary["final_return_per_seed"],
                   "final policy, mean return over eval_episodes episodes (summary.json)",
                   env_steps_per_s=summary.get("env_steps_per_second"), compile_s=summary.get("compile_seconds"),
                   run_s=summary.get("run_seconds"), metrics=metrics,
                   late_training_return=_late_from_metrics(metrics, options.get("fraction", 0.1)),
                   extra={"device": summary.get("device"), "env_steps_per_seed": summary.get("env_steps_per_seed")})


# --------------------------------------------------------------------------------- jumanji.training
_JUMANJI_LINE = re.compile(r"(Eval Stochastic|Eval Greedy|Train) >> Env Steps: ([0-9.e+]+) \| (.*)$")


def parse_jumanji_log(text: str) -> list[dict]:
    """jumanji.training's terminal-logger lines -> ``[{"label", "env_steps", <metric>: value}]``."""
    rows = []
    for line in text.splitlines():
        match = _JUMANJI_LINE.search(line)
        if not match:
            continue
        row = {"label": match.group(1), "env_steps": int(float(match.group(2)))}
        for item in match.group(3).split(" | "):
            key, _, value = item.partition(": ")
            try:
                row[key.strip().lower().replace(" ", "_")] = float(value.replace(",", ""))
            except ValueError:
                pass
        rows.append(row)
    return rows


def jumanji_a2c_log(path: Path, seeds: list[int], options: dict) -> dict:
    """One jumanji.training log per seed (``path`` holds ``{seed}``; experiments/peer_jumanji_a2c.py
    writes them). It evaluates at the *start* of each epoch, so the evaluation after ``epochs`` epochs
    (``options['epochs']``, of ``options['epoch_env_steps']`` env steps each) is the policy after the
    budget; ``options['evaluation']`` picks 'Eval Stochastic' (sampled actions) or 'Eval Greedy'. Env
    steps/s: its epochs after the first (which compiles) up to the budget, mean over seeds."""
    epochs, per_epoch = int(options["epochs"]), int(options["epoch_env_steps"])
    label = options.get("evaluation", "Eval Stochastic")
    finals, rates, first = [], [], []
    for seed in seeds:
        log = Path(str(path).format(seed=seed))
        rows = parse_jumanji_log(log.read_text())
        evals = [r for r in rows if r["label"] == label]
        train = [r for r in rows if r["label"] == "Train"]
        if len(evals) <= epochs or len(train) < epochs:
            raise ValueError(f"{log}: no '{label}' after {epochs} epochs ({len(evals)} evaluations logged)")
        if abs(evals[epochs]["env_steps"] - epochs * per_epoch) > 0.01 * epochs * per_epoch:
            raise ValueError(f"{log}: evaluation {epochs} is at {evals[epochs]['env_steps']} env steps, not "
                             f"{epochs * per_epoch}")
        finals.append(evals[epochs]["episode_return"])
        steady = [r["time"] for r in train[1:epochs]]
        if steady:
            rates.append(per_epoch * len(steady) / sum(steady))
        first.append(train[0]["time"])
    return _record(seeds, finals, f"jumanji.training '{label}' after {epochs * per_epoch:,} env steps",
                   env_steps_per_s=float(np.mean(rates)) if rates else None,
                   extra={"first_epoch_s": first})


# ------------------------------------------------------------------------------------ Brax (Playground)
def brax_env_steps_per_s(record: dict, seed_record: dict) -> float:
    """A seed's env steps/s in experiments/peer_brax_ppo.py's ``record``: its last ``training/sps``
    divided by ``num_resets_per_eval``, which brax 0.14.2's formula multiplies in although the timed
    call runs that fraction of the steps."""
    factor = max(int(record["brax_config"]["scaled"].get("num_resets_per_eval", 0)), 1)
    return float(seed_record["env_steps_per_s"]) / factor


def brax_ppo_json(path: Path, seeds: list[int], options: dict) -> dict:
    """experiments/peer_brax_ppo.py's record: per seed the final deterministic evaluation (Brax's
    ``eval/episode_reward``, mean over its eval envs). Env steps/s: the median over seeds of
    :func:`brax_env_steps_per_s`."""
    record = json.loads(path.read_text())
    per_seed = {s["seed"]: s for s in record["per_seed"]}
    missing = sorted(set(seeds) - set(per_seed))
    if missing:
        raise ValueError(f"{path}: seeds {missing} not finished (has {sorted(per_seed)})")
    sps = float(np.median([brax_env_steps_per_s(record, per_seed[s]) for s in seeds]))
    initial = [per_seed[s]["points"][0]["eval_return"] for s in seeds if per_seed[s]["points"][0]["step"] == 0]
    return _record(seeds, [per_seed[s]["final_return"] for s in seeds],
                   "Brax eval/episode_reward of the final policy (deterministic)", env_steps_per_s=sps,
                   extra={"initial_policy_return_mean": float(np.mean(initial)) if initial else None,
                          "load": [record.get("load_before"), record.get("load_after")]})


# ------------------------------------------------------------------------------- Craftax_Baselines
def craftax_side_by_side(path: Path, seeds: list[int], options: dict) -> dict:
    """experiments/peer_craftax_baselines.py's ``side_by_side_craftax.json``: both sides' final
    policies evaluated by the same code (fresh episodes, sampled actions). ``options['side']``:
    'peer' or 'ours'; ``options['metric']``: an evaluation key (default ``score_pct_of_max``). The
    late training return comes from the per-update curves stored beside it (theirs: their per-update
    mean return, unweighted; ours: weighted by the episodes that ended in each update)."""
    record = json.loads(path.read_text())
    side, metric = options["side"], options.get("metric", "score_pct_of_max")
    fraction = options.get("fraction", record.get("training_return_fraction", 0.1))
    if side == "peer":
        runs = {p["seed"]: p for p in record["peer"]}
        evals = {s: runs[s]["eval"] for s in runs}
        late = []
        for seed in seeds:
            rows = list(csv.DictReader((path.parent / f"peer_curve_seed{seed}.csv").open()))
            # an update in which no episode ended logs no return: '' (NaN here), left out as before
            late.append(stats.late_training_return([float(r["episode_return"] or "nan") for r in rows], None,
                                                   fraction))
        rates = [runs[s]["env_steps_per_s_steady"] for s in seeds]
        more = {"env_steps_per_s": float(np.mean(rates)),
                "compile_s": float(np.mean([runs[s]["compile_s_estimate"] for s in seeds]))}
    elif side == "ours":
        run = next(o for o in record["ours"] if set(seeds) <= set(o["seeds"]))
        evals = {int(s): v for s, v in run["eval"].items()}
        from purejaxrl_opt.host import report

        metrics = report.read_metrics_csv(path.parent / f"ours_metrics_seed{run['seeds'][0]}.csv")
        by_seed = dict(zip(run["seeds"], _late_from_metrics(metrics, fraction)))
        late = [by_seed[s] for s in seeds]
        more = {"env_steps_per_s": run["env_steps_per_s"], "compile_s": run["compile_s"], "run_s": run["run_s"]}
    else:
        raise ConfigError(f"reader craftax_side_by_side: option 'side' = {side!r}: must be 'peer' or 'ours'")
    missing = sorted(set(seeds) - set(evals))
    if missing:
        raise ValueError(f"{path}: no {side} evaluation of seeds {missing}")
    return _record(seeds, [evals[s][metric] for s in seeds],
                   f"{metric} over {record['eval_episodes']} fresh episodes, sampled actions "
                   "(experiments/peer_craftax_baselines.py's evaluation, both sides)",
                   late_training_return=late, **more)


# ------------------------------------------------------------------------------ a results file's numbers
def results_json(path: Path, seeds: list[int], options: dict) -> dict:
    """Per-seed final returns kept in a JSON results file of this repository, where the runs
    themselves were not stored (an earlier script's record): ``options['returns']`` and
    ``options['seeds']`` are the dotted keys of the ``[S]`` lists; ``env_steps_per_s`` and
    ``compile_s`` optional dotted keys of numbers; ``what`` how the file's script measured the
    returns."""
    record = json.loads(path.read_text())

    def at(key: str):
        value = record
        for part in key.split("."):
            value = value[part]
        return value

    for key in ("returns", "seeds", "what"):
        if key not in options:
            raise ConfigError(f"reader results_json: option {key!r} is missing (the dotted key of the per-seed "
                              "returns, of their seeds, and what the returns are)")
    stored_seeds, returns = [int(s) for s in at(options["seeds"])], at(options["returns"])
    missing = sorted(set(seeds) - set(stored_seeds))
    if len(returns) != len(stored_seeds):
        raise ValueError(f"{path}: {options['returns']} has {len(returns)} values for the {len(stored_seeds)} "
                         f"seeds of {options['seeds']}")
    if missing:
        raise ValueError(f"{path}: no returns of seeds {missing} (it holds {stored_seeds})")
    by_seed = dict(zip(stored_seeds, returns))
    more = {name: float(at(options[name])) for name in ("env_steps_per_s", "compile_s") if name in options}
    return _record(seeds, [by_seed[s] for s in seeds], f"{options['what']} ({path.name}: {options['returns']})",
                   **more)


READERS: dict[str, Callable[[Path, list[int], dict], dict]] = {
    "run_dir": run_dir, "jumanji_a2c_log": jumanji_a2c_log, "brax_ppo_json": brax_ppo_json,
    "craftax_side_by_side": craftax_side_by_side, "results_json": results_json,
}


def read(reader: str, path: str, seeds: list[int], options: dict) -> dict:
    """The record of ``seeds`` from ``path`` by ``reader`` (a name in :data:`READERS`)."""
    if reader not in READERS:
        raise ConfigError(f"reader {reader!r} is unknown; allowed: {sorted(READERS)}")
    record = READERS[reader](resolve(path), list(seeds), dict(options))
    if record["seeds"] != list(seeds):
        raise ValueError(f"{path}: holds seeds {record['seeds']}, the entry names {list(seeds)}")
    return record


def json_value(path: str, key: str) -> float:
    """A number in a JSON file by its dotted ``key`` (a reference measured elsewhere, e.g. the random
    policy's mean return in experiments/results/random_return_*.json)."""
    value = json.loads(resolve(path).read_text())
    for part in key.split("."):
        value = value[part]
    return float(value)
