"""Tunix's sampler on SmolLM2-135M-Instruct (CPU), measured like transformers' ``generate`` in
experiments/lm_reference_smollm2.py ``bench``, and checked against transformers' greedy continuations.

Tunix (PyPI ``google-tunix``) is not a dependency of the project: it runs in its own venv, with the
project's jax/flax pins. Its Llama loader reads a Hugging Face safetensors directory, so the GGUF is
first written as one (float32, transformers' dequantisation) by the transformers venv:

    python3 -m venv /tmp/tunixvenv
    /tmp/tunixvenv/bin/pip install jax==0.9.2 jaxlib==0.9.2 flax==0.12.6 google-tunix==0.1.7
    /tmp/refvenv/bin/python experiments/lm_reference_smollm2.py hf-dir --out /tmp/smollm2_hf
    /tmp/tunixvenv/bin/python experiments/bench_generate_tunix.py --hf-dir /tmp/smollm2_hf

The model is ``tunix.models.llama3`` with SmolLM2's shapes (30 layers, 576 wide, 9 query / 3 kv heads
of 64, MLP 1536, vocab 49152, rope theta 1e5, tied embeddings), float32, on the CPU (2 cores here).

Two adjustments keep Tunix's prompts identical to transformers' ids, both forced by how its sampler
tokenises: it prepends the tokenizer's BOS when one is set, and SmolLM2's tokenizer names
``<|im_start|>`` as BOS although the model is not trained with one (transformers adds none), so BOS is
unset; and it builds the attention mask as ``token != pad_id``, while SmolLM2's pad token is
``<|im_end|>``, which every chat prompt contains, so the pad token becomes ``<|endoftext|>`` (id 0,
which occurs in no prompt).

Tunix 0.1.7's Llama attention calls ``apply_rope`` without the configured ``rope_theta``, so every
Llama runs with that function's default 1e6 instead of its own theta (SmolLM2: 1e5; Llama 3: 5e5).
Parity is measured as shipped and with the theta passed (``functools.partial`` over
``tunix.models.llama3.model.apply_rope``); the timings use the latter (the same work).

Measured (median of ``--repeats``, compile excluded by a warm-up call of the same shapes):
  * parity: greedy continuations (64 tokens, eos ``<|im_end|>``) of the 10 prompts, batch 10, against
    experiments/results/lm_parity/smollm2_reference.npz (tokens equal up to the first difference), and
    the largest difference of the last-8-position logits of each prompt;
  * prefill: one jitted forward of the 64 left-padded prompts (Tunix pads the prompt to the next power
    of two, 64 positions), real and padded tokens/s;
  * decode at batch 1 (the first ``--b1-prompts`` prompts in turn) and batch 64: the sampler with 64 and with 1 generation
    steps, eos disabled so that every row runs all steps; decode tokens/s = B * 63 / (t64 - t1).
Tunix pads every prompt to the next power of two (64 positions here), at batch 1 too. Writes
experiments/results/bench_generate/tunix.json, with the load average before and after (other
processes on the 2 cores slow both libraries).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import provenance  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "experiments" / "results" / "lm_parity" / "smollm2_reference.npz"
OUT = ROOT / "experiments" / "results" / "bench_generate" / "tunix.json"
NEW_TOKENS = 64
NEVER = -1  # an eos id no token has: every row runs all steps


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def model_config(hf: Path):
    """``tunix.models.llama3`` config of the Hugging Face directory ``hf`` (its config.json; rope theta
    as transformers writes it, ``rope_parameters``, or as the project's ``LanguageModel.save`` does,
    ``rope_theta``)."""
    from tunix.models.llama3 import model as llama

    cfg = json.loads((Path(hf) / "config.json").read_text())
    theta = cfg["rope_parameters"]["rope_theta"] if "rope_parameters" in cfg else cfg["rope_theta"]
    return llama.ModelConfig(
        num_layers=cfg["num_hidden_layers"], vocab_size=cfg["vocab_size"], embed_dim=cfg["hidden_size"],
        hidden_dim=cfg["intermediate_size"], num_heads=cfg["num_attention_heads"],
        head_dim=cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"]),
        num_kv_heads=cfg["num_key_value_heads"], rope_theta=int(theta), norm_eps=cfg["rms_norm_eps"],
        weight_tying=cfg["tie_word_embeddings"])


def tokenizer(hf: Path):
    """transformers' tokenizer of ``hf`` with the two adjustments of the module docstring: no BOS, and
    ``<|endoftext|>`` (id 0) as the pad token."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(hf)
    tok.bos_token = None
    tok.pad_token = "<|endoftext|>"
    return tok


