"""Text from a pretrained causal LM, on the command line.

    python -m purejaxrl_opt.generate model.path=<HF directory or .gguf> prompt="What is 12 plus 30?" chat=true
    python -m purejaxrl_opt.generate model.path=<...> 'prompt=[Once upon a time, The capital of France is]' temperature=0.7 top_p=0.9

The options (conf/generate.yaml) are checked before the model is read, and the model's files before
anything compiles: a bad key, value, path, file or tensor ends the process with a message naming it
(exit status 2). The completions are printed one per prompt; timings go to stderr.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from purejaxrl_opt.config.schema import ConfigError, _coerce, build_section, non_negative, one_of, positive


@dataclass(frozen=True)
class ModelSection:
    path: str
    dtype: str = "float32"


@dataclass(frozen=True)
class GenerateConfig:
    chat: bool = False
    system: str | None = None
    max_new_tokens: int = 64
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0
    padding: str = "left"

    def validate(self) -> None:
        positive("max_new_tokens", self.max_new_tokens)
        non_negative("seed", self.seed)
        if self.temperature is not None:
            non_negative("temperature", self.temperature)
        if self.top_k is not None:
            non_negative("top_k", self.top_k)
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ConfigError(f"config key 'top_p' = {self.top_p} is invalid: must be in (0, 1]")
        one_of("padding", self.padding, ("left", "right"))


def config_from_hydra(cfg) -> tuple[ModelSection, GenerateConfig, list[str]]:
    """The validated options of a composed conf/generate.yaml: ConfigError naming the key otherwise."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    raw.pop("hydra", None)
    allowed = {"model", "prompt"} | set(GenerateConfig.__dataclass_fields__)
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ConfigError(f"unknown config key '{unknown[0]}'; allowed top-level keys: {sorted(allowed)}")
    model = raw.get("model") or {}
    if not isinstance(model, dict) or model.get("path") in (None, "???"):
        raise ConfigError("config key 'model.path' is required: a Hugging Face model directory or a "
                          ".gguf file, e.g. model.path=path/to/model.gguf")
    model_section = build_section(ModelSection, model, "model")
    one_of("model.dtype", model_section.dtype, ("float32", "bfloat16"))
    prompt = raw.get("prompt")
    prompts = [prompt] if isinstance(prompt, str) and prompt != "???" else prompt
    if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) for p in prompts):
        raise ConfigError(f"config key 'prompt' = {prompt!r} is invalid: must be a string or a non-empty "
                          "list of strings, e.g. prompt=\"What is 12 plus 30?\"")
    fields = GenerateConfig.__dataclass_fields__
    # top-level keys: named as such in errors (build_section would prefix a section name)
    options = GenerateConfig(**{k: _coerce(k, v, fields[k].type) for k, v in raw.items()
                                if k not in ("model", "prompt")})
    options.validate()
    return model_section, options, prompts


def run(model_section: ModelSection, options: GenerateConfig, prompts: list[str]) -> list[str]:
    from purejaxrl_opt.host.lm import load

    start = time.perf_counter()
    lm = load(model_section.path, dtype=model_section.dtype)
    loaded = time.perf_counter()
    sampling = lm.sampling_config(options.max_new_tokens, options.temperature, options.top_k, options.top_p)
    prompt_ids = lm.encode_prompts(prompts, options.chat, options.system)
    completions = lm.generate_ids(prompt_ids, sampling, options.seed, options.padding)
    done = time.perf_counter()
    texts = [lm.tokenizer.decode(ids) for ids in completions]
    for i, text in enumerate(texts):
        if len(prompts) > 1:
            print(f"--- {i}: {prompts[i]}")
        print(text)
    new_tokens = sum(len(ids) for ids in completions)
    print(f"generate | load {loaded - start:.1f} s | {len(prompts)} prompts, {new_tokens} new tokens in "
          f"{done - loaded:.1f} s (compile included)", file=sys.stderr)
    return texts


def _main():
    import hydra

    @hydra.main(version_base=None, config_path="../conf", config_name="generate")
    def main(cfg) -> None:
        import logging

        logging.getLogger("jax").setLevel(logging.WARNING)
        try:
            run(*config_from_hydra(cfg))
        except ConfigError as error:
            print(f"purejaxrl_opt: configuration error: {error}", file=sys.stderr)
            sys.exit(2)

    main()


if __name__ == "__main__":
    from purejaxrl_opt.host.xla_flags import set_default_xla_flags

    set_default_xla_flags(language_model=True)

    _main()
