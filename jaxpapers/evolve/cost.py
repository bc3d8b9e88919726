"""A roofline cost model of an exported GPU program: a CPU proxy for kernel time, FLAGGED AS SUCH.

KernelFoundry's fitness adds a measured speedup to the correctness level. Without a GPU we
estimate time from the program a candidate exported for ``cuda`` (``jax.export`` with
``platforms=("cuda",)``), read on the trusted side: no candidate code runs here, the analysis
reads the serialized module only.

Per Pallas kernel (a ``__gpu$xla.gpu.triton`` custom call; its Triton IR is the ``ir`` bytes of
the backend config, parsed with jaxlib's Triton dialect) with P = grid_x * grid_y * grid_z
programs (one program's ops, ``scf.for`` bodies multiplied by their constant trip counts):

* bytes per program = elements x element bytes of every used ``tt.load`` result (a load
  whose result nothing reads, e.g. the old value Pallas' ``ref[...] = v`` swap reads, is left
  out, as Triton's compiler removes it) and ``tt.store`` value (masked lanes counted: an upper
  bound);
* flops per program = 2 M N K of every ``tt.dot``;
* time = launch + max(P bytes / BW, P flops / peak(dtype)) x ceil(P / SMs) x SMs / P (the last
  factor: a partial last wave of programs wastes SMs).

XLA ops outside kernels (the wrapper's pads, slices, gathers, the reference's whole program):
each op that materialises memory (dot_general, gather, scatter, dynamic (update) slice, pad,
slice, concatenate, reduce, sort, transpose; pads and slices that change nothing are free)
costs ``bytes / BW`` (operands + result), dots ``2 M N K`` flops at peak;
elementwise ops, converts, broadcasts and reshapes are assumed fused (0 bytes), so the XLA side
is an optimistic estimate. ``scf.for`` loops whose bounds are not constants count once (and
``dynamic_loops`` says how many there were); while loops in the XLA part count once too.

The model knows nothing of caches, shared-memory limits, occupancy or instruction latency: a
ranking aid on a CPU machine, not a measurement. ``Hardware`` defaults to an H200: 4.8 TB/s HBM,
132 SMs, 989 TFLOP/s dense bf16 / fp16 tensor cores, 494 (TF32, what Triton uses for float32
dots), 1979 int8; 3 us per kernel launch.
"""

from __future__ import annotations

import dataclasses
import math
import re

__all__ = ["Hardware", "H200", "KernelCost", "ProgramCost", "analyze_module", "estimate_seconds",
           "exported_cost"]

_TRITON_TARGET = "__gpu$xla.gpu.triton"


@dataclasses.dataclass(frozen=True)
class Hardware:
    """A GPU as the roofline sees it (bytes/s, programs resident at once, flop/s by dtype)."""

    name: str = "H200"
    hbm_bytes_per_s: float = 4.8e12
    sms: int = 132
    flops_bf16: float = 989e12
    flops_tf32: float = 494e12
    flops_int8: float = 1979e12
    launch_s: float = 3e-6

    def peak(self, dtype: str) -> float:
        if dtype in ("i8", "ui8", "si8", "f8E4M3FN", "f8E5M2"):
            return self.flops_int8
        if dtype in ("bf16", "f16"):
            return self.flops_bf16
        return self.flops_tf32


H200 = Hardware()


@dataclasses.dataclass(frozen=True)
class KernelCost:
    """One Pallas kernel launch: ``programs`` and the bytes / flops of ONE program."""

    name: str
    programs: int
    bytes_per_program: float
    flops_per_program: float
    dot_dtype: str
    dynamic_loops: int

    def seconds(self, hw: Hardware = H200) -> float:
        p = max(self.programs, 1)
        body = max(p * self.bytes_per_program / hw.hbm_bytes_per_s,
                   p * self.flops_per_program / hw.peak(self.dot_dtype))
        waves = math.ceil(p / hw.sms) * hw.sms / p
        return hw.launch_s + body * waves


