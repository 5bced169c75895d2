"""Brax's own PPO with MuJoCo Playground's tuned config, unmodified, in its own process: the peer of
the suite ``conf/benchmark/side_by_side_playground.yaml`` (whose reader, ``brax_ppo_json`` in
purejaxrl_opt/host/readers.py, reads the record this writes).

    python experiments/peer_brax_ppo.py --task CartpoleBalance --seeds 3000 3001 3002 3003 --steps 153600 \
        --num-envs 32 --json experiments/results/side_by_side_playground/CartpoleBalance/brax.json
    # a run stopped before it wrote its record: the seeds that finished, from its progress lines
    python experiments/peer_brax_ppo.py --task CartpoleBalance --from-log LOG --json OUT.json

``brax.training.agents.ppo.train`` (nothing of this project is imported in the training process) on
``mujoco_playground.registry.load(task)`` with ``impl='jax'`` (the library's ``warp`` default needs
CUDA), wrapped by Playground's own ``wrapper.wrap_for_brax_training``, with every key of
``mujoco_playground.config.<family>_params.brax_ppo_config(task)`` (dm_control_suite, locomotion or
manipulation: the task's family) as given, its ``network_factory`` (network sizes, the policy's and
the value function's observation keys) passed to ``make_ppo_networks`` as Playground's
``learning/train_jax_ppo.py`` does, except the three that set the scale, scaled to a 2-core CPU:

* ``num_envs`` 2048 -> ``--num-envs`` (32); ``batch_size`` 1024 -> ``num_envs / 2`` (in general
  ``batch_size * num_envs / 2048``), so one
  training step is 16 unrolls of every env (``batch_size * num_minibatches = 16 * num_envs``), as in
  Playground's config; ``unroll_length`` 30, 32 minibatches x 16 updates per batch, lr 1e-3,
  discount 0.995, entropy 1e-2, reward scaling 10, observation normalisation and 10 resets per
  evaluation block are kept;
* ``num_timesteps`` 60M -> ``--steps``, a whole number of Brax's evaluation blocks
  (``batch_size * unroll_length * num_minibatches * num_resets_per_eval`` = 153,600 at 32 envs);
* ``num_evals`` 1 + blocks (the initial policy and one per block), 16 eval envs, ``deterministic_eval=True``.

A locomotion or manipulation task reads the robots from ``$MENAGERIE_ROOT`` when set (Playground would
otherwise git clone mujoco_menagerie). ``--as-playground`` keeps Playground's own scale instead (its ``num_envs``, ``batch_size``,
``num_evals``, 128 eval envs; ``--steps`` only when given): the accelerator check
(experiments/device_check_go1.py) runs it so.

Its final return: ``eval/episode_reward`` of the final policy, the mean over 16 complete 1000-step
episodes (our side: ``final_return_per_seed`` with ``eval_episodes=16 eval_deterministic=true``).
Seeds run one after another in this process (JAX's persistent compilation cache,
``JAX_COMPILATION_CACHE_DIR``, spares the recompiles Brax does per ``train`` call), with the load
average recorded before and after each.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import provenance

EVAL_EPISODES = 16


def tuned_config(task: str):
    """Playground's ``brax_ppo_config(task)`` from the params module of the task's family
    (``dm_control_suite`` / ``locomotion`` / ``manipulation``, by ``mujoco_playground.registry``)."""
    from mujoco_playground import registry
    from mujoco_playground.config import dm_control_suite_params, locomotion_params, manipulation_params

    for family, module in (("dm_control_suite", dm_control_suite_params), ("locomotion", locomotion_params),
                           ("manipulation", manipulation_params)):
        if task in getattr(registry, family).ALL_ENVS:
            return module.brax_ppo_config(task)
    raise SystemExit(f"--task {task!r}: not a Playground task; one of {sorted(registry.ALL_ENVS)}")


def plain(value):
    """A config value as JSON: ConfigDicts as dicts, tuples as lists."""
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return [plain(item) for item in value]
    return value


def brax_config(task: str, num_envs: int, steps: int, as_playground: bool = False) -> dict:
    """Playground's tuned Brax PPO config for ``task``, scaled to ``num_envs`` and ``steps``.

    ``as_playground``: Playground's own scale (its ``num_envs``, ``batch_size`` and ``num_evals``;
    ``steps`` replaces ``num_timesteps`` when given, Brax rounding it up to whole evaluation blocks, as
    ``learning/train_jax_ppo.py --num_timesteps`` does)."""
    config = plain(tuned_config(task))
    tuned = dict(config)
    if as_playground:
        if steps:
            config["num_timesteps"] = steps
        return {"tuned": tuned, "scaled": config}
    # batch_size scales with num_envs (the unrolls per env per training step stay Playground's)
    if (config["batch_size"] * num_envs) % config["num_envs"]:
        raise SystemExit(f"--num-envs {num_envs}: batch_size {config['batch_size']} x num_envs / "
                         f"{config['num_envs']} must be whole")
    config["batch_size"] = config["batch_size"] * num_envs // config["num_envs"]
    config["num_envs"] = num_envs
    block = (config["batch_size"] * config["unroll_length"] * config["num_minibatches"]
             * config["action_repeat"] * max(config["num_resets_per_eval"], 1))
    if steps % block:
        raise SystemExit(f"--steps {steps}: must be a multiple of Brax's evaluation block, {block} env steps "
                         f"at {num_envs} envs")
    config["num_timesteps"] = steps
    config["num_evals"] = 1 + steps // block
    return {"tuned": tuned, "scaled": config}


def peer_main(args) -> None:
    """Brax PPO on ``args.task`` for each seed, one after another in this process; writes ``args.json``."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    import jax
    from brax.training.agents.ppo import train as ppo
    from mujoco_playground import registry, wrapper

    if os.environ.get("MENAGERIE_ROOT"):  # a local mujoco_menagerie for locomotion / manipulation tasks
        from etils import epath
        from mujoco_playground._src import mjx_env

        mjx_env.MENAGERIE_PATH = epath.Path(os.environ["MENAGERIE_ROOT"])

    import functools

    from brax.training.agents.ppo import networks as ppo_networks

    configs = brax_config(args.task, args.num_envs, args.steps, args.as_playground)
    config = dict(configs["scaled"])
    # as learning/train_jax_ppo.py builds it: the network sizes and the observation keys of the policy
    # and the value function (an asymmetric critic on locomotion tasks) go to make_ppo_networks
    factory = config.pop("network_factory", None)
    network = {"network_factory": functools.partial(ppo_networks.make_ppo_networks, **factory)} if factory else {}
    eval_envs = config.pop("num_eval_envs", 128) if args.as_playground else EVAL_EPISODES
    env = registry.load(args.task, config_overrides={"impl": "jax"})
    eval_env = registry.load(args.task, config_overrides={"impl": "jax"})
    per_seed = []
    record = {"side": "brax", "task": args.task, "seeds": [], "env_steps_per_seed": args.steps,
              "brax_config": configs, "per_seed": per_seed, "jax_devices": str(jax.devices()),
              **provenance.stamp()}
    for seed in args.seeds:
        points = []
        start = time.perf_counter()

        def progress(step, metrics, points=points, start=start, seed=seed):
            points.append({"step": int(step), "wall_s": round(time.perf_counter() - start, 2),
                           "eval_return": float(metrics["eval/episode_reward"]),
                           "eval_return_std": float(metrics.get("eval/episode_reward_std", float("nan"))),
                           "sps": float(metrics.get("training/sps", float("nan"))),
                           "train_walltime_s": float(metrics.get("training/walltime", float("nan")))})
            print(f"brax {args.task} seed {seed} step {step}: eval {points[-1]['eval_return']:.1f} "
                  f"sps {points[-1]['sps']:.0f} wall {points[-1]['wall_s']} s", flush=True)

        load_before = provenance.load_average()
        ppo.train(environment=env, eval_env=eval_env, wrap_env_fn=wrapper.wrap_for_brax_training,
                  progress_fn=progress, seed=seed, num_eval_envs=eval_envs, deterministic_eval=True,
                  **network, **config)
        per_seed.append({"seed": seed, "wall_s": round(time.perf_counter() - start, 1), "points": points,
                         "final_return": points[-1]["eval_return"], "env_steps_per_s": points[-1]["sps"],
                         "load_before": load_before, "load_after": provenance.load_average()})
        record["seeds"].append(seed)
        # after every seed, so a run stopped early keeps the seeds it finished
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")


