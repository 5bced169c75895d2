r"""Craftax_Baselines' ``ppo.py`` (or ``ppo_rnn.py``) against our PPO (PPO-GRU) on Craftax(-Classic)-Symbolic,
both final policies evaluated by the same code: the runner of the suite
``conf/benchmark/side_by_side_craftax.yaml`` (whose reader, ``craftax_side_by_side`` in
purejaxrl_opt/host/readers.py, reads the ``side_by_side_craftax.json`` and curves this writes).

The peer is MichaelTMatthews/Craftax_Baselines, a checkout outside the project (``--baselines``), run
unmodified in its own process with the installed ``craftax`` package: ``python ppo.py --env_name ...
--num_envs 64 --total_timesteps T --seed S --num_repeats 1 --save_policy`` with W&B offline
(``WANDB_MODE=offline``): its only record of training is what it logs to W&B (per update, over the
episodes that ended in that update: return, length, each achievement's success rate in %), read back
from the offline log with :func:`purejaxrl_opt.host.loggers.read_wandb_history`. Ours is the train CLI with
``conf/tuned/ppo_craftax/<env>.yaml`` (their defaults at 64 envs; ``--algo ppo_rnn``: the ``-rnn`` file,
their ActorCriticRNN's layers).

Both final policies are evaluated by :func:`achievement_eval`: ``--episodes`` fresh episodes per seed,
actions sampled (both train by sampling), played to their end through the adapter's per-env
``step_env``, recording each episode's return, length and the achievements unlocked (recurrent
policies step their hidden state from the zero state). Their network is their own
``models.actor_critic.ActorCritic`` (``ppo_rnn.ActorCriticRNN``) imported from the checkout, with the
parameters their ``--save_policy`` wrote (orbax). Recorded per side and seed: the Craftax score as % of
the max (mean episode return / the max return: Classic 22, full Craftax 226), the achievements %, the
Crafter score (``exp(mean_a ln(1 + s_a)) - 1``), each achievement's success rate; compile time and env
steps/s; the per-update training curves (the suite computes the late training return from them).

    python experiments/peer_craftax_baselines.py peer --seeds 3000 3001 --steps 196608   # one process per seed
    python experiments/peer_craftax_baselines.py ours --seeds 3000 3001 --steps 196608
    python experiments/peer_craftax_baselines.py record --steps 196608
    python experiments/peer_craftax_baselines.py all --env Craftax-Symbolic-v1 --algo ppo_rnn --seeds 3226 3227 --steps 98304

Run directories go to ``--work`` (default per env and algorithm under /work/peers/runs, outside the
project); ``record`` (and ``all``) evaluates every finished run there and writes
experiments/results/<--results>/side_by_side_craftax.json with each side's curves beside it.
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import provenance

ROOT = Path(__file__).resolve().parents[1]
# per env: results dir (under experiments/results/), default work dir, achievements, the max return
# (the sum of the achievements' rewards: Classic +1 each; full Craftax 1/3/5/8 by tier, 226 in all;
# health changes net ~0), the number of actions (their ActorCritic's head)
SPECS = {
    "Craftax-Classic-Symbolic-v1": {"results": "side_by_side_craftax", "work": "/work/peers/runs/craftax",
                                    "achievements": 22, "max_return": 22.0, "actions": 17},
    "Craftax-Symbolic-v1": {"results": "side_by_side_craftax_full", "work": "/work/peers/runs/craftax_full",
                            "achievements": 67, "max_return": 226.0, "actions": 43},
}


# per algorithm: their script, the suffix of the results / work dirs, ours' tuned file's suffix
# (conf/tuned/ppo_craftax/<env><suffix>.yaml) and the table's label for our side
ALGOS = {"ppo": {"script": "ppo.py", "dir_suffix": "", "tuned_suffix": "", "label": "PPO"},
         "ppo_rnn": {"script": "ppo_rnn.py", "dir_suffix": "_rnn", "tuned_suffix": "-rnn", "label": "PPO-GRU"}}


def select_env(name: str, algo: str = "ppo", results: str | None = None) -> None:
    """Point the module's constants (ENV, ALGO, RESULTS, NUM_ACHIEVEMENTS, MAX_RETURN) at ``name`` and
    ``algo``: one env and algorithm per process, set from --env / --algo (and --results) in main()."""
    global ENV, ALGO, RESULTS, NUM_ACHIEVEMENTS, MAX_RETURN
    ENV, ALGO = name, algo
    RESULTS = ROOT / "experiments" / "results" / (results or SPECS[name]["results"] + ALGOS[algo]["dir_suffix"])
    NUM_ACHIEVEMENTS, MAX_RETURN = SPECS[name]["achievements"], SPECS[name]["max_return"]


select_env("Craftax-Classic-Symbolic-v1")


def _peer_command(args, seed: int) -> list[str]:
    return [sys.executable, ALGOS[ALGO]["script"], "--env_name", ENV, "--num_envs", str(args.num_envs),
            "--total_timesteps", str(args.steps), "--seed", str(seed), "--num_repeats", "1",
            "--save_policy"]


def compile_log(text: str) -> list[dict]:
    """Each program JAX compiled (``JAX_LOG_COMPILES=1``): its name and the seconds XLA took."""
    found = re.findall(r"Finished XLA compilation of (.+?) in ([\d.e+-]+) sec", text)
    return [{"program": name, "seconds": float(sec)} for name, sec in found]


def run_peer(args, seed: int) -> None:
    """One seed of Craftax_Baselines' ppo.py in its own process; records wall times and its log."""
    run_dir = Path(args.work) / f"peer_seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    # JAX_LOG_COMPILES: JAX logs each program's compile time (an env variable; their code is unchanged)
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(run_dir), "WANDB_SILENT": "true",
           "JAX_LOG_COMPILES": "1"}
    env.pop("XLA_FLAGS", None)  # their defaults
    command = _peer_command(args, seed)  # the caller runs this script under nice
    start = time.time()
    with open(run_dir / "stdout.txt", "w") as out:
        rc = subprocess.run(command, cwd=args.baselines, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    wall = time.time() - start
    log = (run_dir / "stdout.txt").read_text()
    info = {"seed": seed, "rc": rc, "wall_s": wall, "process_start_unix": start,
            "command": "python " + " ".join(command[1:]), "cwd": args.baselines,
            "baselines_commit": provenance.checkout_commit(args.baselines),
            "load_avg_at_end": provenance.load_average()}
    info["compiles"] = compile_log(log)
    for key, pattern in (("time_to_run_experiment_s", r"Time to run experiment ([\d.]+)"),
                         ("sps_printed", r"SPS:\s+([\d.]+)")):
        found = re.search(pattern, log)
        info[key] = float(found.group(1)) if found else None
    (run_dir / "run.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))
    if rc != 0:
        sys.exit(f"{ALGOS[ALGO]['script']} failed (rc {rc}); see {run_dir / 'stdout.txt'}")


def run_ours(args) -> None:
    """Our PPO through the train CLI (tuned file = their defaults at 64 envs), one process, all seeds."""
    seed = args.seeds[0]
    run_dir = Path(args.work) / f"ours_seed{seed}"
    command = [sys.executable, "-m", "purejaxrl_opt.train", f"env=craftax/{ENV}", "algo=ppo"]
    if ALGOS[ALGO]["tuned_suffix"]:  # the plain env=... composes the MLP file
        command.append(f"tuned=ppo_craftax/{ENV}{ALGOS[ALGO]['tuned_suffix']}")
    command += [f"seed={seed}", f"num_seeds={len(args.seeds)}", f"total_timesteps={args.steps}",
               f"algo.num_envs={args.num_envs}", "progress.mode=lines", "progress.chunks=4",
               f"hydra.run.dir={run_dir}"]
    run_dir.mkdir(parents=True, exist_ok=True)
    start = time.time()
    with open(run_dir.parent / f"ours_seed{seed}.stdout.txt", "w") as out:
        rc = subprocess.run(command, cwd=ROOT, env={**os.environ, "JAX_LOG_COMPILES": "1"}, stdout=out,
                            stderr=subprocess.STDOUT).returncode
    info = {"seed": seed, "num_seeds": len(args.seeds), "rc": rc, "wall_s": time.time() - start,
            "command": "python " + " ".join(command[1:]), "load_avg_at_end": provenance.load_average(),
            "compiles": compile_log((run_dir.parent / f"ours_seed{seed}.stdout.txt").read_text())}
    (run_dir / "run.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))
    if rc != 0:
        sys.exit(f"train failed (rc {rc})")


# ----------------------------------------------------------------------------------------- evaluation
def achievement_eval(act, key, num_episodes: int, limit: int, carry=None):
    """``num_episodes`` fresh episodes played to their end with ``act(carry, obs [N, D], key) ->
    (carry, action [N])`` from ``carry`` (a recurrent policy's hidden state; each episode is played from
    its start to its end, so it is never reset): ``(returns [N], lengths [N], achievements [N, A] bool,
    alive [N])`` of each first episode."""
    import jax
    import jax.numpy as jnp

    from purejaxrl_opt.envs import craftax as craftax_adapter

    env, params = craftax_adapter.make(ENV, {})
    reset_key, loop_key = jax.random.split(key)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, num_episodes), params)

    def _cond(loop):
        return jnp.logical_and(loop[0] < limit, jnp.any(loop[3]))

    def _body(loop):
        t, state, obs, alive, returns, lengths, achieved, key, carry = loop
        key, action_key, step_key = jax.random.split(key, 3)
        carry, action = act(carry, obs, action_key)
        obs, state, reward, terminated, info = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))(
            jax.random.split(step_key, num_episodes), state, action, params)
        done = jnp.logical_or(terminated, jax.vmap(env.is_truncated, in_axes=(0, None))(state, params))
        returns = returns + jnp.where(alive, reward, 0.0)
        lengths = lengths + alive
        achieved = jnp.where((alive & done)[:, None], info["achievements"], achieved)
        return t + 1, state, obs, alive & ~done, returns, lengths, achieved, key, carry

    init = (jnp.zeros((), jnp.int32), state, obs, jnp.ones((num_episodes,), bool),
            jnp.zeros((num_episodes,)), jnp.zeros((num_episodes,), jnp.int32),
            jnp.zeros((num_episodes, NUM_ACHIEVEMENTS), bool), loop_key, carry)
    out = jax.lax.while_loop(_cond, _body, init)
    return out[4], out[5], out[6], out[3]