@dataclasses.dataclass(frozen=True)
class ProgramCost:
    """A whole exported program: its kernels and the XLA work around them."""

    kernels: tuple[KernelCost, ...]
    xla_bytes: float
    xla_flops: float
    dynamic_loops: int

    def seconds(self, hw: Hardware = H200) -> float:
        """Estimated time: kernels in sequence plus the XLA part at the roofline."""
        xla = max(self.xla_bytes / hw.hbm_bytes_per_s, self.xla_flops / hw.flops_tf32)
        xla += hw.launch_s if self.xla_bytes else 0.0
        return sum(k.seconds(hw) for k in self.kernels) + xla


def estimate_seconds(cost: ProgramCost, hw: Hardware = H200) -> float:
    """``cost.seconds(hw)``."""
    return cost.seconds(hw)


_ELEM_BYTES = {"f64": 8, "i64": 8, "ui64": 8, "f32": 4, "i32": 4, "ui32": 4, "bf16": 2,
               "f16": 2, "i16": 2, "ui16": 2, "i8": 1, "ui8": 1, "si8": 1, "i1": 1,
               "f8E4M3FN": 1, "f8E5M2": 1}
_TENSOR = re.compile(r"tensor<((?:[0-9]+x)*)(?:!tt\.ptr<)?([a-zA-Z0-9]+)")


def _shape_dtype(type_str: str) -> tuple[tuple[int, ...], str]:
    """``tensor<16x32xf32>`` -> ((16, 32), "f32"); pointer tensors give the pointee type;
    scalars ``f32`` -> ((), "f32")."""
    m = _TENSOR.search(type_str)
    if not m:
        t = type_str.strip()
        t = re.sub(r"^!tt\.ptr<(.*)>$", r"\1", t)
        return (), t
    dims = tuple(int(d) for d in m.group(1).split("x") if d)
    return dims, m.group(2)


def _nbytes(type_str: str) -> float:
    dims, dt = _shape_dtype(type_str)
    return float(math.prod(dims)) * _ELEM_BYTES.get(dt, 4)


def _ops(block_owner):
    for region in block_owner.regions:
        for block in region.blocks:
            yield from block.operations


_FOLD = {"arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b,
         "arith.muli": lambda a, b: a * b, "arith.maxsi": max, "arith.minsi": min,
         "arith.divsi": lambda a, b: int(a / b) if b else None,
         "arith.floordivsi": lambda a, b: a // b if b else None,
         "arith.remsi": lambda a, b: int(math.fmod(a, b)) if b else None}
_CASTS = ("arith.index_cast", "arith.extsi", "arith.extui", "arith.trunci")


def _const_int(value, depth: int = 0) -> int | None:
    """The value of an integer SSA value built from constants by simple arith ops, else None."""
    owner = value.owner
    name = getattr(owner, "name", None)
    if name is None or depth > 32:
        return None
    if name == "arith.constant":
        try:
            return int(owner.attributes["value"].value)
        except Exception:  # noqa: BLE001 - a non-integer constant: not a static bound
            return None
    if name in _CASTS:
        return _const_int(owner.operands[0], depth + 1)
    if name in _FOLD:
        a, b = (_const_int(v, depth + 1) for v in owner.operands[:2])
        return None if a is None or b is None else _FOLD[name](a, b)
    return None


def _used(value) -> bool:
    try:
        return any(True for _ in value.uses)
    except Exception:  # noqa: BLE001 - bindings without use lists: count it
        return True


