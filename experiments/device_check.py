"""Training throughput on whatever accelerator JAX finds: PPO / TRPO / GRPO at 1 / 8 / 32 / 1024 lanes
on CartPole-v1, Breakout-MinAtar (the conv torso), playground/CartpoleBalance (MJX physics) and
craftax/Craftax-Symbolic-v1, written to one JSON. Run through ``experiments/device_check.sh``.

A *lane* is one independent agent (a seed): ``num_seeds`` lanes train as one compiled program, vmapped
(bench_throughput.py's ``ENVSxLANES`` shapes, here with a fixed small ``num_envs`` per lane), laid out
on the devices as the CLI does (``parallel.lanes=auto``). Each measurement: compile the runner's
functions (:class:`purejaxrl_opt.host.runner.Compiled`), one warm-up update, then ``updates`` timed
updates; env steps/s counts every lane's real env steps (the loop's own ``env_steps`` counter).

Order and budget: every (env, algo) at 1 and 1024 lanes first, then at 32 and 8, so a budget cut
(``--budget-s``, default 510 s of the 600 s the shell script allows) drops the middle of the curve,
not an env. What is skipped, or fails (e.g. out of memory), is recorded with its reason; the JSON is
rewritten after every measurement, so a killed run keeps what it measured.

After the plan, GRPO on CartPole at 1 and 1,024 lanes again with ``algo.check_every=1`` (``grpo_check_every_1``:
its update loop tests the budget every update) beside the plan's ``grpo`` (``check_every`` auto: every
16 updates on a GPU, where a ``while_loop`` test reads its predicate back to the host; once per update
on CPU and TPU, which decide on the device): what a per-update host sync costs there.

``DEVICE_CHECK_SMALL=1`` (or ``--small``): a dry run sized for a CPU: lanes 1 and 2 (1 on Playground
and Craftax), short rollouts, one timed update; every env and algorithm still compiles and runs.

Peers, same device, same process (``--peers``, default on; ``--no-peers`` skips them):

* PureJaxRL's own ``purejaxrl/ppo.py`` (experiments/peer_purejaxrl.py: unmodified, its ``make_train``
  from the checkout ``--purejaxrl``, default ``experiments/peers/purejaxrl``, an ignored path; the
  script refuses at once, before anything runs, where it is missing) beside our PPO in the same config
  at 1, 32 and 1,024 agents (``jax.vmap`` of its ``train`` over keys, as its README runs seeds) on
  CartPole-v1 (its CartPole config) and Breakout-MinAtar (its MinAtar config: the 64x64 relu MLP on the
  flattened image, which ours then uses too), 4 envs x 128 steps per agent. Theirs: the compiled
  ``train`` of ``updates`` updates run twice, the second timed (it includes env reset and network
  init); ours: as every measurement here. Small: 1 and 2 agents, 8 steps.
* Brax's own PPO (experiments/peer_brax_ppo.py, its own process, first, before this process takes
  the accelerator's memory) on Playground's CartpoleBalance at Playground's 2,048 envs, one evaluation
  block of env steps (``--brax``; off when small: a CPU would take hours), beside our PPO on
  playground/CartpoleBalance at 2,048 envs x 30 steps (Brax's ``unroll_length``), one agent.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

import provenance

ROOT = Path(__file__).resolve().parents[1]
from purejaxrl_opt.host.xla_flags import set_default_xla_flags  # noqa: E402  (before JAX starts)

set_default_xla_flags()  # the CLI's defaults: on a CPU, one host device per core; none on GPU/TPU

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from purejaxrl_opt.config.implementations import CONV_IMPLS  # noqa: E402

ENVS = ("CartPole-v1", "Breakout-MinAtar", "playground/CartpoleBalance", "craftax/Craftax-Symbolic-v1")
ALGOS = ("ppo", "trpo", "grpo")
HEAVY = ("playground/", "craftax/")  # compiles of minutes on a CPU


def shapes(env_id: str, small: bool) -> dict:
    """Per-lane rollout shape: ``num_envs`` x ``num_steps`` (PPO/TRPO), GRPO's groups of episodes cut
    at ``max_episode_steps``."""
    steps = 8 if small else (64 if env_id.startswith(HEAVY) else 128)
    return {"num_envs": 4, "num_steps": steps, "num_groups": 1, "group_size": 4, "max_episode_steps": steps}


def plan(small: bool, env_ids=ENVS, algo_names=ALGOS, lanes=None) -> list[tuple[str, str, int]]:
    """(env, algo, lanes) in measurement order; ``lanes`` (a list) replaces the default rounds with one
    round per lane count, in that order."""
    order = []
    rounds = [[n] for n in lanes] if lanes else (([1], [2]) if small else ([1, 1024], [32, 8]))
    for lanes_round in rounds:
        for env_id in env_ids:
            for algo in algo_names:
                for lanes in lanes_round:
                    if small and lanes > 1 and env_id.startswith(HEAVY):
                        continue
                    order.append((env_id, algo, lanes))
    return order


# GRPO's update loop testing its budget every update (algo.check_every=1) beside the backend's default
# (auto: every 16 updates on a GPU, where each test reads the predicate back to the host): what the
# per-update sync costs, on these envs and lane counts, after the main plan
SYNC_CHECK = (("CartPole-v1", 1), ("CartPole-v1", 1024))
SYNC_ALGO = "grpo_check_every_1"


def run_config(env_id: str, algo: str, lanes: int, updates: int, small: bool, conv_impl: str = "auto"):
    from purejaxrl_opt.config.schema import algo_config, EnvConfig, NetworkConfig, RunConfig

    shape = shapes(env_id, small)
    if algo in ("grpo", SYNC_ALGO):
        cfg = algo_config("grpo")(num_groups=shape["num_groups"], group_size=shape["group_size"],
                                  max_episode_steps=shape["max_episode_steps"], num_minibatches=1,
                                  check_every=1 if algo == SYNC_ALGO else 0)
        per_update = shape["num_groups"] * shape["group_size"] * shape["max_episode_steps"]
    else:
        cfg = algo_config(algo)(num_envs=shape["num_envs"], num_steps=shape["num_steps"])
        per_update = shape["num_envs"] * shape["num_steps"]
    run = RunConfig(algo=cfg, env=EnvConfig(id=env_id, normalize_obs=env_id.startswith("playground/")),
                    network=NetworkConfig(conv_impl=conv_impl), seed=0, num_seeds=lanes,
                    total_timesteps=per_update * (updates + 1), eval_episodes=1)
    run.validate()
    return run


PEER_ENVS = {"CartPole-v1": "cartpole", "Breakout-MinAtar": "minatar"}  # env -> PureJaxRL config
PEER_LANES = (1, 32, 1024)
BRAX_TASK, BRAX_ENVS, BRAX_UNROLL = "CartpoleBalance", 2048, 30


def peer_plan(small: bool, env_ids=tuple(PEER_ENVS), lanes=None) -> list[tuple[str, int]]:
    """(env, agents) of the PureJaxRL comparison, fewest agents first (each env at each count)."""
    counts = lanes or ((1, 2) if small else PEER_LANES)
    return [(env_id, n) for n in counts for env_id in env_ids if env_id in PEER_ENVS]


def peer_shape(small: bool) -> tuple[int, int]:
    """Per-agent ``(num_envs, num_steps)`` of the PureJaxRL comparison."""
    return 4, (8 if small else 128)


def purejaxrl_config(env_id: str, updates: int, small: bool) -> dict:
    """PureJaxRL's config for ``env_id`` (peer_purejaxrl.CONFIGS) at :func:`peer_shape`, ``updates`` updates."""
    from peer_purejaxrl import peer_config

    num_envs, num_steps = peer_shape(small)
    config = peer_config(PEER_ENVS[env_id], num_envs, num_envs * num_steps * updates)
    config["NUM_STEPS"] = num_steps
    return config


