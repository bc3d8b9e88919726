"""Plotting plumbing for experiment reports: the Agg backend, saving and closing figures.

matplotlib is imported lazily (never at library import time) and switched to the
non-interactive Agg backend once, so reports render on machines with no screen.

>>> import tempfile, pathlib
>>> plt = pyplot()
>>> fig, ax = plt.subplots()
>>> _ = ax.plot([0, 1], [0, 1])
>>> with tempfile.TemporaryDirectory() as d:
...     p = save(fig, d, "line")
...     (p.name, p.is_file())
('line.png', True)
"""

from __future__ import annotations

import os
import pathlib
import re
from typing import Any

__all__ = ["pyplot", "save"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def pyplot():
    """``matplotlib.pyplot`` with the Agg backend selected (idempotent)."""
    import matplotlib

    if matplotlib.get_backend().lower() != "agg":
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, out_dir: str | os.PathLike, name: str, *, dpi: int = 110,
         tight: bool = True) -> pathlib.Path:
    """Write ``fig`` to ``out_dir/<name>.png``, close it, and return the path.

    Args:
      fig: a matplotlib figure.
      out_dir: folder (created if missing).
      name: file stem: letters, digits, ``_``, ``-`` and ``.`` (``/`` is replaced by ``_``).
      dpi: resolution. tight: ``bbox_inches="tight"``.
    """
    name = name.replace("/", "_")
    if not _NAME.match(name):
        raise ValueError(f"name must be a plain file stem, got {name!r}")
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    try:
        fig.savefig(path, dpi=dpi, bbox_inches="tight" if tight else None)
    finally:
        pyplot().close(fig)
    return path
