"""Pretrained (supervised) policy checkpoints: written by ``python -m purejaxrl_opt.sft``, read by RL
runs with ``init_from`` (the policy and GRPO's reference policy start from them).

A checkpoint is ``<sft run dir>/checkpoint/``, an orbax checkpoint in the training checkpoints'
format (:func:`purejaxrl_opt.formats.checkpoint.save_tree`): the policy's leaves, and a manifest whose
``fingerprint`` holds what the policy fits (network, vocabulary, buffer length, actions, the SFT
config) and every leaf's path, shape and dtype, with a SHA-256 of every leaf. :func:`load_policy`
refuses one of another network, vocabulary or buffer length before anything is compiled, and a
corrupt one (a digest that does not match).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from purejaxrl_opt.config.schema import NetworkConfig, RunConfig
from purejaxrl_opt.config.errors import ConfigError

CHECKPOINT_KIND = "purejaxrl_opt.sft_policy"


def save_checkpoint(path: Path, params, meta: dict) -> None:
    """``params`` as an orbax checkpoint in ``path`` with ``meta`` (kind, network, vocab, ...) as its
    fingerprint."""
    from purejaxrl_opt.formats import checkpoint

    checkpoint.save_tree(path, params, {"kind": meta["kind"], "fingerprint": meta})


def read_meta(path: str) -> dict:
    """The fingerprint (network, vocab, max_len, num_actions, ...) of the SFT checkpoint ``path``
    (an SFT run dir or its ``checkpoint/``); ConfigError naming ``init_from`` otherwise."""
    from purejaxrl_opt.formats import checkpoint

    return _manifest(path, checkpoint)[1]["fingerprint"]


def _checkpoint_path(path: str) -> Path:
    from purejaxrl_opt.formats import checkpoint

    p = Path(path)
    for candidate in (p / "checkpoint", p):
        if checkpoint.is_tree(candidate):
            return candidate
    if (p / "checkpoint" / "params.msgpack").is_file() or (p / "params.msgpack").is_file():
        raise ConfigError(f"config key 'init_from' = {path!r}: a msgpack SFT checkpoint of an older "
                          "version; re-run python -m purejaxrl_opt.sft (checkpoints are orbax now)")
    raise ConfigError(f"config key 'init_from' = {path!r} is invalid: must be an SFT run dir or its "
                      "checkpoint dir (python -m purejaxrl_opt.sft writes <run dir>/checkpoint/)")


def _manifest(path: str, checkpoint) -> tuple[Path, dict]:
    ckpt = _checkpoint_path(path)
    try:
        manifest = checkpoint.read_tree_manifest(ckpt)
    except checkpoint.CheckpointError as error:
        raise ConfigError(f"config key 'init_from' = {path!r}: {error}") from error
    if manifest.get("kind") != CHECKPOINT_KIND:
        raise ConfigError(f"config key 'init_from' = {path!r}: not an SFT policy checkpoint "
                          f"(kind {manifest.get('kind')!r})")
    return ckpt, manifest


NETWORK_KEYS = ("kind", "d_model", "num_layers", "num_heads", "mlp_ratio")


def load_policy(path: str, net: NetworkConfig, spec) -> Any:
    """Policy params of an SFT checkpoint, after checking it fits this run (ConfigError otherwise)."""
    import jax

    from purejaxrl_opt.formats import checkpoint
    from purejaxrl_opt.core.models.policies import make_policy

    if spec.vocab is None:
        raise ConfigError(f"config key 'init_from' needs a token env; {spec.env_id} is not one")
    ckpt, manifest = _manifest(path, checkpoint)
    meta = manifest["fingerprint"]
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
    template = jax.eval_shape(make_policy(spec, net).init, jax.random.PRNGKey(0))
    try:
        params, _ = checkpoint.restore_tree(ckpt, template)
    except checkpoint.CheckpointError as error:
        raise ConfigError(f"config key 'init_from' = {path!r}: parameter shapes differ from this "
                          f"run's network, or the checkpoint is corrupt: {error}") from error
    return jax.tree_util.tree_map(jax.numpy.asarray, params)


def load_initial_actor(run: RunConfig, spec):
    """Actor params from ``run.init_from`` (checked against the run's network and env), else None."""
    if run.init_from is None:
        return None
    return load_policy(run.init_from, run.network, spec)
