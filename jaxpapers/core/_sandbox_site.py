"""Site-packages mode of :mod:`jaxpapers.core.sandbox`: which interpreter, ``sys.path`` and
read-only binds let a sandboxed program import this process's packages (see that module)."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence

__all__ = ["BOOTSTRAP", "Site", "site_setup", "site_binds"]

BOOTSTRAP = """\
import sys, site, types
sys.path[:] = {path!r}
sys.prefix, sys.exec_prefix = {prefix!r}, {exec_prefix!r}  # what site.venv() would set
for d in {site_dirs!r}:
    site.addsitedir(d)
sys.argv[:] = sys.argv[1:]
m = sys.modules["__main__"] = types.ModuleType("__main__")
m.__file__ = sys.argv[0]
with open(sys.argv[0], "rb") as f:
    code = compile(f.read(), sys.argv[0], "exec")
exec(code, m.__dict__)
"""


@dataclasses.dataclass(frozen=True)
class Site:
    """How to run this process's interpreter in the sandbox (hashable: a probe cache key).

    python: the interpreter (``sys.executable``); prefix, exec_prefix: this process's
    ``sys.prefix`` / ``sys.exec_prefix`` (a venv's; ``-S`` would leave the base interpreter's);
    path: the child's ``sys.path``; site_dirs: the folders among them whose ``.pth`` files are
    processed; binds: ``(host source, sandbox destination)`` read-only bind mounts, parents
    first.
    """

    python: str
    prefix: str
    exec_prefix: str
    path: tuple[str, ...]
    site_dirs: tuple[str, ...]
    binds: tuple[tuple[str, str], ...]

    def argv(self, script: str, work: str) -> list[str]:
        boot = BOOTSTRAP.format(path=list(self.path), site_dirs=list(self.site_dirs),
                                prefix=self.prefix, exec_prefix=self.exec_prefix)
        return [self.python, "-I", "-S", "-B", "-c", boot, f"{work}/{script}"]


def site_setup(covered: Sequence[str], protected: set[str]) -> Site | str:
    """The :class:`Site` for this process now, or why its interpreter cannot be used.

    ``covered``: host folders the sandbox hides; ``protected``: folders no bind may uncover.
    """
    import site as site_module

    exe = sys.executable
    if not exe or not os.path.isabs(exe) or not os.access(exe, os.X_OK):
        return (f"sandbox unavailable: this process has no runnable interpreter path "
                f"(sys.executable is {exe!r})")
    path = []
    for p in sys.path:
        if isinstance(p, str) and os.path.isabs(p) and os.path.exists(p):
            p = os.path.normpath(p)
            if p not in path:
                path.append(p)
    site_candidates = list(site_module.getsitepackages())
    if site_module.ENABLE_USER_SITE:
        site_candidates.append(site_module.getusersitepackages())
    site_dirs = [p for p in path if p in {os.path.normpath(c) for c in site_candidates}]

    needed = [sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix, exe, *path]
    hop = os.path.abspath(exe)  # every folder on the interpreter's chain of symlinks
    for _ in range(40):
        needed.append(os.path.dirname(hop))
        if not os.path.islink(hop):
            break
        hop = os.path.normpath(os.path.join(os.path.dirname(hop), os.readlink(hop)))
    for finder in sys.meta_path:  # setuptools' editable finders keep their roots in MAPPING
        module = sys.modules.get(getattr(finder, "__module__", None) or "")
        for name in ("MAPPING", "NAMESPACES"):
            table = getattr(module, name, None)
            if isinstance(table, dict):
                for v in table.values():
                    needed += [v] if isinstance(v, str) else [x for x in v if isinstance(x, str)]
    binds = site_binds(needed, covered, protected)
    shown = [d for _, d in binds]

    def visible(p: str) -> bool:  # not hidden, or inside a bind
        return (not any(p.startswith(c + "/") or p == c for c in covered)
                or any(p == d or p.startswith(d + "/") for d in shown))

    path = [p for p in path if visible(p)]  # e.g. the script's folder under /tmp is left out
    site_dirs = [p for p in site_dirs if p in path]
    return Site(exe, sys.prefix, sys.exec_prefix, tuple(path), tuple(site_dirs), binds)


def site_binds(needed: Sequence[str], covered: Sequence[str],
               protected: set[str]) -> tuple[tuple[str, str], ...]:
    """Read-only binds making ``needed`` (existing paths) visible where the sandbox hides them.

    A path under a hidden folder is bound (from its real path) at its own path and at its real
    path; a hidden folder itself, or anything holding one (e.g. all of ``/root``), never is.
    """
    binds: set[tuple[str, str]] = set()
    for n in needed:
        if not (n and os.path.isabs(n) and os.path.exists(n)):
            continue
        real = os.path.realpath(n)
        for dest in {os.path.normpath(n), real}:
            if not any(dest.startswith(c + "/") for c in covered):
                continue  # visible already through the read-only root
            if any(q == dest or q.startswith(dest + "/") for q in protected):
                continue  # would uncover a hidden folder
            binds.add((real, dest))
    kept: list[tuple[str, str]] = []
    for src, dest in sorted(binds, key=lambda b: (len(b[1]), b)):
        if not any(dest.startswith(d + "/") and src == s + dest[len(d):] for s, d in kept):
            kept.append((src, dest))
    return tuple(kept)
