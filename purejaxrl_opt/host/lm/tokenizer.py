"""Tokenizer of a pretrained LM: a ``tokenizers`` tokenizer, its chat template (jinja2) and its special
and stop tokens, read from a Hugging Face directory's ``tokenizer.json`` / ``tokenizer_config.json`` /
``generation_config.json`` or built from a GGUF file's own vocabulary and merges.

The chat template is rendered the way transformers does (a sandboxed jinja2 environment with
``trim_blocks`` and ``lstrip_blocks``, the special tokens as variables, ``raise_exception`` and a
``tojson`` filter); the rendered text is tokenized without adding special tokens (the template writes
its own).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

from purejaxrl_opt.config.errors import ConfigError

SPECIAL_NAMES = ("bos_token", "eos_token", "pad_token", "unk_token")

# the pre-tokenizer split of each `tokenizer.ggml.pre` we build (llama.cpp's names)
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
                 r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
                r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GGUF_PRE_TOKENIZERS = ("default", "gpt2", "smollm", "llama-bpe", "qwen2")


def _token_content(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken dict."""
    if isinstance(value, dict):
        return value.get("content")
    return value


def _ids(value: Any) -> list[int]:
    """An ``eos_token_id``-style entry (None, an int or a list of ints) as a list."""
    if value is None:
        return []
    return [int(v) for v in (value if isinstance(value, (list, tuple)) else [value])]