def peer_run_config(env_id: str, lanes: int, updates: int, small: bool):
    """Our PPO in PureJaxRL's config for ``env_id``: its epochs, minibatches, lr, annealing and network
    (MinAtar: the 64x64 relu MLP on the flattened image, no conv torso)."""
    from purejaxrl_opt.config.schema import algo_config, EnvConfig, NetworkConfig, RunConfig

    c = purejaxrl_config(env_id, updates, small)
    cfg = algo_config("ppo")(num_envs=c["NUM_ENVS"], num_steps=c["NUM_STEPS"], update_epochs=c["UPDATE_EPOCHS"],
                             num_minibatches=c["NUM_MINIBATCHES"], lr=c["LR"], anneal_lr=c["ANNEAL_LR"],
                             gamma=c["GAMMA"], gae_lambda=c["GAE_LAMBDA"], clip_eps=c["CLIP_EPS"],
                             ent_coef=c["ENT_COEF"], vf_coef=c["VF_COEF"], max_grad_norm=c["MAX_GRAD_NORM"])
    network = NetworkConfig(hidden_sizes=(64, 64), activation=c["ACTIVATION"], cnn_channels=())
    run = RunConfig(algo=cfg, env=EnvConfig(id=env_id), network=network, seed=0, num_seeds=lanes,
                    total_timesteps=c["NUM_ENVS"] * c["NUM_STEPS"] * (updates + 1), eval_episodes=1)
    run.validate()
    return run


