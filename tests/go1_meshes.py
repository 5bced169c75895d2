"""A mujoco_menagerie directory holding only what Playground's Go1 envs read from it, for tests on a
machine without the menagerie (it is a GitHub checkout, not a package; nothing is downloaded here).

Go1's model (mujoco_playground/_src/locomotion/go1/xmls/go1_mjx_feetonly.xml) takes five meshes from
``unitree_go1/assets``, used only by its ``visual`` geoms: class ``visual`` sets ``contype=0
conaffinity=0`` (no contact) and every body has an explicit ``<inertial>`` (the meshes add no mass).
So a small valid mesh under each name gives the same dynamics, observations and rewards as the real
files; only a rendered frame would differ. Tests that build Go1 use this with ``MENAGERIE_ROOT``.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

GO1_MESHES = ("trunk", "hip", "thigh_mirror", "calf", "thigh")


def _tetrahedron_stl(path: Path, size: float = 0.01) -> None:
    """A binary STL of one small closed tetrahedron (MuJoCo needs a mesh with volume)."""
    corners = np.asarray([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], np.float32) * size
    faces = [(0, 2, 1), (0, 1, 3), (0, 3, 2), (1, 2, 3)]
    with open(path, "wb") as out:
        out.write(b"\0" * 80 + struct.pack("<I", len(faces)))
        for face in faces:
            out.write(struct.pack("<3f", 0.0, 0.0, 0.0) + corners[list(face)].tobytes() + b"\0\0")


def write_go1_visual_meshes(root: Path) -> Path:
    """``root/unitree_go1/assets/<name>.stl`` for Go1's five visual meshes; returns ``root``."""
    assets = Path(root) / "unitree_go1" / "assets"
    assets.mkdir(parents=True, exist_ok=True)
    for name in GO1_MESHES:
        _tetrahedron_stl(assets / f"{name}.stl")
    return Path(root)
