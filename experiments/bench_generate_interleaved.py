"""Generation speed of ours, transformers' ``generate`` (PyTorch CPU) and Tunix's sampler, measured in
turn on the same machine with the same prompts, lengths and batch, so that all three see the same
background load.

    python experiments/bench_generate_interleaved.py --repeats 3
    python experiments/bench_generate_interleaved.py --repeats 5 --hf-dir /tmp/smollm2_hf \\
        --ref-python /tmp/refvenv/bin/python --tunix-python /tmp/tunixvenv/bin/python

transformers and Tunix run in their own venvs (see experiments/lm_reference_smollm2.py and
experiments/bench_generate_tunix.py for how they are made), each as one long-lived subprocess in its
``serve`` mode: it loads SmolLM2-135M-Instruct, warms up (compiles), and then times one repeat per
request. Ours runs in this process, with the XLA flags the project's CLI sets
(``purejaxrl_opt.host.xla_flags.set_default_xla_flags``); the subprocesses get this process's
environment as it was before those flags. Each repeat times every library once, in an order rotated
from repeat to repeat.

Prompts: the 10 prompts of experiments/results/lm_parity/smollm2_reference.npz (their token ids,
12 to 40 tokens), repeated to ``--batch`` rows and left-padded to the longest (40; Tunix's sampler pads
to the next power of two, 64); batch 1 runs the first ``--b1-prompts`` prompts one at a time, unpadded.
Greedy, 64 new tokens, no stop token (every row generates all 64). One repeat of a library times:
  * ``prefill_s``: one forward of the batch that returns the logits of every position (transformers'
    and Tunix's model call; ours :func:`causal_lm.logits`);
  * ``prefill_last_s`` (ours and transformers): the forward that generation runs first, filling the
    KV cache and returning only the last position's logits (ours ``causal_lm.prefill``; transformers
    with ``logits_to_keep=1``);
  * ``b1_t1_s`` / ``b1_t64_s`` and ``bB_t1_s`` / ``bB_t64_s``: generation of 1 and of 64 new tokens at
    batch 1 and at batch B (ours ``sampling.generate``); decode tokens/s = B * 63 / (t64 - t1), the 63
    steps after the first token, with the prompt's prefill cancelled out.

On a shared machine, other processes slow every library (transformers' two threads most). Before each
library's repeat the driver waits up to ``--settle`` seconds for the 1-minute load average to fall
below ``--quiet-load`` (the previous library's own run raises it); it records the load average before
and after and the CPU time that other processes used meanwhile (``/proc/stat`` minus the timed
process's own), and marks the repeat ``quiet`` when it began below ``--quiet-load``. The summary's
ratios use the quiet repeats' medians when every library has one, else all repeats' (and says which).
Writes ``--out`` (JSON) with the commit, the command, the per-repeat records and the summary.
"""

from __future__ import annotations

import os
import sys

from purejaxrl_opt.host.xla_flags import set_default_xla_flags

ENV_BEFORE_FLAGS = dict(os.environ)
set_default_xla_flags(language_model=True)  # before JAX starts: what `python -m purejaxrl_opt.generate` gets

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import provenance  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "experiments" / "results" / "lm_parity" / "smollm2_reference.npz"
NEW_TOKENS = 64
SIDES = ("ours", "transformers", "tunix")
KEYS = ("prefill_s", "prefill_last_s", "b1_t1_s", "b1_t64_s", "bB_t1_s", "bB_t64_s")


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _busy_jiffies() -> int:
    """All CPUs' non-idle time so far, in clock ticks (``/proc/stat``)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4]  # minus idle and iowait


def _own_jiffies(pid: int) -> int:
    """A process's user + system time so far, in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


