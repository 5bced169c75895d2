"""Throughput vs number of (simulated) devices: lane sharding and data-parallel PPO on CartPole.

    python experiments/bench_devices.py [--devices 1 2 4] [--timesteps 32768]

Each device count runs in its own process (``--xla_force_host_platform_device_count`` must be set
before JAX starts). Writes experiments/results/bench_devices.json.

NOTE: on a CPU-only machine the "devices" are simulated and all share the same cores (2 here), so
the curve shows the overhead of sharding/collectives, not a speed-up. On a multi-GPU machine run the
same script without the flag (``--real``) to measure real scaling.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "results" / "bench_devices.json"


def worker(mode: str, devices: int, timesteps: int) -> dict:
    import jax

    from purejaxrl_opt.host import parallel, runner
    from purejaxrl_opt.config.schema import EnvConfig, RunConfig
    from purejaxrl_opt.core.algos.ppo import PPOConfig

    if mode == "lanes":  # 8 independent agents, split over the devices
        run = RunConfig(algo=PPOConfig(num_envs=8, num_steps=128), env=EnvConfig(id="CartPole-v1"),
                        num_seeds=8, total_timesteps=timesteps, eval_episodes=2)
        settings = parallel.ParallelConfig("auto" if devices > 1 else "off", 1)
    else:  # one agent, 32 envs split over the devices
        run = RunConfig(algo=PPOConfig(num_envs=32, num_steps=128), env=EnvConfig(id="CartPole-v1"),
                        num_seeds=1, total_timesteps=timesteps * 4, eval_episodes=2)
        settings = parallel.ParallelConfig("off", devices)
    run.validate()
    result = runner.execute(run, tempfile.mkdtemp(prefix="bench_devices_"), parallel=settings)
    s = result.summary
    return {"mode": mode, "devices": devices, "device": s["device"], "layout": s["parallel"],
            "num_seeds": run.num_seeds, "num_envs": run.algo.num_envs,
            "env_steps_total": int(sum(s["env_steps_per_seed"])), "compile_seconds": s["compile_seconds"],
            "run_seconds": s["run_seconds"], "env_steps_per_second": round(s["env_steps_per_second"], 1),
            "jax": jax.__version__}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--timesteps", type=int, default=32768)
    parser.add_argument("--real", action="store_true", help="use the real devices (e.g. GPUs)")
    parser.add_argument("--worker", nargs=2, metavar=("MODE", "DEVICES"))
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(worker(args.worker[0], int(args.worker[1]), args.timesteps)))
        return
    rows = []
    for mode in ("lanes", "data"):
        for n in args.devices:
            env = dict(os.environ, PYTHONPATH=str(ROOT))
            if not args.real:
                env["JAX_PLATFORMS"] = "cpu"
                env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                                    f" --xla_force_host_platform_device_count={n}").strip()
            proc = subprocess.run([sys.executable, __file__, "--worker", mode, str(n), "--timesteps",
                                   str(args.timesteps)], env=env, capture_output=True, text=True)
            line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
            if proc.returncode or not line:
                raise SystemExit(f"{mode} x{n} failed:\n{proc.stderr[-3000:]}")
            rows.append(json.loads(line[0][7:]))
            print(rows[-1])
    note = ("CPU-simulated devices (--xla_force_host_platform_device_count) all share the same "
            f"{os.cpu_count()} cores, so this curve shows sharding/collective overhead, not speed-up"
            if not args.real else "real devices")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"note": note, "host": platform.node(), "cpu_count": os.cpu_count(),
                                    "timesteps_per_agent": args.timesteps, "results": rows}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
