"""One agent's PPO update split in two phases, ours and PureJaxRL's ``ppo.py`` side by side: the rollout
(acting, env steps, values, GAE) and the minibatch epochs, so a one-agent speed ratio can be read phase
by phase.

    python experiments/one_agent_phases.py --checkout experiments/peers/purejaxrl --rounds 3

For each case of experiments/throughput_one_agent.py (the same configs on both sides) and each side,
two programs are timed: ``--updates`` whole updates in one compiled scan, and the same with the
minibatch epochs removed (``update_epochs`` 0 on both sides: XLA then also drops what only the epochs
read). The epochs' time is the difference. Every (case, side, program) is its own process, the sides
interleaved, ``--rounds`` times; a process reports the fastest of ``--calls`` calls after a warm-up
call, and the table gives the median over rounds.

* ours: the training CLI's composed config (its overrides), XLA:CPU flags and compile options
  (``host/chunks.py`` ``compile_lowered``), one lane on one device, ``algo.update`` scanned ``--updates``
  times from one init (the CLI's compiled chunk runs the same update in a loop);
* theirs: PureJaxRL's ``make_train`` with ``TOTAL_TIMESTEPS = updates x steps x envs``, compiled and
  called whole (plain JAX, no flags); its call also runs its init (env reset, network init), a small
  part of ``--updates`` updates.

Writes ``--out``/phases.json and phases.md (commit and command: experiments/provenance.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import provenance
from throughput_one_agent import CASES, case_setup

ROOT = Path(__file__).resolve().parents[1]


def child(side: str, case: str, epochs: bool, updates: int, calls: int, checkout: str, minatar_steps: int) -> dict:
    """Time one program in this process: ``{"ms_per_update": ...}`` (the fastest call / updates)."""
    ours, peer_args = case_setup(case, minatar_steps)
    if side == "ours":
        import purejaxrl_opt.train  # noqa: F401  (the CLI's XLA flags, before JAX starts)
        import jax
        import jax.numpy as jnp

        from bench_logging import compose
        from purejaxrl_opt.core import algos
        from purejaxrl_opt.host.chunks import compile_lowered
        from purejaxrl_opt.host.settings import parse_settings

        run = parse_settings(compose(["algo=ppo", "logger=none", "num_seeds=1", *ours])).run
        if not epochs:
            run = dataclasses.replace(run, algo=dataclasses.replace(run.algo, update_epochs=0))
        algo = algos.make_algorithm(run, algos.make_env(run))
        hparams = algo.default_hparams()
        state = jax.block_until_ready(jax.jit(algo.init)(jax.random.PRNGKey(0), hparams))
        program = compile_lowered(jax.jit(lambda s: jax.lax.scan(lambda c, i: algo.update(c, hparams, i), s,
                                                                 jnp.arange(updates, dtype=jnp.int32))).lower(state))
        call = lambda: program(state)  # noqa: E731
        steps_per_update = run.algo.num_envs * run.algo.num_steps
    else:
        import jax

        from peer_purejaxrl import make_peer_train, peer_config, ppo_file

        name = peer_args[peer_args.index("--config") + 1]
        config = peer_config(name)
        num_envs = int(peer_args[peer_args.index("--num-envs") + 1]) if "--num-envs" in peer_args else config["NUM_ENVS"]
        steps_per_update = num_envs * config["NUM_STEPS"]
        config = peer_config(name, num_envs, updates * steps_per_update)
        if not epochs:
            config["UPDATE_EPOCHS"] = 0
        program = jax.jit(make_peer_train(ppo_file(checkout), config))
        key = jax.random.PRNGKey(0)
        call = lambda: program(key)  # noqa: E731
    jax.block_until_ready(call())
    best = float("inf")
    for _ in range(calls):
        start = time.perf_counter()
        jax.block_until_ready(call())
        best = min(best, time.perf_counter() - start)
    return {"ms_per_update": best / updates * 1e3, "env_steps_per_update": steps_per_update}


def measure(side: str, case: str, epochs: bool, args) -> dict:
    cmd = [sys.executable, __file__, "--child", side, case, "1" if epochs else "0", "--updates", str(args.updates),
           "--calls", str(args.calls), "--checkout", args.checkout, "--minatar-steps", str(args.minatar_steps)]
    env = dict(os.environ)
    if side == "purejaxrl":
        env.pop("XLA_FLAGS", None)
    proc = subprocess.run(cmd, cwd=ROOT / "experiments", capture_output=True, text=True, timeout=1800, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{side} {case} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkout", default=str(ROOT / "experiments/peers/purejaxrl"))
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--updates", type=int, default=16, help="updates per timed call")
    parser.add_argument("--calls", type=int, default=5, help="timed calls per process (the fastest counts)")
    parser.add_argument("--rounds", type=int, default=3, help="processes per (case, side, program)")
    parser.add_argument("--minatar-steps", type=int, default=1_048_576, help="unused but for the peer's config")
    parser.add_argument("--out", default=str(ROOT / "experiments/results/throughput_one_agent"))
    parser.add_argument("--child", nargs=3, metavar=("SIDE", "CASE", "EPOCHS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        side, case, epochs = args.child
        print(json.dumps(child(side, case, epochs == "1", args.updates, args.calls, args.checkout,
                               args.minatar_steps)))
        return 0
    load_before = provenance.load_average()
    raw = []
    for round_ in range(args.rounds):
        for case in args.cases:
            for epochs in (True, False):
                for side in ("ours", "purejaxrl"):
                    m = measure(side, case, epochs, args)
                    raw.append({"round": round_, "case": case, "side": side, "epochs": epochs, **m})
                    print(f"round {round_} {case:13s} {side:9s} {'whole update' if epochs else 'no epochs':12s} "
                          f"{m['ms_per_update']:.3f} ms/update", flush=True)
    table = {}
    for case in args.cases:
        row = {}
        for side in ("ours", "purejaxrl"):
            whole = statistics.median(r["ms_per_update"] for r in raw if r["case"] == case and r["side"] == side and r["epochs"])
            rollout = statistics.median(r["ms_per_update"] for r in raw if r["case"] == case and r["side"] == side and not r["epochs"])
            row[side] = {"update_ms": whole, "rollout_ms": rollout, "epochs_ms": whole - rollout}
        row["ratio"] = {k: row["purejaxrl"][k] / row["ours"][k] for k in ("update_ms", "rollout_ms", "epochs_ms")}
        # what a 1.3x update would leave for our epochs with our rollout as it is
        row["epochs_ms_for_1.3x"] = row["purejaxrl"]["update_ms"] / 1.3 - row["ours"]["rollout_ms"]
        table[case] = row
    load_after = provenance.load_average()
    from purejaxrl_opt.host.suites import describe_machine

    machine = provenance.machine()
    out = Path(args.out)
    provenance.write_json(out / "phases.json", {"machine": machine, "updates": args.updates, "calls": args.calls, "rounds": args.rounds,
                                                "load_avg_before": load_before, "load_avg_after": load_after,
                                                "table": table, "raw": raw})
    lines = ["# One agent's update in two phases, ours vs PureJaxRL's ppo.py (CPU)", "",
             f"{describe_machine(machine)}; each program its own process, {args.rounds} rounds, the fastest of "
             f"{args.calls} calls of {args.updates} updates per process, medians over rounds "
             "(see experiments/one_agent_phases.py). Rollout: the update without its minibatch epochs; "
             "epochs: the whole update minus that. Speed: PureJaxRL's time / ours.", "",
             "| case | ours update ms | PureJaxRL update ms | speed | ours rollout ms | PureJaxRL rollout ms | "
             "speed | ours epochs ms | PureJaxRL epochs ms | speed | our epochs ms a 1.3x update would need |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for case, row in table.items():
        o, p, r = row["ours"], row["purejaxrl"], row["ratio"]
        lines.append(f"| {case} | {o['update_ms']:.3f} | {p['update_ms']:.3f} | {r['update_ms']:.2f}x | "
                     f"{o['rollout_ms']:.3f} | {p['rollout_ms']:.3f} | {r['rollout_ms']:.2f}x | {o['epochs_ms']:.3f} | "
                     f"{p['epochs_ms']:.3f} | {r['epochs_ms']:.2f}x | {row['epochs_ms_for_1.3x']:.3f} |")
    lines += ["", f"Load average (1, 5, 15 min) before: {load_before}, after: {load_after}."]
    provenance.write_markdown(out / "phases.md", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
