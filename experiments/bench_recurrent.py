"""Throughput of a recurrent (GRU or LSTM) PPO agent against the MLP one on the same env and batch.

Both train PPO on CartPole-v1 without velocities, by default 16 envs x 128 steps, 4 epochs x 4
minibatches, torso [128], GRU 128 (the floor runs' tuned files use 64 x 32, torso [64], GRU 64: pass
``--num-envs 64 --num-steps 32 --num-minibatches 8 --hidden-sizes 64 --recurrent-size 64``),
``--seeds`` agents vmapped in one jitted function, in one process, alternating; env steps/s is timed
after compilation (best of ``--repeats``). Writes experiments/results/bench_recurrent.json
(bench_recurrent_before.json: the same command before the replay kept only the cell's hidden side
in the scan).

    python experiments/bench_recurrent.py --seeds 4 --updates 4 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import jax


from purejaxrl_opt.core import algos  # noqa: E402
from purejaxrl_opt.core.algos.base import init_loop, run_updates  # noqa: E402
from purejaxrl_opt.config.schema import EnvConfig, NetworkConfig, RunConfig  # noqa: E402
from purejaxrl_opt.core.algos.ppo import PPOConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def make(recurrent: str, args) -> RunConfig:
    algo = PPOConfig(num_envs=args.num_envs, num_steps=args.num_steps, num_minibatches=args.num_minibatches,
                     update_epochs=args.update_epochs)
    run = RunConfig(algo=algo, env=EnvConfig(id="CartPole-v1", obs_mask=(1, 0, 1, 0)),
                    network=NetworkConfig(hidden_sizes=tuple(args.hidden_sizes), recurrent=recurrent,
                                          recurrent_size=args.recurrent_size),
                    total_timesteps=args.updates * algo.batch_env_steps())
    run.validate()
    return run


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--num-minibatches", type=int, default=4)
    parser.add_argument("--update-epochs", type=int, default=4)
    parser.add_argument("--hidden-sizes", type=int, nargs="*", default=[128])
    parser.add_argument("--recurrent-size", type=int, default=128)
    parser.add_argument("--cell", choices=("gru", "lstm"), default="gru")
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results" / "bench_recurrent.json"))
    args = parser.parse_args()

    compiled, results = {}, {}
    keys = jax.random.split(jax.random.PRNGKey(0), args.seeds)
    for name in ("mlp", args.cell):
        run = make("none" if name == "mlp" else name, args)
        algo = algos.make_algorithm(run)
        loops = jax.jit(jax.vmap(lambda k: init_loop(algo, k)))(keys)
        start = time.perf_counter()
        fn = jax.jit(jax.vmap(lambda loop: run_updates(algo, loop, 0, args.updates))).lower(loops).compile()
        compiled[name] = (fn, loops, time.perf_counter() - start)
    best = {name: float("inf") for name in compiled}
    for _ in range(args.repeats):  # alternating, so both see the same machine load
        for name, (fn, loops, _) in compiled.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(loops))
            best[name] = min(best[name], time.perf_counter() - start)
    steps = args.seeds * args.updates * args.num_envs * args.num_steps
    for name, (_, _, compile_s) in compiled.items():
        results[name] = {"env_steps_per_second": steps / best[name], "seconds": best[name],
                         "compile_seconds": compile_s}
    results[f"{args.cell}_over_mlp_throughput"] = (results[args.cell]["env_steps_per_second"]
                                                   / results["mlp"]["env_steps_per_second"])
    results["setup"] = {"env": "CartPole-v1 obs_mask [1,0,1,0]", "num_envs": args.num_envs,
                        "num_steps": args.num_steps, "update_epochs": args.update_epochs,
                        "num_minibatches": args.num_minibatches, "hidden_sizes": args.hidden_sizes,
                        "recurrent_size": args.recurrent_size, "seeds": args.seeds, "updates": args.updates,
                        "env_steps_timed": steps, "device": str(jax.devices()[0]),
                        "jax_version": jax.__version__, "host": platform.node()}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
