"""A tiny random language model made on the spot: a character-level tokenizer (printable ASCII and
ChatML's special tokens, with a ChatML template) and a random Llama-shaped
:mod:`purejaxrl_opt.core.models.causal_lm`. What a language-model run uses when no model file is given and
the shipped SmolLM2 is not installed, and what the fast tests train; nothing is downloaded."""

from __future__ import annotations

import string

from purejaxrl_opt.host.lm import LanguageModel
from purejaxrl_opt.host.lm.tokenizer import Tokenizer
from purejaxrl_opt.core.models.causal_lm import LMConfig, init_params

SPECIAL = ("<unk>", "<|im_start|>", "<|im_end|>")
CHARACTERS = tuple(dict.fromkeys(string.printable.replace("\x0b", "").replace("\x0c", "")))
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                 "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def char_tokenizer() -> Tokenizer:
    """One token per character of :data:`CHARACTERS` (others: ``<unk>``), ``<|im_end|>`` the end of a
    turn (eos, pad and stop token), and a ChatML chat template."""
    from tokenizers import AddedToken, Tokenizer as Backend, decoders, models

    vocab = {token: i for i, token in enumerate(SPECIAL + CHARACTERS)}
    backend = Backend(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    special = {"eos_token": "<|im_end|>", "pad_token": "<|im_end|>", "unk_token": "<unk>"}
    return Tokenizer(backend, CHAT_TEMPLATE, special)


def tiny_model(num_layers: int = 2, hidden: int = 64, seed: int = 0, dtype: str = "float32") -> LanguageModel:
    """A random Llama-shaped model over :func:`char_tokenizer` (``hidden / 16`` heads of 16, two
    key/value heads when they divide, an MLP of ``2 x hidden``, tied embeddings)."""
    import jax

    tokenizer = char_tokenizer()
    heads = hidden // 16
    cfg = LMConfig(model_type="llama", vocab_size=128, hidden_size=hidden, intermediate_size=2 * hidden,
                   num_layers=num_layers, num_heads=heads, num_kv_heads=2 if heads % 2 == 0 else 1,
                   head_dim=16, tie_word_embeddings=True, max_position_embeddings=4096, dtype=dtype)
    params = init_params(cfg, jax.random.key(seed))
    return LanguageModel(cfg, params, tokenizer, cfg.to_hf(), {}, "tiny")