def _eval_summary(returns, lengths, achieved, alive, names) -> dict:
    import numpy as np

    returns, lengths, achieved = np.asarray(returns), np.asarray(lengths), np.asarray(achieved)
    rates = 100.0 * achieved.mean(axis=0)
    return {"episodes": int(returns.shape[0]), "unfinished": int(np.asarray(alive).sum()),
            "return_mean": float(returns.mean()), "length_mean": float(lengths.mean()),
            "score_pct_of_max": float(100.0 * returns.mean() / MAX_RETURN),
            "achievements_pct": float(rates.mean()),
            "crafter_score": float(math.exp(np.mean(np.log1p(rates))) - 1.0),
            "success_rate_pct": {name: float(r) for name, r in zip(names, rates)}}


def _achievement_names() -> list[str]:
    if ENV.startswith("Craftax-Classic"):
        from craftax.craftax_classic.constants import Achievement
    else:
        from craftax.craftax.constants import Achievement

    return [a.name.lower() for a in sorted(Achievement, key=lambda a: a.value)]


def eval_ours(run_dir: Path, episodes: int, limit: int) -> dict:
    """Every lane of our run, in one compiled function (lanes vmapped)."""
    import jax
    import numpy as np

    from purejaxrl_opt import envs
    from purejaxrl_opt.evaluate import load

    run, algo, plan, lanes, loop, step = load(run_dir)

    recurrence = algo.policy.recurrence  # None for an MLP

    def lane_eval(algo_state, key):
        actor_params, obs_norm = algo.policy_params(algo_state)

        def act(memory, obs, key):
            obs = envs.obs_norm_apply(obs_norm, obs)
            if recurrence is None:
                return memory, algo.dist.sample(key, algo.policy.apply(actor_params, obs))
            memory, dist_params = recurrence.step(actor_params, memory, obs)
            return memory, algo.dist.sample(key, dist_params)

        start = None if recurrence is None else recurrence.zero((episodes,))
        return achievement_eval(act, key, episodes, limit, start)

    keys = jax.numpy.stack([jax.random.PRNGKey(10_000 + lane.seed) for lane in lanes])
    results = jax.jit(jax.vmap(lane_eval))(loop.algo_state, keys)
    names = _achievement_names()
    return {lane.seed: _eval_summary(*(np.asarray(r)[lane.index] for r in results), names) for lane in lanes}


