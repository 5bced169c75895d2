"""Which XLA CPU flags speed up PPO training at the CartPole 4 x 128 shape? Each flag set runs
``bench_throughput.py`` in a fresh process (flags are read once, at backend start), in rounds so that
machine load hits every set alike; the table has the median over rounds of (c) training env steps/s
and of c/b (training / acting-only, measured in the same process).

    python experiments/bench_xla_flags.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FLAG_SETS = {
    "default": "",
    "concurrency_scheduler": "--xla_cpu_enable_concurrency_optimized_scheduler=true",
    "vector_width_512": "--xla_cpu_prefer_vector_width=512",
    "no_multi_thread_eigen": "--xla_cpu_multi_thread_eigen=false",
    "fast_math": "--xla_cpu_enable_fast_math=true",
    "opt_level_1": "--xla_backend_optimization_level=1",
}


def measure(flags: str, env_steps: int, data: int) -> dict:
    out = ROOT / "experiments" / "results" / "tmp_flags.json"
    env = {**os.environ, "XLA_FLAGS": flags}
    cmd = [sys.executable, str(ROOT / "experiments" / "bench_throughput.py"), "--num-envs", "4",
           "--env-steps", str(env_steps), "--repeats", "3", "--out", str(out)]
    if data > 1:
        cmd += ["--data", str(data)]
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
    result = json.loads(out.read_text())["results"][0]
    out.unlink()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--env-steps", type=int, default=300_000)
    parser.add_argument("--sets", nargs="*", default=list(FLAG_SETS), choices=list(FLAG_SETS))
    parser.add_argument("--data", type=int, default=1, help="also measure data-parallel PPO")
    parser.add_argument("--out", default="experiments/results/bench_xla_flags.json")
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {name: [] for name in args.sets}
    for round_ in range(args.rounds):
        for name in args.sets:
            res = measure(FLAG_SETS[name], args.env_steps, args.data)
            runs[name].append(res)
            print(f"round {round_} {name}: acting {res['acting_steps_per_s']:,.0f}/s ppo "
                  f"{res['ppo_steps_per_s']:,.0f}/s c/b {res['ppo_over_acting']:.3f}"
                  + (f" data={args.data} c/b {res[f'ppo_data{args.data}_over_acting']:.3f}"
                     if f"ppo_data{args.data}_over_acting" in res else ""), flush=True)
    table = {}
    for name, results in runs.items():
        row = {"flags": FLAG_SETS[name]}
        for key in ("acting_steps_per_s", "ppo_steps_per_s", "ppo_over_acting",
                    f"ppo_data{args.data}_steps_per_s", f"ppo_data{args.data}_over_acting"):
            values = [r[key] for r in results if key in r]
            if values:
                row[key] = statistics.median(values)
        table[name] = row
    print(f"\n| flags | acting/s | PPO/s | c/b |" + (f" PPO data={args.data}/s | c/b |" if args.data > 1 else ""))
    print("|---|---|---|---|" + ("---|---|" if args.data > 1 else ""))
    for name, row in table.items():
        line = (f"| {name} | {row['acting_steps_per_s']:,.0f} | {row['ppo_steps_per_s']:,.0f} | "
                f"{row['ppo_over_acting']:.3f} |")
        if args.data > 1 and f"ppo_data{args.data}_steps_per_s" in row:
            line += (f" {row[f'ppo_data{args.data}_steps_per_s']:,.0f} | "
                     f"{row[f'ppo_data{args.data}_over_acting']:.3f} |")
        print(line)
    Path(args.out).write_text(json.dumps({"rounds": args.rounds, "table": table}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
