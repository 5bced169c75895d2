#!/usr/bin/env bash
# Throughput of PPO / TRPO / GRPO at 1 / 8 / 32 / 1024 lanes on CartPole-v1, Breakout-MinAtar,
# playground/CartpoleBalance and craftax/Craftax-Symbolic-v1 on the accelerator JAX finds, in at most
# ~10 minutes, into one JSON (experiments/device_check.py says what is measured and in which order),
# with PureJaxRL's own ppo.py beside our PPO at 1, 32 and 1,024 agents on CartPole-v1 and Breakout-MinAtar
# and Brax's PPO at 2,048 envs on Playground's CartpoleBalance. PureJaxRL's checkout must be at
# experiments/peers/purejaxrl (an ignored path; the script refuses at once without it):
#   git clone https://github.com/luchris429/purejaxrl experiments/peers/purejaxrl && git -C experiments/peers/purejaxrl checkout 31756b1
# (--no-peers measures ours only).
#
#   experiments/device_check.sh [OUT_JSON [device_check.py options, e.g. --envs CartPole-v1]]  # default experiments/results/device_check/device_check.json
#   DEVICE_CHECK_SMALL=1 experiments/device_check.sh /tmp/dry.json   # CPU dry run, every env and algo
#
# Environment:
#   DEVICE_CHECK_SMALL=1        tiny shapes (lanes 1-2, 8-step rollouts): proves the script end to end
#   DEVICE_CHECK_BUDGET_S=510   stop starting new measurements after this many seconds
#   DEVICE_CHECK_TIMEOUT_S=590  hard wall-clock limit of the whole run (what was measured is kept)
#   DEVICE_CHECK_PYTHON         the interpreter (default: .venv/bin/python if present, else python3)
#   DEVICE_CHECK_INSTALL=1      first create .venv and install the project with its playground and
#                               craftax extras and JAX's CUDA 12 plugin at the pinned version
#                               (needs a package index; a fresh accelerator machine has none of it)
# On a machine with JAX, flax, optax and chex but no package index (how it ran on an H200,
# experiments/results/device_check/h200.md): download the other wheels elsewhere for its Python
# (`pip download --no-deps --only-binary=:all: --python-version 3.12 ... gymnax==1.0.1 gymnasium
# farama-notifications craftax==1.6.1 playground==0.2.0 brax==0.14.2 mujoco==4.0.0 mujoco-core==4.0.0
# mujoco-mjx==3.17.0 jaxopt ml_collections trimesh pyopengl`), install them with
# `pip install --no-index --no-deps --target /tmp/site`, and run with PYTHONPATH=/tmp/site
# DEVICE_CHECK_PYTHON=python3 (the Playground adapter sets MUJOCO_GL=disable where there is no libEGL).
# On a GPU/TPU the CLI's CPU defaults are off by themselves: no host-device-per-core XLA flag
# (purejaxrl_opt/host/xla_flags.py), network.recurrent_grad=auto -> autodiff, network.conv_impl=auto -> patch
# on GPU (measured 5.0x lax.conv on MinAtar at 1,024 lanes), lax on TPU (purejaxrl_opt/config/implementations.py);
# the JSON records which ran.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-experiments/results/device_check/device_check.json}"
if [[ "${DEVICE_CHECK_INSTALL:-0}" == "1" ]]; then
  python3 -m venv .venv
  .venv/bin/pip install -q -e '.[playground,craftax]' 'jax[cuda12]==0.9.2'
fi
python="${DEVICE_CHECK_PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x .venv/bin/python ]]; then python=.venv/bin/python; else python=python3; fi
fi
# compiles are reused by a rerun on the same machine
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-/tmp/device_check_jax_cache}"
# MUJOCO_GL: left to purejaxrl_opt/envs/playground.py (egl where libEGL is installed, else disable)
status=0
timeout --signal=TERM --kill-after=10 "${DEVICE_CHECK_TIMEOUT_S:-590}" \
  "$python" experiments/device_check.py --out "$out" "${@:2}" || status=$?
if [[ $status -eq 124 ]]; then
  if [[ -f "$out" ]]; then
    echo "device_check: stopped at the ${DEVICE_CHECK_TIMEOUT_S:-590} s limit; $out holds what was measured" >&2
  else
    echo "device_check: stopped at the ${DEVICE_CHECK_TIMEOUT_S:-590} s limit before the first measurement ended" >&2
  fi
fi
exit $status