def eval_peer(run_dir: Path, baselines: str, episodes: int, limit: int, seed: int) -> dict:
    import jax
    import jax.numpy as jnp
    from orbax.checkpoint import PyTreeCheckpointer

    sys.path.insert(0, baselines)

    found = sorted(glob.glob(str(run_dir / "wandb" / "offline-run-*" / "files" / "policies" / "*" / "default")))
    if not found:
        raise FileNotFoundError(f"no saved policy under {run_dir}/wandb/offline-run-*/files/policies")
    restored = PyTreeCheckpointer().restore(found[-1])
    params = restored["params"]
    if ALGO == "ppo":
        from models.actor_critic import ActorCritic  # their network, unmodified

        network, start = ActorCritic(SPECS[ENV]["actions"], 512), None

        def act(carry, obs, key):
            pi, _ = network.apply(params, obs)
            return carry, pi.sample(seed=key)
    else:
        # their ppo_rnn.py's network (the script's module, unmodified; its argparse runs only as __main__),
        # stepped as their rollout steps it: one time step [1, N] with the done flags (never set here)
        from ppo_rnn import ActorCriticRNN, ScannedRNN

        network = ActorCriticRNN(SPECS[ENV]["actions"], config={"LAYER_SIZE": 512})
        start = ScannedRNN.initialize_carry(episodes, 512)

        def act(hidden, obs, key):
            hidden, pi, _ = network.apply(params, hidden, (obs[None], jnp.zeros((1, obs.shape[0]), bool)))
            return hidden, pi.sample(seed=key)[0]

    result = jax.jit(lambda key: achievement_eval(act, key, episodes, limit, start))(
        jax.random.PRNGKey(10_000 + seed))
    return _eval_summary(*result, _achievement_names())


