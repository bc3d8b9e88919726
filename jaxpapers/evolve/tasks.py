"""The kernel tasks KernelFoundry's search runs on: our two Pallas ops, as candidate problems.

A *candidate* is Python source defining

    kernel(*inputs, interpret: bool, platform: str | None, **static, **params) -> jax.Array

where ``inputs`` are the task's plain arrays (below), ``static`` the task's static problem
keywords (e.g. ``group_size``), ``params`` tunable ints (block sizes) with defaults in the
candidate's signature, ``interpret`` asks for the Pallas interpreter (CPU) and ``platform`` names
the backend the kernel is lowered for (``"cuda"``, ``"tpu"``, ``"cpu"``; compiler params differ per
backend). Inputs are drawn by the trusted side from ``(task, shape, seed)`` with numpy
(:func:`make_inputs`): a candidate never sees the seeds.

Tasks:

* ``quantized_matmul``: ``x [M, K]`` float32 times a symmetric int4 group-quantized ``[K, N]``
  weight ``q`` (:class:`jaxpapers.quant.QuantizedArray`, made by ``jaxpapers.quant.quantize``
  from a random normal matrix). The candidate gets ``(x, q.data [K/2, N] uint8, q.scales [G, N]
  float32)`` (split-half int4 packing in tiles of ``pack_rows = min(group_size, 128)`` rows,
  levels offset by 8; see ``pallas_kernels.quantized_matmul.reference``) and
  ``static = {"group_size": K / G}``; the reference is ``jaxpapers.quant.qdot(x, q)`` (fp32
  accumulation). Shapes: :class:`pallas_kernels.quantized_matmul.shapes.Shape` (bits 4,
  symmetric); space: the fields of ``BlockSizes``.
* ``sparse_decode_attention``: ``(q [B, Hq, D], k [B, Hk, L, D], v [B, Hk, L, D], indices [B, Hk,
  K] int32, valid [B, Hk, K] bool, length [B] int32)`` float32 normal q/k/v, page indices uniform
  over the pages, ``valid`` ~85% True, ``length`` uniform in ``[L/2, L]``; ``static =
  {"page_size": p}``; the reference is ``sparse_decode_attention_reference`` (the softmax scale
  is ``1/sqrt(D)``). Shapes: :class:`pallas_kernels.binary_hash_attention.shapes.AttentionShape`;
  space: the fields of ``AttentionBlockSizes``.

Seen shapes are what mutators and prompts may show; held-out shapes are used only by the
evaluator, to catch kernels hard-coded to the seen ones.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import zlib
from typing import Any, Callable

import numpy as np

from pallas_kernels.binary_hash_attention.shapes import AttentionShape
from pallas_kernels.quantized_matmul.shapes import Shape

__all__ = ["Task", "TASKS", "get_task", "make_inputs", "input_avals", "reference_jax",
           "reference_output", "tolerance", "shape_seed", "describe_shape"]


@dataclasses.dataclass(frozen=True)
class Task:
    """One kernel problem.

    Attributes:
      name: the task's name (a key of :data:`TASKS`).
      shape_type: the dataclass its shapes are (``Shape`` or ``AttentionShape``).
      seen_shapes: shapes a mutator or prompt may see.
      holdout_shapes: shapes only the evaluator uses (never shown).
      gpu_shapes: benchmark shapes for the template stage and the GPU timing.
      space: tunable parameters and their candidate values (the template stage's grid).
      description: what the kernel computes, for prompts (no shapes in it).
    """

    name: str
    shape_type: type
    seen_shapes: tuple
    holdout_shapes: tuple
    gpu_shapes: tuple
    space: tuple[tuple[str, tuple[int, ...]], ...]
    description: str
    static_kwargs: Callable[[Any], dict]
    check_shape: Callable[[Any], None]

    def space_dict(self) -> dict[str, list[int]]:
        return {k: list(v) for k, v in self.space}


def _qm_static(s: Shape) -> dict:
    return {"group_size": s.group}


def _qm_check(s) -> None:
    if not isinstance(s, Shape):
        raise TypeError(f"shape must be a quantized_matmul Shape, got {type(s).__name__}")
    if s.bits != 4 or not s.symmetric:
        raise ValueError(f"shape {s.name!r}: the quantized_matmul task is symmetric int4 "
                         f"(bits={s.bits}, symmetric={s.symmetric})")
    if s.k % s.group or s.group % 2 or min(s.m, s.k, s.n) < 1:
        raise ValueError(f"shape {s.name!r}: K must be a multiple of an even group_size")


def _sda_static(s: AttentionShape) -> dict:
    return {"page_size": s.page_size}


def _sda_check(s) -> None:
    if not isinstance(s, AttentionShape):
        raise TypeError(f"shape must be an AttentionShape, got {type(s).__name__}")
    if min(s.b, s.hq, s.hk, s.length, s.d, s.k, s.page_size) < 1 or s.hq % s.hk:
        raise ValueError(f"shape {s.name!r}: sizes must be >= 1 and Hq a multiple of Hk")


_QM = Task(
    name="quantized_matmul",
    shape_type=Shape,
    seen_shapes=(Shape("qm_m8_k256_n128_g64", 8, 256, 128, 4, 64),
                 Shape("qm_m16_k256_n256_g128", 16, 256, 256, 4, 128)),
    holdout_shapes=(Shape("qm_m5_k512_n128_g128", 5, 512, 128, 4, 128),),
    gpu_shapes=tuple(Shape(f"qm_gpu_m{m}_k4096", m, 4096, 4096, 4, 128, tag="gpu")
                     for m in (1, 16, 256)),
    space=(("block_m", (16, 32, 64, 128)), ("block_n", (32, 64, 128, 256)),
           ("block_k", (128, 256, 512, 1024)), ("split_k", (1, 2, 4, 8))),
    description=("y = x @ W for float32 activations x [M, K] and a symmetric int4 weight W "
                 "[K, N] quantized group-wise along K: data [K/2, N] uint8 holds two 4-bit "
                 "levels per byte in split-half tiles of P = min(group_size, 128) rows (byte "
                 "t*P/2 + i holds row t*P + i in its low nibble and row t*P + P/2 + i in its "
                 "high nibble), level u = q + 8; W[k, n] = (u - 8) * scales[k // group_size, n]. "
                 "Accumulate in float32; return [M, N] float32."),
    static_kwargs=_qm_static,
    check_shape=_qm_check,
)

_SDA = Task(
    name="sparse_decode_attention",
    shape_type=AttentionShape,
    seen_shapes=(AttentionShape("sda_tokens", 1, 4, 2, 256, 32, 32),
                 AttentionShape("sda_pages16", 2, 4, 2, 512, 32, 8, page_size=16)),
    holdout_shapes=(AttentionShape("sda_gqa4_pages32", 1, 8, 2, 384, 64, 5, page_size=32),),
    gpu_shapes=tuple(AttentionShape(f"sda_gpu_L32k_p{p}", 1, 32, 8, 32 * 1024, 128,
                                    -(-655 // p), page_size=p, tag="gpu") for p in (1, 16, 64)),
    space=(("block_k", (4, 8, 16, 32, 64, 128)), ("num_splits", (1, 2, 4, 8, 16))),
    description=("Decode attention: for each batch b and query head h (kv head h // (Hq/Hk)), "
                 "softmax(q k^T / sqrt(D)) v over the selected tokens only: indices [B, Hk, K] "
                 "name pages of page_size tokens (page p covers tokens p*page_size ... "
                 "(p+1)*page_size - 1), entries with valid == False are ignored and tokens at "
                 "positions >= length[b] are masked; a duplicated index counts twice; a head "
                 "with nothing selected outputs zeros. float32 in and out, [B, Hq, D]."),
    static_kwargs=_sda_static,
    check_shape=_sda_check,
)

TASKS: dict[str, Task] = {_QM.name: _QM, _SDA.name: _SDA}


def get_task(task: str | Task) -> Task:
    """The :class:`Task` named ``task`` (a Task passes through); unknown names raise."""
    if isinstance(task, Task):
        return task
    if not isinstance(task, str) or task not in TASKS:
        raise ValueError(f"task must be one of {sorted(TASKS)}, got {task!r}")
    return TASKS[task]


def shape_seed(task: str, shape, seed: int) -> int:
    """The numpy seed of ``(task, shape, seed)``: crc32 of their text (the same in every
    process)."""
    return zlib.crc32(f"{task}|{shape!r}|{int(seed)}".encode())


def make_inputs(task: str | Task, shape, seed: int) -> tuple[np.ndarray, ...]:
    """The candidate's input arrays for ``shape`` drawn from ``seed`` (numpy, deterministic).

    Returns a tuple of numpy arrays in the order of the task's ``kernel`` arguments (module
    docstring). Runs on the trusted side only.
    """
    t = get_task(task)
    t.check_shape(shape)
    rng = np.random.default_rng(shape_seed(t.name, shape, seed))
    if t.name == "quantized_matmul":
        q = _quantized_weight(rng, shape)
        x = rng.standard_normal((shape.m, shape.k), dtype=np.float32)
        return x, np.asarray(q.data), np.asarray(q.scales)
    s = shape
    pages = -(-s.length // s.page_size)
    q = rng.standard_normal((s.b, s.hq, s.d), dtype=np.float32)
    k = rng.standard_normal((s.b, s.hk, s.length, s.d), dtype=np.float32)
    v = rng.standard_normal((s.b, s.hk, s.length, s.d), dtype=np.float32)
    idx = rng.integers(0, pages, (s.b, s.hk, s.k), dtype=np.int32)
    valid = rng.random((s.b, s.hk, s.k)) < 0.85
    length = rng.integers(s.length // 2, s.length + 1, (s.b,), dtype=np.int32)
    return q, k, v, idx, valid, length


def input_avals(task: str | Task, shape) -> list[tuple[tuple[int, ...], str]]:
    """``(shape, dtype name)`` of each input array, without drawing them (GPU-sized shapes)."""
    t = get_task(task)
    t.check_shape(shape)
    s = shape
    if t.name == "quantized_matmul":
        return [((s.m, s.k), "float32"), ((s.k // 2, s.n), "uint8"),
                ((s.k // s.group, s.n), "float32")]
    kv = (s.b, s.hk, s.length, s.d)
    return [((s.b, s.hq, s.d), "float32"), (kv, "float32"), (kv, "float32"),
            ((s.b, s.hk, s.k), "int32"), ((s.b, s.hk, s.k), "bool"), ((s.b,), "int32")]


def _quantized_weight(rng: np.random.Generator, s: Shape):
    w = rng.standard_normal((s.k, s.n), dtype=np.float32)
    return _quantize_jit()(w, bits=4, group_size=s.group, symmetric=True)


@functools.cache
def _quantize_jit():
    """``jaxpapers.quant.quantize`` as one compiled program per shape: run eagerly it compiles
    a dozen small programs per weight shape (seconds per evaluation's first shapes). Same
    values: its ops are exact (max, a correctly rounded divide, round, clip). Its finiteness
    check is skipped under jit; a standard normal draw is always finite."""
    import jax

    from jaxpapers.quant import quantize
    return jax.jit(quantize, static_argnames=("bits", "group_size", "symmetric"))


def reference_jax(task: str | Task, shape, inputs):
    """The reference as a traceable jax function of the input arrays (jit / export it)."""
    import jax.numpy as jnp
    t = get_task(task)
    t.check_shape(shape)
    if t.name == "quantized_matmul":
        from jaxpapers.quant import QuantizedArray, qdot
        x, data, scales = (jnp.asarray(a) for a in inputs)
        g = shape.group
        q = QuantizedArray(data=data, scales=scales, zeros=None, bits=4, group_size=g,
                           pack_rows=min(g, 128), shape=(shape.k, shape.n), dtype="float32")
        return qdot(x, q)
    from pallas_kernels.binary_hash_attention.reference import sparse_decode_attention_reference
    q, k, v, idx, valid, length = (jnp.asarray(a) for a in inputs)
    return sparse_decode_attention_reference(q, k, v, idx, valid, length=length,
                                             page_size=shape.page_size)


def reference_output(task: str | Task, shape, inputs) -> np.ndarray:
    """The reference result for ``inputs`` (float32 numpy): ``qdot`` for the matmul,
    ``sparse_decode_attention_reference`` for attention (jitted once per task and shape)."""
    t = get_task(task)
    t.check_shape(shape)
    return np.asarray(_reference_jit(t.name, shape)(*inputs))


@functools.lru_cache(maxsize=64)
def _reference_jit(task: str, shape):
    """The reference of ``(task, shape)`` as one compiled program: op by op it compiles a few
    dozen small programs per shape."""
    import jax
    return jax.jit(lambda *inputs: reference_jax(task, shape, inputs))


def tolerance(task: str | Task, shape, *, platform: str = "cpu") -> float:
    """Allowed ``max|out - ref| / max(1, max|ref|)``: float32 summation-order error
    (~1e-6 sqrt(n) relative, with a 10x margin) on CPU; on GPUs Triton's float32 dots use TF32
    (10-bit mantissa), so 2e-2 there."""
    t = get_task(task)
    if platform in ("cuda", "rocm", "gpu"):
        return 2e-2
    n = shape.k if t.name == "quantized_matmul" else shape.k * shape.page_size
    return 1e-5 * math.sqrt(max(n, 1)) + 1e-6


def describe_shape(shape) -> str:
    """A shape as prompt text (name and sizes)."""
    fields = [f"{f.name}={getattr(shape, f.name)}" for f in dataclasses.fields(shape)
              if f.name not in ("name", "tag")]
    return f"{shape.name}: " + ", ".join(fields)
