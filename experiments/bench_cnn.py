"""Conv torso vs MLP torso: PPO on a MinAtar env at the same batch, 1 and 2 vmapped seeds, in one process.

Each variant is compiled and trained through the runner's own pieces, as the CLI runs it
(``runner.Compiled``: the lane-vmapped ``init``/``run_updates``/``evaluate``, compiled ahead of time;
``runner.train_lanes``: one chunk, no callbacks, the ``run_seconds`` of ``summary.json``), with the
CLI's default XLA flags. Variants:

  conv      the default conv torso (network.cnn_channels=[16]; PatchConv: im2col patches @ kernel)
  mlp       network.cnn_channels=[]: the MLP on the flattened image, same hidden sizes
  conv_nn   the same conv torso built from flax.linen.Conv (what the torso was before; --no-before
            skips it): its kernel gradient lowers to a convolution XLA:CPU runs as a plain loop nest,
            a grouped one under vmap over lanes

Training runs are timed in ``--repeats`` interleaved rounds (median; a shared machine's slow spells
hit every variant alike), and each variant's env steps/s is reported with its ratio to ``mlp`` at the
same lane count. Writes experiments/results/bench_cnn.json and .md.

    python experiments/bench_cnn.py                       # Breakout-MinAtar, 4 envs x 128 steps
    python experiments/bench_cnn.py --num-envs 64 --num-minibatches 8 --no-before
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path


from purejaxrl_opt.host.xla_flags import set_default_xla_flags  # noqa: E402  (before JAX starts its backend)

set_default_xla_flags()

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from purejaxrl_opt.core import algos
from purejaxrl_opt.core.models import networks  # noqa: E402
from purejaxrl_opt.config.schema import algo_config, EnvConfig, NetworkConfig, RunConfig  # noqa: E402
from purejaxrl_opt.host.runner import Compiled, train_lanes  # noqa: E402
from purejaxrl_opt.host.sweep import lane_inputs  # noqa: E402

VARIANTS = {"conv": (16,), "mlp": (), "conv_nn": (16,)}


def _flax_conv(features, kernel_size, kernel_init, name):
    """What Torso built before PatchConv (same parameters and function; see tests/test_conv.py)."""
    return nn.Conv(features, kernel_size, padding="VALID", kernel_init=kernel_init, name=name)


def build(variant: str, args, lanes: int, env_steps: int):
    """Compile one variant; returns (compiled, keys, hparams, num_updates, compile seconds)."""
    run = RunConfig(algo=algo_config("ppo")(num_envs=args.num_envs, num_steps=args.num_steps,
                                             num_minibatches=args.num_minibatches),
                    env=EnvConfig(id=args.env),
                    network=NetworkConfig(hidden_sizes=tuple(args.hidden_sizes),
                                          cnn_channels=VARIANTS[variant]),
                    num_seeds=lanes, total_timesteps=env_steps)
    run.validate()
    env = algos.make_env(run)
    algo = algos.make_algorithm(run, env)
    keys, hparams = lane_inputs(run)
    patch_conv = networks.PatchConv
    if variant == "conv_nn":
        networks.PatchConv = _flax_conv  # traced while compiling only
    try:
        compiled = Compiled(algo, keys, hparams)
    finally:
        networks.PatchConv = patch_conv
    return compiled, keys, hparams, algo.num_updates, compiled.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--env", default="Breakout-MinAtar")
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--num-minibatches", type=int, default=4)
    parser.add_argument("--hidden-sizes", type=int, nargs="+", default=[64, 64])
    parser.add_argument("--lanes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--env-steps", type=int, default=10_240, help="env steps per lane per measurement")
    parser.add_argument("--before-env-steps", type=int, default=2_560,
                        help="env steps per lane per measurement of conv_nn (slow: fewer steps)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-before", action="store_true", help="skip the flax.linen.Conv torso")
    parser.add_argument("--out", default="experiments/results/bench_cnn.json")
    args = parser.parse_args()

    variants = [v for v in VARIANTS if not (args.no_before and v == "conv_nn")]
    rows, fns = [], {}
    for lanes in args.lanes:
        for variant in variants:
            env_steps = args.before_env_steps if variant == "conv_nn" else args.env_steps
            compiled, keys, hparams, num_updates, seconds = build(variant, args, lanes, env_steps)
            rows.append({"variant": variant, "lanes": lanes, "compile_seconds": round(seconds, 2),
                         "env_steps_per_lane_per_measure": env_steps})
            print(f"compiled {variant} lanes={lanes}: {seconds:.1f} s", flush=True)

            def _train(compiled=compiled, keys=keys, hparams=hparams, num_updates=num_updates):
                loop, run_seconds = train_lanes(compiled, keys, hparams, num_updates, 1)
                return float(jax.device_get(loop.env_steps).sum()) / run_seconds

            fns[(variant, lanes)] = _train
    for fn in fns.values():  # warm-up
        fn()
    samples = {key: [] for key in fns}
    for _ in range(args.repeats):
        for key, fn in fns.items():
            samples[key].append(fn())
    for row in rows:
        rates = samples[(row["variant"], row["lanes"])]
        row["env_steps_per_second"] = round(statistics.median(rates), 1)
        row["env_steps_per_second_rounds"] = [round(r, 1) for r in rates]
    by_key = {(r["variant"], r["lanes"]): r for r in rows}
    for row in rows:
        mlp = by_key.get(("mlp", row["lanes"]))
        row["over_mlp"] = round(row["env_steps_per_second"] / mlp["env_steps_per_second"], 3)

    header = (f"PPO on {args.env}, {args.num_envs} envs x {args.num_steps} steps, "
              f"{args.num_minibatches} minibatches, hidden {args.hidden_sizes}, {args.env_steps} env steps "
              f"per lane per measurement ({args.before_env_steps} for conv_nn), median of {args.repeats} "
              f"interleaved rounds, one process")
    lines = [header, "", "| torso | lanes | compile s | env steps/s | / mlp | rounds (min-max) |",
             "|---|---|---|---|---|---|"]
    for row in sorted(rows, key=lambda r: (r["lanes"], variants.index(r["variant"]))):
        lines.append(f"| {row['variant']} | {row['lanes']} | {row['compile_seconds']:.1f} | "
                     f"{row['env_steps_per_second']:,.0f} | {row['over_mlp']:.3f} | "
                     f"{min(row['env_steps_per_second_rounds']):,.0f}-{max(row['env_steps_per_second_rounds']):,.0f} |")
    table = "\n".join(lines)
    print(table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"config": vars(args), "device": str(jax.devices()[0]), "jax": jax.__version__,
                               "host": platform.node(), "cpu_count": os.cpu_count(),
                               "xla_flags": os.environ.get("XLA_FLAGS", ""), "results": rows},
                              indent=2) + "\n")
    out.with_suffix(".md").write_text(
        table + "\n\nconv: PatchConv (patches @ kernel); conv_nn: the same torso on flax.linen.Conv "
        "(before); mlp: network.cnn_channels=[]. Written by experiments/bench_cnn.py.\n")
    print(f"wrote {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
