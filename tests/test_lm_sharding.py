"""Language-model training sharded over a data x FSDP mesh (purejaxrl_opt/core/stages/lm_policy.py's shardings,
parallel.lm_mesh, lm/runner.py) on 4 simulated CPU devices: the same loss, metrics and updated arrays as
on one device, for GRPO's full fine-tuning and LoRA and for PPO with a value LM, the arrays really split,
and the CLI path end to end. The device count must be set before JAX starts, so the checks run in a
subprocess (as tests/test_parallel.py)."""

from __future__ import annotations

import sys

import jax
import pytest

from purejaxrl_opt.host import parallel
from purejaxrl_opt.host.parallel import ParallelConfig
from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.core.stages.lm_policy import fsdp_spec
from jax.sharding import PartitionSpec as P
from tests.test_parallel import run_with_devices

PRELUDE = """
import jax, numpy as np
from jax.sharding import Mesh
from purejaxrl_opt.core.algos import grpo_lm, ppo_lm
from purejaxrl_opt.config.schema import hyperparameters
from purejaxrl_opt.core.algos.grpo import GRPOConfig
from purejaxrl_opt.host.lm.tiny import tiny_model
from purejaxrl_opt.config.lm import LMTrainConfig, ModelConfig, PPOLMConfig
from purejaxrl_opt.core.stages.lm_policy import Batch, batch_shardings, param_shardings
from purejaxrl_opt.host.parallel import lm_mesh, ParallelConfig

assert len(jax.devices()) == 4
P_LEN, T = 6, 4
model = tiny_model(num_layers=2, hidden=32, seed=1)
rng = np.random.default_rng(0)
prompts = rng.integers(3, 100, (4, P_LEN)).astype(np.int32)
prompt_mask = np.ones((4, P_LEN), np.int32)
prompt_mask[1, :2] = 0
completions = rng.integers(3, 100, (16, T)).astype(np.int32)
lengths = rng.integers(1, T + 1, 16).astype(np.int32)
completions[np.arange(T)[None] >= lengths[:, None]] = model.tokenizer.pad_id
batch = Batch(prompts, prompt_mask, completions, lengths, rng.normal(size=16).astype(np.float32))
lm = LMTrainConfig(max_new_tokens=T, micro_batch_size=4)
sampling = model.sampling_config(T, 1.0)


def place(mesh, state, frozen, batch):
    put = lambda tree, shardings: jax.device_put(tree, shardings)
    return (put(state, param_shardings(state, mesh)), put(frozen, param_shardings(frozen, mesh)),
            put(batch, batch_shardings(batch, mesh)))


def compare(one, many, what):
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(one)[0], jax.tree_util.tree_leaves(many)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=2e-4, atol=2e-6,
                                   err_msg=what + jax.tree_util.keystr(path))


def split(tree):
    # the largest array is FSDP-split: a device holds a quarter or a half of it
    largest = max(jax.tree_util.tree_leaves(tree), key=lambda x: x.size)
    return largest.addressable_shards[0].data.size < largest.size
"""

GRPO = PRELUDE + """
import sys
MESHES = ((2, 2), (1, 4)) if "slow" in sys.argv else ((2, 2),)
algo = GRPOConfig(num_groups=4, group_size=4, beta=0.1, update_epochs=2, num_minibatches=2, lr=1e-3)
hparams = hyperparameters(algo)
for rank in (0, 2):
    config = ModelConfig(path="tiny", lora_rank=rank, lora_targets=("q", "v", "gate"))
    single = grpo_lm.LMGRPO(algo, lm, config, model.cfg, sampling, P_LEN, 10)
    state, frozen = single.init(model.params, jax.random.key(0))
    want_state, want = single.update(state, frozen, batch, hparams, jax.random.key(1))
    if rank == 0 and "slow" in sys.argv:
        want_tokens = single.sample(state, frozen, prompts, prompt_mask, jax.random.key(2))
    for data, fsdp in MESHES if rank == 0 else ((2, 2),):
        mesh = lm_mesh(ParallelConfig(data=data, fsdp=fsdp), {"batch": 16, "micro": 4})
        grpo = grpo_lm.LMGRPO(algo, lm, config, model.cfg, sampling, P_LEN, 10, mesh)
        s, f, b = place(mesh, state, frozen, batch)
        assert split(s.trained) and split(s.opt_state) and split(f), (rank, data, fsdp)
        new_state, metrics = grpo.update(s, f, b, hparams, jax.random.key(1))
        compare(want, metrics, f"rank {rank} mesh {data}x{fsdp} metrics")
        compare(want_state.trained, new_state.trained, f"rank {rank} mesh {data}x{fsdp} trained")
        compare(want_state.opt_state, new_state.opt_state, f"rank {rank} mesh {data}x{fsdp} adam")
        assert split(new_state.trained) and split(new_state.opt_state), "the update keeps the layout"
        if rank == 0 and "slow" in sys.argv:
            got = grpo.sample(s, f, *jax.device_put((prompts, prompt_mask), batch_shardings((prompts, prompt_mask), mesh)),
                              jax.random.key(2))
            for a, g in zip(want_tokens, got):
                np.testing.assert_array_equal(np.asarray(g), np.asarray(a))
    print("grpo rank", rank, "ok", {k: float(v) for k, v in want.items() if k in ("policy_loss", "kl_ref")})
"""

