"""Supervised warm start of a pretrained language model on a task's reference answers:
``python -m purejaxrl_opt.sft env=lm/<task> model.path=<dir or .gguf>``, then
``python -m purejaxrl_opt.train algo=grpo env=lm/<task> init_from=<that run dir>``.

The examples are ``sft.num_examples`` training prompts of the task (the first of its seeded order,
the held-out prompts never among them), each with its reference completion: a built-in task's
correct answer in its answer tag (``<answer>42</answer>``; Countdown: the expression the target was
made from), or the ``completion`` column of an ``lm/prompts`` row; the prompt goes through the chat
template as in the RL runs, and the completion ends with the model's stop token. Training is
:mod:`purejaxrl_opt.core.algos.sft_lm` (teacher-forced cross-entropy on the completion tokens,
``sft.steps`` AdamW steps on batches of ``sft.batch_size`` drawn in seeded passes over the examples).

The run dir gets ``model/`` (the trained model as a Hugging Face directory, LoRA merged: what
``init_from`` loads), ``summary.json`` (held-out accuracy, rewards and mean length before and after
-- the evaluation of the RL runs, on their held-out prompts -- the loss, and ``params_digest``, the
sha256 of the saved weights, which a run started with ``init_from`` records as its
``start_params_digest``), ``metrics.csv`` (loss per step) and ``examples.jsonl`` (held-out prompts,
completions and rewards after training).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.config.lm import LMTrainConfig, ModelConfig
from purejaxrl_opt.config.schema import EnvConfig, RunConfig, _check, _coerce, _raw, build_section, parse_section
from purejaxrl_opt.host.lm import data
from purejaxrl_opt.host.lm.runner import LMSettings

CONF = Path(__file__).resolve().parents[3] / "conf"
# keys of the SFT config that a language-model SFT reads; every other key the env=lm/<task> file
# composes (conf/language_model/defaults.yaml: the RL run's) must keep its default there
USED_TOP = {"env", "sft", "seed", "model", "lm", "eval_episodes", "eval_deterministic", "hydra"}
UNUSED_LM = {"num_updates": "sft.steps", "warmup_updates": "sft.warmup_steps and sft.schedule",
             "save_model": "the SFT run always writes model/"}
# the token-env SFT's keys that do not apply here, and what does instead
UNUSED_SFT = {"min_digits": "the task's env.params", "max_digits": "the task's env.params",
              "eval_prompts": "eval_episodes", "examples": "lm.num_examples"}


def _lm_defaults() -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(CONF / "language_model" / "defaults.yaml"))


def parse_settings(cfg) -> LMSettings:
    """A composed ``conf/sft.yaml`` with ``env=lm/<task>`` as the run's settings (``algo``: the
    SFTConfig); ConfigError naming the key for anything that does not apply or is invalid."""
    from purejaxrl_opt.core.algos.sft import SFTConfig

    raw = _raw(cfg)
    defaults = _lm_defaults()
    for key, value in raw.items():
        if key in USED_TOP:
            continue
        if key not in defaults:
            raise ConfigError(f"unknown config key '{key}'; allowed top-level keys of a language-model SFT: "
                              f"{sorted(USED_TOP - {'hydra'})}")
        _check(value == defaults[key], key, value, f"left at its default {defaults[key]!r} on a language-model "
               "SFT (it concerns the RL runs)")
    lm_raw = dict(raw.get("lm") or {})
    for key, instead in UNUSED_LM.items():
        if key in lm_raw:
            _check(lm_raw[key] == defaults["lm"][key], f"lm.{key}", lm_raw[key],
                   f"left at its default {defaults['lm'][key]!r} on a language-model SFT (use {instead})")
    sft_raw = dict(raw.get("sft") or {})
    sft = build_section(SFTConfig, sft_raw, "sft")
    sft.validate()
    for key, instead in UNUSED_SFT.items():
        default = getattr(SFTConfig(), key)
        _check(getattr(sft, key) == default, f"sft.{key}", getattr(sft, key),
               f"left at its default {default!r} on a language-model SFT (use {instead})")
    env = build_section(EnvConfig, raw["env"], "env")
    model = parse_section(ModelConfig, raw.get("model"), "model")
    lm = parse_section(LMTrainConfig, lm_raw, "lm")
    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    top = {k: _coerce(k, raw[k], fields[k].type) for k in ("seed", "eval_episodes", "eval_deterministic")
           if k in raw}
    settings = LMSettings(algo=sft, model=model, lm=lm, env=env, **top)
    _check(settings.seed >= 0, "seed", settings.seed, ">= 0")
    _check(settings.eval_episodes >= 1, "eval_episodes", settings.eval_episodes, ">= 1 (held-out prompts)")
    return settings


def examples(run, num_examples: int) -> tuple[list[dict], list[list[int]]]:
    """``(rows, completion token ids)``: the first ``num_examples`` training rows in the task's seeded
    order and their reference completions, tokenized (no special tokens added) and ended by the
    model's first stop token."""
    task, tokenizer = run.task, run.model.tokenizer
    _check(num_examples <= len(task.train), "sft.num_examples", num_examples,
           f"<= the task's {len(task.train)} training prompts")
    if task.reference is None:
        raise ConfigError(f"{run.settings.env.id} has no reference answers for SFT")
    if not tokenizer.stop_ids:
        raise ConfigError("the model's tokenizer has no stop token: an SFT completion could not end")
    rows = data.train_rows(task, 0, num_examples)
    return rows, [tokenizer.encode(task.reference(row), add_special_tokens=False) + [tokenizer.stop_ids[0]]
                  for row in rows]