def brax_run_config(updates: int):
    """Our PPO on playground/CartpoleBalance at Brax's scale: 2,048 envs x 30 steps, one agent."""
    from purejaxrl_opt.config.schema import algo_config, EnvConfig, RunConfig

    run = RunConfig(algo=algo_config("ppo")(num_envs=BRAX_ENVS, num_steps=BRAX_UNROLL, num_minibatches=32),
                    env=EnvConfig(id=f"playground/{BRAX_TASK}", normalize_obs=True), seed=0, num_seeds=1,
                    total_timesteps=BRAX_ENVS * BRAX_UNROLL * (updates + 1), eval_episodes=1)
    run.validate()
    return run


def measure_purejaxrl(checkout: str, env_id: str, lanes: int, updates: int, small: bool) -> dict:
    """PureJaxRL's ``train`` vmapped over ``lanes`` keys: compile, one run, then one timed run."""
    from peer_purejaxrl import make_peer_train, ppo_file

    config = purejaxrl_config(env_id, updates, small)
    given = dict(config)
    train = make_peer_train(ppo_file(checkout), config)
    keys = jax.random.split(jax.random.PRNGKey(0), lanes)
    start = time.perf_counter()
    compiled = jax.jit(jax.vmap(train)).lower(keys).compile()
    compile_s = time.perf_counter() - start
    jax.block_until_ready(compiled(keys))
    start = time.perf_counter()
    jax.block_until_ready(compiled(keys))
    seconds = time.perf_counter() - start
    env_steps = lanes * int(config["NUM_UPDATES"]) * config["NUM_STEPS"] * config["NUM_ENVS"]
    return {"side": "purejaxrl", "env": env_id, "algo": "ppo", "lanes": lanes, "config": given,
            "updates_timed": int(config["NUM_UPDATES"]), "compile_s": round(compile_s, 2),
            "timed_s": round(seconds, 4), "env_steps_timed": env_steps,
            "env_steps_per_s": round(env_steps / seconds, 1),
            "per_lane_env_steps_per_s": round(env_steps / seconds / lanes, 1)}