PPO = PRELUDE + """
algo = PPOLMConfig(num_prompts=4, group_size=4, update_epochs=2, num_minibatches=2, lr=1e-3, kl_coef=0.1)
hparams = hyperparameters(algo)
config = ModelConfig(path="tiny")
single = ppo_lm.LMPPO(algo, lm, config, model.cfg, sampling, P_LEN, 10)
state, frozen = single.init(model.params, jax.random.key(0))
want_state, want = single.update(state, frozen, batch, hparams, jax.random.key(1))
mesh = lm_mesh(ParallelConfig(data=2, fsdp=2), {"batch": 16})
ppo = ppo_lm.LMPPO(algo, lm, config, model.cfg, sampling, P_LEN, 10, mesh)
s, f, b = place(mesh, state, frozen, batch)
new_state, metrics = ppo.update(s, f, b, hparams, jax.random.key(1))
compare(want, metrics, "ppo metrics")
compare(want_state.trained, new_state.trained, "ppo trained")
assert split(new_state.trained["value"]) and split(new_state.trained["policy"])
print("ppo ok", float(want["value_loss"]))
"""

CLI = """
import csv, tempfile
import jax, numpy as np
from purejaxrl_opt.host.lm import runner
from tests.conftest import compose

def metrics(*overrides):
    out = tempfile.mkdtemp()
    settings = runner.parse_settings(compose(
        "algo=grpo", "env=lm/prompts", "env.params.generator=tests.lm_fixtures:digit_prompts",
        "env.params.rewards=[tests.lm_fixtures:sevens]", "env.params.num_eval=4", "eval_episodes=4",
        "model.path=tiny", "model.tiny_hidden=32", "lm.max_new_tokens=4", "lm.num_updates=2",
        "algo.num_groups=2", "algo.group_size=4", "algo.lr=0.01", "progress.mode=off",
        "lm.save_model=false", "lm.eval_batch_size=4", *overrides))
    summary = runner.execute(settings, out)
    rows = list(csv.DictReader(open(out + "/metrics.csv")))
    return summary, rows

one, rows_one = metrics()
four, rows_four = metrics("parallel.data=2", "parallel.fsdp=2")
assert four["parallel"] == {"data": 2, "fsdp": 2}
for a, b in zip(rows_one, rows_four):
    for key in ("reward", "policy_loss", "entropy", "completion_length"):
        np.testing.assert_allclose(float(b[key]), float(a[key]), rtol=1e-3, atol=1e-5, err_msg=key)
assert one["held_out_after"]["reward"] == four["held_out_after"]["reward"]
print("cli ok")
"""


def test_four_devices_match_one_for_full_fine_tuning_and_lora():
    """A 2 x 2 (data x fsdp) mesh: GRPO's full fine-tuning and LoRA updates."""
    out = run_with_devices(GRPO, devices=4, timeout=400)
    assert out.count("ok") == 2, out


@pytest.mark.slow
def test_four_devices_match_one_for_ppo_with_a_value_lm():
    assert "ppo ok" in run_with_devices(PPO, devices=4, timeout=400)


@pytest.mark.slow
def test_four_devices_match_one_on_a_1x4_mesh_and_in_sampling():
    out = run_with_devices(GRPO.replace("import sys", "import sys; sys.argv.append('slow')"), devices=4,
                           timeout=600)
    assert out.count("ok") == 2, out


@pytest.mark.slow
def test_the_cli_path_on_four_devices_matches_one():
    """``parallel.data=2 parallel.fsdp=2``: the run's metrics and held-out results are those of one
    device (generation, host rewards, update, evaluation)."""
    assert "cli ok" in run_with_devices(CLI, devices=4, timeout=600)


