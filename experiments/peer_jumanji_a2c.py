"""jumanji.training's own A2C, unmodified, one process per seed: the peer of the suite
``conf/benchmark/side_by_side_jumanji.yaml`` (whose reader, ``jumanji_a2c_log`` in
purejaxrl_opt/host/readers.py, reads the logs this writes).

    python experiments/peer_jumanji_a2c.py --env snake --seeds 3100 3101 --steps 307200 \
        --learner-steps-per-epoch 60 --out experiments/results/side_by_side_jumanji/snake_3100

Runs ``python -m jumanji.training.train agent=a2c env=<name> seed=S`` from the installed jumanji 1.1.2
with its terminal logger. Only its budget and evaluation sizes are overridden through its own Hydra
config (``env.training.num_learner_steps_per_epoch``, ``env.training.num_epochs``,
``env.evaluation.*_total_batch_size``); network, optimiser, n_steps, batch size and loss weights are
the package's config for that env. It needs dm-haiku and neptune (imported by its loggers), which this
project does not depend on: pass the interpreter of an environment that has them with
``--peer-python`` (e.g. a venv whose site-packages has a .pth to this project's venv plus ``pip
install dm-haiku neptune``).

jumanji.training evaluates at the *start* of each epoch, so it is run for one epoch more than the
budget: its evaluation at ``env_steps = budget`` is the policy after exactly ``budget`` env steps.
Writes ``<out>/a2c_<env>_s<seed>.log`` (read by the suite) and ``<out>/a2c_<env>_s<seed>/timing.json``
(wall time, load average before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

import provenance

# what jumanji.training's config sets per env (jumanji/training/configs/env/<name>.yaml, 1.1.2):
# (n_steps, total_batch_size)
PEER_BATCH = {"snake": (20, 128), "game_2048": (50, 32), "maze": (10, 128)}


def run(args, seed: int, out: Path) -> None:
    n_steps, batch = PEER_BATCH[args.env]
    per_epoch = n_steps * batch * args.learner_steps_per_epoch
    if args.steps % per_epoch:
        raise SystemExit(f"--steps {args.steps} is not a multiple of the peer's epoch ({per_epoch} env steps "
                         f"= n_steps {n_steps} x batch {batch} x {args.learner_steps_per_epoch} learner steps)")
    run_dir = out / f"a2c_{args.env}_s{seed}"
    command = [args.peer_python, "-m", "jumanji.training.train", "agent=a2c", f"env={args.env}", f"seed={seed}",
               "logger.type=terminal", f"env.training.num_epochs={args.steps // per_epoch + 1}",
               f"env.training.num_learner_steps_per_epoch={args.learner_steps_per_epoch}",
               f"env.evaluation.eval_total_batch_size={args.eval_episodes}",
               f"env.evaluation.greedy_eval_total_batch_size={args.eval_episodes}",
               f"hydra.run.dir={run_dir}"]
    timing = {"load_before": provenance.load_average()}
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, JAX_PLATFORMS="cpu"),
                          cwd=str(out))
    timing.update(wall_s=round(time.perf_counter() - start, 1), load_after=provenance.load_average(),
                  command=" ".join(["python"] + command[1:]), **provenance.stamp())
    if proc.returncode != 0:
        raise SystemExit(f"jumanji.training failed (rc {proc.returncode}):\n{(proc.stdout + proc.stderr)[-4000:]}")
    # the log last: its presence is what the suite's reader takes for a finished run
    (run_dir / "timing.json").write_text(json.dumps(timing) + "\n")
    (out / f"a2c_{args.env}_s{seed}.log").write_text(proc.stdout + proc.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", choices=sorted(PEER_BATCH), default="snake")
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--steps", type=int, required=True, help="env steps per seed")
    parser.add_argument("--eval-episodes", type=int, default=32)
    parser.add_argument("--learner-steps-per-epoch", type=int, default=20)
    parser.add_argument("--peer-python", default="/work/peers/jumanji_a2c_venv/bin/python")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        run(args, seed, out)


if __name__ == "__main__":
    main()