@dataclass
class Tokenizer:
    """Text <-> token ids, the chat template, and the ids generation stops at."""

    backend: Any  # tokenizers.Tokenizer
    chat_template: str | None = None
    special_tokens: dict = field(default_factory=dict)  # bos_token/eos_token/pad_token/unk_token -> str
    extra_stop_ids: tuple[int, ...] = ()  # from generation_config.json / config.json, beside eos_token

    # -- ids --------------------------------------------------------------------------------------
    def token_id(self, token: str | None) -> int | None:
        return None if token is None else self.backend.token_to_id(token)

    @property
    def bos_id(self) -> int | None:
        return self.token_id(self.special_tokens.get("bos_token"))

    @property
    def eos_id(self) -> int | None:
        return self.token_id(self.special_tokens.get("eos_token"))

    @property
    def pad_id(self) -> int:
        """The pad token, else the first stop token, else 0 (padding is masked out anyway)."""
        pad = self.token_id(self.special_tokens.get("pad_token"))
        if pad is not None:
            return pad
        return self.stop_ids[0] if self.stop_ids else 0

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """The eos token and every other id the configs name as an end of generation, in order."""
        ids = ([self.eos_id] if self.eos_id is not None else []) + list(self.extra_stop_ids)
        return tuple(dict.fromkeys(ids))

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    # -- text -------------------------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; ``add_special_tokens`` applies tokenizer.json's post-processor (e.g. a
        leading bos)."""
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                            tokenize: bool = False):
        """The chat template rendered for ``messages`` (``[{"role": ..., "content": ...}, ...]``):
        the text, or its ids (no special tokens added) with ``tokenize``."""
        if not self.chat_template:
            raise ConfigError("this model has no chat template (no 'chat_template' in "
                              "tokenizer_config.json or chat_template.jinja, or in the GGUF's "
                              "tokenizer.chat_template): generate without chat")
        text = _render(self.chat_template, messages=messages,
                       add_generation_prompt=add_generation_prompt, **self.special_tokens)
        return self.encode(text, add_special_tokens=False) if tokenize else text

    # -- files ------------------------------------------------------------------------------------
    @classmethod
    def from_dir(cls, path: Path, config: dict, generation_config: dict) -> "Tokenizer":
        """From ``tokenizer.json`` and (optional) ``tokenizer_config.json`` / ``chat_template.jinja`` in
        ``path``; stop ids from ``generation_config`` and ``config`` (their ``eos_token_id``)."""
        import tokenizers

        file = path / "tokenizer.json"
        if not file.is_file():
            raise ConfigError(f"{file}: missing (a model directory needs tokenizer.json)")
        try:
            backend = tokenizers.Tokenizer.from_file(str(file))
        except Exception as error:  # the library's own parse error, with the file named
            raise ConfigError(f"{file}: not a tokenizers file ({error})") from None
        tokenizer_config = _read_json(path / "tokenizer_config.json", required=False)
        template = tokenizer_config.get("chat_template")
        if isinstance(template, list):  # named templates: the default one
            named = {t.get("name"): t.get("template") for t in template}
            template = named.get("default", next(iter(named.values()), None))
        if (path / "chat_template.jinja").is_file():
            template = (path / "chat_template.jinja").read_text()
        special = {name: _token_content(tokenizer_config.get(name)) for name in SPECIAL_NAMES}
        special = {name: token for name, token in special.items() if token is not None}
        for name, token in special.items():
            if backend.token_to_id(token) is None:
                raise ConfigError(f"{path / 'tokenizer_config.json'}: {name} {token!r} is not in "
                                  f"the vocabulary of {file}")
        if "eos_token" not in special:  # the eos id of the model's configs stands in
            for eos in _ids(generation_config.get("eos_token_id")) + _ids(config.get("eos_token_id")):
                if backend.id_to_token(eos) is not None:
                    special["eos_token"] = backend.id_to_token(eos)
                    break
        stops = _ids(generation_config.get("eos_token_id")) + _ids(config.get("eos_token_id"))
        return cls(backend, template, special, tuple(dict.fromkeys(stops)))

    def save(self, path: Path) -> None:
        """``tokenizer.json`` and ``tokenizer_config.json`` (special tokens, chat template) in ``path``."""
        self.backend.save(str(path / "tokenizer.json"))
        tokenizer_config = {**self.special_tokens, "tokenizer_class": "PreTrainedTokenizerFast"}
        if self.chat_template:
            tokenizer_config["chat_template"] = self.chat_template
        (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")


def _read_json(file: Path, required: bool = True) -> dict:
    if not file.is_file():
        if required:
            raise ConfigError(f"{file}: missing")
        return {}
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError as error:
        raise ConfigError(f"{file}: not valid JSON ({error})") from None


def _render(template: str, **variables) -> str:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise ConfigError(f"chat template: {message}")

    def tojson(value, indent=None, ensure_ascii=False, sort_keys=False):
        return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(template).render(**variables)
    except jinja2.TemplateError as error:
        raise ConfigError(f"chat template does not render: {error}") from None


def from_gguf_metadata(fields: dict, source: str) -> Tokenizer:
    """A byte-level BPE tokenizer from a GGUF file's ``tokenizer.ggml.*`` metadata (``fields``: key ->
    value), its chat template and special tokens; ConfigError naming ``source`` and the key for a
    tokenizer kind or pre-tokenizer this does not build."""
    from tokenizers import AddedToken, Tokenizer as Backend, decoders, models, normalizers, pre_tokenizers, processors
    from tokenizers import Regex

    kind = fields.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise ConfigError(f"{source}: tokenizer.ggml.model {kind!r} is not supported: must be 'gpt2' "
                          "(byte-level BPE)")
    pre = fields.get("tokenizer.ggml.pre", "default")
    if pre not in GGUF_PRE_TOKENIZERS:
        raise ConfigError(f"{source}: tokenizer.ggml.pre {pre!r} is not supported: must be one of "
                          f"{list(GGUF_PRE_TOKENIZERS)}")
    tokens = list(fields["tokenizer.ggml.tokens"])
    types = list(fields.get("tokenizer.ggml.token_type", [1] * len(tokens)))
    merges = [tuple(m.split(" ", 1)) for m in fields.get("tokenizer.ggml.merges", [])]
    backend = Backend(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges,
                                 ignore_merges=pre == "llama-bpe"))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=pre in ("default", "gpt2",
                                                                                   "smollm"))
    if pre == "smollm":
        backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                         byte_level])
    elif pre in ("llama-bpe", "qwen2"):
        split = _LLAMA3_SPLIT if pre == "llama-bpe" else _QWEN2_SPLIT
        if pre == "qwen2":  # Qwen2's tokenizer.json normalises to NFC before splitting
            backend.normalizer = normalizers.NFC()
        backend.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False), byte_level])
    else:
        backend.pre_tokenizer = byte_level
    backend.decoder = decoders.ByteLevel()
    # llama.cpp's token types: 3 control (special), 4 user-defined (kept whole, not special)
    backend.add_tokens([AddedToken(t, special=s, normalized=False) for t, s in (
        (tokens[i], types[i] == 3) for i in range(len(tokens)) if types[i] in (3, 4))])
    special = {}
    for name in SPECIAL_NAMES:
        key = {"pad_token": "padding_token_id", "unk_token": "unknown_token_id"}.get(name, f"{name}_id")
        token_id = fields.get(f"tokenizer.ggml.{key}")
        if token_id is not None and 0 <= int(token_id) < len(tokens):
            special[name] = tokens[int(token_id)]
    if fields.get("tokenizer.ggml.add_bos_token") and "bos_token" in special:
        bos = special["bos_token"]
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tokens.index(bos))])
    stops = [int(fields[f"tokenizer.ggml.{k}_token_id"]) for k in ("eot", "eom")
             if f"tokenizer.ggml.{k}_token_id" in fields]
    return Tokenizer(backend, fields.get("tokenizer.chat_template"), special, tuple(stops))
