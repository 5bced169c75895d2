"""Evaluate a saved policy: load a run's checkpoint, play N episodes per lane, write the returns.

    python -m purejaxrl_opt.evaluate RUN_DIR [--episodes N] [--step UPDATE] [--stochastic]
                                     [--out PATH] [--gif PATH [--lane L]] [--no-wandb]

Loads the final (or ``--step``) checkpoint of ``RUN_DIR`` -- the config is read from the checkpoint
itself, so no Hydra overrides are needed -- and evaluates every lane (seed x sweep config) for
``--episodes`` episodes inside one jitted, lane-vmapped function, with the lane's own evaluation key
(so ``--episodes`` equal to the run's ``eval_episodes`` reproduces ``summary.json``'s final returns).
Writes ``RUN_DIR/eval/update_<step>_<episodes>ep.json`` (or ``--out``). ``--gif`` renders one episode
of lane ``--lane``: with the env's own ``render_frame(state, params)`` where its adapter provides one
(envs/protocol.py), else, on gymnax, with gymnax's visualizer (classic control needs pygame,
MinAtar/Catch/mazes only matplotlib); other envs are refused with the reason; a progress bar counts
the rendered frames on a terminal. A run logged to W&B (``RUN_DIR/wandb_run.json``) gets the
evaluation's returns in its W&B summary (``evaluate/...``) and the ``--gif`` as the video
``episode_video``, in the same W&B run (resumed by its id; offline runs stay offline), unless
``--no-wandb``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from functools import partial
from pathlib import Path

# gymnax's visualizer covers these (gymnax.visualize.Visualizer)
RENDERABLE = ("Acrobot-v1", "CartPole-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0",
              "Catch-bsuite", "Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar",
              "Seaquest-MinAtar", "SpaceInvaders-MinAtar", "Pong-misc", "PointRobot-misc",
              "MetaMaze-misc", "FourRooms-misc")
NEEDS_PYGAME = ("Acrobot-v1", "CartPole-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0")


def load(run_dir: str | Path, step: int | None = None, episodes: int | None = None,
         deterministic: bool | None = None):
    """``(run, algo, plan, lanes, loop, step)`` of a run dir's checkpoint (host arrays)."""
    from purejaxrl_opt.core import algos
    from purejaxrl_opt.formats import checkpoint
    from purejaxrl_opt.host import sweep
    from purejaxrl_opt.config.schema import from_dictconfig
    from purejaxrl_opt.host.runner import loop_shape

    step, manifest = checkpoint.read_manifest(run_dir, step)
    config = {**manifest["fingerprint"]["config"], **manifest.get("evaluation", {})}
    if episodes is not None:
        config["eval_episodes"] = episodes
    if deterministic is not None:
        config["eval_deterministic"] = deterministic
    run = from_dictconfig(config)
    plan = sweep.SweepPlan.from_dict(manifest["fingerprint"]["sweep"])
    algo = algos.make_algorithm(run)
    lanes = sweep.lanes(run, plan)
    keys, hparams = sweep.lane_inputs(run, plan)
    shape = loop_shape(algo, keys, hparams)
    loop, step = checkpoint.restore(run_dir, checkpoint.fingerprint(run, plan, shape), shape, step)
    return run, algo, plan, lanes, loop, step


def evaluate_returns(algo, loop):
    """``[lanes, eval_episodes]`` returns of every lane's policy (jitted, vmapped over lanes): the
    training run's final evaluation (:func:`purejaxrl_opt.core.stages.evaluation.final_returns`)."""
    import jax
    import numpy as np

    from purejaxrl_opt.core.stages import evaluation

    return np.asarray(jax.jit(jax.vmap(partial(evaluation.final_returns, algo)))(loop))


EPISODE_CHUNK = 256  # steps per compiled chunk of play_episode


