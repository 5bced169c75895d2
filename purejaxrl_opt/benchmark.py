"""Benchmark suites: results with confidence intervals, reference numbers and the machine named.

    python -m purejaxrl_opt.benchmark suite=quick                # classic control, PPO/TRPO/GRPO
    python -m purejaxrl_opt.benchmark suite=full                 # + MinAtar, longer budgets
    python -m purejaxrl_opt.benchmark suite=quick dry_run=true   # entries and budgets, no training
    python -m purejaxrl_opt.benchmark suite=full hydra.run.dir=DIR   # again after a crash: finished
                                                                     # entries are read back (reuse)
    python -m purejaxrl_opt.benchmark suite=side_by_side_jumanji     # a side by side from its stored runs

The command line only: what a suite is, how its entries are trained or read back and what it writes
is :mod:`purejaxrl_opt.host.suites`; the settings are ``conf/benchmark.yaml``.
"""

from __future__ import annotations

import sys

from purejaxrl_opt import train  # first: sets the CLI's default XLA flags before JAX initialises

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from purejaxrl_opt.config.schema import ConfigError  # noqa: E402
from purejaxrl_opt.host import suites  # noqa: E402


def _settings(cfg: DictConfig) -> dict:
    allowed = {"suite", "dry_run", "only", "num_seeds", "seed", "train_overrides", "reuse", "use_stored",
               "bootstrap"}
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
        if key in suites.OWN_KEYS:
            # every entry sets these itself, after the overrides: a budget given here would be
            # silently replaced by the entry's
            where = {"num_seeds": "num_seeds=N", "seed": "seed=S"}.get(key)
            instead = (f"use the benchmark's own {where}" if where else
                       f"each entry sets its own '{key}' (in the suite file; a copy of it can be passed "
                       "as suite=<path>)")
            raise ConfigError(f"config key 'train_overrides' sets '{key}', which the suite's entries "
                              f"set themselves: {instead}")
    for flag in ("dry_run", "reuse", "use_stored"):
        if not isinstance(raw.get(flag), bool):
            raise ConfigError(f"config key '{flag}' = {raw.get(flag)!r} is invalid: must be true or false")
    return {"suite": raw.get("suite"), "dry_run": raw["dry_run"], "only": only,
            "num_seeds": raw.get("num_seeds"), "seed": raw.get("seed"), "train_overrides": extra,
            "reuse": raw["reuse"], "use_stored": raw["use_stored"], "reps": boot.get("reps", 5000), "curve_reps": boot.get("curve_reps", 1000),
            "level": level, "boot_seed": boot.get("seed", 0)}


@hydra.main(version_base=None, config_path="../conf", config_name="benchmark")
def main(cfg: DictConfig) -> None:
    import logging

    logging.getLogger("jax").setLevel(logging.WARNING)
    try:
        s = _settings(cfg)
        suite = suites.load_suite(s["suite"], s["num_seeds"], s["seed"], s["only"])
        if s["dry_run"]:
            for entry in suite.entries:
                if entry.peer is None:
                    suites.check_entry(entry, suites.compose_entry(entry, s["train_overrides"]))
            print(suites.dry_run_text(suite, s["use_stored"]))
            return
        command = "python -m purejaxrl_opt.benchmark " + " ".join(HydraConfig.get().overrides.task)
        out = suites.run_suite(suite, HydraConfig.get().runtime.output_dir, s["train_overrides"], s["reuse"],
                               s["reps"], s["curve_reps"], s["level"], s["boot_seed"], command.strip(),
                               train_fn=lambda cfg, out_dir: train.run_from_config(cfg, out_dir),
                               use_stored=s["use_stored"])
    except ConfigError as error:
        print(f"purejaxrl_opt.benchmark: configuration error: {error}", file=sys.stderr)
        sys.exit(2)
    if any(r.get("error") for r in out["entries"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