def run_brax(out: Path, timeout_s: float, python: str = sys.executable) -> dict:
    """Brax's PPO at 2,048 envs for one evaluation block, in its own process: its record's sps."""
    record_path = out.parent / "brax_ppo_2048.json"
    block = BRAX_ENVS // 2 * BRAX_UNROLL * 32 * 10  # batch_size x unroll x minibatches x resets (its config)
    cmd = [python, str(ROOT / "experiments/peer_brax_ppo.py"), "--task", BRAX_TASK, "--seeds", "0",
           "--steps", str(block), "--num-envs", str(BRAX_ENVS), "--json", str(record_path)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    record = json.loads(record_path.read_text())
    seed = record["per_seed"][0]
    return {"side": "brax", "env": f"playground/{BRAX_TASK}", "algo": "ppo", "lanes": 1, "num_envs": BRAX_ENVS,
            "env_steps": block, "env_steps_per_s": seed["env_steps_per_s"], "final_return": seed["final_return"],
            "wall_s": round(time.perf_counter() - start, 1), "record": str(record_path.relative_to(ROOT))
            if record_path.is_relative_to(ROOT) else str(record_path), "command": " ".join(cmd[1:])}


def measure(env_id: str, algo_name: str, lanes: int, updates: int, small: bool, env_cache: dict,
            conv_impl: str = "auto", run=None) -> dict:
    """Our ``algo_name`` on ``env_id`` at ``lanes`` agents (``run``: that config instead of
    :func:`run_config`'s)."""
    from purejaxrl_opt.core import algos
    from purejaxrl_opt.host import parallel
    from purejaxrl_opt.host.runner import Compiled
    from purejaxrl_opt.host.sweep import lane_inputs

    run = run if run is not None else run_config(env_id, algo_name, lanes, updates, small, conv_impl)
    if env_id not in env_cache:
        env_cache[env_id] = algos.make_env(run)
    algo = algos.make_algorithm(run, env_cache[env_id])
    keys, hparams = lane_inputs(run)
    layout = parallel.make_layout(parallel.ParallelConfig(), run, lanes)
    compiled = Compiled(algo, keys, hparams, layout)
    keys, hparams = compiled.place_inputs(keys, hparams)
    loop = compiled.init(keys, hparams)
    loop = compiled.updates(loop, jnp.int32(0), jnp.int32(1))  # warm-up: first execution
    before = _env_steps(loop)
    start = time.perf_counter()
    loop = compiled.updates(loop, jnp.int32(1), jnp.int32(1 + updates))
    jax.block_until_ready(loop)
    seconds = time.perf_counter() - start
    after = _env_steps(loop)
    record = {"env": env_id, "algo": algo_name, "lanes": lanes, "updates_timed": updates,
              "compile_s": round(compiled.seconds, 2), "timed_s": round(seconds, 4),
              "env_steps_timed": int(after - before), "env_steps_per_s": round((after - before) / seconds, 1),
              "per_lane_env_steps_per_s": round((after - before) / seconds / lanes, 1),
              "shape": {"num_envs": run.algo.num_envs, "num_steps": getattr(run.algo, "num_steps", None)}
              if not algo_name.startswith("grpo") else shapes(env_id, small),
              "check_every": algo.check_every, "lane_blocks": layout.lane_rows if layout.active else 1}
    stats = _memory_stats()
    if stats:
        record["peak_bytes_in_use"] = stats
    return record


def _env_steps(loop) -> float:
    """Every lane's env steps so far (the loop's uint32 counters), summed exactly on the host."""
    import numpy as np

    return float(np.asarray(jax.device_get(loop.env_steps)).astype(np.float64).sum())


def _memory_stats():
    try:
        stats = jax.local_devices()[0].memory_stats() or {}
    except Exception:  # not every backend reports memory
        return None
    return stats.get("peak_bytes_in_use")


def record_failure(payload: dict, env_id: str, algo: str, lanes: int, err: Exception) -> None:
    """Keep a failed measurement (e.g. an OOM at 1024 lanes) in the JSON and go on with the rest."""
    payload["failed"].append({"env": env_id, "algo": algo, "lanes": lanes,
                              "error": f"{type(err).__name__}: {err}"[:2000],
                              "traceback": traceback.format_exc()[-4000:]})
    print(f"{env_id} {algo} lanes {lanes}: FAILED {type(err).__name__}: {str(err)[:300]}", flush=True)


def write_payload(payload: dict, out: Path, start: float) -> None:
    """Rewrite the JSON after every measurement, so a killed run keeps what it measured."""
    payload["elapsed_s"] = round(time.perf_counter() - start, 1)
    payload["load_avg_end"] = provenance.load_average()
    out.write_text(json.dumps(payload, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "experiments/results/device_check/device_check.json"))
    parser.add_argument("--budget-s", type=float, default=float(os.environ.get("DEVICE_CHECK_BUDGET_S", 510)))
    parser.add_argument("--small", action="store_true", default=os.environ.get("DEVICE_CHECK_SMALL") == "1")
    parser.add_argument("--envs", nargs="+", default=list(ENVS), choices=ENVS)
    parser.add_argument("--algos", nargs="+", default=list(ALGOS), choices=ALGOS)
    parser.add_argument("--conv-impl", default="auto", choices=CONV_IMPLS,
                        help="network.conv_impl for the conv torso (MinAtar); purejaxrl_opt/config/implementations.py "
                        "says what auto picks per backend")
    parser.add_argument("--lanes", nargs="+", type=int, default=None,
                        help="measure these lane counts only, in this order (default: 1 and 1024, then 32 and 8)")
    parser.add_argument("--updates", type=int, default=None, help="timed updates per measurement (default 3; "
                        "small: 1)")
    parser.add_argument("--peers", action=argparse.BooleanOptionalAction, default=True,
                        help="also PureJaxRL's ppo.py (and, unless small, Brax's PPO) beside ours")
    parser.add_argument("--purejaxrl", default=str(ROOT / "experiments/peers/purejaxrl"),
                        help="PureJaxRL checkout (experiments/peer_purejaxrl.py says how to get it)")
    parser.add_argument("--brax", action=argparse.BooleanOptionalAction, default=None,
                        help="Brax's PPO at 2,048 envs on Playground (default: with --peers, unless small)")
    parser.add_argument("--peers-only", action="store_true", help="only the peer comparisons")
    parser.add_argument("--peer-updates", type=int, default=None, help="updates per PureJaxRL comparison "
                        "(default 10; small: 1)")
    args = parser.parse_args()
    updates = args.updates or (1 if args.small else 3)
    peer_updates = args.peer_updates or (1 if args.small else 10)
    brax = args.peers and (args.brax if args.brax is not None else not args.small)
    if args.peers_only and not args.peers:
        raise SystemExit("--peers-only with --no-peers: nothing to measure")
    if args.peers:
        from peer_purejaxrl import ppo_file

        ppo_file(args.purejaxrl)  # refuses now, before anything runs, when the checkout is missing
    from provenance import stamp

    from purejaxrl_opt.config import implementations

    devices = jax.devices()
    payload = {**stamp(), "small": args.small, "budget_s": args.budget_s, "updates_timed": updates,
               "backend": implementations.backend(), "implementations": implementations.describe(args.conv_impl),
               "envs": args.envs, "algos": args.algos, "devices": [str(d) for d in devices], "device_kind": devices[0].device_kind,
               "num_devices": len(devices), "jax": jax.__version__, "python": platform.python_version(),
               "xla_flags": os.environ.get("XLA_FLAGS", ""), "host_cpus": os.cpu_count(),
               "load_avg": provenance.load_average(), "results": [], "skipped": [], "failed": []}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    env_cache: dict = {}
    payload["peers"] = {"purejaxrl": [], "brax": None, "purejaxrl_checkout": args.purejaxrl if args.peers else None}
    if brax:  # first: its own process, before this one takes the accelerator's memory
        try:
            payload["peers"]["brax"] = run_brax(out, timeout_s=min(240.0, args.budget_s / 2))
            print(f"brax ppo {BRAX_TASK} {BRAX_ENVS} envs: {payload['peers']['brax']['env_steps_per_s']:,.0f} env "
                  f"steps/s", flush=True)
        except Exception as err:  # noqa: BLE001  (the rest must still run)
            payload["failed"].append({"env": f"playground/{BRAX_TASK}", "algo": "brax_ppo", "lanes": 1,
                                      "error": f"{type(err).__name__}: {err}"[:2000]})
    for env_id, algo, lanes in ([] if args.peers_only else plan(args.small, args.envs, args.algos, args.lanes)):
        elapsed = time.perf_counter() - start
        if elapsed > args.budget_s:
            payload["skipped"].append({"env": env_id, "algo": algo, "lanes": lanes,
                                       "reason": f"budget: {elapsed:.0f} s > {args.budget_s:.0f} s"})
            continue
        try:
            record = measure(env_id, algo, lanes, updates, args.small, env_cache, args.conv_impl)
            payload["results"].append(record)
            print(f"{env_id:32s} {algo:5s} lanes {lanes:5d}: {record['env_steps_per_s']:>14,.0f} env steps/s "
                  f"(compile {record['compile_s']:.1f} s) [{time.perf_counter() - start:.0f} s]", flush=True)
        except Exception as err:  # noqa: BLE001  (an OOM at 1024 lanes must not lose the rest)
            record_failure(payload, env_id, algo, lanes, err)
        write_payload(payload, out, start)
    if "grpo" in args.algos and not args.peers_only:
        for env_id, lanes in SYNC_CHECK:
            if args.small and lanes > 2:
                continue
            if time.perf_counter() - start > args.budget_s:
                payload["skipped"].append({"env": env_id, "algo": SYNC_ALGO, "lanes": lanes, "reason": "budget"})
                continue
            try:
                record = measure(env_id, SYNC_ALGO, lanes, updates, args.small, env_cache, args.conv_impl)
                payload["results"].append(record)
                print(f"{env_id:32s} {SYNC_ALGO} lanes {lanes:5d}: {record['env_steps_per_s']:>14,.0f} env steps/s",
                      flush=True)
            except Exception as err:  # noqa: BLE001
                record_failure(payload, env_id, SYNC_ALGO, lanes, err)
            write_payload(payload, out, start)
    if args.peers:
        peer_rounds(args, payload, out, start, peer_updates, env_cache, brax)
    payload["elapsed_s"] = round(time.perf_counter() - start, 1)
    out.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {out}: {len(payload['results'])} measured, {len(payload['skipped'])} skipped, "
          f"{len(payload['failed'])} failed in {payload['elapsed_s']} s")
    if payload["failed"]:
        sys.exit(1)