def test_fsdp_splits_the_largest_divisible_axis():
    assert fsdp_spec((2, 32, 64), 4) == P(None, None, "fsdp")
    assert fsdp_spec((128, 32), 4) == P("fsdp")
    assert fsdp_spec((30, 6), 4) == P()  # nothing divides: replicated
    assert fsdp_spec((30, 8), 4) == P(None, "fsdp")
    assert fsdp_spec((), 4) == P() and fsdp_spec((64,), 1) == P()


def test_a_mesh_that_does_not_fit_is_a_config_error():
    # more devices than any test process has (it may have 1, or one per core once the CLI's flags
    # are set by another test module in the same worker)
    available = len(jax.devices())
    with pytest.raises(ConfigError, match=rf"parallel\.data' x 'parallel\.fsdp' = 64 x 64 = 4096 devices: "
                                          rf"only {available} available"):
        parallel.lm_mesh(ParallelConfig(data=64, fsdp=64), {"batch": 4096})
    devices = [object()] * 4
    with pytest.raises(ConfigError, match=r"lm\.micro_batch_size = 6 completions do not divide over"):
        parallel.lm_mesh(ParallelConfig(data=2, fsdp=2), {"batch": 16, "lm.micro_batch_size": 6}, devices)
    with pytest.raises(ConfigError, match=r"parallel\.fsdp' = 2: sharding the params"):
        parallel.make_layout(ParallelConfig(fsdp=2), None, 1)


MULTI_PROCESS = """
import sys
from purejaxrl_opt.host import parallel
port, pid, num, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if num > 1:
    parallel.initialize_distributed({"coordinator": f"127.0.0.1:{port}", "num_processes": num,
                                     "process_id": pid, "init_timeout_s": 60})
import jax
from purejaxrl_opt.host.lm import runner
from tests.conftest import compose
assert len(jax.devices()) == 4 and jax.process_count() == num, jax.devices()
settings = runner.parse_settings(compose(
    "algo=grpo", "env=lm/prompts", "env.params.generator=tests.lm_fixtures:digit_prompts",
    "env.params.rewards=[tests.lm_fixtures:digits]", "env.params.num_eval=4", "eval_episodes=4",
    "model.path=tiny", "model.tiny_hidden=32", "lm.max_new_tokens=4", "lm.num_updates=2",
    "algo.num_groups=2", "algo.group_size=4", "algo.lr=0.01", "progress.mode=off", "lm.eval_batch_size=4",
    "parallel.data=2", "parallel.fsdp=2"))
runner.execute(settings, out)
print("WORKER_OK", pid)
"""


@pytest.mark.slow
def test_two_processes_of_two_devices_match_one_process_of_four(tmp_path):
    """jax.distributed on 127.0.0.1 (gloo CPU collectives), 2 processes x 2 simulated devices as one
    2 x 2 (data x fsdp) mesh: the metrics and the saved model are those of one process with 4
    devices on the same mesh (float tolerance); only process 0 writes."""
    import csv
    import os
    import subprocess
    import textwrap

    import numpy as np

    from purejaxrl_opt.host.lm import load
    from tests.conftest import TEST_XLA_FLAGS
    from tests.test_parallel import ROOT, _free_port

    def start(pid, num, devices, out):
        env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT),
                   XLA_FLAGS=f"--xla_force_host_platform_device_count={devices} " + " ".join(TEST_XLA_FLAGS))
        return subprocess.Popen([sys.executable, "-c", textwrap.dedent(MULTI_PROCESS), str(port), str(pid), str(num),
                                 str(out)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)

    port = _free_port()
    procs = [start(0, 1, 4, tmp_path / "one"), start(0, 2, 2, tmp_path / "out0"), start(1, 2, 2, tmp_path / "out1")]
    try:
        logs = [proc.communicate(timeout=400)[0] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for proc, log in zip(procs, logs):
        assert proc.returncode == 0 and "WORKER_OK" in log, log[-3000:]
    assert not (tmp_path / "out1").exists()  # process 1 wrote nothing
    rows = [list(csv.DictReader(open(tmp_path / d / "metrics.csv"))) for d in ("one", "out0")]
    for a, b in zip(*rows):
        for key in ("reward", "policy_loss", "entropy", "completion_length"):
            np.testing.assert_allclose(float(b[key]), float(a[key]), rtol=1e-3, atol=1e-5, err_msg=key)
    one, two = (load(tmp_path / d / "model").params for d in ("one", "out0"))
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5), one, two)
