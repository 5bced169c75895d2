"""The CPU lowering of JAX's threefry hash, rolled (JAX's CPU default, the CLI's) vs unrolled (opt-in:
``PUREJAXRL_OPT_THREEFRY=unrolled``, purejaxrl_opt/host/xla_flags.py ``unroll_threefry``): env steps/s
and compile s of one agent, and whether the two train the same bits.

    python experiments/bench_threefry.py --repeats 3

Each measurement is one process of the training CLI with ``PUREJAXRL_OPT_THREEFRY=rolled`` or
``unrolled``, interleaved (experiments/cli_choices.py: timings, load gating and the byte-for-byte
comparison of every update's metrics), on the cases of experiments/throughput_one_agent.py (PureJaxRL's
CartPole config at 4, 64 and 512 envs; its MinAtar config on Breakout-MinAtar), one seed (``--seed``).
Writes ``--out``/results.json and results.md (commit and command: experiments/provenance.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import provenance
from cli_choices import compare, markdown
from throughput_one_agent import CASES, case_setup

ROOT = Path(__file__).resolve().parents[1]
CHOICES = {"rolled": {"PUREJAXRL_OPT_THREEFRY": "rolled"}, "unrolled": {"PUREJAXRL_OPT_THREEFRY": "unrolled"}}
TITLE = "The threefry hash on the CPU: rolled (JAX's default, the CLI's) vs unrolled (opt-in)"


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
    summary = {case: compare(case, case_setup(case, args.minatar_steps)[0], CHOICES, args) for case in args.cases}
    from purejaxrl_opt.host.suites import describe_machine

    machine = provenance.machine()
    record = {"machine": machine, "machine_text": describe_machine(machine), "seed": args.seed,
              "repeats": args.repeats, "max_load": args.max_load, "minatar_steps": args.minatar_steps,
              "summary": summary}
    provenance.write_json(Path(args.out) / "results.json", record)
    text = markdown(record, TITLE, tuple(CHOICES))
    provenance.write_markdown(Path(args.out) / "results.md", text)
    print(text)
    return 0 if all(s["same_bits"] for s in summary.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