def play_episode(algo, loop, lane: int, deterministic: bool = True, chunk: int = EPISODE_CHUNK):
    """Host (numpy) states and cumulative rewards of one episode of ``lane``'s policy, for rendering.

    Played in compiled chunks of ``chunk`` steps until the episode ends (or the env's limit,
    :func:`purejaxrl_opt.core.stages.evaluation.episode_limit`): the states of the whole limit at once do not fit
    in memory on long-episode envs (full Craftax: 100,000 steps of a 9-level world). The numbers are
    those of one scan over the limit (the same keys, step by step)."""
    import jax
    import numpy as np

    from purejaxrl_opt.core.stages import evaluation

    state = jax.tree_util.tree_map(lambda x: x[lane], loop.algo_state)
    key = jax.random.fold_in(loop.eval_key[lane], 7)
    limit = evaluation.episode_limit(algo.spec)
    chunk = min(chunk, limit)
    steps = jax.jit(partial(evaluation.episode_steps, algo, length=chunk, deterministic=deterministic))
    carry = jax.jit(partial(evaluation.episode_start, algo))(state, key)
    parts, played = [], 0
    while played < limit:
        carry, part = steps(state, carry)
        part = jax.device_get(part)
        parts.append(part)
        played += chunk
        if np.asarray(part[2]).any():
            break
    states, rewards, done = jax.tree_util.tree_map(lambda *xs: np.concatenate(xs)[:limit], *parts)
    length = int(np.argmax(done)) + 1 if done.any() else done.shape[0]
    return ([jax.tree_util.tree_map(lambda x, i=i: x[i], states) for i in range(length)],
            np.cumsum(np.asarray(rewards, np.float64)[:length]))


def _frames(render, states) -> list:
    """``render(state)`` of every state, with a progress bar of the frames on a terminal."""
    from purejaxrl_opt.host.progress import Bar

    frames = []
    with Bar(len(states), unit="frames", desc="rendering") as bar:
        for state in states:
            frames.append(render(state))
            bar.update_to(len(frames))
    return frames


def render_frames(env, env_params, states) -> list:
    """``uint8 [H, W, 3]`` frames of host ``states`` by the env's own ``render_frame``: compiled, or
    on the host where the env says it cannot be traced (``render_in_jit = False``, e.g. MuJoCo's
    OpenGL renderer; purejaxrl_opt/envs/protocol.py)."""
    import jax
    import numpy as np

    render = jax.jit(env.render_frame) if getattr(env, "render_in_jit", True) else env.render_frame
    return _frames(lambda state: np.asarray(render(state, env_params), np.uint8), states)


def _gym_frames(env_id: str, env_params, states) -> list:
    """Classic-control frames from ONE gymnasium renderer (gymnax's visualizer builds a new
    gymnasium env per frame: minutes for a 500-step CartPole episode)."""
    import gymnasium
    import numpy as np
    from gymnax.visualize import vis_gym

    gym_env = gymnasium.make(env_id, render_mode="rgb_array")
    try:
        gym_env.reset(seed=0)
        unwrapped = gym_env.unwrapped
        vis_gym.set_gym_params(unwrapped, env_id, env_params)

        def render(state):
            unwrapped.state = vis_gym.get_gym_state(state, env_id)
            if env_id == "Pendulum-v1":
                unwrapped.last_u = np.asarray(state.last_u, dtype=np.float64)
            return np.asarray(gym_env.render())

        return _frames(render, states)
    finally:
        gym_env.close()


def _save_gif(frames, path: Path, duration_ms: int = 50) -> None:
    from PIL import Image

    images = [Image.fromarray(frame) for frame in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=duration_ms, loop=0)


def render_route(algo) -> str:
    """How ``--gif`` renders the run's env: ``"render_frame"`` (the env's own), ``"gymnax"``
    (gymnax's visualizer); anything else is a ValueError saying why it cannot."""
    from purejaxrl_opt.envs import registry

    spec = algo.spec
    if getattr(algo.env, "render_frame", None) is not None:
        problem = getattr(algo.env, "render_problem", lambda: None)()
        if problem:
            raise ValueError(f"--gif: {problem}")
        return "render_frame"
    _, name = registry.split_id(spec.env_id)
    if spec.library == "gymnax" and name in RENDERABLE:
        return "gymnax"
    if spec.library == "gymnax":
        raise ValueError(f"--gif: gymnax cannot render {spec.env_id}; renderable envs: {list(RENDERABLE)}")
    raise ValueError(f"--gif: {spec.env_id} cannot be rendered: the {spec.library} env has no "
                     "render_frame(state, params) (purejaxrl_opt/envs/protocol.py)")


