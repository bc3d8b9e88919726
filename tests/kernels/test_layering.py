"""Kernels stand alone: nothing in ``pallas_kernels/`` imports ``jaxpapers`` (DESIGN.md)."""

from __future__ import annotations

import ast
import doctest
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
KERNELS = ROOT / "pallas_kernels"


def _imported_names(tree: ast.AST):
    """Absolute module names imported by ``tree``: import statements (at any depth, so lazy
    imports count) and ``importlib.import_module`` / ``__import__`` calls with a literal name."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
        elif isinstance(node, ast.Call) and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in ("import_module", "__import__"):
                yield node.args[0].value


def _doctest_trees(tree: ast.AST):
    """The ``>>>`` examples of every docstring in ``tree``, parsed (doctests run as code too)."""
    parser = doctest.DocTestParser()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            for ex in parser.get_examples(doc or ""):
                try:
                    yield ast.parse(ex.source)
                except SyntaxError:
                    continue


def _is_jaxpapers(name: str) -> bool:
    return name == "jaxpapers" or name.startswith("jaxpapers.")


def test_no_kernel_source_imports_jaxpapers():
    files = sorted(KERNELS.rglob("*.py"))
    assert len(files) >= 10, files   # the scan really sees the kernel folders
    bad = []
    for path in files:
        tree = ast.parse(path.read_text(), filename=str(path))
        for t in (tree, *_doctest_trees(tree)):
            bad += [f"{path.relative_to(ROOT)}: {n}" for n in _imported_names(t)
                    if _is_jaxpapers(n)]
    assert not bad, "pallas_kernels must not import jaxpapers:\n" + "\n".join(bad)


def test_the_scan_catches_lazy_and_doctest_imports():
    src = ('"""\n>>> from jaxpapers.quant import quantize\n"""\n'
           "def f():\n    import jaxpapers.attention as A\n"
           "    return importlib.import_module('jaxpapers.quant')\n")
    tree = ast.parse(src)
    names = [n for t in (tree, *_doctest_trees(tree)) for n in _imported_names(t)]
    assert sorted(names) == ["jaxpapers.attention", "jaxpapers.quant", "jaxpapers.quant"]


def test_importing_every_kernel_module_loads_no_jaxpapers_module():
    code = (
        "import importlib, pkgutil, sys\n"
        "import pallas_kernels.quantized_matmul, pallas_kernels.binary_hash_attention\n"
        "import pallas_kernels\n"
        "for m in pkgutil.walk_packages(pallas_kernels.__path__, 'pallas_kernels.'):\n"
        "    importlib.import_module(m.name)\n"
        "bad = sorted(m for m in sys.modules if m.startswith('jaxpapers'))\n"
        "assert 'pallas_kernels.quantized_matmul.bench' in sys.modules\n"
        "print('JAXPAPERS_MODULES', bad)\n"
        "sys.exit(1 if bad else 0)\n")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "JAXPAPERS_MODULES []" in out.stdout