def pass_rope_theta(theta: float) -> None:
    """The fix for Tunix 0.1.7's Llama attention (module docstring): ``apply_rope`` with the model's
    own theta. Affects functions traced after the call."""
    from tunix.models.llama3 import model as llama

    llama.apply_rope = functools.partial(llama.apply_rope, rope_theta=theta)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hf-dir", required=True, help="SmolLM2 as a Hugging Face safetensors directory")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--b1-prompts", type=int, default=3, help="prompts timed one at a time (of 10)")
    p.add_argument("--serve", action="store_true",
                   help="no parity and no file: after the warm-up print one JSON line {\"ready\": ...}, then one "
                        "repeat of the timings as a JSON line per 'run' line on stdin, until 'quit' (for "
                        "experiments/bench_generate_interleaved.py)")
    a = p.parse_args()
    hf = Path(a.hf_dir)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        if not (hf / name).is_file():
            raise FileNotFoundError(f"{hf / name} is missing: make the directory with "
                                    "lm_reference_smollm2.py hf-dir --out DIR")
    if not REFERENCE.is_file():
        raise FileNotFoundError(f"{REFERENCE} is missing: run lm_reference_smollm2.py reference first")

    from tunix.generate import sampler as sampler_lib
    from tunix.generate import utils as gen_utils
    from tunix.models.llama3 import params as llama_params

    mcfg = model_config(hf)
    t0 = time.perf_counter()
    mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    model = llama_params.create_model_from_safe_tensors(str(hf), mcfg, mesh, dtype=jnp.float32)
    load_s = time.perf_counter() - t0
    tok = tokenizer(hf)
    eos = tok.convert_tokens_to_ids("<|im_end|>")

    ref = np.load(REFERENCE)
    texts = [str(t) for t in ref["texts"]]
    ref_ids = [r[:n].tolist() for r, n in zip(ref["input_ids"], ref["lengths"])]
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    if ids != ref_ids:
        raise RuntimeError("the tokenizer in --hf-dir does not reproduce the reference prompt ids")
    width = gen_utils.next_power_of_2(max(len(r) for r in ids))
    cache = sampler_lib.CacheConfig(cache_size=width + NEW_TOKENS, num_layers=mcfg.num_layers,
                                    num_kv_heads=mcfg.num_kv_heads, head_dim=mcfg.head_dim)
    sampler = sampler_lib.Sampler(model, tok, cache)

    def sample(prompts, steps, eos_ids):  # the current `sampler`: rebuilt below after the rope fix
        return sampler(prompts, max_generation_steps=steps, max_prompt_length=width, eos_tokens=eos_ids,
                       temperature=0.0)

    def parity() -> dict:
        """Greedy continuations of the 10 prompts (one batch, left padded by Tunix) against transformers'
        (run one at a time), and the last-8-position logits of an unpadded forward of each prompt."""
        out = sample(texts, NEW_TOKENS, [eos])
        rows, max_diff = [], 0.0
        for i, toks in enumerate(out.tokens):
            got = [int(x) for x in toks]
            want = ref["generated"][i, :ref["generated_lengths"][i]].tolist()
            if want and want[-1] == eos:
                want = want[:-1]  # Tunix returns the tokens before the eos
            same = next((k for k, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
            rows.append({"prompt": i, "tunix_len": len(got), "transformers_len": len(want),
                         "equal_prefix": same, "identical": got == want})
            t = jnp.asarray([ids[i]])
            m = jnp.ones_like(t, dtype=bool)
            logits, _ = model(t, gen_utils.build_positions_from_mask(m), None,
                              gen_utils.make_causal_attn_mask(m, len(ids[i])))
            max_diff = max(max_diff, float(np.abs(np.asarray(logits[0, -8:]) - ref["logits_last8"][i]).max()))
        return {"identical_continuations": sum(r["identical"] for r in rows), "of": len(rows),
                "max_abs_logit_diff_last8": max_diff, "per_prompt": rows}

    # Tunix 0.1.7's llama3 attention calls apply_rope without the config's rope_theta, so every model
    # gets the function's default 1e6 (SmolLM2: 1e5). Measured as shipped, then with the theta passed;
    # the timings below use the latter (the same work either way).
    if not a.serve:
        shipped = parity()
        print("parity as shipped", shipped["identical_continuations"], shipped["max_abs_logit_diff_last8"],
              flush=True)
    pass_rope_theta(mcfg.rope_theta)
    sampler = sampler_lib.Sampler(model, tok, cache)  # new jitted functions, traced with the fix
    if not a.serve:
        fixed = parity()
        print("parity with rope_theta", fixed["identical_continuations"], fixed["max_abs_logit_diff_last8"],
              flush=True)

    # prefill alone: the model's own forward, jitted, on the 64 left-padded prompts
    rows = [ids[i % len(ids)] for i in range(a.batch)]
    pad = tok.pad_token_id
    toks = np.full((a.batch, width), pad, np.int32)
    for i, r in enumerate(rows):
        toks[i, width - len(r):] = r
    toks = jnp.asarray(toks)
    mask = toks != pad
    positions = gen_utils.build_positions_from_mask(mask)
    attn = gen_utils.make_causal_attn_mask(mask, width)

    from flax import nnx
    graph, state = nnx.split(model)

    @jax.jit
    def forward(state, toks, positions, attn):
        logits, _ = nnx.merge(graph, state)(toks, positions, None, attn)
        return logits

    def prefill():
        forward(state, toks, positions, attn).block_until_ready()

    batch_texts = [texts[i % len(texts)] for i in range(a.batch)]

    def one_by_one(steps):
        return sum(_timed(lambda t=t: sample([t], steps, [NEVER])) for t in texts[:a.b1_prompts])

    load0 = provenance.load_average()
    t = time.perf_counter()
    prefill(), sample(batch_texts, NEW_TOKENS, [NEVER]), sample(batch_texts, 1, [NEVER])
    one_by_one(NEW_TOKENS), one_by_one(1)
    warm_s = time.perf_counter() - t

    def once() -> dict:
        return {"prefill_s": _timed(prefill), "b1_t1_s": one_by_one(1), "b1_t64_s": one_by_one(NEW_TOKENS),
                "bB_t1_s": _timed(lambda: sample(batch_texts, 1, [NEVER])),
                "bB_t64_s": _timed(lambda: sample(batch_texts, NEW_TOKENS, [NEVER]))}

    if a.serve:
        print(json.dumps({"ready": {
            "versions": {n: version(n) for n in ("google-tunix", "jax", "jaxlib", "flax")},
            "device": str(jax.devices()[0]), "padded_width": width, "cache_size": width + NEW_TOKENS,
            "real_tokens": int(mask.sum()), "load_s": round(load_s, 2), "warmup_and_compile_s": round(warm_s, 2),
            "xla_flags": os.environ.get("XLA_FLAGS", "")}}), flush=True)
        for line in sys.stdin:
            if line.strip() == "quit":
                break
            print(json.dumps({"seconds": once()}), flush=True)
        return
    res = {}
    for rep in range(a.repeats):
        for k, v in once().items():
            res.setdefault(k, []).append(v)
        print(rep, {k: round(v[-1], 3) for k, v in res.items()}, flush=True)
    med = {k: statistics.median(v) for k, v in res.items()}
    n1, real = a.b1_prompts, int(mask.sum())
    result = {
        "commit": provenance.commit(),
        "command": " ".join([sys.executable if "tunixvenv" in sys.executable else "python", *sys.argv]),
        "versions": {n: version(n) for n in ("google-tunix", "jax", "jaxlib", "flax", "transformers",
                                             "tokenizers", "numpy")} | {"python": platform.python_version()},
        "model": "SmolLM2-135M-Instruct.Q4_1.gguf dequantised to float32 by transformers, saved as safetensors,"
                 " loaded by tunix.models.llama3.params.create_model_from_safe_tensors",
        "settings": {"device": str(jax.devices()[0]), "dtype": "float32", "greedy": True, "new_tokens": NEW_TOKENS,
                     "batch": a.batch, "prompt_lengths": [len(r) for r in ids], "padded_width": width,
                     "cache_size": width + NEW_TOKENS, "repeats": a.repeats, "load_s": round(load_s, 2),
                     "warmup_and_compile_s": round(warm_s, 2), "cores": os.cpu_count(),
                     "tokenizer_changes": {"bos_token": None, "pad_token": "<|endoftext|>"},
                     "loadavg_before": load0, "loadavg_after": provenance.load_average()},
        "parity_with_transformers": {"as_shipped": shipped, "rope_theta_passed": fixed},
        "prefill": {"batch": a.batch, "real_tokens": real, "padded_tokens": a.batch * width,
                    "seconds": round(med["prefill_s"], 4), "real_tokens_per_s": round(real / med["prefill_s"], 1),
                    "padded_tokens_per_s": round(a.batch * width / med["prefill_s"], 1)},
        "decode_batch1": {"prompts": n1, "t1_s": round(med["b1_t1_s"], 4), "t64_s": round(med["b1_t64_s"], 4),
                          "decode_tokens_per_s": round(n1 * (NEW_TOKENS - 1) / (med["b1_t64_s"] - med["b1_t1_s"]), 1),
                          "end_to_end_tokens_per_s": round(n1 * NEW_TOKENS / med["b1_t64_s"], 1)},
        f"decode_batch{a.batch}": {
            "t1_s": round(med["bB_t1_s"], 4), "t64_s": round(med["bB_t64_s"], 4),
            "decode_tokens_per_s": round(a.batch * (NEW_TOKENS - 1) / (med["bB_t64_s"] - med["bB_t1_s"]), 1),
            "end_to_end_tokens_per_s": round(a.batch * NEW_TOKENS / med["bB_t64_s"], 1)},
        "raw_seconds": {k: [round(x, 4) for x in v] for k, v in res.items()},
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("prefill", "decode_batch1", f"decode_batch{a.batch}")}, indent=2))


if __name__ == "__main__":
    main()
