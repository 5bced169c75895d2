"""Checkpoint tensors <-> the params pytree of :mod:`purejaxrl_opt.core.models.causal_lm`.

One table names every tensor of a config in the Hugging Face layout and in the GGUF layout, with the
params leaf (and layer) it fills and its shape in the file (``[out, in]`` for a projection, the
transpose of the params kernel). :func:`check_tensors` compares a file's names and shapes with the
table and refuses, naming the tensor and the file, a missing, unexpected or misshapen tensor before
anything is read or compiled; :func:`assemble` stacks the layers into the params pytree.
Safetensors I/O is here too (``safetensors``' numpy API; bfloat16 through ml_dtypes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.core.models.causal_lm import LMConfig, param_shapes

# params leaf of a layer -> (Hugging Face name in a layer, GGUF name in a block, stored transposed)
_LAYER = {
    "attn_norm": ("input_layernorm.weight", "attn_norm.weight", False),
    "q": ("self_attn.q_proj.weight", "attn_q.weight", True),
    "k": ("self_attn.k_proj.weight", "attn_k.weight", True),
    "v": ("self_attn.v_proj.weight", "attn_v.weight", True),
    "o": ("self_attn.o_proj.weight", "attn_output.weight", True),
    "q_bias": ("self_attn.q_proj.bias", "attn_q.bias", False),
    "k_bias": ("self_attn.k_proj.bias", "attn_k.bias", False),
    "v_bias": ("self_attn.v_proj.bias", "attn_v.bias", False),
    "q_norm": ("self_attn.q_norm.weight", "attn_q_norm.weight", False),
    "k_norm": ("self_attn.k_norm.weight", "attn_k_norm.weight", False),
    "mlp_norm": ("post_attention_layernorm.weight", "ffn_norm.weight", False),
    "gate": ("mlp.gate_proj.weight", "ffn_gate.weight", True),
    "up": ("mlp.up_proj.weight", "ffn_up.weight", True),
    "down": ("mlp.down_proj.weight", "ffn_down.weight", True),
}
_TOP = {
    "embed": ("model.embed_tokens.weight", "token_embd.weight", False),
    "final_norm": ("model.norm.weight", "output_norm.weight", False),
    "lm_head": ("lm_head.weight", "output.weight", True),
}
# buffers some Hugging Face checkpoints carry that are not parameters (recomputed from the config)
HF_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


class Entry(NamedTuple):
    leaf: str  # params key: a top-level one, or one of params["layers"]
    layer: int | None  # None for a top-level leaf
    shape: tuple[int, ...]  # in the file
    transposed: bool  # the file holds the transpose of the params slice


def tensor_table(cfg: LMConfig, layout: str) -> dict[str, Entry]:
    """Every tensor name of ``cfg`` in ``layout`` ("hf" or "gguf") -> its :class:`Entry`."""
    column = {"hf": 0, "gguf": 1}[layout]
    shapes = param_shapes(cfg)
    table = {}
    for leaf, names in _TOP.items():
        if leaf in shapes:
            shape = shapes[leaf][::-1] if names[2] else shapes[leaf]
            table[names[column]] = Entry(leaf, None, tuple(shape), names[2])
    for leaf, shape in shapes["layers"].items():
        name, transposed = _LAYER[leaf][column], _LAYER[leaf][2]
        shape = tuple(shape[1:][::-1] if transposed else shape[1:])
        for i in range(cfg.num_layers):
            full = f"model.layers.{i}.{name}" if layout == "hf" else f"blk.{i}.{name}"
            table[full] = Entry(leaf, i, shape, transposed)
    return table


def check_tensors(table: dict[str, Entry], present: dict[str, tuple[int, ...]], where: dict[str, str],
                  searched: str) -> None:
    """Refuse a tensor of ``table`` missing from ``present`` (name -> shape), one of ``present`` not in
    ``table``, or one of another shape; ``where`` names each present tensor's file, ``searched`` the
    files looked in."""
    for name, entry in table.items():
        if name not in present:
            raise ConfigError(f"tensor {name!r} (shape {list(entry.shape)}) is missing from {searched}")
    for name, shape in present.items():
        if name not in table:
            raise ConfigError(f"{where[name]}: unexpected tensor {name!r} (shape {list(shape)}): not a "
                              "parameter of this config")
        if tuple(shape) != table[name].shape:
            raise ConfigError(f"{where[name]}: tensor {name!r} has shape {list(shape)}, expected "
                              f"{list(table[name].shape)} for this config")


def assemble(cfg: LMConfig, table: dict[str, Entry], read: Callable[[str], np.ndarray]) -> dict:
    """The params pytree (numpy, ``cfg.dtype``) from ``read(name)`` of every tensor in ``table``."""
    dtype = np.dtype(cfg.jnp_dtype)
    shapes = param_shapes(cfg)
    params = {"layers": {leaf: np.empty(shape, dtype) for leaf, shape in shapes["layers"].items()}}
    for name, entry in table.items():
        array = read(name)
        array = array.T if entry.transposed else array
        if entry.layer is None:
            params[entry.leaf] = np.ascontiguousarray(array.astype(dtype))
        else:
            params["layers"][entry.leaf][entry.layer] = array.astype(dtype)
    return params


def hf_tensors(cfg: LMConfig, params: dict) -> dict[str, np.ndarray]:
    """The params as Hugging Face-named numpy tensors (the inverse of :func:`assemble`)."""
    tensors = {}
    for name, entry in tensor_table(cfg, "hf").items():
        leaf = params[entry.leaf] if entry.layer is None else params["layers"][entry.leaf][entry.layer]
        leaf = np.asarray(leaf)
        tensors[name] = np.ascontiguousarray(leaf.T if entry.transposed else leaf)
    return tensors


# --------------------------------------------------------------------------- safetensors
def safetensors_files(path: Path) -> dict[str, str]:
    """Tensor name -> file name of the checkpoint in directory ``path``: ``model.safetensors``, or the
    shards ``model.safetensors.index.json`` maps (each must exist and hold what the index says)."""
    from safetensors import safe_open

    index = path / "model.safetensors.index.json"
    single = path / "model.safetensors"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as error:
            raise ConfigError(f"{index}: not a safetensors index (no weight_map: {error})") from None
        for file in sorted(set(weight_map.values())):
            if not (path / file).is_file():
                raise ConfigError(f"{path / file}: missing (named by {index.name})")
    elif single.is_file():
        with safe_open(str(single), framework="numpy") as f:
            weight_map = {name: single.name for name in f.keys()}
    else:
        raise ConfigError(f"{path}: no weights (neither model.safetensors nor "
                          "model.safetensors.index.json)")
    return weight_map


def read_safetensors(path: Path, cfg: LMConfig) -> dict:
    """The params pytree (numpy) of the safetensors checkpoint in ``path``, checked against ``cfg``
    (names and shapes, from the headers) before any tensor is read."""
    from safetensors import safe_open

    weight_map = safetensors_files(path)
    table = tensor_table(cfg, "hf")
    handles = {file: safe_open(str(path / file), framework="numpy")
               for file in sorted(set(weight_map.values()))}
    present, where = {}, {}
    for file, handle in handles.items():
        names = set(handle.keys())
        for name in names:
            if name.endswith(HF_IGNORED_SUFFIXES) or (name == "lm_head.weight" and cfg.tie_word_embeddings):
                continue  # a tied head is the embedding (as transformers ties it on load)
            if weight_map.get(name) != file:
                raise ConfigError(f"{path / file}: tensor {name!r} is not where "
                                  f"model.safetensors.index.json puts it ({weight_map.get(name)})")
            present[name] = tuple(handle.get_slice(name).get_shape())
            where[name] = str(path / file)
            dtype = handle.get_slice(name).get_dtype()
            if dtype not in ("F32", "F16", "BF16", "F64"):
                raise ConfigError(f"{path / file}: tensor {name!r} has dtype {dtype}: must be a float "
                                  "(F32, F16, BF16)")
    for name, file in weight_map.items():
        if name not in present and not name.endswith(HF_IGNORED_SUFFIXES) and not (
                name == "lm_head.weight" and cfg.tie_word_embeddings):
            raise ConfigError(f"{path / file}: tensor {name!r}, named by model.safetensors.index.json, "
                              "is not in the file")
    files = sorted(set(weight_map.values()))
    check_tensors(table, present, where, ", ".join(str(path / f) for f in files))
    return assemble(cfg, table, lambda name: handles[weight_map[name]].get_tensor(name))


def write_safetensors(path: Path, cfg: LMConfig, params: dict) -> None:
    """``model.safetensors`` in directory ``path`` (Hugging Face names, ``cfg.dtype``)."""
    from safetensors.numpy import save_file

    save_file(hf_tensors(cfg, params), str(path / "model.safetensors"), metadata={"format": "pt"})