def write_gif(algo, loop, lane: int, path: str | Path, deterministic: bool = True) -> Path:
    from purejaxrl_opt.envs import registry

    route = render_route(algo)
    _, name = registry.split_id(algo.spec.env_id)
    if route == "gymnax" and name in NEEDS_PYGAME:
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")  # headless: no sound card, no display
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        try:
            import pygame  # noqa: F401
        except ImportError as error:
            raise ValueError(f"--gif: rendering {name} needs pygame (pip install pygame)") from error
    import matplotlib

    matplotlib.use("Agg")
    states, cumulative = play_episode(algo, loop, lane, deterministic)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if route == "render_frame":
        _save_gif(render_frames(algo.env, algo.env_params, states), path)
    elif name in NEEDS_PYGAME:
        _save_gif(_gym_frames(name, algo.env_params, states), path)
    else:
        from gymnax.visualize import Visualizer

        Visualizer(algo.env, algo.env_params, states, cumulative).animate(str(path))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m purejaxrl_opt.evaluate",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", help="a run directory with checkpoints/ (see checkpoint.* config)")
    parser.add_argument("--episodes", type=int, default=None,
                        help="episodes per lane (default: the run's eval_episodes)")
    parser.add_argument("--step", type=int, default=None, help="checkpoint update (default: latest)")
    parser.add_argument("--stochastic", action="store_true", help="sample actions instead of the mode")
    parser.add_argument("--out", default=None, help="JSON file for the returns")
    parser.add_argument("--gif", default=None, help="write an animation of one episode here")
    parser.add_argument("--lane", type=int, default=0, help="lane rendered by --gif")
    parser.add_argument("--no-wandb", action="store_true",
                        help="do not add the returns and the --gif to the run's W&B run")
    args = parser.parse_args(argv)
    if args.episodes is not None and args.episodes < 1:
        parser.error("--episodes must be >= 1")

    from purejaxrl_opt.host.xla_flags import set_default_xla_flags

    set_default_xla_flags()  # the same XLA flags as training, before JAX starts
    from purejaxrl_opt.formats.checkpoint import CheckpointError
    from purejaxrl_opt.config.schema import ConfigError

    deterministic = False if args.stochastic else None
    try:
        run, algo, plan, lanes, loop, step = load(args.run_dir, args.step, args.episodes, deterministic)
        if not 0 <= args.lane < len(lanes):
            raise ValueError(f"--lane {args.lane} is out of range: the run has {len(lanes)} lane(s)")
        if args.gif:
            render_route(algo)  # an env that cannot render here is refused before the evaluation compiles
        returns = evaluate_returns(algo, loop)
    except (CheckpointError, ConfigError, ValueError) as error:
        print(f"purejaxrl_opt.evaluate: {error}", file=sys.stderr)
        return 2
    result = {
        "run_dir": str(Path(args.run_dir).absolute()),
        "checkpoint_update": step,
        "episodes": run.eval_episodes,
        "deterministic": run.eval_deterministic,
        "mean": float(returns.mean()),
        "lanes": [{"lane": lane.index, "seed": lane.seed, "config": lane.config, "values": lane.values,
                   "mean": float(returns[lane.index].mean()),
                   "returns": [float(r) for r in returns[lane.index]]} for lane in lanes],
    }
    out = Path(args.out) if args.out else (
        Path(args.run_dir) / "eval" / f"update_{step}_{run.eval_episodes}ep.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    per_lane = ", ".join(f"{lane['mean']:.2f}" for lane in result["lanes"])
    print(f"[purejaxrl_opt] {run.algo.name} on {run.env.id}, checkpoint at update {step}: mean return "
          f"{result['mean']:.2f} over {len(lanes)} lane(s) x {run.eval_episodes} episodes "
          f"(per lane: {per_lane}) -> {out}")
    if args.gif:
        try:
            path = write_gif(algo, loop, args.lane, args.gif, run.eval_deterministic)
        except ValueError as error:
            print(f"purejaxrl_opt.evaluate: {error}", file=sys.stderr)
            return 2
        print(f"[purejaxrl_opt] animation of one episode of lane {args.lane} -> {path}")
    if not args.no_wandb:
        return _log_to_wandb(args.run_dir, result, args.gif and path, args.lane)
    return 0


def _log_to_wandb(run_dir, result: dict, gif, lane: int) -> int:
    """The returns (and the GIF) into the run's W&B run, if it has one; 1 when W&B fails."""
    from purejaxrl_opt.host import loggers

    summary = {"evaluate/checkpoint_update": result["checkpoint_update"],
               "evaluate/episodes": result["episodes"], "evaluate/deterministic": result["deterministic"],
               "evaluate/mean_return": result["mean"],
               "evaluate/mean_return_per_lane": [entry["mean"] for entry in result["lanes"]]}
    if gif:
        summary["evaluate/video_lane"] = lane
    try:
        state = loggers.log_to_run(run_dir, {"episode_video": str(gif)} if gif else None, summary)
    except Exception as error:  # noqa: BLE001 - the returns and the GIF are written already
        print(f"purejaxrl_opt.evaluate: could not log to the run's W&B run: {error}", file=sys.stderr)
        return 1
    if state is not None:
        print(f"[purejaxrl_opt] added to W&B run {state['id']} ({state['mode']})"
              + (f": episode_video at step {state['last_step']}" if gif else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
