"""What every kernel op shares: the ``implementation`` choice, platform detection, compiler params.

* :data:`Implementation` -- ``"auto" | "xla" | "pallas"``; :func:`resolve` turns it into what runs.
  ``"xla"`` is the pure-jnp reference path; ``"pallas"`` is the kernel (the Pallas interpreter when
  no compiled kernel exists here, e.g. on CPU) and raises ``ValueError`` when it cannot run;
  ``"auto"`` is the compiled kernel when it can run here, otherwise the XLA path with a
  ``UserWarning`` that says why. Only ``"auto"`` ever falls back.
* :func:`platform` -- ``"cuda" | "rocm" | "tpu" | "cpu" | ...``, the compiler-param target.
* :func:`compiler_params` -- the backend's own ``CompilerParams`` object (Triton for cuda/rocm,
  Mosaic for tpu, none otherwise; dict-style params are rejected by current jax).

Nothing here (or anywhere in ``pallas_kernels``) imports ``jaxpapers``.
"""

from __future__ import annotations

import dataclasses
import typing
import warnings
from typing import Literal

import jax

__all__ = ["Implementation", "IMPLEMENTATIONS", "COMPILED_PLATFORMS", "Resolved", "resolve",
           "check_implementation", "check_platform", "PLATFORMS", "platform", "compiler_params", "compiler_params_kwargs",
           "pow2_ceil", "is_pow2"]

Implementation = Literal["auto", "xla", "pallas"]
IMPLEMENTATIONS: tuple[str, ...] = typing.get_args(Implementation)
# Platforms with a compiled Pallas backend (Triton / Mosaic GPU for cuda and rocm, Mosaic for tpu).
COMPILED_PLATFORMS = ("cuda", "rocm", "tpu")


def pow2_ceil(v: int) -> int:
    """Smallest power of two >= ``v`` (1 for ``v <= 1``)."""
    return 1 << max(0, int(v) - 1).bit_length()


def is_pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def platform() -> str:
    """The default backend as a lowering platform: ``"cuda"``, ``"rocm"``, ``"tpu"``, ``"cpu"``."""
    p = jax.default_backend()
    if p != "gpu":
        return p
    try:
        version = str(getattr(jax.devices()[0].client, "platform_version", "")).lower()
    except Exception:  # noqa: BLE001 - an odd client only means "assume CUDA"
        version = ""
    return "rocm" if "rocm" in version else "cuda"


PLATFORMS = ("cuda", "rocm", "tpu", "cpu")


def check_platform(value: str | None, name: str = "platform") -> str:
    """``value`` checked against :data:`PLATFORMS` (``"gpu"`` means ``"cuda"``); None: this
    process's backend (:func:`platform`)."""
    if value is None:
        return platform()
    if value == "gpu":
        return "cuda"
    if not isinstance(value, str) or value not in PLATFORMS:
        raise ValueError(f"{name} must be None or one of {PLATFORMS}, got {value!r}")
    return value


def compiler_params(platform: str | None, dimension_semantics: tuple[str, ...]):
    """Backend-matched compiler params: Triton's for cuda/rocm, Mosaic's for tpu, else None.

    ``dimension_semantics`` ("parallel" / "arbitrary" per grid axis) is used on TPU only. Params of
    one backend fail when lowered for another, so pass the platform actually lowered for (None in
    interpret mode).
    """
    if platform in ("cuda", "rocm", "gpu"):
        from jax.experimental.pallas import triton as pl_triton

        return pl_triton.CompilerParams(num_warps=4, num_stages=2)
    if platform == "tpu":
        from jax.experimental.pallas import tpu as pltpu

        return pltpu.CompilerParams(dimension_semantics=tuple(dimension_semantics))
    return None


def compiler_params_kwargs(interpret, platform: str | None,
                           dimension_semantics: tuple[str, ...]) -> dict:
    """``{"compiler_params": ...}`` for ``pl.pallas_call``, or ``{}`` (interpret mode, CPU)."""
    params = compiler_params(None if interpret else platform, dimension_semantics)
    return {} if params is None else {"compiler_params": params}


def check_implementation(implementation, name: str = "implementation") -> None:
    """Raise ``ValueError`` naming ``implementation`` unless it is in :data:`IMPLEMENTATIONS`."""
    if not isinstance(implementation, str) or implementation not in IMPLEMENTATIONS:
        raise ValueError(f"{name} must be one of {IMPLEMENTATIONS}, got {implementation!r}")


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What runs: ``implementation`` ("xla" or "pallas"), ``interpret`` (run the Pallas
    interpreter) and ``platform`` (the compiler-param target)."""

    implementation: Literal["xla", "pallas"]
    interpret: bool
    platform: str


def resolve(op: str, implementation: Implementation, *, unsupported: str | None = None,
            interpret: bool | None = None, platform: str | None = None,
            stacklevel: int = 3) -> Resolved:
    """Decide how ``op`` runs here.

    Args:
      op: the op's name, for messages.
      implementation: "auto" | "xla" | "pallas"; anything else raises ``ValueError``.
      unsupported: why the *compiled* kernel cannot run this case on this platform (e.g. a
        Triton block constraint), or None. It does not matter in interpret mode.
      interpret: run the Pallas interpreter; default: True exactly when this platform has no
        compiled Pallas backend (CPU).
      platform: the backend to plan and lower for (``"cuda"``, ``"rocm"``, ``"tpu"``,
        ``"cpu"``); default: this process's backend. Naming a GPU/TPU on a CPU machine plans the
        compiled kernel for it (e.g. to lower or export it with ``lowering_platforms``); it
        cannot run here.
      stacklevel: passed to ``warnings.warn`` (3 = the caller of the op).

    Returns:
      :class:`Resolved`. "xla" stays "xla". "pallas" runs the kernel (interpreted on CPU) and
      raises ``ValueError`` when it cannot: compiled mode requested where no compiled backend
      exists, or ``unsupported`` is set. "auto" picks the compiled kernel when it can run, else
      "xla" with a ``UserWarning`` naming the reason (Python shows it once per call site and
      reason).
    """
    check_implementation(implementation)
    plat = check_platform(platform)
    compiled_here = plat in COMPILED_PLATFORMS
    interpret = (not compiled_here) if interpret is None else bool(interpret)
    if implementation == "xla":
        return Resolved("xla", interpret, plat)
    why = unsupported
    if not compiled_here:
        why = f"no compiled Pallas kernel on backend {plat!r}"
    if implementation == "pallas":
        if not interpret and why:
            raise ValueError(f"{op}(implementation='pallas') cannot run here: {why}. Use "
                             "implementation='auto' or 'xla'"
                             + (", or interpret=True" if not compiled_here else ""))
        return Resolved("pallas", interpret, plat)
    # "auto": only the compiled kernel; interpret mode is a test tool, not a speed
    if why:
        warnings.warn(f"{op}(implementation='auto') uses the XLA path: {why}",
                      stacklevel=stacklevel)
        return Resolved("xla", interpret, plat)
    return Resolved("pallas", interpret, plat)


def time_fn(fn, args_list, *, repeats: int = 20) -> float:
    """Median microseconds of ``fn(*args)`` cycling through ``args_list`` (after one warm-up
    call per argument tuple); the benchmarks' one timer (distinct buffers defeat caches)."""
    import statistics
    import time

    for a in args_list:
        jax.block_until_ready(fn(*a))
    samples = []
    for r in range(repeats):
        a = args_list[r % len(args_list)]
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*a))
        samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)
