"""One GRPO step on a pretrained language model — generation, rewards, update — ours vs TRL's
``GRPOTrainer`` (PyTorch, CPU) vs Tunix's ``GRPOLearner`` (JAX, CPU): same model, prompts, group size,
lengths and optimiser settings.

    python experiments/bench_grpo_step.py                                   # ours, TRL: 4 x 4, 32 tokens
    python experiments/bench_grpo_step.py --sides ours,trl,tunix --repeats 3 --prompts 4 --group 4 \\
        --new-tokens 32 --updates 4 --ref-python /tmp/refvenv/bin/python --tunix-python /tmp/tunixvenv/bin/python

``--model`` is a Hugging Face directory that every side loads. For the shipped SmolLM2, the project
writes it from the GGUF (dequantised to float32; ``LanguageModel.save``, as ``experiments/lm_parity.py
--save-dir`` does, without that script's reference file):

    PYTHONPATH=.:experiments python -c "from lm_parity import shipped_gguf; \\
        from purejaxrl_opt.host.lm import load; load(shipped_gguf()).save('/tmp/smollm2_hf')"

TRL and Tunix run in their own venvs, each started by this script in a fresh process (``trl-side`` /
``tunix-side`` modes of this file, in ``--ref-python`` / ``--tunix-python``); nothing of the project
depends on them:

    python3 -m venv /tmp/refvenv        # torch 2.13.0 is the CPU build this machine keeps on disk
    /tmp/refvenv/bin/pip install torch==2.13.0 && /tmp/refvenv/bin/pip install trl==1.16.0 transformers datasets
    python3 -m venv /tmp/tunixvenv
    /tmp/tunixvenv/bin/pip install jax==0.9.2 jaxlib==0.9.2 flax==0.12.6 google-tunix==0.1.7

The sides run one after the other on the same machine; ``--repeats R`` runs them in turn R times
(ours, trl, tunix, ours, trl, tunix, ...; each run a new process, so each compiles / warms up again),
so that a slow phase of the machine falls on every side. Before each run this process waits up to
``--settle`` seconds for the 1-minute load to fall below 1.5 and records it. Each side uses the
machine's cores (XLA's threads; torch with ``torch.set_num_threads(cores)``).

The same work on every side: the arithmetic task (``env=lm/arithmetic``, seed 0), the training rows
of updates 0..K-1 in our order (``data.train_rows``), each prompt as one user turn through the model's
chat template; ``--group`` completions per prompt sampled at temperature 1 (no top-k / top-p) up to
``--new-tokens`` tokens, stopping at the end-of-turn token; rewards format (0.1) + correct (1.0), the
project's reward functions over the decoded text (TRL and Tunix call the same Python functions); one
AdamW step per batch on the whole batch (one micro-batch), lr 1e-5 constant, beta = 0 (no reference
model), one optimisation pass per generation (``num_iterations=1``), gradient clipping at 1.0, float32.

* ours: ``python -m purejaxrl_opt.train algo=grpo env=lm/arithmetic model.path=...`` (the CLI as a
  user runs it); its metrics.csv times every update by phase (``time/generate_s``, ``time/reward_s``,
  ``time/update_s``);
* TRL: ``GRPOTrainer(...).train()`` for ``--updates`` steps; a callback times every step (TRL's step
  generates, rewards and updates), and a wrapper its ``_generate_and_score_completions``;
* Tunix (0.1.7): ``GRPOLearner(RLCluster(...)).train(batches)`` with ``tunix.models.llama3`` loaded from
  ``--model`` (SmolLM2's config, tokenizer adjustments and the rope-theta fix of
  experiments/bench_generate_tunix.py), actor and rollout colocated on one mesh and sharing weights
  (no weight sync), the ``vanilla`` rollout (Tunix's sampler), ``reference=None``, AdamW as
  ``optax.chain(clip_by_global_norm(1.0), adamw(1e-5, weight_decay=0))``; wrappers on the instance time
  each global step, its generation + rewards + advantages and its actor update.

Where Tunix's step differs from the others' (read before comparing times):

* prompt width: every step's prompts are left-padded to one width, the longest prompt of all the
  steps (given as ``max_prompt_length``, so the jitted sampler compiles once; Tunix pads to the next
  power of two only when a batch holds a longer prompt than that width) with a KV cache of width +
  ``--new-tokens``; the update's forward runs over width + ``--new-tokens`` positions for every row
  whatever the sampled lengths (Tunix pads completions to ``max_tokens_to_generate``);
* the completion is the tokens before the end-of-turn token (Tunix's sampler cuts there): the update
  does not score that token, and the mean completion length counts the tokens before it;
* loss: Tunix's ``loss_agg_mode`` default ``sequence-mean-token-mean`` (each completion's token mean,
  then the mean over completions; ours' default ``loss_norm=sequence`` is the same, TRL 1.16's default
  ``loss_type=dapo`` a token mean over the batch); advantages (r - mean) / (std + 1e-6) per group;
* rewards: Tunix sums its reward functions unweighted, so the format function returns 0.1 x the
  project's;
* its update is dispatched asynchronously; the update's timer waits for the new weights (the next
  generation waits for them anyway);
* sampling: Tunix's sampler draws from one key per call (``RolloutConfig.seed``, folded with the
  decoding step only), the same at every step.

Per side and repeat: the seconds of every step, and the median over the steps after the first (the
first compiles / warms up). Per side: the median over repeats of those medians; the ratios TRL / ours
and Tunix / ours of these medians, and per repeat. Writes ``--out``/results.{json,md} with the commit and
the command (results.json: ``sides[side]`` holds ``median_step_s``, ``repeat_median_step_s`` and
``repeats``, one record per run; ``--keep`` carries over the sides of an earlier results.json this run
does not measure, in their shape).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEED = 0
LR = 1e-5


# --------------------------------------------------------------------------- TRL's side (its venv)
def trl_side(spec: dict) -> dict:
    import importlib.util

    import torch
    import transformers
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    torch.set_num_threads(spec["threads"])
    # the project's reward functions (tasks.py imports only the standard library and numpy)
    module_spec = importlib.util.spec_from_file_location("lm_tasks", ROOT / "purejaxrl_opt/host/lm/tasks.py")
    tasks = importlib.util.module_from_spec(module_spec)
    sys.modules["lm_tasks"] = tasks  # (its dataclasses look their module up)
    module_spec.loader.exec_module(tasks)

    def texts(completions):
        return [c[0]["content"] if isinstance(c, list) else c for c in completions]

    def format_reward(prompts, completions, **columns):
        return tasks.answer_format(prompts, texts(completions), **columns)

    def correct_reward(prompts, completions, answer, **columns):
        return tasks.number_correct(prompts, texts(completions), answer, **columns)

    rows = spec["rows"]
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"]}], "answer": r["answer"]}
                                 for r in rows])
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32)
    out_dir = tempfile.mkdtemp(prefix="trl_grpo_")
    config = trl.GRPOConfig(
        output_dir=out_dir, per_device_train_batch_size=spec["prompts"] * spec["group"],
        gradient_accumulation_steps=1, num_generations=spec["group"], max_completion_length=spec["new_tokens"],
        max_steps=spec["updates"], learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, adam_beta2=0.999, max_grad_norm=1.0, beta=0.0, num_iterations=1,
        temperature=1.0, top_p=1.0, top_k=0, reward_weights=[0.1, 1.0], shuffle_dataset=False,
        logging_steps=1, report_to=[], save_strategy="no", use_cpu=True, bf16=False, fp16=False, seed=SEED,
        dataloader_num_workers=0)
    trainer = trl.GRPOTrainer(model=model, reward_funcs=[format_reward, correct_reward], args=config,
                              train_dataset=dataset, processing_class=tokenizer)

    steps: list[float] = []
    logged: list[dict] = []  # TRL's log records (completion lengths, rewards)

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            steps.append(time.perf_counter() - self.start)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs:
                logged.append(dict(logs))

    trainer.add_callback(Timer())
    generation: list[float] = []  # TRL's generation + rewards of each step (the rest of it is the update)
    generate_and_score = trainer._generate_and_score_completions

    def timed_generate_and_score(*args, **kwargs):
        start = time.perf_counter()
        out = generate_and_score(*args, **kwargs)
        generation.append(time.perf_counter() - start)
        return out

    trainer._generate_and_score_completions = timed_generate_and_score
    trainer.train()
    lengths = [log["completions/mean_length"] for log in logged if "completions/mean_length" in log]
    rewards = [log["reward"] for log in logged if "reward" in log]
    return {"step_s": steps, "generate_and_reward_s": generation, "mean_completion_length": lengths, "reward": rewards,
            "versions": {"trl": trl.__version__, "transformers": transformers.__version__,
                         "torch": torch.__version__}, "torch_threads": torch.get_num_threads()}


# --------------------------------------------------------------------------- Tunix's side (its venv)
def tunix_side(spec: dict) -> dict:
    """Tunix's GRPOLearner on its RLCluster (actor and rollout colocated on one mesh, sharing the
    weights; no reference model with beta = 0), ``train`` over ``updates`` batches of ``prompts``
    prompts. Its own phases are timed by wrapping three of its methods on the instance: the global step
    (the step), the generation + rewards + advantages (``_generate_and_compute_advantage``) and the
    actor update (``RLCluster.update_actor``, waited on: Tunix dispatches the update asynchronously and
    the next generation waits on its weights)."""
    import importlib.util
    from importlib.metadata import version

    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx
    from tunix.models.llama3 import params as llama_params
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl.grpo import grpo_learner
    from tunix.rl.rollout import base_rollout

    sys.path.insert(0, str(ROOT / "experiments"))
    import bench_generate_tunix as shared  # SmolLM2 in tunix.models.llama3: config, tokenizer, rope fix

    module_spec = importlib.util.spec_from_file_location("lm_tasks", ROOT / "purejaxrl_opt/host/lm/tasks.py")
    tasks = importlib.util.module_from_spec(module_spec)
    sys.modules["lm_tasks"] = tasks
    module_spec.loader.exec_module(tasks)

    # Tunix sums its reward functions unweighted: the format weight 0.1 goes into the function
    def format_reward(prompts, completions, **columns):
        return [0.1 * r for r in tasks.answer_format(prompts, list(completions), **columns)]

    def correct_reward(prompts, completions, answer, **columns):
        return tasks.number_correct(prompts, list(completions), answer, **columns)

    hf = Path(spec["model"])
    mcfg = shared.model_config(hf)
    shared.pass_rope_theta(mcfg.rope_theta)
    tok = shared.tokenizer(hf)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    rows = spec["rows"]
    texts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], add_generation_prompt=True,
                                     tokenize=False) for r in rows]
    # one prompt width for every step (the longest prompt; a jitted sampler recompiles per width).
    # Tunix pads to the next power of two only when the width given is shorter than the batch's longest
    width = max(len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts)
    mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    model = llama_params.create_model_from_safe_tensors(str(hf), mcfg, mesh, dtype=jnp.float32)

    optimizer = optax.chain(optax.clip_by_global_norm(1.0),
                            optax.adamw(LR, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0))
    training = rl_cluster_lib.RLTrainingConfig(
        actor_optimizer=optimizer, eval_every_n_steps=10 ** 9, max_steps=spec["updates"],
        checkpoint_root_directory=None, metrics_logging_options=None)
    rollout = base_rollout.RolloutConfig(
        max_tokens_to_generate=spec["new_tokens"], temperature=1.0, top_p=1.0, top_k=None,
        max_prompt_length=width, kv_cache_size=width + spec["new_tokens"], eos_tokens=[eos], seed=SEED)
    cluster = rl_cluster_lib.RLCluster(
        actor=model, reference=None, tokenizer=tok,
        cluster_config=rl_cluster_lib.ClusterConfig(
            role_to_mesh={rl_cluster_lib.Role.ACTOR: mesh, rl_cluster_lib.Role.ROLLOUT: mesh},
            rollout_engine="vanilla", offload_to_cpu=False, training_config=training, rollout_config=rollout))
    algo = grpo_learner.GRPOConfig(num_generations=spec["group"], num_iterations=1, beta=0.0, epsilon=0.2,
                                   loss_algo="grpo")
    learner = grpo_learner.GRPOLearner(rl_cluster=cluster, algo_config=algo,
                                       reward_fns=[format_reward, correct_reward])

    steps: list[float] = []
    generation: list[float] = []
    updates: list[float] = []
    lengths: list[float] = []
    rewards: list[float] = []

    def timed(fn, into, after=None):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            jax.block_until_ready(out if after is None else after())
            into.append(time.perf_counter() - start)
            return out
        return wrapper

    compute_rewards = learner._compute_rewards

    def recorded_rewards(*args, **kwargs):
        out = compute_rewards(*args, **kwargs)
        rewards.append(float(out.mean()))
        return out

    learner._compute_rewards = recorded_rewards
    generate = timed(learner._generate_and_compute_advantage, generation)

    def generate_and_measure(*args, **kwargs):
        example = generate(*args, **kwargs)
        lengths.append(float(example.completion_mask.sum(axis=-1).mean()))
        return example

    learner._generate_and_compute_advantage = generate_and_measure
    cluster.update_actor = timed(cluster.update_actor, updates, lambda: nnx.state(cluster.actor_trainer.model))
    learner._run_global_step = timed(learner._run_global_step, steps,
                                     lambda: nnx.state(cluster.actor_trainer.model))
    # a batch's columns as numpy arrays (the learner repeats each row G times with a tree map over them)
    import numpy as np

    n = spec["prompts"]
    batches = [{"prompts": np.array(texts[i:i + n]), "answer": np.array([r["answer"] for r in rows[i:i + n]])}
               for i in range(0, len(rows), n)]
    learner.train(batches)
    return {"step_s": steps, "generate_and_reward_s": generation, "update_s": updates,
            "mean_completion_length": lengths, "reward": rewards, "prompt_width": width,
            "optimizer_steps": cluster.actor_trainer.train_steps,
            "cache_size": width + spec["new_tokens"], "device": str(jax.devices()[0]),
            "versions": {n: version(n) for n in ("google-tunix", "jax", "jaxlib", "flax", "optax", "transformers")}}


# --------------------------------------------------------------------------- our side, the driver
def _rows(num_prompts: int, updates: int) -> list[dict]:
    from purejaxrl_opt.host.lm import data

    task = data.load_task("lm/arithmetic", {"seed": SEED})
    rows = []
    for update in range(updates):
        rows += [{"prompt": r["prompt"], "answer": r["answer"]} for r in data.train_rows(task, update, num_prompts)]
    return rows


def _wait_quiet(settle: float) -> float:
    deadline = time.time() + settle
    while os.getloadavg()[0] >= 1.5 and time.time() < deadline:
        time.sleep(2)
    return os.getloadavg()[0]


def ours_side(args, run_dir: Path) -> dict:
    command = [sys.executable, "-m", "purejaxrl_opt.train", "algo=grpo", "env=lm/arithmetic",
               f"model.path={args.model}", f"seed={SEED}", f"lm.num_updates={args.updates}",
               f"algo.num_groups={args.prompts}", f"algo.group_size={args.group}",
               f"lm.max_new_tokens={args.new_tokens}", f"algo.lr={LR}", "algo.beta=0.0",
               "algo.update_epochs=1", "algo.num_minibatches=1", "lm.micro_batch_size=0",
               "lm.temperature=1.0", "lm.top_k=0", "lm.top_p=1.0", "model.dtype=float32",
               "eval_episodes=4", "lm.eval_batch_size=4", "lm.save_model=false", "logger=none",
               "progress.mode=off", f"hydra.run.dir={run_dir}"]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"our run failed:\n{done.stderr[-3000:]}")
    with open(run_dir / "metrics.csv") as handle:
        rows = list(csv.DictReader(handle))
    phases = ("generate", "reward", "update")
    length_key = next((k for k in rows[0] if "length" in k), None)
    return {"step_s": [sum(float(r[f"time/{p}_s"]) for p in phases) for r in rows],
            "phase_s": {p: [float(r[f"time/{p}_s"]) for r in rows] for p in phases},
            "mean_completion_length": [float(r[length_key]) for r in rows] if length_key else None,
            "length_column": length_key, "reward": [float(r["reward"]) for r in rows],
            "wall_s": time.perf_counter() - start, "command": " ".join(command[1:])}


def _venv_side(args, side: str, python: str, cores: int) -> dict:
    """TRL's or Tunix's side: this file in ``python`` (its venv), in a fresh process, with a spec file."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = {"model": args.model, "prompts": args.prompts, "group": args.group, "new_tokens": args.new_tokens,
                "updates": args.updates, "threads": cores, "rows": _rows(args.prompts, args.updates)}
        (Path(tmp) / "spec.json").write_text(json.dumps(spec))
        start = time.perf_counter()
        done = subprocess.run([python, __file__, f"{side}-side", str(Path(tmp) / "spec.json")],
                              cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{side}'s run failed:\n{done.stderr[-3000:]}")
        return {**json.loads(done.stdout.strip().splitlines()[-1]), "wall_s": time.perf_counter() - start}


def _median_after_first(values) -> float | None:
    return statistics.median(values[1:]) if values and len(values) > 1 else None


def _generation(run: dict) -> list[float]:
    """Each step's generation + rewards (ours: its generate and reward phases)."""
    if "phase_s" in run:
        return [g + w for g, w in zip(run["phase_s"]["generate"], run["phase_s"]["reward"])]
    return run.get("generate_and_reward_s") or []


def _runs(record: dict) -> list[dict]:
    """A side's runs: its ``repeats``, or the record itself (results.json written before --repeats)."""
    return record.get("repeats") or [record]


SIDES = ("ours", "trl", "tunix")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("trl-side", "tunix-side"):
        spec = json.loads(Path(sys.argv[2]).read_text())
        print(json.dumps((trl_side if sys.argv[1] == "trl-side" else tunix_side)(spec)))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="/tmp/smollm2_hf", help="a Hugging Face directory every side loads")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step")
    parser.add_argument("--group", type=int, default=4, help="completions per prompt (G)")
    parser.add_argument("--new-tokens", type=int, default=32, help="completion length limit")
    parser.add_argument("--updates", type=int, default=4, help="steps per side and repeat (the first warms up)")
    parser.add_argument("--ref-python", default="/tmp/refvenv/bin/python", help="the TRL venv's python")
    parser.add_argument("--tunix-python", default="/tmp/tunixvenv/bin/python", help="the Tunix venv's python")
    parser.add_argument("--sides", default="ours,trl", help="comma-separated, of: " + ", ".join(SIDES))
    parser.add_argument("--repeats", type=int, default=1,
                        help="run the sides in turn this many times (ours, trl, tunix, ours, ...), each a fresh "
                             "process")
    parser.add_argument("--settle", type=float, default=120.0)
    parser.add_argument("--out", default="experiments/results/bench_grpo_step")
    parser.add_argument("--keep", action="store_true",
                        help="keep the sides of --out's results.json that this run does not measure")
    args = parser.parse_args()
    sides = args.sides.split(",")
    unknown = [side for side in sides if side not in SIDES]
    if unknown or len(set(sides)) != len(sides):
        raise SystemExit(f"--sides {args.sides!r}: each of {', '.join(SIDES)} at most once")
    if args.repeats < 1:
        raise SystemExit("--repeats must be at least 1")
    if not Path(args.model, "config.json").is_file():
        raise SystemExit(f"--model {args.model}: no config.json there (a Hugging Face directory is needed)")
    sys.path.insert(0, str(ROOT / "experiments"))
    import provenance

    results: dict = {}
    previous = ROOT / args.out / "results.json"
    if args.keep and previous.is_file():
        kept = json.loads(previous.read_text())
        results = {side: {**record, "kept_from": {"commit": kept["commit"], "command": kept["command"]}}
                   for side, record in kept["sides"].items() if side not in sides}
    cores = os.cpu_count()
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    for repeat in range(args.repeats):
        for side in sides:
            load = _wait_quiet(args.settle)
            print(f"[bench_grpo_step] repeat {repeat}, {side}: 1-min load {load:.2f} at start", flush=True)
            if side == "ours":
                with tempfile.TemporaryDirectory() as tmp:
                    run = ours_side(args, Path(tmp) / "run")
            else:
                run = _venv_side(args, side, args.ref_python if side == "trl" else args.tunix_python, cores)
            run["load_at_start"] = load
            run["median_step_s"] = _median_after_first(run["step_s"])
            runs[side].append(run)
            print(f"[bench_grpo_step] repeat {repeat}, {side}: steps {[round(s, 1) for s in run['step_s']]} s, "
                  f"generation + rewards {[round(s, 1) for s in _generation(run)]} s, "
                  f"mean completion length {run.get('mean_completion_length')}, reward {run.get('reward')}",
                  flush=True)
    for side in sides:
        medians = [run["median_step_s"] for run in runs[side]]
        generation = [_median_after_first(_generation(run)) for run in runs[side]]
        results[side] = {
            "median_step_s": statistics.median(medians) if None not in medians else None,
            "repeat_median_step_s": medians,
            "median_generate_and_reward_s": (statistics.median(generation) if None not in generation else None),
            "repeats": runs[side]}

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a and b else None

    summary: dict = {"repeats": args.repeats}
    for other in ("trl", "tunix"):
        if "ours" in results and other in results:
            summary[f"{other}_over_ours_step_time"] = ratio(results[other]["median_step_s"],
                                                            results["ours"]["median_step_s"])
            if other in runs and "ours" in runs:  # both measured now: the ratio of each repeat's medians
                summary[f"{other}_over_ours_per_repeat"] = [
                    ratio(theirs["median_step_s"], ours["median_step_s"])
                    for theirs, ours in zip(runs[other], runs["ours"])]
    record = {**provenance.stamp(), "machine": provenance.machine(),
              "settings": {"model": args.model, "prompts": args.prompts, "group": args.group,
                           "new_tokens": args.new_tokens, "updates": args.updates, "repeats": args.repeats,
                           "order": sides, "dtype": "float32", "cores": cores, "task": "lm/arithmetic",
                           "seed": SEED, "lr": LR, "beta": 0.0},
              "sides": results, "summary": summary}
    out = ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(record, indent=1))

    def numbers(values, digits=1) -> str:
        return ", ".join("n/a" if v is None else f"{v:.{digits}f}" for v in values or [])

    lines = ["| side | repeat | step seconds (each) | median after the first | of it: generation + rewards "
             "| of it: update | mean completion length | reward |", "|---|---:|---|---:|---:|---:|---|---|"]
    for side, r in results.items():
        for repeat, run in enumerate(_runs(r)):
            gen = _median_after_first(_generation(run))
            step = run["median_step_s"]
            lines.append(f"| {side} | {repeat} | {numbers(run['step_s'])} | {numbers([step])} | {numbers([gen])} | "
                         f"{numbers([step - gen if step is not None and gen is not None else None])} | "
                         f"{numbers(run.get('mean_completion_length'))} | {numbers(run.get('reward'), 2)} |")
    lines += ["", "| side | median over repeats of each repeat's median step | each repeat's median step |",
              "|---|---:|---|"]
    for side, r in results.items():
        medians = r.get("repeat_median_step_s") or [r["median_step_s"]]
        lines.append(f"| {side} | {numbers([r['median_step_s']], 2)} | {numbers(medians, 2)} |")
    for other, name in (("trl", "TRL"), ("tunix", "Tunix")):
        if f"{other}_over_ours_step_time" in summary:
            line = (f"\n{name}'s step time over ours (medians over repeats): "
                    f"**{numbers([summary[f'{other}_over_ours_step_time']], 2)}x**")
            if f"{other}_over_ours_per_repeat" in summary:
                line += f"; per repeat: {numbers(summary[f'{other}_over_ours_per_repeat'], 2)}"
            lines.append(line)
    (out / "results.md").write_text("\n".join(lines) + "\n\n" + provenance.markdown_footer() + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
