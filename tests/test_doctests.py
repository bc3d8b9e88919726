"""Run the ``>>>`` examples of every module of ``jaxpapers`` and ``pallas_kernels`` as doctests.

The module list is discovered with ``pkgutil.walk_packages`` (no hand list to forget a module).
Left out:
  * ``*.bench`` modules: device benchmarks (``jaxpapers bench``), not examples;
  * ``jaxpapers.__main__``: importing it runs the CLI and exits;
  * modules whose import needs an optional dependency that is not installed: collected as a
    skip that names the missing package (none at the time of writing: ``conformal.sklearn``
    needs scikit-learn, a core dependency).
A module without examples is not collected (only a module with at least one example is a case).
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

PACKAGES = ("jaxpapers", "pallas_kernels")
EXCLUDED = {"jaxpapers.__main__": "importing it runs the CLI and exits"}
OPTIONFLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _missing_optional(err: ModuleNotFoundError) -> str | None:
    """The missing third-party package behind ``err``, or None if it is one of ours (a bug)."""
    top = (err.name or "").split(".")[0]
    return None if top in PACKAGES or not top else top


def _walk():
    """(name, module | None, skip reason | None) for every module under PACKAGES."""
    for pkg_name in PACKAGES:
        pkg = importlib.import_module(pkg_name)
        yield pkg_name, pkg, None
        skipped: list[tuple[str, str]] = []

        def onerror(name, skipped=skipped):
            # a subpackage failed to import during the walk: re-raise unless the cause is a
            # missing third-party package (then its whole subtree is skipped)
            try:
                importlib.import_module(name)
            except ModuleNotFoundError as err:
                missing = _missing_optional(err)
                if missing is None:
                    raise
                skipped.append((name, f"optional dependency {missing!r} is not installed "
                                      f"(package and its submodules)"))

        for info in pkgutil.walk_packages(pkg.__path__, pkg_name + ".", onerror=onerror):
            name = info.name
            if name in EXCLUDED or name.rsplit(".", 1)[-1] == "bench":
                continue
            try:
                mod = importlib.import_module(name)
            except ModuleNotFoundError as err:
                missing = _missing_optional(err)
                if missing is None:
                    raise
                yield name, None, f"optional dependency {missing!r} is not installed"
                continue
            yield name, mod, None
        yield from ((n, None, why) for n, why in skipped)


def _has_examples(mod) -> bool:
    return any(t.examples for t in doctest.DocTestFinder().find(mod))


def _cases():
    cases = []
    for name, mod, why in _walk():
        if why is not None:
            cases.append(pytest.param(name, id=name, marks=pytest.mark.skip(reason=why)))
        elif _has_examples(mod):
            cases.append(pytest.param(name, id=name))
    return cases


CASES = _cases()


def test_discovery_finds_the_capabilities():
    """Guard against an empty or truncated walk (e.g. a package whose __path__ is wrong)."""
    names = {p.values[0] for p in CASES}
    for expected in ("jaxpapers.core.train", "jaxpapers.bandits.runner", "jaxpapers.lm.model",
                     "pallas_kernels.quantized_matmul.ops"):
        assert expected in names, f"{expected} has examples but was not collected"


@pytest.mark.parametrize("name", CASES)
def test_doctests(name):
    mod = importlib.import_module(name)
    res = doctest.testmod(mod, optionflags=OPTIONFLAGS)
    assert res.attempted > 0, f"{name}: collected for its examples, but doctest ran none"
    assert res.failed == 0, (f"{name}: {res.failed} of {res.attempted} doctest examples failed "
                             f"(the failing examples are printed in the captured stdout)")