# ----------------------------------------------------------------------------------------- training logs
def _peer_rows(run_dir: Path) -> list[dict]:
    from purejaxrl_opt.host.loggers import read_wandb_history

    logs = sorted(glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb")))
    rows = read_wandb_history(logs[-1])

    def _scalar(v):
        if isinstance(v, list):
            return float(v[0]) if v else None
        if isinstance(v, dict):  # a W&B histogram would lose the value; refuse to guess
            raise ValueError(f"unexpected W&B value {v!r}")
        return v

    return [{k: _scalar(v) for k, v in row.items()} for row in rows]


def summarise_peer(run_dir: Path, num_envs: int, num_steps: int) -> dict:
    info = json.loads((run_dir / "run.json").read_text())
    rows = _peer_rows(run_dir)
    sps = [r["sps"] for r in rows if r.get("sps") is not None]
    steady = sorted(sps)[len(sps) // 2] if sps else None  # median per-update rate (compile excluded)
    stamps = [r["_timestamp"] for r in rows if "_timestamp" in r]
    # time from the process start to the first update's log: the compile plus one update
    first = stamps[0] - info["process_start_unix"] if stamps else None
    batch = num_envs * num_steps
    compile_estimate = first - batch / steady if (first is not None and steady) else None
    with open(run_dir / "curve.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["update", "env_steps", "episode_return", "episode_length", "sps"])
        for i, r in enumerate(rows):
            writer.writerow([i + 1, (i + 1) * batch, r.get("episode_return"), r.get("episode_length"), r.get("sps")])
    return {"seed": info["seed"], "command": info["command"], "baselines_commit": info["baselines_commit"],
            "updates_logged": len(rows),
            "wall_s": info["wall_s"], "time_to_run_experiment_s": info["time_to_run_experiment_s"],
            "first_log_after_s": first, "compile_s_estimate": compile_estimate,
            "env_steps_per_s_steady": steady, "env_steps_per_s_printed": info["sps_printed"],
            "load_avg_at_end": info["load_avg_at_end"]}


def summarise_ours(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    info = json.loads((run_dir / "run.json").read_text())
    return {"seeds": summary["seeds"], "command": info["command"],
            "compile_s": summary["compile_seconds"], "run_s": summary["run_seconds"],
            "env_steps_per_s": summary["env_steps_per_second"], "wall_s": info["wall_s"],
            "final_return_per_seed_16ep": summary["final_return_per_seed"], "device": summary["device"],
            "load_avg_at_end": info["load_avg_at_end"]}


def cached_eval(run_dir: Path, args) -> dict:
    """The evaluation of a run dir's final policy (``eval.json`` there, computed once: ``eval``)."""
    path = run_dir / f"eval_{args.episodes}ep.json"
    if not path.exists():
        # the library's modules are imported here, not first inside the jitted evaluation: craftax
        # builds jnp arrays at import time (craftax_classic/constants.py), which a trace would capture
        from purejaxrl_opt.envs import craftax as craftax_adapter

        craftax_adapter.make(ENV, {})
        _achievement_names()
        if run_dir.name.startswith("peer_seed"):
            seed = json.loads((run_dir / "run.json").read_text())["seed"]
            result = eval_peer(run_dir, args.baselines, args.episodes, args.limit, seed)
        else:
            result = eval_ours(run_dir, args.episodes, args.limit)
        path.write_text(json.dumps(result, indent=2) + "\n")
    return json.loads(path.read_text())


def record(args) -> None:
    work = Path(args.work)
    RESULTS.mkdir(parents=True, exist_ok=True)
    peer_dirs = sorted(d for d in work.glob("peer_seed*") if d.is_dir())
    ours_dirs = sorted(d for d in work.glob("ours_seed*") if d.is_dir())
    # a run still going (or killed) has no summary.json / no saved policy yet: listed, not summarised
    unfinished = ([d.name for d in ours_dirs if not (d / "summary.json").exists()]
                  + [d.name for d in peer_dirs if not (d / "run.json").exists()])
    ours_dirs = [d for d in ours_dirs if (d / "summary.json").exists()]
    peer_dirs = [d for d in peer_dirs if (d / "run.json").exists()]
    peers = []
    for d in peer_dirs:
        s = summarise_peer(d, args.num_envs, 64)
        s["eval"] = cached_eval(d, args)
        peers.append(s)
        (RESULTS / f"peer_curve_seed{s['seed']}.csv").write_text((d / "curve.csv").read_text())
    ours = []
    for d in ours_dirs:
        s = summarise_ours(d)
        s["eval"] = {int(seed): v for seed, v in cached_eval(d, args).items()}
        ours.append(s)
        (RESULTS / f"ours_metrics_seed{s['seeds'][0]}.csv").write_text((d / "metrics.csv").read_text())
    result = {"env": ENV, "algo": ALGO, **provenance.stamp(), "steps_per_seed": args.steps, "num_envs": args.num_envs,
              "eval_episodes": args.episodes,
              "peer": peers, "ours": ours, "unfinished_runs": unfinished, "load_average": provenance.load_average()}
    (RESULTS / "side_by_side_craftax.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS / 'side_by_side_craftax.json'}: peer seeds {[p['seed'] for p in peers]}, ours "
          f"{[o['seeds'] for o in ours]}, not finished {unfinished}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["peer", "ours", "eval", "record", "all"],
                        help="all: peer for every seed, ours, then record")
    parser.add_argument("--env", choices=sorted(SPECS), default="Craftax-Classic-Symbolic-v1")
    parser.add_argument("--algo", choices=sorted(ALGOS), default="ppo",
                        help="ppo: their ppo.py vs our PPO (MLP); ppo_rnn: their ppo_rnn.py vs our PPO-GRU")
    parser.add_argument("--run", default=None, help="eval: the run dir (under --work) to evaluate")
    parser.add_argument("--seeds", type=int, nargs="+", default=[3000, 3001])
    parser.add_argument("--steps", type=int, default=196608, help="env steps per seed")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--episodes", type=int, default=32, help="evaluation episodes per seed")
    parser.add_argument("--limit", type=int, default=10000, help="evaluation step limit")
    parser.add_argument("--baselines", default="/work/peers/Craftax_Baselines")
    parser.add_argument("--work", default=None, help="run dirs (default: per env, outside the project)")
    parser.add_argument("--results", default=None,
                        help="the record's dir under experiments/results/ (default: per env and algorithm)")
    args = parser.parse_args()
    select_env(args.env, args.algo, args.results)
    args.work = args.work or SPECS[args.env]["work"] + ALGOS[args.algo]["dir_suffix"]
    if args.what in ("peer", "all"):
        for seed in args.seeds:
            run_peer(args, seed)
    if args.what in ("ours", "all"):
        run_ours(args)
    if args.what in ("eval", "record", "all"):
        from purejaxrl_opt.host.xla_flags import set_default_xla_flags

        set_default_xla_flags()
        if args.what == "eval":
            print(json.dumps(cached_eval(Path(args.work) / args.run, args), indent=2))
        else:
            record(args)


if __name__ == "__main__":
    main()