class Ours:
    """The project's sampler in this process: compiled and warmed up at construction."""

    def __init__(self, batch: int, b1_prompts: int, ids: list[list[int]]):
        import jax
        import jax.numpy as jnp

        from purejaxrl_opt.core.models import causal_lm
        from purejaxrl_opt.core.models.sampling import SamplingConfig, generate
        from purejaxrl_opt.host.lm import load, pad_batch

        sys.path.insert(0, str(ROOT / "experiments"))
        from bench_generate import smollm2_path

        self.pid = os.getpid()
        start = time.perf_counter()
        lm = load(smollm2_path())
        self.load_s = time.perf_counter() - start
        texts = [str(t) for t in np.load(REFERENCE)["texts"]]
        if [lm.tokenizer.encode(t) for t in texts] != ids:
            raise RuntimeError(f"our tokenizer does not give {REFERENCE.name}'s prompt ids")
        params, cfg = lm.params, lm.cfg
        rows = [ids[i % len(ids)] for i in range(batch)]
        tokens, mask = (jnp.asarray(x) for x in pad_batch(rows, lm.tokenizer.pad_id, "left"))
        self.width, self.real_tokens = int(tokens.shape[1]), int(mask.sum())
        logits = jax.jit(causal_lm.logits, static_argnames="cfg")
        prefill = jax.jit(causal_lm.prefill, static_argnames=("cfg", "max_len"))
        key = jax.random.key(0)

        def gen(x, m, n):
            sampling = SamplingConfig(max_new_tokens=n, temperature=0.0, stop_ids=(), pad_id=lm.tokenizer.pad_id)
            jax.block_until_ready(generate(params, cfg, sampling, x, m, key))

        singles = [(jnp.asarray([r], jnp.int32), jnp.ones((1, len(r)), jnp.int32)) for r in ids[:b1_prompts]]
        self._steps = {
            "prefill_s": lambda: jax.block_until_ready(logits(params, cfg, tokens, mask)),
            "prefill_last_s": lambda: jax.block_until_ready(
                prefill(params, cfg, tokens, mask, max_len=self.width + NEW_TOKENS)),
            "b1_t1_s": lambda: [gen(x, m, 1) for x, m in singles],
            "b1_t64_s": lambda: [gen(x, m, NEW_TOKENS) for x, m in singles],
            "bB_t1_s": lambda: gen(tokens, mask, 1),
            "bB_t64_s": lambda: gen(tokens, mask, NEW_TOKENS),
        }
        start = time.perf_counter()
        for step in self._steps.values():  # compile every shape
            step()
        self.ready = {"jax": jax.__version__, "device": str(jax.devices()[0]), "padded_width": self.width,
                      "real_tokens": self.real_tokens, "load_s": round(self.load_s, 2),
                      "warmup_and_compile_s": round(time.perf_counter() - start, 2),
                      "xla_flags": os.environ.get("XLA_FLAGS", "")}

    def once(self) -> dict:
        return {k: _timed(step) for k, step in self._steps.items()}

    def close(self):
        pass


class Worker:
    """A library's ``serve`` subprocess: started, then waited on until it prints its ready line."""

    def __init__(self, name: str, command: list[str], timeout_s: float):
        self.name, self.command = name, command
        self.proc = subprocess.Popen(command, cwd=ROOT, env=ENV_BEFORE_FLAGS, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        self.pid = self.proc.pid
        self.ready = self._read(timeout_s)["ready"]

    def _read(self, timeout_s: float) -> dict:
        import selectors

        selector = selectors.DefaultSelector()
        selector.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                self.proc.kill()
                raise RuntimeError(f"{self.name} ({' '.join(self.command)}) said nothing in {timeout_s:.0f} s")
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.name} ({' '.join(self.command)}) exited with {self.proc.wait()}")
            if line.startswith("{"):  # anything else is the library's own chatter
                return json.loads(line)

    def once(self, timeout_s: float) -> dict:
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        return self._read(timeout_s)["seconds"]

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)


