"""mujoco's OpenGL backend on a machine without a display (a leaf: imports only the standard library).

mujoco picks its backend once, when first imported; whatever imports it first (the Playground adapter,
brax, Playground itself, a test module) must find ``MUJOCO_GL`` already chosen, so the choice lives
here, importable without importing any of them.
"""

from __future__ import annotations

import os

GL_OFF = ("disable", "disabled", "off", "false", "0")  # mujoco's own spellings of "no OpenGL"


def headless_gl(environ=os.environ, find_library=None) -> str | None:
    """The ``MUJOCO_GL`` to set before mujoco is imported, or None to leave the user's (or a display's).

    mujoco picks its OpenGL backend when imported. A headless machine has no display for GLFW, so EGL;
    where no libEGL is installed (seen on a GPU machine's image) mujoco's import itself fails with
    ``MUJOCO_GL=egl``, so rendering is disabled there: training needs none, only ``evaluate --gif`` does.
    """
    if "MUJOCO_GL" in environ or environ.get("DISPLAY"):
        return None
    if find_library is None:
        import ctypes.util

        find_library = ctypes.util.find_library
    return "egl" if find_library("EGL") else "disable"


def set_headless_gl(environ=os.environ) -> str | None:
    """Set ``MUJOCO_GL`` to :func:`headless_gl`'s choice (when it makes one) and return it. Must run
    before mujoco is first imported in the process (brax, Playground and the adapter import it)."""
    choice = headless_gl(environ)
    if choice is not None:
        environ["MUJOCO_GL"] = choice
    return choice
