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

import sys
from pathlib import Path

from cli_choices import compare, parse_args, write
from throughput_one_agent import CASES, case_setup

ROOT = Path(__file__).resolve().parents[1]
CHOICES = {"rolled": {"PUREJAXRL_OPT_THREEFRY": "rolled"}, "unrolled": {"PUREJAXRL_OPT_THREEFRY": "unrolled"}}
TITLE = "The threefry hash on the CPU: rolled (JAX's default, the CLI's) vs unrolled (opt-in)"


def main(argv=None) -> int:
    args = parse_args(argv, __doc__, CASES, str(ROOT / "experiments/results/bench_threefry"))
    summary = {case: compare(case, case_setup(case, args.minatar_steps)[0], CHOICES, args) for case in args.cases}
    return write(args, summary, TITLE, tuple(CHOICES))


if __name__ == "__main__":
    sys.exit(main())