def _triton_program(op, acc: dict, mult: float) -> None:
    """Accumulate one program's loads/stores/dots under ``op`` (loops multiply by trip count)."""
    for child in _ops(op):
        name = child.name
        if name == "tt.load":
            if _used(child.results[0]):   # Pallas' swap loads the old value: dead, DCE'd
                acc["bytes"] += mult * _nbytes(str(child.results[0].type))
        elif name == "tt.store":
            acc["bytes"] += mult * _nbytes(str(child.operands[1].type))
        elif name == "tt.dot":
            lhs, dt = _shape_dtype(str(child.operands[0].type))
            m, k = lhs[-2:]
            n = _shape_dtype(str(child.operands[1].type))[0][-1]
            acc["flops"] += mult * 2.0 * m * n * k
            acc["dtype"] = dt
        if name == "scf.for":
            lb, ub, step = (_const_int(v) for v in child.operands[:3])
            if None in (lb, ub, step) or step <= 0:
                acc["dynamic"] += 1
                trips = 1
            else:
                trips = max(0, -(-(ub - lb) // step))
            _triton_program(child, acc, mult * trips)
        elif child.regions:
            _triton_program(child, acc, mult)


def _kernel_cost(op, ctx) -> KernelCost:
    from jax._src.lib import triton
    from jax._src.lib.mlir import ir
    cfg = op.attributes["mhlo.backend_config"]
    grid = [int(cfg[f"grid_{a}"].value) for a in "xyz"]
    name = str(cfg["name"].value) if "name" in cfg else "kernel"
    triton.dialect.register_dialect(ctx)
    module = ir.Module.parse(cfg["ir"].value_bytes, context=ctx)
    acc = {"bytes": 0.0, "flops": 0.0, "dtype": "f32", "dynamic": 0}
    _triton_program(module.operation, acc, 1.0)
    return KernelCost(name, math.prod(grid), acc["bytes"], acc["flops"], acc["dtype"],
                      acc["dynamic"])


_MATERIALISING = ("stablehlo.dot_general", "stablehlo.gather", "stablehlo.scatter",
                  "stablehlo.dynamic_slice", "stablehlo.dynamic_update_slice", "stablehlo.pad",
                  "stablehlo.slice", "stablehlo.concatenate", "stablehlo.reduce",
                  "stablehlo.sort", "stablehlo.transpose", "stablehlo.reduce_window")


def _dot_flops(op) -> float:
    lhs, _ = _shape_dtype(str(op.operands[0].type))
    out, _ = _shape_dtype(str(op.results[0].type))
    dims = str(op.attributes["dot_dimension_numbers"])
    m = re.search(r"lhs_contracting_dimensions = \[([0-9, ]*)\]", dims)
    contract = [int(c) for c in m.group(1).split(",") if c.strip()] if m else []
    k = math.prod(lhs[c] for c in contract) if contract else 1
    return 2.0 * math.prod(out) * k


def analyze_module(mlir_text: str) -> ProgramCost:
    """The :class:`ProgramCost` of a StableHLO module (text, as ``Exported.mlir_module()``).

    Raises ``ValueError`` naming ``mlir_text`` when it does not parse.
    """
    from jax._src.interpreters import mlir as jmlir
    from jax._src.lib.mlir import ir
    if not isinstance(mlir_text, str):
        raise TypeError("mlir_text must be a str")
    ctx = jmlir.make_ir_context()
    try:
        module = ir.Module.parse(mlir_text, context=ctx)
    except Exception as e:  # noqa: BLE001 - report any parser failure the same way
        raise ValueError(f"mlir_text does not parse as MLIR: {str(e)[:200]}") from None
    kernels: list[KernelCost] = []
    state = {"bytes": 0.0, "flops": 0.0, "dynamic": 0}

    def visit(owner):
        for op in _ops(owner):
            name = op.name
            if name == "stablehlo.custom_call":
                target = str(op.attributes["call_target_name"]).strip('"')
                if target == _TRITON_TARGET:
                    kernels.append(_kernel_cost(op, ctx))
                    continue
            noop = (name in ("stablehlo.pad", "stablehlo.slice", "stablehlo.dynamic_slice")
                    and str(op.results[0].type) == str(op.operands[0].type))
            if name in _MATERIALISING and not noop:
                state["bytes"] += sum(_nbytes(str(v.type)) for v in op.operands
                                      if "tensor<" in str(v.type))
                state["bytes"] += sum(_nbytes(str(r.type)) for r in op.results)
                if name == "stablehlo.dot_general":
                    state["flops"] += _dot_flops(op)
            if name == "stablehlo.while":
                state["dynamic"] += 1
            if op.regions:
                visit(op)

    visit(module.operation)
    return ProgramCost(tuple(kernels), state["bytes"], state["flops"], state["dynamic"])


def exported_cost(exported, hw: Hardware = H200) -> tuple[ProgramCost, float]:
    """``(ProgramCost, estimated seconds)`` of a ``jax.export.Exported`` lowered for cuda."""
    platforms = tuple(getattr(exported, "platforms", ()))
    if "cuda" not in platforms:
        raise ValueError(f"exported must be lowered for 'cuda' (platforms={platforms})")
    cost = analyze_module(exported.mlir_module())
    return cost, cost.seconds(hw)
