"""One GRPO step on a pretrained language model — generation, rewards, update — ours vs TRL's
``GRPOTrainer`` (PyTorch, CPU), same model, prompts, group size, lengths and optimiser settings.

    python experiments/bench_grpo_step.py                                   # SmolLM2-135M, 4 x 4, 32 tokens
    python experiments/bench_grpo_step.py --model /tmp/smollm2_hf --prompts 4 --group 4 --new-tokens 32 \\
        --updates 4 --ref-python /tmp/refvenv/bin/python

``--model`` is a Hugging Face directory that both load (for the shipped SmolLM2, the one
``experiments/lm_parity.py --save-dir`` writes from the GGUF). TRL runs in its own venv
(``--ref-python``: torch CPU + transformers, see experiments/lm_reference_smollm2.py, plus
``pip install trl datasets``); nothing of the project depends on it. The two sides run one after the
other on the same machine (this process waits up to ``--settle`` seconds for the 1-minute load to fall
below 1.5 before each and records it), each with the machine's cores (XLA's threads; torch with
``torch.set_num_threads(cores)``).

The same work on both sides: the arithmetic task (``env=lm/arithmetic``, seed 0), the training rows
of updates 0..K-1 in our order (``data.train_rows``), each prompt as one user turn through the model's
chat template; ``--group`` completions per prompt sampled at temperature 1 (no top-k / top-p) up to
``--new-tokens`` tokens, stopping at the end-of-turn token; rewards format (0.1) + correct (1.0), the
project's reward functions over the decoded text (TRL calls the same Python functions); one AdamW step
per batch on the whole batch (one micro-batch), lr 1e-5 constant, beta = 0 (no reference model), one
optimisation pass per generation (TRL ``num_iterations=1``), gradient clipping at 1.0, float32.

* ours: ``python -m purejaxrl_opt.train algo=grpo env=lm/arithmetic model.path=...`` (the CLI as a
  user runs it); its metrics.csv times every update by phase (``time/generate_s``, ``time/reward_s``,
  ``time/update_s``);
* TRL: ``GRPOTrainer(...).train()`` for ``--updates`` steps; a callback times every step (TRL's step
  generates, rewards and updates).

Per side: the seconds of every step, and the median over the steps after the first (the first
compiles / warms up); the ratio is TRL's median step over ours. Writes ``--out``/results.{json,md}
with the commit and the command.
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


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "trl-side":
        spec = json.loads(Path(sys.argv[2]).read_text())
        print(json.dumps(trl_side(spec)))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="/tmp/smollm2_hf", help="a Hugging Face directory both sides load")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step")
    parser.add_argument("--group", type=int, default=4, help="completions per prompt (G)")
    parser.add_argument("--new-tokens", type=int, default=32, help="completion length limit")
    parser.add_argument("--updates", type=int, default=4, help="steps per side (the first warms up)")
    parser.add_argument("--ref-python", default="/tmp/refvenv/bin/python", help="the TRL venv's python")
    parser.add_argument("--sides", default="ours,trl")
    parser.add_argument("--settle", type=float, default=120.0)
    parser.add_argument("--out", default="experiments/results/bench_grpo_step")
    parser.add_argument("--keep", action="store_true",
                        help="keep the sides of --out's results.json that this run does not measure")
    args = parser.parse_args()
    if not Path(args.model, "config.json").is_file():
        raise SystemExit(f"--model {args.model}: no config.json there (a Hugging Face directory is needed)")
    sys.path.insert(0, str(ROOT / "experiments"))
    import provenance

    results: dict = {}
    previous = ROOT / args.out / "results.json"
    if args.keep and previous.is_file():
        kept = json.loads(previous.read_text())
        results = {side: {**record, "kept_from": {"commit": kept["commit"], "command": kept["command"]}}
                   for side, record in kept["sides"].items() if side not in args.sides.split(",")}
    cores = os.cpu_count()
    for side in args.sides.split(","):
        results.pop(side, None)
        load = _wait_quiet(args.settle)
        print(f"[bench_grpo_step] {side}: 1-min load {load:.2f} at start", flush=True)
        if side == "ours":
            with tempfile.TemporaryDirectory() as tmp:
                results["ours"] = ours_side(args, Path(tmp) / "run")
        elif side == "trl":
            with tempfile.TemporaryDirectory() as tmp:
                spec = {"model": args.model, "prompts": args.prompts, "group": args.group,
                        "new_tokens": args.new_tokens, "updates": args.updates, "threads": cores,
                        "rows": _rows(args.prompts, args.updates)}
                (Path(tmp) / "spec.json").write_text(json.dumps(spec))
                start = time.perf_counter()
                done = subprocess.run([args.ref_python, __file__, "trl-side", str(Path(tmp) / "spec.json")],
                                      cwd=ROOT, capture_output=True, text=True)
                if done.returncode != 0:
                    raise SystemExit(f"TRL's run failed:\n{done.stderr[-3000:]}")
                results["trl"] = {**json.loads(done.stdout.strip().splitlines()[-1]),
                                  "wall_s": time.perf_counter() - start}
        else:
            raise SystemExit(f"--sides: unknown side {side!r} (ours, trl)")
        results[side]["load_at_start"] = load
        steady = results[side]["step_s"][1:]
        results[side]["median_step_s"] = statistics.median(steady) if steady else None
        print(f"[bench_grpo_step] {side}: steps {[round(s, 1) for s in results[side]['step_s']]} s", flush=True)
    summary = {}
    if "ours" in results and "trl" in results:
        summary["trl_over_ours_step_time"] = results["trl"]["median_step_s"] / results["ours"]["median_step_s"]
    record = {**provenance.stamp(), "machine": provenance.machine(), "settings": {"model": args.model, "prompts": args.prompts, "group": args.group,
                                                  "new_tokens": args.new_tokens, "updates": args.updates,
                                                  "dtype": "float32", "cores": cores, "task": "lm/arithmetic",
                                                  "seed": SEED, "lr": LR, "beta": 0.0},
              "sides": results, "summary": summary}
    out = ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(record, indent=1))
    lines = ["| side | step seconds (each) | median after the first | of it: generation + rewards | of it: update "
             "| mean completion length | reward |", "|---|---|---:|---:|---:|---|---|"]
    for side, r in results.items():
        lengths = r.get("mean_completion_length") or []
        if "phase_s" in r:
            generation = [g + w for g, w in zip(r["phase_s"]["generate"], r["phase_s"]["reward"])]
        else:
            generation = r.get("generate_and_reward_s") or []
        gen = statistics.median(generation[1:]) if len(generation) > 1 else float("nan")
        lines.append(f"| {side} | {', '.join(f'{s:.1f}' for s in r['step_s'])} | {r['median_step_s']:.1f} | "
                     f"{gen:.1f} | {r['median_step_s'] - gen:.1f} | "
                     f"{', '.join(f'{x:.1f}' for x in lengths)} | {', '.join(f'{x:.2f}' for x in r['reward'])} |")
    if summary:
        lines.append(f"\nTRL's step time over ours (medians): **{summary['trl_over_ours_step_time']:.2f}x**")
    (out / "results.md").write_text("\n".join(lines) + "\n\n" + provenance.markdown_footer() + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