def peer_rounds(args, payload: dict, out: Path, start: float, updates: int, env_cache: dict, brax: bool) -> None:
    """Ours and PureJaxRL's at each (env, agents) of :func:`peer_plan`, then ours at Brax's scale."""
    todo = [("purejaxrl", env_id, lanes) for env_id, lanes in peer_plan(args.small, args.envs, args.lanes)]
    if brax:
        todo.append(("brax", f"playground/{BRAX_TASK}", 1))
    for peer, env_id, lanes in todo:
        elapsed = time.perf_counter() - start
        if elapsed > args.budget_s:
            payload["skipped"].append({"env": env_id, "algo": f"ppo_vs_{peer}", "lanes": lanes,
                                       "reason": f"budget: {elapsed:.0f} s > {args.budget_s:.0f} s"})
            continue
        try:
            if peer == "brax":
                ours = measure(env_id, "ppo", 1, 3, args.small, env_cache, run=brax_run_config(3))
                payload["peers"]["ours_at_brax_scale"] = ours
                theirs = payload["peers"]["brax"]
            else:
                ours = measure(env_id, "ppo", lanes, updates, args.small, env_cache,
                               run=peer_run_config(env_id, lanes, updates, args.small))
                theirs = measure_purejaxrl(args.purejaxrl, env_id, lanes, updates, args.small)
                payload["peers"]["purejaxrl"].append({"ours": ours, "purejaxrl": theirs,
                                                      "ratio": round(ours["env_steps_per_s"]
                                                                     / theirs["env_steps_per_s"], 3)})
            if theirs:
                print(f"{env_id:32s} ppo vs {peer} lanes {lanes:5d}: ours {ours['env_steps_per_s']:>14,.0f}, theirs "
                      f"{theirs['env_steps_per_s']:>14,.0f} env steps/s [{time.perf_counter() - start:.0f} s]",
                      flush=True)
        except Exception as err:  # noqa: BLE001  (an OOM at 1024 lanes must not lose the rest)
            record_failure(payload, env_id, f"ppo_vs_{peer}", lanes, err)
        write_payload(payload, out, start)


if __name__ == "__main__":
    main()