def record_from_log(log: Path, task: str, steps: int, num_envs: int) -> dict:
    """The brax record of a peer run that was stopped before it wrote its JSON, from its progress
    lines (``brax <task> seed <s> step <n>: eval <r> sps <v> wall <w> s``); finished seeds only."""
    import re

    line = re.compile(rf"^brax {task} seed (\d+) step (\d+): eval ([-\d.]+) sps ([-\w.]+) wall ([\d.]+) s$")
    seeds: dict[int, list] = {}
    for text in log.read_text().splitlines():
        match = line.match(text.strip())
        if match:
            seed, step, ret, sps, wall = match.groups()
            seeds.setdefault(int(seed), []).append({"step": int(step), "wall_s": float(wall),
                                                    "eval_return": float(ret), "sps": float(sps)})
    per_seed = [{"seed": seed, "points": points, "final_return": points[-1]["eval_return"],
                 "env_steps_per_s": points[-1]["sps"], "wall_s": points[-1]["wall_s"]}
                for seed, points in seeds.items() if points[-1]["step"] >= steps]
    return {"side": "brax", "task": task, "seeds": [s["seed"] for s in per_seed], "env_steps_per_seed": steps,
            "brax_config": brax_config(task, num_envs, steps), "per_seed": per_seed,
            "source": f"progress lines of the peer's log {log.name}: the process was stopped before it "
                      "wrote its JSON; seeds that finished only"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[])
    parser.add_argument("--steps", type=int, default=None, help="env steps per seed (default 153,600; "
                        "with --as-playground, Playground's num_timesteps)")
    parser.add_argument("--num-envs", type=int, default=32)
    parser.add_argument("--json", required=True, help="the record to write")
    parser.add_argument("--from-log", default=None, help="the log of a peer run stopped before its record")
    parser.add_argument("--as-playground", action="store_true",
                        help="Playground's own scale (num_envs, batch_size, num_evals, 128 eval envs); "
                             "--steps, when given, replaces num_timesteps")
    args = parser.parse_args()
    if args.steps is None and not args.as_playground:
        args.steps = 153_600
    target = Path(args.json)
    target.parent.mkdir(parents=True, exist_ok=True)
    if args.from_log:
        record = {**record_from_log(Path(args.from_log), args.task, args.steps, args.num_envs), **provenance.stamp()}
        target.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {target}: seeds {record['seeds']}")
    elif not args.seeds:
        raise SystemExit("--seeds: at least one seed (or --from-log)")
    else:
        peer_main(args)


if __name__ == "__main__":
    main()
