"""The CPU lowering of JAX's threefry hash, rolled (JAX's CPU default, the CLI's) vs unrolled (opt-in:
``PUREJAXRL_OPT_THREEFRY=unrolled``, purejaxrl_opt/host/xla_flags.py ``unroll_threefry``): env steps/s
and compile s of one agent, and whether the two train the same bits.

    python experiments/bench_threefry.py --repeats 3

Each measurement is one process of the training CLI (``python -m purejaxrl_opt.train num_seeds=1``) with
``PUREJAXRL_OPT_THREEFRY=rolled`` or ``unrolled``, the two interleaved (rolled, unrolled, rolled, ...), on
the cases of experiments/throughput_one_agent.py (PureJaxRL's CartPole config at 4, 64 and 512 envs;
its MinAtar config on Breakout-MinAtar), one seed (``--seed``). Env steps/s and compile s: the medians
over a choice's processes (``summary.json``'s ``env_steps_per_second`` and ``compile_seconds``); a timing
counts when the 1-minute load average was below ``--max-load`` as it started (each waits up to
``--wait-s`` for that; else all count). Same bits: every repeat's ``metrics.csv`` (every update's
losses, returns, lengths) and final evaluation return compared byte for byte between the two choices.
Writes ``--out``/results.json and results.md (commit and command: experiments/provenance.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import provenance
from throughput_one_agent import CASES, case_setup, run_ours, wait_for_quiet

ROOT = Path(__file__).resolve().parents[1]
CHOICES = ("rolled", "unrolled")


def measure(case: str, args) -> dict:
    overrides, _ = case_setup(case, args.minatar_steps)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for choice in CHOICES:
                load, quiet = wait_for_quiet(args.max_load, args.wait_s)
                work = Path(tmp) / f"{choice}_{repeat}"
                row = run_ours([*overrides, "logger=none", "progress.mode=off"], work, args.seed,
                               env={"PUREJAXRL_OPT_THREEFRY": choice})
                row["metrics"] = (work / "ours" / "metrics.csv").read_bytes()
                row["command"] = f"PUREJAXRL_OPT_THREEFRY={choice} {row['command']}"
                row.update(choice=choice, repeat=repeat, load_before=load, quiet=quiet)
                rows.append(row)
                print(f"{case} {choice} #{repeat}: {row['env_steps_per_s']:,.0f} env steps/s, compile "
                      f"{row['compile_s']:.2f} s (load {load[0]:.2f})", flush=True)
    same = all(a["metrics"] == b["metrics"] and a["eval_return"] == b["eval_return"]
               for a, b in zip(rows[0::2], rows[1::2]))
    out = {"same_bits": same, "command": {c: next(r["command"] for r in rows if r["choice"] == c) for c in CHOICES}}
    for choice in CHOICES:
        mine = [r for r in rows if r["choice"] == choice]
        use = [r for r in mine if r["quiet"]] or mine
        out[choice] = {"env_steps_per_s": statistics.median(r["env_steps_per_s"] for r in use),
                       "compile_s": statistics.median(r["compile_s"] for r in use),
                       "quiet_repeats": sum(r["quiet"] for r in mine), "repeats": len(mine),
                       "all_env_steps_per_s": [r["env_steps_per_s"] for r in mine],
                       "all_compile_s": [r["compile_s"] for r in mine]}
    out["speed_ratio"] = out["unrolled"]["env_steps_per_s"] / out["rolled"]["env_steps_per_s"]
    out["compile_ratio"] = out["unrolled"]["compile_s"] / out["rolled"]["compile_s"]
    return out


def markdown(record: dict) -> str:
    lines = ["# The threefry hash on the CPU: rolled (JAX's default, the CLI's) vs unrolled (opt-in)", "",
             f"{record['machine_text']}; seed {record['seed']}, {record['repeats']} process(es) per choice and "
             "case, interleaved; medians over a choice's processes (those started below the load bound, "
             f"{record['max_load']}, where any). Same bits: every update's metrics and the final evaluation "
             "byte for byte equal between the choices, in every repeat.", "",
             "| case | rolled env steps/s | unrolled env steps/s | ratio | rolled compile s | unrolled compile s "
             "| compile ratio | same bits | quiet (rolled/unrolled) |",
             "|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for case, s in record["summary"].items():
        r, u = s["rolled"], s["unrolled"]
        lines.append(f"| {case} | {r['env_steps_per_s']:,.0f} | {u['env_steps_per_s']:,.0f} | {s['speed_ratio']:.2f}x "
                     f"| {r['compile_s']:.2f} | {u['compile_s']:.2f} | {s['compile_ratio']:.2f}x "
                     f"| {'yes' if s['same_bits'] else 'NO'} | {r['quiet_repeats']}/{r['repeats']}, "
                     f"{u['quiet_repeats']}/{u['repeats']} |")
    return "\n".join(lines) + "\n"  # write_markdown adds the commit and command


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--minatar-steps", type=int, default=1_048_576)
    parser.add_argument("--max-load", type=float, default=1.5)
    parser.add_argument("--wait-s", type=float, default=60.0)
    parser.add_argument("--out", default=str(ROOT / "experiments/results/bench_threefry"))
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    summary = {case: measure(case, args) for case in args.cases}
    from purejaxrl_opt.host.suites import describe_machine

    machine = provenance.machine()
    record = {"machine": machine, "machine_text": describe_machine(machine), "seed": args.seed,
              "repeats": args.repeats, "max_load": args.max_load, "minatar_steps": args.minatar_steps,
              "summary": summary}
    provenance.write_json(Path(args.out) / "results.json", record)
    provenance.write_markdown(Path(args.out) / "results.md", markdown(record))
    print(markdown(record))
    return 0 if all(s["same_bits"] for s in summary.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
