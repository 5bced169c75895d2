"""XLA's accounting of the compiled update (what summary.json's ``memory`` reports) for GRPO and PPO
with a critic on a token env, at several model sizes: the critic's cost as the model grows.

    python experiments/memory_tokens.py                       # Multiply-v0, d_model 64 and 256
    python experiments/memory_tokens.py --env Addition-v0 --d-models 64 128 256

Compiles the update of each (algorithm, d_model) with the tuned shapes (conf/tuned/<algo>_<env>.yaml,
one seed) and writes experiments/results/memory_tokens.{json,md}. Nothing is trained.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from functools import partial
from pathlib import Path


OUT = Path(__file__).resolve().parent / "results"


def measure(algo_name: str, env_id: str, d_model: int) -> dict:
    import jax
    import jax.numpy as jnp
    from hydra import compose, initialize_config_dir

    from purejaxrl_opt.core import algos
    from purejaxrl_opt.config.schema import schema as config
    from purejaxrl_opt.host import sweep
    from purejaxrl_opt.core.algos.base import run_updates
    from purejaxrl_opt.host.runner import loop_shape

    conf_dir = str(Path(__file__).resolve().parents[1] / "conf")
    with initialize_config_dir(conf_dir, version_base=None):
        cfg = compose("config", overrides=[f"algo={algo_name}", f"env={env_id}", "num_seeds=1",
                                           f"network.d_model={d_model}", "eval_every=0", "eval_samples=0"])
    from omegaconf import OmegaConf

    cfg = {k: v for k, v in OmegaConf.to_container(cfg, resolve=False).items() if k != "hydra"}
    run = config.from_dictconfig(cfg)
    algo = algos.make_algorithm(run)
    keys, hparams = sweep.lane_inputs(run, None)
    shape = loop_shape(algo, keys, hparams)
    start = time.perf_counter()
    compiled = jax.jit(jax.vmap(partial(run_updates, algo), in_axes=(0, None, None))).lower(
        shape, jnp.int32(0), jnp.int32(1)).compile()
    seconds = time.perf_counter() - start
    stats = compiled.memory_analysis()
    params = algo.param_fn(shape.algo_state)
    num_params = sum(int(x.size) for x in jax.tree_util.tree_leaves(params))
    total = (stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
             - stats.alias_size_in_bytes)
    return {"algo": algo_name, "env": env_id, "d_model": d_model, "num_params": num_params,
            "update_argument_bytes": int(stats.argument_size_in_bytes),
            "update_temp_bytes": int(stats.temp_size_in_bytes),
            "update_total_bytes": int(total), "compile_seconds": round(seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Multiply-v0")
    parser.add_argument("--d-models", type=int, nargs="+", default=[64, 256])
    args = parser.parse_args()
    rows = []
    for d_model in args.d_models:
        for algo_name in ("grpo", "ppo"):
            row = measure(algo_name, args.env, d_model)
            print(json.dumps(row), flush=True)
            rows.append(row)
    OUT.mkdir(parents=True, exist_ok=True)
    meta = {"host": platform.node(), "note": "XLA memory_analysis of the compiled update (one lane), bytes"}
    (OUT / "memory_tokens.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    lines = [f"# Memory of the compiled update on {args.env} (XLA accounting, one seed, tuned shapes)", "",
             "| algo | d_model | params | update total (MiB) | temporaries (MiB) |",
             "|---|---|---|---|---|"]
    for r in rows:
        label = "GRPO (no critic)" if r["algo"] == "grpo" else "PPO + value transformer"
        lines.append(f"| {label} | {r['d_model']} | {r['num_params']:,} | {r['update_total_bytes'] / 2**20:.1f} "
                     f"| {r['update_temp_bytes'] / 2**20:.1f} |")
    (OUT / "memory_tokens.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
