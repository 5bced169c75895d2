"""Reference data for the causal-LM loaders: two tiny random checkpoints in Hugging Face layout and
the logits, token ids and greedy continuations that Hugging Face transformers (PyTorch) computes for
them. The project's tests compare against these files without importing torch.

Needs torch and transformers, which the project does not depend on: run it in a separate venv,

    python3 -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install torch==2.13.0 transformers safetensors tokenizers gguf numpy jinja2
    /tmp/refvenv/bin/python experiments/lm_reference.py            # writes tests/data/lm/

Everything it writes is a function of the fixed seeds below (weights from numpy, tokenizers trained
on the fixed CORPUS), so a rerun with the same library versions reproduces the files byte for byte
apart from the transformers version recorded in the configs. tests/data/lm/README.md describes every
file and array.

The two models differ on purpose, each covering a path a loader must get right:
  tiny_llama  LlamaForCausalLM, float32 weights, untied lm_head, GQA (4 query / 2 kv heads),
              ``rope_scaling`` of type llama3 (chosen so that it rescales 7 of the 8 frequencies),
              BOS added by the tokenizer's post-processor, two end-of-turn ids in generation_config.
  tiny_qwen2  Qwen2ForCausalLM, bfloat16 weights (the dtype of most published checkpoints), q/k/v
              biases, tied embeddings (no lm_head.weight in the file), no BOS, NFC normaliser and
              Qwen2's split regex before the byte-level step, ChatML template.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "lm"
NEW_TOKENS = 16
# (numpy seed, gain of o_proj/down_proj) per model. Chosen among seeds 1-7 and gains 1-3 for greedy
# continuations that are varied (at gain 1 the tied Qwen2 head mostly repeats the last token, its own
# embedding dominating the logits) and whose top-1/top-2 logit gap stays above 0.03 at every step, so
# float32 rounding differences between implementations cannot flip a greedy choice.
MODELS = {"llama": (6, 2.0), "qwen2": (4, 3.0)}

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A policy maps observations to a distribution over actions.",
    "Proximal policy optimisation clips the probability ratio of the new and old policies.",
    "The value function estimates the expected discounted return from a state.",
    "Generalised advantage estimation trades bias for variance with the parameter lambda.",
    "Group relative policy optimisation compares several samples of the same prompt.",
    "Transformers attend to every earlier token; the cache keeps their keys and values.",
    "Rotary position embeddings rotate pairs of query and key features by an angle.",
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    print(i * i)\n",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 2024 3.14159",
    "User: What is the capital of France?\nAssistant: The capital of France is Paris.",
    "User: Add two and three.\nAssistant: Two plus three is five.",
    "Héllo wörld! Ça va? Übung macht den Meister. naïve café résumé",
    "Tabs\tand  double  spaces, newlines\n\nand CAPITALS, don't they're we'll I'm you've.",
]

LLAMA_SPECIALS = ["<s>", "</s>", "<|start|>", "<|end|>"]
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# the split pattern of Qwen2's tokenizer.json (also GPT-4's cl100k, less the 1-3 digit grouping)
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

LLAMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start|>' + message['role'] + '\n' + message['content'] | trim + '<|end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start|>assistant\n' }}{% endif %}"
)
QWEN2_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

PROMPTS = [  # plain text, encoded with the tokenizer's special tokens (BOS for Llama)
    "The cache",
    "Proximal policy optimisation clips",
    "def add(a, b):\n    return",
    "Héllo wörld! The value function estimates the expected",
]
CHAT = [{"role": "user", "content": "What is the capital of France?"}]
ENCODE_TEXTS = [  # tokenizer checks: merges, byte fallback of unseen characters, whitespace, specials
    "Hello world",
    "  leading spaces and trailing  ",
    "naïve café 🚀 日本",
    "line one\nline two\r\n\tindented",
    "don't stop 12345 3.14",
]


def _train_tokenizer(kind: str, vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    if kind == "llama":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        specials = LLAMA_SPECIALS
    else:
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        specials = QWEN2_SPECIALS
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=1)
    tok.train_from_iterator(CORPUS, trainer=trainer)
    if tok.get_vocab_size() != vocab_size:
        raise RuntimeError(f"{kind}: the corpus yields {tok.get_vocab_size()} tokens, not {vocab_size}")
    if kind == "llama":
        bos = tok.token_to_id("<s>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]),
        ])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def _llama3_inv_freq(theta: float, head_dim: int, rs: dict) -> np.ndarray:
    """The llama3 frequency rescaling written out independently, to check transformers applied it."""
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelen = 2 * np.pi / inv
    low_wl = rs["original_max_position_embeddings"] / rs["low_freq_factor"]
    high_wl = rs["original_max_position_embeddings"] / rs["high_freq_factor"]
    smooth = (rs["original_max_position_embeddings"] / wavelen - rs["low_freq_factor"]) / (
        rs["high_freq_factor"] - rs["low_freq_factor"])
    out = np.where(wavelen > low_wl, inv / rs["factor"], inv)
    mid = (wavelen >= high_wl) & (wavelen <= low_wl)
    return np.where(mid, (1 - smooth) * inv / rs["factor"] + smooth * inv, out)


def _config(kind: str, vocab: int, ids: dict) -> dict:
    common = {
        "hidden_act": "silu", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "initializer_range": 0.02,
        "vocab_size": vocab, "use_cache": True, "transformers_version": transformers.__version__,
    }
    if kind == "llama":
        return {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", **common,
            "head_dim": 16, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "rope_scaling": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
            "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False, "pretraining_tp": 1,
            "tie_word_embeddings": False, "torch_dtype": "float32",
            "bos_token_id": ids["<s>"], "eos_token_id": [ids["</s>"], ids["<|end|>"]],
        }
    return {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", **common,
        "max_position_embeddings": 256, "max_window_layers": 2, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "rope_scaling": None, "sliding_window": 256, "use_sliding_window": False,
        "attention_dropout": 0.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
    }


def _weights(cfg: dict, seed: int, resid_gain: float = 1.0) -> dict[str, np.ndarray]:
    """Random weights in transformers' names, [out, in] for linear layers. The scales are chosen so the
    logits spread over a few units (std ~2) and differ between positions: N(0, 1/fan_in) for the
    projections, ``resid_gain`` times that std for the two that write into the residual stream, 0.3
    for the embeddings and the head, norm gains 1 + 0.1 N(0, 1), biases 0.1 N(0, 1)."""
    rng = np.random.default_rng(seed)
    h, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", h // nh)
    bias = cfg["model_type"] == "qwen2"

    def lin(out, inp, g=1.0):
        return rng.normal(0.0, g * inp ** -0.5, (out, inp))

    def gain(n):
        return 1.0 + 0.1 * rng.normal(size=n)

    w = {"model.embed_tokens.weight": rng.normal(0.0, 0.3, (v, h))}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = gain(h)
        for name, out in (("q", nh * hd), ("k", nkv * hd), ("v", nkv * hd)):
            w[p + f"self_attn.{name}_proj.weight"] = lin(out, h)
            if bias:
                w[p + f"self_attn.{name}_proj.bias"] = 0.1 * rng.normal(size=out)
        w[p + "self_attn.o_proj.weight"] = lin(h, nh * hd, resid_gain)
        w[p + "post_attention_layernorm.weight"] = gain(h)
        w[p + "mlp.gate_proj.weight"] = lin(f, h)
        w[p + "mlp.up_proj.weight"] = lin(f, h)
        w[p + "mlp.down_proj.weight"] = lin(h, f, resid_gain)
    w["model.norm.weight"] = gain(h)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = rng.normal(0.0, 0.3, (v, h))
    return w


def _write_model(kind: str, seed: int, resid_gain: float) -> Path:
    d = OUT / f"tiny_{kind}"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    vocab = 384 if kind == "llama" else 320
    tok = _train_tokenizer(kind, vocab)
    tok.save(str(d / "tokenizer.json"))
    ids = tok.get_vocab()
    cfg = _config(kind, vocab, ids)
    (d / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")

    dtype = torch.float32 if cfg["torch_dtype"] == "float32" else torch.bfloat16
    tensors = {k: torch.from_numpy(a.astype(np.float32)).to(dtype).contiguous()
               for k, a in _weights(cfg, seed, resid_gain).items()}
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})

    specials = LLAMA_SPECIALS if kind == "llama" else QWEN2_SPECIALS
    added = {str(ids[s]): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                           "single_word": False, "special": True} for s in specials}
    if kind == "llama":
        tcfg = {"bos_token": "<s>", "eos_token": "<|end|>", "chat_template": LLAMA_TEMPLATE}
        gen = {"bos_token_id": ids["<s>"], "eos_token_id": [ids["</s>"], ids["<|end|>"]], "do_sample": False}
    else:
        tcfg = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                "chat_template": QWEN2_TEMPLATE}
        gen = {"bos_token_id": ids["<|endoftext|>"], "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
               "pad_token_id": ids["<|endoftext|>"], "do_sample": False}
    tcfg = {"added_tokens_decoder": added, **tcfg, "clean_up_tokenization_spaces": False,
            "model_max_length": 256, "tokenizer_class": "PreTrainedTokenizerFast"}
    (d / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2) + "\n")
    gen["transformers_version"] = transformers.__version__
    (d / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    return d


def _pad(rows: list[list[int]], fill: int) -> tuple[np.ndarray, np.ndarray]:
    n = max(len(r) for r in rows)
    out = np.full((len(rows), n), fill, np.int32)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out, np.array([len(r) for r in rows], np.int32)


def _reference(kind: str, d: Path) -> dict[str, np.ndarray]:
    hf_tok = AutoTokenizer.from_pretrained(d)
    raw_tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    cfg = json.loads((d / "config.json").read_text())
    assert type(model).__name__ == cfg["architectures"][0]

    rs = cfg.get("rope_scaling")
    if rs:  # transformers must have read the legacy key: compare its frequencies with a hand computation
        want = _llama3_inv_freq(cfg["rope_theta"], cfg["head_dim"], rs)
        got = model.model.rotary_emb.inv_freq.double().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6)
        base = 1.0 / cfg["rope_theta"] ** (np.arange(0, cfg["head_dim"], 2) / cfg["head_dim"])
        print(f"{kind}: llama3 rope rescales {int(np.sum(~np.isclose(want, base)))} of {len(want)} frequencies")

    prompts = [hf_tok(p)["input_ids"] for p in PROMPTS]
    chat_text = hf_tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    chat_ids = raw_tok.encode(chat_text, add_special_tokens=False).ids
    assert hf_tok.apply_chat_template(CHAT, add_generation_prompt=True, return_dict=True)["input_ids"] == chat_ids
    for p, ids in zip(PROMPTS, prompts):
        assert raw_tok.encode(p).ids == ids, (kind, p)
    rows = prompts[:3] + [chat_ids]  # the last row is the chat prompt, a fourth length
    texts = PROMPTS[:3] + [chat_text]
    input_ids, lengths = _pad(rows, 0)
    mask = (np.arange(input_ids.shape[1])[None] < lengths[:, None]).astype(np.int32)

    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(input_ids).long(),
                       attention_mask=torch.from_numpy(mask).long()).logits.float().numpy()
        for i, r in enumerate(rows):  # right padding must not change the real positions
            alone = model(input_ids=torch.tensor([r])).logits[0].float().numpy()
            np.testing.assert_allclose(logits[i, :len(r)], alone, atol=1e-5, rtol=1e-5)
        logits = logits * mask[..., None]  # padded positions are not part of the reference

        gens, gaps = [], []
        for r in rows:
            out = model.generate(torch.tensor([r]), attention_mask=torch.ones(1, len(r), dtype=torch.long),
                                 do_sample=False, max_new_tokens=NEW_TOKENS, output_scores=True,
                                 return_dict_in_generate=True)
            gens.append(out.sequences[0, len(r):].tolist())
            for s in out.scores:
                top = torch.topk(s[0].float(), 2).values
                gaps.append(float(top[0] - top[1]))
    gen_ids, gen_len = _pad(gens, -1)
    spread = float(np.std(logits[mask.astype(bool)], axis=0).mean())
    print(f"{kind}: prompt lengths {lengths.tolist()}, generated lengths {gen_len.tolist()}, "
          f"smallest top-1/top-2 gap in greedy steps {min(gaps):.4f}, mean std of logits across positions "
          f"{spread:.3f}, distinct generated ids {len(set(sum(gens, [])))}")
    for i, g in enumerate(gens):
        print(f"  {texts[i]!r} -> {hf_tok.decode(g)!r}")

    enc = [raw_tok.encode(t).ids for t in ENCODE_TEXTS]
    for t, e in zip(ENCODE_TEXTS, enc):
        assert hf_tok(t)["input_ids"] == e
        assert hf_tok.decode(e, skip_special_tokens=True) == t, (kind, t)
    enc_ids, enc_len = _pad(enc, -1)
    return {
        f"{kind}_texts": np.array(texts), f"{kind}_input_ids": input_ids, f"{kind}_attention_mask": mask,
        f"{kind}_logits": logits.astype(np.float32), f"{kind}_generated": gen_ids,
        f"{kind}_generated_lengths": gen_len, f"{kind}_greedy_min_gap": np.float32(min(gaps)),
        f"{kind}_encode_texts": np.array(ENCODE_TEXTS), f"{kind}_encode_ids": enc_ids,
        f"{kind}_encode_lengths": enc_len,
    }


def main() -> None:
    torch.manual_seed(0)
    arrays = {}
    for kind, (seed, resid_gain) in MODELS.items():
        arrays.update(_reference(kind, _write_model(kind, seed, resid_gain)))
    np.savez(OUT / "reference.npz", **arrays)
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT} ({total / 1e6:.2f} MB), transformers {transformers.__version__}, "
          f"torch {torch.__version__}", file=sys.stderr)


if __name__ == "__main__":
    main()
