"""Pretrained (supervised) policy checkpoints: written by ``python -m purejaxrl_opt.sft``, read by RL
runs with ``init_from`` (the policy and GRPO's reference policy start from them).

A checkpoint is ``params.msgpack`` + ``meta.json`` (network, vocabulary, buffer length);
:func:`load_policy` refuses one of another network, vocabulary or buffer length before anything is
compiled.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from purejaxrl_opt.config import NetworkConfig, RunConfig
from purejaxrl_opt.errors import ConfigError

CHECKPOINT_KIND = "purejaxrl_opt.sft_policy"

def save_checkpoint(path: Path, params, meta: dict) -> None:
    """``path/params.msgpack`` + ``path/meta.json``, written to a temp dir then renamed (atomic)."""
    from flax import serialization

    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / "params.msgpack").write_bytes(serialization.to_bytes(params))
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)


def _checkpoint_path(path: str) -> Path:
    p = Path(path)
    if (p / "checkpoint" / "meta.json").is_file():
        return p / "checkpoint"
    if (p / "meta.json").is_file():
        return p
    raise ConfigError(f"config key 'init_from' = {path!r} is invalid: must be an SFT run dir or its "
                      "checkpoint dir (python -m purejaxrl_opt.sft writes <run dir>/checkpoint/)")


NETWORK_KEYS = ("kind", "d_model", "num_layers", "num_heads", "mlp_ratio")


def load_policy(path: str, net: NetworkConfig, spec) -> Any:
    """Policy params of an SFT checkpoint, after checking it fits this run (ConfigError otherwise)."""
    import jax
    import numpy as np
    from flax import serialization

    from purejaxrl_opt.policies import make_policy

    if spec.vocab is None:
        raise ConfigError(f"config key 'init_from' needs a token env; {spec.env_id} is not one")
    ckpt = _checkpoint_path(path)
    meta = json.loads((ckpt / "meta.json").read_text())
    if meta.get("kind") != CHECKPOINT_KIND:
        raise ConfigError(f"config key 'init_from' = {path!r}: not an SFT policy checkpoint "
                          f"(kind {meta.get('kind')!r})")
    diffs = [f"network.{k}: checkpoint has {meta['network'].get(k)!r}, this run has {getattr(net, k)!r}"
             for k in NETWORK_KEYS if meta["network"].get(k) != getattr(net, k)]
    if diffs:
        raise ConfigError(f"config key 'init_from' = {path!r}: the checkpoint is another architecture: "
                          + "; ".join(diffs))
    if tuple(meta["vocab"]) != tuple(spec.vocab):
        raise ConfigError(f"config key 'init_from' = {path!r}: vocabulary mismatch: checkpoint "
                          f"{meta['vocab']}, env {spec.env_id} {list(spec.vocab)}")
    if meta["max_len"] != spec.obs_shape[0] or meta["num_actions"] != spec.num_actions:
        raise ConfigError(f"config key 'init_from' = {path!r}: the checkpoint has token buffer "
                          f"max_len={meta['max_len']} and {meta['num_actions']} actions; env "
                          f"{spec.env_id} has max_len={spec.obs_shape[0]} (env.params.max_len) and "
                          f"{spec.num_actions}")
    policy = make_policy(spec, net)
    template = jax.eval_shape(policy.init, jax.random.PRNGKey(0))
    target = jax.tree_util.tree_map(lambda s: np.zeros(s.shape, s.dtype), template)
    params = serialization.from_bytes(target, (ckpt / "params.msgpack").read_bytes())
    for want, got in zip(jax.tree_util.tree_leaves(target), jax.tree_util.tree_leaves(params)):
        if np.shape(want) != np.shape(got):
            raise ConfigError(f"config key 'init_from' = {path!r}: parameter shapes differ from this "
                              "run's network")
    return jax.tree_util.tree_map(jax.numpy.asarray, params)


def load_initial_actor(run: RunConfig, spec):
    """Actor params from ``run.init_from`` (checked against the run's network and env), else None."""
    if run.init_from is None:
        return None
    return load_policy(run.init_from, run.network, spec)