def execute(settings: LMSettings, out_dir) -> dict:
    """Train, evaluate before and after, and write the run dir; returns the summary."""
    import jax

    from purejaxrl_opt.core.algos.sft_lm import LMSFT
    from purejaxrl_opt.core.stages.lm_policy import Batch
    from purejaxrl_opt.host.artifacts import describe_device, git_commit, write_json_atomic
    from purejaxrl_opt.host.lm import runner

    sft, lm = settings.algo, settings.lm
    out_dir = Path(out_dir)
    if (out_dir / "model").exists():
        raise ConfigError(f"{out_dir / 'model'} already exists: choose another run dir")
    batch_size = sft.batch_size
    micro = lm.micro_batch_size or batch_size
    _check(batch_size % micro == 0, "lm.micro_batch_size", lm.micro_batch_size,
           f"0 or a divisor of sft.batch_size = {batch_size}")
    run = runner.build(settings, LMSFT, {"sft.batch_size": batch_size, "the micro-batch": micro}, sft.steps)
    rows, completions = examples(run, sft.num_examples)
    _check(batch_size <= len(rows), "sft.batch_size", batch_size, f"<= sft.num_examples = {len(rows)}")
    length = max(len(c) for c in completions)
    model_cfg = run.model.cfg
    _check(run.trainer.prompt_len + length <= model_cfg.max_position_embeddings, "sft.num_examples", sft.num_examples,
           f"examples that fit the model: a prompt ({run.trainer.prompt_len} tokens) and its reference "
           f"({length}) exceed max_position_embeddings = {model_cfg.max_position_embeddings}")
    pad = run.model.tokenizer.pad_id
    answers = np.full((len(rows), length), pad, np.int32)
    for i, ids in enumerate(completions):
        answers[i, :len(ids)] = ids
    lengths = np.asarray([len(c) for c in completions], np.int32)
    say = print
    say(f"[lm-sft] {settings.env.id} | {len(rows)} examples | {sft.steps} steps x batch {batch_size} | "
        f"model {run.model.source} ({model_cfg.num_layers} layers, d {model_cfg.hidden_size})")
    trainer = run.trainer
    init_key, _ = jax.random.split(jax.random.key(settings.seed))
    state, frozen = trainer.init(run.model.params, init_key)
    if settings.model.lora_rank == 0:
        run.model = dataclasses.replace(run.model, params=None)
    state, frozen = run.place_state(state), run.place_state(frozen)
    out_dir.mkdir(parents=True, exist_ok=True)
    policy_params = jax.jit(trainer.current_policy)
    eval_seed = settings.seed + 1_000_003  # the RL runs' held-out seed: the same evaluation
    before, _ = runner.evaluate(run, policy_params(state.trained, frozen), eval_seed)
    say(f"[lm-sft] held-out before: {before}")
    order = _batches(len(rows), batch_size, sft.steps, settings.seed)
    metrics, start = [], time.perf_counter()
    for step, index in enumerate(order):
        tokens, mask = run.prompt_batch([rows[i] for i in index])
        batch = run.place_batch(Batch(tokens, mask, answers[index], lengths[index],
                                      np.zeros(len(index), np.float32)))
        state, out = trainer.step(state, frozen, batch, donate=True)
        metrics.append({"step": step + 1, **{k: float(v) for k, v in jax.device_get(out).items()}})
        if (step + 1) % max(1, sft.steps // 10) == 0 or step + 1 == sft.steps:
            say(f"[lm-sft] step {step + 1}/{sft.steps}  loss {metrics[-1]['loss']:.4f}")
    train_seconds = time.perf_counter() - start
    final = jax.device_get(policy_params(state.trained, frozen))
    after, eval_examples = runner.evaluate(run, final, eval_seed)
    say(f"[lm-sft] held-out after: {after}")
    with open(out_dir / "metrics.csv", "w") as handle:
        handle.write("step,loss,learning_rate\n")
        for row in metrics:
            handle.write(f"{row['step']},{row['loss']:.6g},{row['learning_rate']:.6g}\n")
    with open(out_dir / "examples.jsonl", "w") as handle:
        for example in eval_examples[:lm.num_examples]:
            handle.write(json.dumps({"split": "held_out", **example}) + "\n")
    dataclasses.replace(run.model, cfg=trainer.cfg, params=final).save(out_dir / "model")
    summary = {
        "algo": "sft", "env": settings.env.id, "model": run.model.source, "model_path": settings.model.path,
        "config": settings.fingerprint(), "examples": len(rows), "steps": sft.steps,
        "final_loss": metrics[-1]["loss"], "held_out_before": before, "held_out_after": after,
        "held_out_prompts": len(run.held_out), "prompt_length": trainer.prompt_len,
        "train_seconds": train_seconds, "model_dir": str(out_dir / "model"),
        "params_digest": runner.params_digest(final), "device": describe_device(), "commit": git_commit(),
    }
    write_json_atomic(out_dir / "summary.json", summary)
    say(f"[lm-sft] model: {out_dir / 'model'}")
    return summary


def _batches(num: int, batch_size: int, steps: int, seed: int) -> list[np.ndarray]:
    """Each step's example indices: consecutive slices of passes over the examples, each pass in the
    order of a permutation drawn from ``(seed, pass)``."""
    flat, passes = [], 0
    while len(flat) < steps * batch_size:
        flat.extend(np.random.default_rng([seed, passes]).permutation(num).tolist())
        passes += 1
    return [np.asarray(flat[s * batch_size:(s + 1) * batch_size]) for s in range(steps)]


def main(cfg, out_dir) -> float:
    """The SFT CLI's language-model path; returns the held-out accuracy after training (the mean
    held-out reward when the task has no accuracy reward)."""
    settings = parse_settings(cfg)
    summary = execute(settings, out_dir)
    after = summary["held_out_after"]
    return float(after.get("accuracy", after["reward"]))
