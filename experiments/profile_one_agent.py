"""Where one agent's time goes on XLA:CPU: a sampling profile (Linux ``perf``) of PPO's compiled updates,
ours and PureJaxRL's ``ppo.py`` side by side, the samples sorted into what runs them.

    python experiments/profile_one_agent.py --checkout experiments/peers/purejaxrl --num-envs 4

Each side runs in its own process: the training function of ``--updates`` updates (ours: PPO's
``update`` scanned in one jit, the CLI's XLA flags and compile options; theirs: ``make_train`` of ``ppo.py``'s CartPole
config with ``--num-envs``, as experiments/peer_purejaxrl.py builds it) is compiled and run once, then
called in a loop while ``perf record -p PID`` samples it for ``--seconds``. ``--rollout-only`` runs
ours with no minibatch epochs (the rollout, values, GAE and metrics of an update; not a valid training
config, a profile only). ``perf report`` then gives each sampled function's share, sorted into:

* ``compiled kernels``: the code XLA generated for the program (perf's ``[JIT]``);
* ``YNNPACK``: the library XLA:CPU hands products and reductions to (its kernels and their set-up);
* ``thunk runtime``: XLA:CPU's executor stepping through the program's thunks (``xla::cpu::``);
* ``task hand-off``: handing work between the runtime's threads (Eigen's thread pool queues, futex
  wake-ups and context switches in the kernel);
* ``idle workers``: pool threads spinning for work (CPU time on the other core, not on the path);
* ``allocation``: malloc/free; ``memory copies``: memmove/memcpy; ``other``: everything else.

Needs Linux ``perf`` with permission to attach (root, or ``kernel.perf_event_paranoid`` <= 1). Writes
``--out``/profile.json and profile.md (commit and command: experiments/provenance.py).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import provenance

ROOT = Path(__file__).resolve().parents[1]
CATEGORIES = ("compiled kernels", "YNNPACK", "thunk runtime", "task hand-off", "idle workers", "allocation",
              "memory copies", "other")
_IDLE = ("GlobalSteal", "RunQueue<tsl::thread::EigenEnvironment::Task, 1024u>::PopBack", "MaybeGetTask",
         "WorkerLoop", "LocalSteal", "Spin")
_HANDOFF = ("RunQueue", "ScheduleWithHint", "EigenEnvironment::Task", "futex", "schedule", "finish_task_switch",
            "_raw_spin", "try_to_wake_up", "pthread_cond", "pthread_mutex", "syscall", "__lll_lock")


def category(dso: str, symbol: str) -> str:
    """The category of one ``perf report`` row (see the module docstring)."""
    if dso.startswith("[JIT]") or symbol.startswith("0x"):
        return "compiled kernels"
    if "ynn" in symbol.lower() or "slinky" in symbol:
        return "YNNPACK"
    if any(s in symbol for s in _IDLE):
        return "idle workers"
    if "xla::cpu::" in symbol or "ThunkExecutor" in symbol:
        return "thunk runtime"
    if any(s in symbol for s in _HANDOFF):
        return "task hand-off"
    if re.search(r"malloc|free|_int_|unlink_chunk|memalign|tcache", symbol):
        return "allocation"
    if "memmove" in symbol or "memcpy" in symbol or "memset" in symbol:
        return "memory copies"
    return "other"


def child(args) -> int:
    """The profiled process: compile, run once, write ``args.ready``, then loop until killed."""
    if args.side == "ours":
        import purejaxrl_opt.train  # noqa: F401  (the CLI's XLA flags, before JAX starts)
        import dataclasses

        import jax
        import jax.numpy as jnp

        from one_agent_algos import run_for
        from purejaxrl_opt.core import algos
        from purejaxrl_opt.host.sweep import lane_inputs

        run = run_for("ppo", args.updates)
        algo_cfg = dataclasses.replace(run.algo, num_envs=args.num_envs,
                                       update_epochs=0 if args.rollout_only else run.algo.update_epochs)
        run = dataclasses.replace(run, algo=algo_cfg)
        algo = algos.make_algorithm(run)
        keys, hparams = lane_inputs(run)
        hp = jax.tree_util.tree_map(lambda x: x[0], hparams)
        state = jax.jit(algo.init)(keys[0], hp)
        from purejaxrl_opt.host.chunks import compile_lowered  # the CLI's compile options

        fn = compile_lowered(jax.jit(lambda s: jax.lax.scan(lambda c, i: algo.update(c, hp, i), s,
                                                            jnp.arange(args.updates))).lower(state))
        call = lambda: fn(state)  # noqa: E731
    else:
        import jax

        from peer_purejaxrl import make_peer_train, peer_config, ppo_file

        config = peer_config("cartpole", args.num_envs, args.updates * 128 * args.num_envs)
        train = jax.jit(make_peer_train(ppo_file(args.checkout), config))
        key = jax.random.PRNGKey(0)
        call = lambda: train(key)  # noqa: E731
    jax.block_until_ready(call())
    start = time.perf_counter()
    jax.block_until_ready(call())
    Path(args.ready).write_text(str((time.perf_counter() - start) / args.updates))
    while True:
        jax.block_until_ready(call())


@contextlib.contextmanager
def ready_child(side: str, args, ready: Path, env: dict | None = None):
    """Start ``side``'s profiled process (:func:`child`, with ``env`` when given) and wait until its
    programs are compiled and it is looping; yields ``(process, seconds per update)`` and kills it on
    exit. A process that ends early, or is not ready within 600 s, ends this one naming why."""
    cmd = [sys.executable, __file__, "--child", side, "--ready", str(ready), "--num-envs", str(args.num_envs),
           "--updates", str(args.updates)] + (["--checkout", args.checkout] if args.checkout else []) + \
        (["--rollout-only"] if getattr(args, "rollout_only", False) and side == "ours" else [])
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.time() + 600
        while not ready.exists():
            if proc.poll() is not None:
                raise SystemExit(f"the {side} process ended before it was ready:\n{proc.stderr.read()[-3000:]}")
            if time.time() > deadline:
                raise SystemExit(f"the {side} process was not ready within 600 s")
            time.sleep(0.5)
        yield proc, float(ready.read_text())
    finally:
        proc.kill()
        proc.wait()


def profile(side: str, args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        ready, data = Path(tmp) / "ready", Path(tmp) / "perf.data"
        with ready_child(side, args, ready) as (proc, seconds_per_update):
            subprocess.run(["perf", "record", "-F", str(args.frequency), "-p", str(proc.pid), "-o", str(data),
                            "--", "sleep", str(args.seconds)], check=True, capture_output=True)
        report = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", "dso,symbol",
                                 "-g", "none", "--stdio", "--percent-limit", "0"],
                                check=True, capture_output=True, text=True).stdout
    shares = dict.fromkeys(CATEGORIES, 0.0)
    top = []
    for line in report.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+(?: tid \d+)?)\s+\[.\]\s+(.*?)\s*$", line)
        if not m:
            continue
        pct, dso, symbol = float(m.group(1)), m.group(2), m.group(3)
        shares[category(dso, symbol)] += pct
        if len(top) < 25:
            top.append({"percent": pct, "dso": dso, "symbol": symbol[:120], "category": category(dso, symbol)})
    busy = 100.0 - shares["idle workers"]
    return {"ms_per_update": round(1e3 * seconds_per_update, 3),
            "percent_of_samples": {k: round(v, 2) for k, v in shares.items()},
            "percent_of_busy_samples": {k: round(100 * v / busy, 1) for k, v in shares.items() if k != "idle workers"},
            "top_functions": top}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkout", default=None, help="a PureJaxRL checkout (experiments/peer_purejaxrl.py); "
                        "without it only ours is profiled")
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--updates", type=int, default=100, help="updates per call of the training function")
    parser.add_argument("--seconds", type=float, default=8.0, help="how long perf samples each side")
    parser.add_argument("--frequency", type=int, default=2000, help="perf's samples per second")
    parser.add_argument("--rollout-only", action="store_true", help="ours without minibatch epochs")
    parser.add_argument("--out", default=str(ROOT / "experiments/results/throughput_one_agent"))
    parser.add_argument("--child", choices=("ours", "purejaxrl"), help=argparse.SUPPRESS)
    parser.add_argument("--ready", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        args.side = args.child
        return child(args)
    if shutil.which("perf") is None:
        raise SystemExit("profile_one_agent needs Linux perf on PATH (e.g. apt install linux-perf)")
    sides = ["ours"] + (["purejaxrl"] if args.checkout else [])
    load_before = provenance.load_average()
    results = {side: profile(side, args) for side in sides}
    record = {"num_envs": args.num_envs, "updates": args.updates, "seconds": args.seconds,
              "rollout_only": args.rollout_only, "load_avg_before": load_before,
              "load_avg_after": provenance.load_average(), "machine": provenance.machine(), "sides": results}
    name = f"profile_{args.num_envs}envs" + ("_rollout" if args.rollout_only else "")
    provenance.write_json(Path(args.out) / f"{name}.json", record)
    rows = ["| category | " + " | ".join(f"{s} (% of busy samples)" for s in sides) + " |",
            "|---|" + "---:|" * len(sides)]
    for cat in CATEGORIES:
        if cat != "idle workers":
            rows.append(f"| {cat} | " + " | ".join(f"{results[s]['percent_of_busy_samples'][cat]:.1f}"
                                                   for s in sides) + " |")
    rows.append("| ms per update (while profiled) | " + " | ".join(f"{results[s]['ms_per_update']:.2f}"
                                                                  for s in sides) + " |")
    text = (f"# Where one agent's time goes: PPO CartPole, {args.num_envs} envs x 128 steps"
            f"{', rollout only' if args.rollout_only else ''}\n\n"
            "Shares of perf's samples of each process, idle pool threads left out (see "
            "experiments/profile_one_agent.py for the categories).\n\n" + "\n".join(rows) + "\n\n"
            + provenance.markdown_footer())
    provenance.write_markdown(Path(args.out) / f"{name}.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