def rates(seconds: dict, batch: int, b1_prompts: int, real_tokens: int) -> dict:
    """Tokens/s from one library's seconds (a repeat's, or medians)."""
    out = {"prefill_real_tokens_per_s": real_tokens / seconds["prefill_s"],
           "decode_batch1_tokens_per_s": b1_prompts * (NEW_TOKENS - 1) / (seconds["b1_t64_s"] - seconds["b1_t1_s"]),
           f"decode_batch{batch}_tokens_per_s": batch * (NEW_TOKENS - 1) / (seconds["bB_t64_s"] - seconds["bB_t1_s"]),
           f"generate_batch{batch}_end_to_end_tokens_per_s": batch * NEW_TOKENS / seconds["bB_t64_s"]}
    if "prefill_last_s" in seconds:
        out["prefill_last_real_tokens_per_s"] = real_tokens / seconds["prefill_last_s"]
    return {k: round(v, 1) for k, v in out.items()}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--b1-prompts", type=int, default=1, help="prompts timed one at a time at batch 1 (of 10)")
    parser.add_argument("--hf-dir", default="/tmp/smollm2_hf", help="SmolLM2 as a HF safetensors directory (Tunix)")
    parser.add_argument("--ref-python", default="/tmp/refvenv/bin/python", help="the transformers venv's python")
    parser.add_argument("--tunix-python", default="/tmp/tunixvenv/bin/python", help="the Tunix venv's python")
    parser.add_argument("--sides", default=",".join(SIDES), help=f"which of {','.join(SIDES)} to run")
    parser.add_argument("--quiet-load", type=float, default=1.5, help="a repeat begun below this 1-min load is quiet")
    parser.add_argument("--settle", type=float, default=45.0, help="seconds to wait for the load to fall, at most")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a subprocess may take per answer")
    parser.add_argument("--out", default="experiments/results/bench_generate/interleaved.json")
    args = parser.parse_args(argv)
    sides = [s for s in args.sides.split(",") if s]
    if not sides or any(s not in SIDES for s in sides):
        parser.error(f"--sides {args.sides!r}: must be a comma-separated subset of {','.join(SIDES)}")
    for name, python in (("transformers", args.ref_python), ("tunix", args.tunix_python)):
        if name in sides and not Path(python).is_file():
            parser.error(f"--{'ref' if name == 'transformers' else 'tunix'}-python {python}: no such file "
                         "(make the venv as the script's docstring says, or leave it out with --sides)")
    if "tunix" in sides and not (Path(args.hf_dir) / "model.safetensors").is_file():
        parser.error(f"--hf-dir {args.hf_dir}: no model.safetensors (lm_reference_smollm2.py hf-dir --out DIR)")
    provenance_stamp = provenance.stamp()
    ref = np.load(REFERENCE)
    ids = [r[:n].tolist() for r, n in zip(ref["input_ids"], ref["lengths"])]

    libraries = {}
    for side in sides:
        start = time.perf_counter()
        if side == "ours":
            libraries[side] = Ours(args.batch, args.b1_prompts, ids)
        elif side == "transformers":
            libraries[side] = Worker(side, [args.ref_python, "experiments/lm_reference_smollm2.py", "serve",
                                            "--batch", str(args.batch), "--b1-prompts", str(args.b1_prompts)],
                                     args.timeout)
        else:
            libraries[side] = Worker(side, [args.tunix_python, "experiments/bench_generate_tunix.py", "--serve",
                                            "--hf-dir", args.hf_dir, "--batch", str(args.batch),
                                            "--b1-prompts", str(args.b1_prompts)], args.timeout)
        print(f"{side}: ready in {time.perf_counter() - start:.0f} s: {libraries[side].ready}", flush=True)

    records = []
    try:
        for rep in range(args.repeats):
            order = sides[rep % len(sides):] + sides[:rep % len(sides)]
            for side in order:
                waited = 0.0
                while os.getloadavg()[0] >= args.quiet_load and waited < args.settle:
                    time.sleep(5)
                    waited += 5
                lib = libraries[side]
                load_before = provenance.load_average()
                busy0, own0, wall0 = _busy_jiffies(), _own_jiffies(lib.pid), time.perf_counter()
                seconds = lib.once() if side == "ours" else lib.once(args.timeout)
                wall = time.perf_counter() - wall0
                others = (_busy_jiffies() - busy0 - (_own_jiffies(lib.pid) - own0)) / os.sysconf("SC_CLK_TCK")
                record = {"repeat": rep, "library": side, "seconds": {k: round(v, 4) for k, v in seconds.items()},
                          "rates": rates(seconds, args.batch, args.b1_prompts, lib.ready["real_tokens"]),
                          "load_average_before": load_before, "load_average_after": provenance.load_average(),
                          "settle_wait_s": waited, "wall_s": round(wall, 2),
                          "other_processes_cpu_cores": round(max(others, 0.0) / wall, 2),
                          "quiet": load_before[0] < args.quiet_load}
                records.append(record)
                print(json.dumps({k: record[k] for k in ("repeat", "library", "rates", "load_average_before",
                                                         "other_processes_cpu_cores", "quiet")}), flush=True)
    finally:
        for lib in libraries.values():
            lib.close()

    quiet_everywhere = all(any(r["quiet"] for r in records if r["library"] == s) for s in sides)
    summary = {"medians_over": "quiet repeats" if quiet_everywhere else "all repeats (not every library had a quiet one)"}
    for side in sides:
        chosen = [r for r in records if r["library"] == side and (r["quiet"] or not quiet_everywhere)]
        med = {k: statistics.median(r["seconds"][k] for r in chosen) for k in chosen[0]["seconds"]}
        summary[side] = {"repeats": len(chosen), "median_seconds": {k: round(v, 4) for k, v in med.items()},
                         "rates": rates(med, args.batch, args.b1_prompts, libraries[side].ready["real_tokens"])}
    if "ours" in sides:
        for other in [s for s in sides if s != "ours"]:
            summary[f"ours_over_{other}"] = {
                k: round(summary["ours"]["rates"][k] / v, 3) for k, v in summary[other]["rates"].items()
                if k in summary["ours"]["rates"]}
    result = {**provenance_stamp, "machine": {"cpu": platform.processor() or platform.machine(),
                                              "cores": os.cpu_count()},
              "settings": {"batch": args.batch, "b1_prompts": args.b1_prompts, "new_tokens": NEW_TOKENS,
                           "greedy": True, "dtype": "float32", "prompt_lengths": [len(r) for r in ids],
                           "repeats": args.repeats, "quiet_load": args.quiet_load, "settle_s": args.settle,
                           "model": "SmolLM2-135M-Instruct.Q4_1.gguf (dequantised to float32)"},
              "libraries": {s: libraries[s].ready for s in sides}, "summary": summary, "repeats": records}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
