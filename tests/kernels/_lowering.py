"""Lower a jitted function for a GPU (Triton) or TPU (Mosaic) target on a CPU-only machine."""

from __future__ import annotations

import contextlib
import warnings

import jax


def lower_for(platform: str, f, *args):
    """``jax.jit(f).trace(*args).lower(lowering_platforms=(platform,))``.

    TPU lowering (and, from jax 0.11, GPU lowering) needs an abstract device of that platform in
    context, given here by an abstract one-device mesh; warnings of the lowering are silenced.
    """
    ctx = contextlib.nullcontext()
    needs_abstract = platform == "tpu" or tuple(map(int, jax.__version__.split(".")[:2])) >= (0, 11)
    if needs_abstract:
        from jax.sharding import AbstractDevice, AbstractMesh

        dev = (AbstractDevice(device_kind="NVIDIA H200", num_cores=None, platform="gpu")
               if platform == "cuda" else
               AbstractDevice(device_kind="TPU v5 lite", num_cores=1, platform="tpu"))
        ctx = jax.sharding.use_abstract_mesh(AbstractMesh((1,), ("x",), abstract_device=dev))
    with ctx, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return jax.jit(f).trace(*args).lower(lowering_platforms=(platform,))
