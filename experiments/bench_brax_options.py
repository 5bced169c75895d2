"""What Brax PPO's unrolls cost: env steps/s of PPO on playground/CartpoleBalance with its tuned file
(conf/tuned/ppo_playground/CartpoleBalance.yaml: 32 envs x 480 steps, 16 epochs x 32 minibatches) as it is,
with ``algo.unroll_length=30`` and with ``algo.recompute_advantages=true`` too.

    python experiments/bench_brax_options.py [--steps 30720] [--repeats 3]

One process, the CLI's XLA flags; each variant is compiled once, then trained ``--repeats`` times in the
order A B C A B C ... (the shared machine's load drifts), timing training only as the CLI's env steps/s
does (host/runner.train_lanes). Writes experiments/results/bench_brax_options.json (commit and command:
experiments/provenance.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from purejaxrl_opt.host.xla_flags import set_default_xla_flags

set_default_xla_flags()  # before JAX starts, as the CLI

import numpy as np  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

import provenance  # noqa: E402
from purejaxrl_opt.config.schema import from_dictconfig  # noqa: E402
from purejaxrl_opt.core import algos  # noqa: E402
from purejaxrl_opt.host import runner, sweep  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {"as_tuned": [], "unroll_length=30": ["algo.unroll_length=30"],
            "unroll_length=30,recompute_advantages": ["algo.unroll_length=30", "algo.recompute_advantages=true"]}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30_720)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    record = {**provenance.stamp(), "machine": provenance.machine(), "env": "playground/CartpoleBalance",
              "env_steps": args.steps, "load_avg_before": provenance.load_average(), "variants": {}}
    compiled = {}
    for name, overrides in VARIANTS.items():
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
            cfg = compose(config_name="config", overrides=["algo=ppo", "env=playground/CartpoleBalance",
                                                           f"total_timesteps={args.steps}", "num_seeds=1",
                                                           *overrides])
        run = from_dictconfig(cfg)
        algo = algos.make_algorithm(run)
        keys, hparams = sweep.lane_inputs(run)
        compiled[name] = (runner.Compiled(algo, keys, hparams), keys, hparams, algo.num_updates)
        record["variants"][name] = {"overrides": overrides, "compile_seconds": round(compiled[name][0].seconds, 1),
                                    "run_seconds": []}
        print(f"{name}: compiled in {compiled[name][0].seconds:.1f} s", flush=True)
    for _ in range(args.repeats):
        for name, (program, keys, hparams, num_updates) in compiled.items():
            _, seconds = runner.train_lanes(program, keys, hparams, num_updates, 1)
            record["variants"][name]["run_seconds"].append(round(seconds, 3))
    for name, result in record["variants"].items():
        result["env_steps_per_second_median"] = round(args.steps / float(np.median(result["run_seconds"])))
        print(f"{name}: {result['run_seconds']} s -> {result['env_steps_per_second_median']:,} env steps/s")
    record["load_avg_after"] = provenance.load_average()
    provenance.write_json(ROOT / "experiments" / "results" / "bench_brax_options.json", record)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
