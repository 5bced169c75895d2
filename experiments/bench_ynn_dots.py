"""How XLA:CPU hands matrix products to YNNPACK: each product on its own from XLA's product thunks
(``individual_dot``, jaxlib 0.9.2's default) vs as YNNPACK fusions (``dot``, the training CLI's default
on the CPU, per compile: purejaxrl_opt/host/xla_flags.py ``cpu_compile_options``), reductions as
fusions in both: env steps/s and compile s of one agent, and whether the two train the same bits.

    python experiments/bench_ynn_dots.py --repeats 3

Each measurement is one process of the training CLI, with
``XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=individual_dot,reduce`` (a user's choice, which the
CLI keeps: the same bits as jaxlib's default in the runs checked) or
with an empty ``XLA_FLAGS`` (the CLI's defaults: its programs compiled with YNNPACK's products where XLA
can), interleaved (experiments/cli_choices.py: timings, load gating and the byte-for-byte comparison of
every update's metrics), one seed (``--seed``), on:

* the cases of experiments/throughput_one_agent.py: PureJaxRL's CartPole config at 4, 64 and 512 envs
  and its MinAtar config (64x64 MLP) on Breakout-MinAtar;
* short runs of the other programs the CLI compiles, each at its defaults or tuned file
  (:data:`MORE`): TRPO (Pendulum), GRPO (CartPole; a token task), recurrent PPO (CartPole without
  velocities, GRU), PPO's conv torso (Breakout-MinAtar's tuned file), a Playground task (MJX physics)
  and a Navix grid.

Writes ``--out``/results.json and results.md (commit and command: experiments/provenance.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from cli_choices import compare, parse_args, write
from throughput_one_agent import CASES, case_setup

ROOT = Path(__file__).resolve().parents[1]
FLAG = "--xla_cpu_experimental_ynn_fusion_type="
CHOICES = {"individual_dot,reduce": {"XLA_FLAGS": FLAG + "individual_dot,reduce"}, "dot,reduce": {"XLA_FLAGS": ""}}
TITLE = ("YNNPACK's products on XLA:CPU: from XLA's product thunks (individual_dot, jaxlib's default) vs as "
         "YNNPACK fusions (dot: the CLI's default, per compile)")
MORE = {
    "trpo_pendulum": ["algo=trpo", "env=Pendulum-v1", "total_timesteps=102400"],
    "grpo_cartpole": ["algo=grpo", "env=CartPole-v1", "total_timesteps=200000"],
    "ppo_gru_cartpole_novel": ["algo=ppo", "env=CartPole-v1-novel", "total_timesteps=200000"],
    "ppo_conv_minatar": ["algo=ppo", "env=Breakout-MinAtar", "total_timesteps=131072"],
    "ppo_playground_cartpole_balance": ["algo=ppo", "env=playground/CartpoleBalance", "algo.num_envs=32",
                                        "total_timesteps=40960"],
    "grpo_addition": ["algo=grpo", "env=Addition-v0", "total_timesteps=100000"],
    "ppo_navix_empty": ["algo=ppo", "env=navix/Navix-Empty-8x8-v0", "total_timesteps=100000"],
}


def main(argv=None) -> int:
    args = parse_args(argv, __doc__, [*CASES, *MORE], str(ROOT / "experiments/results/bench_ynn_dots"))
    summary = {case: compare(case, MORE[case] if case in MORE else case_setup(case, args.minatar_steps)[0], CHOICES, args) for case in args.cases}
    return write(args, summary, TITLE, tuple(CHOICES))


if __name__ == "__main__":
    sys.exit(main())
