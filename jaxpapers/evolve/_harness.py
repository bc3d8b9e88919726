"""The two programs that run inside the sandbox (as text: they are files of the sandbox's work dir).

``EXPORT`` imports the candidate (``candidate.py``) and, per shape of ``spec.json``, exports the
candidate's kernel twice with ``jax.export``: for ``cuda`` with ``interpret=False`` (the Triton
lowering: the "compiles" rung) and for ``cpu`` with ``interpret=True``; it writes
``cuda_<i>.bin`` / ``cpu_<i>.bin`` (shapes marked ``"cpu": false``, the cost model's GPU
shapes, get the cuda export only) and prints one JSON line after ``MARK``. Candidate code runs
here, so nothing this program writes is trusted: the evaluator checks the blobs itself.

``RUN`` executes serialized ``cpu`` blobs (``spec.json``'s ``runs``: blob file and input
count) on inputs the evaluator wrote (``in_<i>_<j>.npy``) and writes ``out_<i>.npy``.
No candidate Python runs there (an exported program is StableHLO only;
host callbacks cannot be serialized); it is sandboxed because the program may still loop or
allocate without bound.

Both first read ``spec.json``'s ``xla_backend_optimization_level`` (the evaluator's own level,
or null) and add it to ``XLA_FLAGS`` before anything imports jax.
"""

MARK = "@@KERNELFOUNDRY@@"

_PRELUDE = r'''
import json, os, sys, traceback
os.environ.setdefault("JAX_PLATFORMS", "cpu")
MARK = "@@KERNELFOUNDRY@@"
def _emit(obj):
    sys.stdout.write("\n" + MARK + json.dumps(obj) + "\n")
    sys.stdout.flush()
def _short(e):
    text = "".join(traceback.format_exception_only(type(e), e)).strip()
    return text[-600:]


def _opt_level():
    try:
        with open("spec.json") as f:
            level = json.load(f).get("xla_backend_optimization_level")
    except Exception:
        return
    if type(level) is int and 0 <= level <= 3:
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags} --xla_backend_optimization_level={level}".strip()


_opt_level()
'''

EXPORT = _PRELUDE + r'''
report = {"import": None, "shapes": []}
try:
    with open("spec.json") as f:
        spec = json.load(f)
    namespace = {"__name__": "candidate", "__file__": "candidate.py"}
    with open("candidate.py") as f:
        code = compile(f.read(), "candidate.py", "exec")
    exec(code, namespace)
    kernel = namespace.get("kernel")
    if not callable(kernel):
        raise NameError("the candidate defines no callable `kernel`")
except BaseException as e:  # the candidate failed to import
    report["import"] = _short(e)
    _emit(report)
    raise SystemExit(0)

import functools
import jax
from jax import export

def _gpu_context():
    """jax >= 0.11 lowers GPU kernels on a CPU host only under an abstract GPU mesh."""
    import contextlib
    try:
        from jax.sharding import AbstractDevice, AbstractMesh, use_abstract_mesh
        mesh = AbstractMesh((1,), ("x",), abstract_device=AbstractDevice(
            device_kind="NVIDIA H200", num_cores=None, platform="gpu"))
        return use_abstract_mesh(mesh)
    except Exception:
        return contextlib.nullcontext()

TRITON = export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")
for i, shape in enumerate(spec["shapes"]):
    avals = [jax.ShapeDtypeStruct(tuple(a[0]), a[1]) for a in shape["inputs"]]
    kw = dict(shape["static"], **spec["params"])
    row = {"cuda": None, "cpu": None}
    try:
        f = jax.jit(functools.partial(kernel, interpret=False, platform="cuda", **kw))
        try:
            exp = export.export(f, platforms=("cuda",), disabled_checks=[TRITON])(*avals)
        except Exception:
            with _gpu_context():
                exp = export.export(f, platforms=("cuda",), disabled_checks=[TRITON])(*avals)
        with open(f"cuda_{i}.bin", "wb") as fh:
            fh.write(exp.serialize())
    except BaseException as e:
        row["cuda"] = _short(e)
    if not shape.get("cpu", True):
        report["shapes"].append(row)
        continue
    try:
        f = jax.jit(functools.partial(kernel, interpret=True, platform="cpu", **kw))
        exp = export.export(f, platforms=("cpu",))(*avals)
        with open(f"cpu_{i}.bin", "wb") as fh:
            fh.write(exp.serialize())
    except BaseException as e:
        row["cpu"] = _short(e)
    report["shapes"].append(row)
_emit(report)
'''

RUN = _PRELUDE + r'''
import numpy as np
import jax
from jax import export
with open("spec.json") as f:
    spec = json.load(f)
rows = []
loaded = {}
for i, run in enumerate(spec["runs"]):
    try:
        if run["blob"] not in loaded:
            with open(run["blob"], "rb") as fh:
                loaded[run["blob"]] = export.deserialize(bytearray(fh.read()))
        exp = loaded[run["blob"]]
        args = []
        for j in range(run["inputs"]):
            args.append(np.load(f"in_{i}_{j}.npy"))
            os.remove(f"in_{i}_{j}.npy")   # only outputs go back
        out = exp.call(*args)
        if isinstance(out, (tuple, list)):
            raise TypeError(f"the program returns {len(out)} outputs, not one array")
        np.save(f"out_{i}.npy", np.asarray(out))
        rows.append(None)
    except BaseException as e:
        rows.append(_short(e))
for name in list(loaded):
    os.remove(name)
_emit({"runs": rows})
'''
