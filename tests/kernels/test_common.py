"""pallas_kernels._common: the one ``implementation`` resolver, platform params, pow2_ceil."""

from __future__ import annotations

import warnings

import pytest

from pallas_kernels import _common
from pallas_kernels._common import (IMPLEMENTATIONS, Resolved, compiler_params,
                                    compiler_params_kwargs, pow2_ceil, resolve)


@pytest.fixture
def on(monkeypatch):
    """``on("cuda")`` makes the resolver (and the ops) believe they run on that platform."""
    def set_platform(name):
        monkeypatch.setattr(_common, "platform", lambda: name)
    return set_platform


def test_implementations_are_the_literal():
    assert IMPLEMENTATIONS == ("auto", "xla", "pallas")


@pytest.mark.parametrize("bad", ["jnp", "cuda", "Pallas", None, 1])
def test_bad_implementation_names_the_argument(bad):
    with pytest.raises(ValueError, match="implementation must be one of"):
        resolve("op", bad)


def test_xla_is_always_xla(on):
    for plat in ("cpu", "cuda", "tpu"):
        on(plat)
        assert resolve("op", "xla").implementation == "xla"


def test_pallas_on_cpu_interprets_and_raises_when_compiled_is_forced(on):
    on("cpu")
    assert resolve("op", "pallas") == Resolved("pallas", True, "cpu")
    with pytest.raises(ValueError, match=r"op\(implementation='pallas'\) cannot run here: "
                                         r"no compiled Pallas kernel on backend 'cpu'"):
        resolve("op", "pallas", interpret=False)


def test_pallas_raises_for_an_unsupported_case_and_never_falls_back(on):
    on("cuda")
    assert resolve("op", "pallas") == Resolved("pallas", False, "cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no silent or loud fallback
        with pytest.raises(ValueError, match="cannot run here: Triton wants powers of two"):
            resolve("op", "pallas", unsupported="Triton wants powers of two")
    # the interpreter runs any case
    assert resolve("op", "pallas", unsupported="x", interpret=True).implementation == "pallas"


def test_auto_falls_back_only_with_a_warning(on):
    on("cpu")
    with pytest.warns(UserWarning, match=r"op\(implementation='auto'\) uses the XLA path: no "
                                         r"compiled Pallas kernel on backend 'cpu'"):
        assert resolve("op", "auto").implementation == "xla"
    on("tpu")
    with pytest.warns(UserWarning, match="XLA path: too big"):
        assert resolve("op", "auto", unsupported="too big").implementation == "xla"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve("op", "auto") == Resolved("pallas", False, "tpu")


def test_pow2_ceil():
    assert [pow2_ceil(v) for v in (0, 1, 2, 3, 4, 5, 17, 128, 129)] == \
        [1, 1, 2, 4, 4, 8, 32, 128, 256]


def test_compiler_params_per_platform():
    from jax.experimental.pallas import tpu as pltpu
    from jax.experimental.pallas import triton as pl_triton

    assert isinstance(compiler_params("cuda", ("parallel",)), pl_triton.CompilerParams)
    tpu = compiler_params("tpu", ("parallel", "arbitrary"))
    assert isinstance(tpu, pltpu.CompilerParams)
    assert tuple(tpu.dimension_semantics) == ("parallel", "arbitrary")
    assert compiler_params("cpu", ("parallel",)) is None
    assert compiler_params_kwargs(True, "cuda", ("parallel",)) == {}
    assert set(compiler_params_kwargs(False, "tpu", ("parallel",))) == {"compiler_params"}


def test_platform_argument_plans_for_another_backend():
    assert _common.check_platform("gpu") == "cuda"
    assert _common.check_platform(None) == _common.platform()
    with pytest.raises(ValueError, match="platform"):
        _common.check_platform("metal")
    run = resolve("op", "pallas", interpret=False, platform="cuda")
    assert run == Resolved("pallas", False, "cuda")
    with pytest.raises(ValueError, match="platform"):
        resolve("op", "pallas", platform="vulkan")
