"""Pretrained language models from local files: load, generate, score, save.

    from purejaxrl_opt.host.lm import load
    lm = load("path/to/hf_dir_or_file.gguf")                 # float32 by default; dtype="bfloat16"
    lm.generate(["What is 12 plus 30?"], chat=True, max_new_tokens=32)   # -> list of str
    lm.score(["The capital of France is"], [" Paris."])      # -> per-token log-probs of each completion
    lm.save("out_dir")                                       # a Hugging Face directory

A directory is a Hugging Face causal-LM checkpoint (``config.json``, ``model.safetensors`` or shards
with ``model.safetensors.index.json``, ``tokenizer.json``, optional ``tokenizer_config.json`` /
``generation_config.json``); a ``.gguf`` file holds all of it. Nothing is fetched from the network.
Every file, key and tensor is checked before anything compiles (ConfigError naming it).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.host.lm.tokenizer import Tokenizer, _read_json
from purejaxrl_opt.core.models.causal_lm import DTYPES, LMConfig

__all__ = ["LanguageModel", "load", "pad_batch"]

# prompt lengths are padded up to a multiple of this: prompts of similar lengths share one compile
LENGTH_BUCKET = 32


def pad_batch(sequences: Sequence[Sequence[int]], pad_id: int, side: str = "left",
              multiple: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Token lists -> ``(tokens int32 [B, L], attention_mask int32 [B, L])``, padded on ``side`` to the
    longest, rounded up to a multiple of ``multiple``."""
    if side not in ("left", "right"):
        raise ConfigError(f"padding side {side!r} is invalid: must be 'left' or 'right'")
    if not sequences or any(len(s) == 0 for s in sequences):
        raise ConfigError("every sequence needs at least one token")
    length = -(-max(len(s) for s in sequences) // multiple) * multiple
    tokens = np.full((len(sequences), length), pad_id, np.int32)
    mask = np.zeros((len(sequences), length), np.int32)
    for row, seq in enumerate(sequences):
        span = slice(length - len(seq), length) if side == "left" else slice(0, len(seq))
        tokens[row, span] = seq
        mask[row, span] = 1
    return tokens, mask


@dataclass
class LanguageModel:
    """A loaded model: config, params (a pytree of jax arrays), tokenizer and its source configs."""

    cfg: LMConfig
    params: dict
    tokenizer: Tokenizer
    hf_config: dict  # config.json (as loaded, or built from GGUF metadata)
    generation_config: dict = field(default_factory=dict)
    source: str = ""

    # -- text in, text out ------------------------------------------------------------------------
    def encode_prompts(self, prompts: Sequence[str], chat: bool = False, system: str | None = None
                       ) -> list[list[int]]:
        """Token ids of each prompt: raw text (tokenizer.json's special tokens added), or with ``chat``
        the chat template of a user turn (after a ``system`` turn if given) and the assistant prompt."""
        if isinstance(prompts, str):
            raise ConfigError("prompts must be a list of strings, not one string")
        if not chat:
            return [self.tokenizer.encode(p) for p in prompts]
        turns = [[{"role": "system", "content": system}] if system is not None else [] for _ in prompts]
        return [self.tokenizer.apply_chat_template(t + [{"role": "user", "content": p}], tokenize=True)
                for t, p in zip(turns, prompts)]

    def sampling_config(self, max_new_tokens: int = 64, temperature: float | None = None,
                        top_k: int | None = None, top_p: float | None = None):
        """Generation options; the ones left None come from generation_config.json (its
        ``do_sample``/``temperature``/``top_k``/``top_p``, as transformers reads them), else greedy."""
        from purejaxrl_opt.core.models.sampling import SamplingConfig

        sample = bool(self.generation_config.get("do_sample", False))
        defaults = {"temperature": float(self.generation_config.get("temperature", 1.0)) if sample else 0.0,
                    "top_k": int(self.generation_config.get("top_k", 50)) if sample else 0,
                    "top_p": float(self.generation_config.get("top_p", 1.0)) if sample else 1.0}
        return SamplingConfig(
            max_new_tokens=max_new_tokens,
            temperature=defaults["temperature"] if temperature is None else float(temperature),
            top_k=defaults["top_k"] if top_k is None else int(top_k),
            top_p=defaults["top_p"] if top_p is None else float(top_p),
            stop_ids=self.tokenizer.stop_ids, pad_id=self.tokenizer.pad_id)

    def generate_ids(self, prompt_ids: Sequence[Sequence[int]], sampling, seed: int = 0,
                     padding: str = "left") -> list[list[int]]:
        """Continuations (token ids, the stop token included) of token-id prompts, one compiled call."""
        import jax

        from purejaxrl_opt.core.models.sampling import generate

        tokens, mask = pad_batch(prompt_ids, self.tokenizer.pad_id, padding, LENGTH_BUCKET)
        out, num = generate(self.params, self.cfg, sampling, tokens, mask, jax.random.key(seed))
        out, num = np.asarray(out), np.asarray(num)
        return [out[row, :num[row]].tolist() for row in range(len(prompt_ids))]

    def generate(self, prompts: Sequence[str], max_new_tokens: int = 64, temperature: float | None = None,
                 top_k: int | None = None, top_p: float | None = None, seed: int = 0, chat: bool = False,
                 system: str | None = None, padding: str = "left") -> list[str]:
        """One completion (text, special tokens dropped) per prompt; see :meth:`sampling_config`."""
        sampling = self.sampling_config(max_new_tokens, temperature, top_k, top_p)
        ids = self.generate_ids(self.encode_prompts(prompts, chat, system), sampling, seed, padding)
        return [self.tokenizer.decode(seq) for seq in ids]

    def score(self, prompts: Sequence[str], completions: Sequence[str], chat: bool = False,
              system: str | None = None) -> list[np.ndarray]:
        """Per-token log-probs (float32 ``[completion tokens]``) of each completion after its prompt,
        the completion tokenized alone (no special tokens added)."""
        from purejaxrl_opt.core.models.sampling import score

        if len(prompts) != len(completions):
            raise ConfigError(f"{len(prompts)} prompts but {len(completions)} completions")
        prompt_ids = self.encode_prompts(prompts, chat, system)
        completion_ids = [self.tokenizer.encode(c, add_special_tokens=False) for c in completions]
        if any(not c for c in completion_ids):
            raise ConfigError("every completion needs at least one token")
        tokens, mask = pad_batch([p + c for p, c in zip(prompt_ids, completion_ids)],
                                 self.tokenizer.pad_id, "left", LENGTH_BUCKET)
        completion_mask = np.zeros_like(mask)
        for row, c in enumerate(completion_ids):
            completion_mask[row, tokens.shape[1] - len(c):] = 1
        log_probs = np.asarray(score(self.params, self.cfg, tokens, mask, completion_mask))
        return [log_probs[row, tokens.shape[1] - len(c):] for row, c in enumerate(completion_ids)]

    # -- files ------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """A Hugging Face directory (model.safetensors, config.json, generation_config.json and the
        tokenizer files) that :func:`load` reads back to bitwise-equal params. Written into a temporary
        sibling and renamed, so a failure leaves no half-written directory."""
        from purejaxrl_opt.host.lm.weights import write_safetensors

        target = Path(path)
        if target.exists():
            raise ConfigError(f"{target}: already exists (save writes a new directory)")
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        write_safetensors(staging, self.cfg, self.params)
        config = {**self.hf_config, **self.cfg.to_hf()}
        config.pop("rope_parameters", None)  # to_hf writes rope_theta / rope_scaling
        (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        generation = dict(self.generation_config)
        if self.tokenizer.stop_ids:
            generation["eos_token_id"] = list(self.tokenizer.stop_ids)
        if self.tokenizer.bos_id is not None:
            generation.setdefault("bos_token_id", self.tokenizer.bos_id)
        (staging / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
        self.tokenizer.save(staging)
        staging.rename(target)
        return target


def load(path: str | os.PathLike, dtype: str = "float32") -> LanguageModel:
    """A model from a Hugging Face directory or a ``.gguf`` file (see the module docstring), its params
    in ``dtype`` (float32 or bfloat16) on the default device."""
    import jax

    if dtype not in DTYPES:
        raise ConfigError(f"dtype {dtype!r} is invalid: must be one of {list(DTYPES)}")
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: no such file or directory")
    if path.is_file():
        if path.suffix != ".gguf":
            raise ConfigError(f"{path}: a model is a Hugging Face directory or a .gguf file")
        from purejaxrl_opt.host.lm.gguf_file import read_gguf

        cfg, params, tokenizer, config = read_gguf(path, dtype)
        generation_config = {}
    else:
        from purejaxrl_opt.host.lm.weights import read_safetensors

        config = _read_json(path / "config.json")
        cfg = LMConfig.from_hf(config, dtype=dtype, source=str(path / "config.json"))
        generation_config = _read_json(path / "generation_config.json", required=False)
        tokenizer = Tokenizer.from_dir(path, config, generation_config)
        params = read_safetensors(path, cfg)
    if tokenizer.vocab_size > cfg.vocab_size:
        raise ConfigError(f"{path}: the tokenizer has {tokenizer.vocab_size} tokens, more than the "
                          f"model's vocab_size {cfg.vocab_size}")
    return LanguageModel(cfg, jax.device_put(params), tokenizer, config, generation_config, str(path))
