"""Multi-process runs on JAX's distributed runtime: join the job, name the primary, split a batch.

Scaling out means running the same program once per host (or once per accelerator) and letting
JAX connect the processes: a coordination service (started by process 0) lets them find each
other, and XLA's collectives (gloo on CPU, NCCL on GPU, ICI on TPU) carry the gradient
all-reduce. After :func:`initialize`, ``jax.devices()`` lists the devices of *every* process,
``jax.local_devices()`` those of this one, and a mesh over all devices
(:func:`jaxpapers.core.sharding.data_parallel_mesh`) makes jitted code run across processes.

Each process loads only its rows of a global batch (:func:`process_slice`) and
:func:`jaxpapers.core.sharding.shard_batch` assembles them into one global array. Only the
primary process (:func:`is_primary`, process 0) prints progress and writes reports; orbax
checkpoints are written by all processes together.

Where the processes come from:

* ``jaxpapers launch -n N -- COMMAND ...`` starts N local processes with the environment
  variables :data:`COORDINATOR_ENV`, :data:`NUM_PROCESSES_ENV`, :data:`PROCESS_ID_ENV` set (the
  local test harness, like ``torchrun --standalone``);
* on a cluster, the scheduler starts one process per host (``srun``, ``mpirun``, a Cloud TPU
  pod slice) and :func:`initialize` picks the cluster up through JAX's auto-detection.

This module does not import jax at import time (``jaxpapers launch`` reads its constants).

>>> process_slice(8, index=1, count=2)
slice(4, 8, None)
>>> info = initialize()     # no variables, no cluster: a single process, nothing to connect
>>> info.num_processes, is_primary()
(1, True)
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
import os
import sys
import warnings
from collections.abc import Sequence

__all__ = ["COORDINATOR_ENV", "NUM_PROCESSES_ENV", "PROCESS_ID_ENV", "ProcessInfo", "initialize",
           "is_primary", "process_slice", "detected_cluster"]

COORDINATOR_ENV = "JAXPAPERS_COORDINATOR"      # "host:port" of process 0's coordination service
NUM_PROCESSES_ENV = "JAXPAPERS_NUM_PROCESSES"  # the number of processes of the job
PROCESS_ID_ENV = "JAXPAPERS_PROCESS_ID"        # this process's id in [0, num_processes)

# The cluster environments of JAX's auto-detection that initialize() follows. JAX also probes
# Kubernetes and mpi4py; those are left out on purpose: any pod would otherwise try to bootstrap
# through the Kubernetes API, and mpi4py is opt-in in JAX itself.
_CLUSTERS = ("SlurmCluster", "OmpiCluster", "GceTpuCluster", "GkeTpuCluster")

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ProcessInfo:
    """Where this process stands in the job (returned by :func:`initialize`).

    Attributes:
      process_id: this process's index, ``jax.process_index()``.
      num_processes: the number of processes, ``jax.process_count()``.
      coordinator_address: ``"host:port"`` of the coordination service, or None when no
        distributed runtime was started (a single process).
      source: where the settings came from: ``"arguments"``, ``"environment"`` (the
        ``JAXPAPERS_*`` variables), ``"cluster:<name>"`` (JAX's auto-detection),
        ``"already initialized"`` or ``"single process"``.
    """

    process_id: int
    num_processes: int
    coordinator_address: str | None
    source: str


def _parse_int(value, *, name: str, env: str | None, minimum: int) -> int | None:
    """An int >= minimum from an argument, or from the text of environment variable ``env``."""
    where = name if env is None else f"environment variable {env}"
    if value is None:
        return None
    if env is not None:
        try:
            value = int(value.strip())
        except ValueError:
            raise ValueError(f"{where} must be an integer >= {minimum}, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{where} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{where} must be an integer >= {minimum}, got {value}")
    return value


def _check_address(address: str, where: str) -> str:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{where} must be 'host:port' with a port in 1..65535, got {address!r}")
    return address


def _resolve(coordinator_address, num_processes, process_id):
    """The three settings from the arguments, else from the JAXPAPERS_* variables."""
    got = {}
    for name, arg, env, minimum in (("num_processes", num_processes, NUM_PROCESSES_ENV, 1),
                                    ("process_id", process_id, PROCESS_ID_ENV, 0)):
        if arg is not None:
            got[name] = (_parse_int(arg, name=name, env=None, minimum=minimum), name)
        elif os.environ.get(env, "").strip():
            got[name] = (_parse_int(os.environ[env], name=name, env=env, minimum=minimum),
                         f"environment variable {env}")
        else:
            got[name] = (None, None)
    if coordinator_address is not None:
        if not isinstance(coordinator_address, str):
            raise TypeError(f"coordinator_address must be a 'host:port' string, got "
                            f"{type(coordinator_address).__name__} {coordinator_address!r}")
        got["coordinator_address"] = (_check_address(coordinator_address,
                                                     "coordinator_address"),
                                      "coordinator_address")
    elif os.environ.get(COORDINATOR_ENV, "").strip():
        where = f"environment variable {COORDINATOR_ENV}"
        got["coordinator_address"] = (_check_address(os.environ[COORDINATOR_ENV].strip(), where),
                                      where)
    else:
        got["coordinator_address"] = (None, None)
    present = {k for k, (v, _) in got.items() if v is not None}
    if present and len(present) < 3:
        missing = [k for k in ("coordinator_address", "num_processes", "process_id")
                   if k not in present]
        env_of = {"coordinator_address": COORDINATOR_ENV, "num_processes": NUM_PROCESSES_ENV,
                  "process_id": PROCESS_ID_ENV}
        raise ValueError(
            f"{', '.join(f'{k} (or {env_of[k]})' for k in missing)} not set while "
            f"{', '.join(got[k][1] for k in sorted(present))} is: give all three of "
            "coordinator_address, num_processes, process_id, or none")
    if not present:
        return None
    (n, n_where), (i, i_where) = got["num_processes"], got["process_id"]
    if i >= n:
        raise ValueError(f"{i_where}={i} must be smaller than {n_where}={n}")
    wheres = " ".join(where for _, where in got.values())
    return (got["coordinator_address"][0], n, i,
            "environment" if "environment variable" in wheres else "arguments")


def detected_cluster() -> str | None:
    """The cluster environment JAX would bootstrap from (SLURM, Open MPI, Cloud TPU), or None.

    Returns:
      the name of JAX's cluster class (``"SlurmCluster"``, ``"OmpiCluster"``,
      ``"GceTpuCluster"``, ``"GkeTpuCluster"``), or None when none is present.
    """
    try:
        # jax has no public "which cluster is this" query; its detection classes live in
        # jax._src.clusters (stable since jax 0.3). If they move, detection is off (a warning),
        # and the JAXPAPERS_* variables or explicit arguments still work.
        from jax._src import clusters

        envs = [e for e in clusters.ClusterEnv._cluster_types if e.__name__ in _CLUSTERS]
    except (ImportError, AttributeError) as e:  # pragma: no cover - depends on jax internals
        warnings.warn(f"cannot query jax's cluster detection ({e}); pass coordinator_address, "
                      f"num_processes and process_id (or set {COORDINATOR_ENV}, "
                      f"{NUM_PROCESSES_ENV}, {PROCESS_ID_ENV}) to run several processes",
                      stacklevel=2)
        return None
    for env in envs:
        if env.is_env_present():
            return env.__name__
    return None


def _select_cpu_collectives() -> None:
    """Cross-process collectives on CPU go through gloo (unless the user chose e.g. mpi)."""
    import jax

    try:
        current = jax.config.jax_cpu_collectives_implementation
    except AttributeError:  # pragma: no cover - a jax without the option
        return
    if not current or current == "none":
        jax.config.update("jax_cpu_collectives_implementation", "gloo")


def _exit_on_uncaught_exception() -> None:
    """Make an uncaught exception end this process at once, with exit code 1.

    Without this, a process that raises waits at exit in jax's shutdown barrier for its peers,
    while they wait for it inside a collective: the job hangs until a timeout instead of failing.
    """
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        try:
            previous(exc_type, exc, tb)
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001 - a closed stream must not block the exit
                    pass
            os._exit(130 if issubclass(exc_type, KeyboardInterrupt) else 1)

    sys.excepthook = hook


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, *,
               local_device_ids: int | Sequence[int] | None = None, timeout_s: int = 300,
               exit_on_error: bool = True) -> ProcessInfo:
    """Join the job's other processes through JAX's distributed runtime (or stay single).

    Call it first thing, before any JAX computation. The settings come from, in order:

    1. the arguments (all three of ``coordinator_address``, ``num_processes``, ``process_id``);
    2. the environment variables ``JAXPAPERS_COORDINATOR``, ``JAXPAPERS_NUM_PROCESSES``,
       ``JAXPAPERS_PROCESS_ID`` (set by ``jaxpapers launch``);
    3. JAX's cluster auto-detection: SLURM, Open MPI, Cloud TPU (see :func:`detected_cluster`);
    4. none of these: a single process; nothing is started (a no-op).

    On CPU the cross-process collectives are gloo's. Calling it again returns the same info.

    Args:
      coordinator_address: ``"host:port"`` of process 0, where it starts the coordination
        service; every process passes the same address.
      num_processes: the number of processes in the job (>= 1).
      process_id: this process's id in ``[0, num_processes)``; 0 is the primary.
      local_device_ids: restrict this process to these local accelerators (e.g. one GPU per
        process); None: all (JAX's cluster detection picks one GPU per SLURM/MPI task).
      timeout_s: seconds to wait for all processes to connect.
      exit_on_error: in a multi-process job, an uncaught exception ends the process at once
        with exit code 1, so that the launcher or scheduler sees the failure and stops the
        others (otherwise it waits at exit for peers stuck in a collective with it).

    Returns:
      a :class:`ProcessInfo`.

    Raises:
      ValueError: a setting is malformed (naming the argument or environment variable), only
        some of the three are set, or ``process_id >= num_processes``.
      RuntimeError: settings were given but JAX already ran a computation in this process.
    """
    import jax

    timeout_s = _parse_int(timeout_s, name="timeout_s", env=None, minimum=1)
    requested = _resolve(coordinator_address, num_processes, process_id)
    if jax.distributed.is_initialized():
        info = ProcessInfo(jax.process_index(), jax.process_count(),
                           _coordinator_of_running_runtime(), "already initialized")
        if requested is not None and requested[1:3] != (info.num_processes, info.process_id):
            raise ValueError(f"jax's distributed runtime already runs as process "
                             f"{info.process_id} of {info.num_processes}, but process "
                             f"{requested[2]} of {requested[1]} was asked for")
        return info
    extra = {"initialization_timeout": timeout_s}
    if local_device_ids is not None:
        extra["local_device_ids"] = local_device_ids
    if requested is None:
        cluster = detected_cluster()
        if cluster is None:
            return ProcessInfo(0, 1, None, "single process")
        _select_cpu_collectives()
        try:
            jax.distributed.initialize(**extra)
        except RuntimeError as e:  # jax already computed here: it cannot join the job any more
            warnings.warn(f"a {cluster} environment was detected but JAX has already run a "
                          f"computation in this process, so it stays a single process ({e}); "
                          "call jaxpapers.core.distributed.initialize() first", stacklevel=2)
            return ProcessInfo(0, 1, None, "single process")
        source = f"cluster:{cluster}"
    else:
        address, n, i, source = requested
        _select_cpu_collectives()
        try:
            jax.distributed.initialize(coordinator_address=address, num_processes=n,
                                       process_id=i, **extra)
        except RuntimeError as e:
            raise RuntimeError(f"cannot join the job as process {i} of {n} ({e}); call "
                               "initialize() before any JAX computation") from e
    if exit_on_error and jax.process_count() > 1:
        _exit_on_uncaught_exception()
    info = ProcessInfo(jax.process_index(), jax.process_count(),
                       _coordinator_of_running_runtime(), source)
    logger.info("process %d of %d (%s)", info.process_id, info.num_processes, source)
    return info


def _coordinator_of_running_runtime() -> str | None:
    """The coordinator address jax was started with (None if unknown)."""
    try:
        # not in jax's public API (jax.distributed exposes initialize/is_initialized/shutdown);
        # only used for the ProcessInfo returned to the caller
        from jax._src import distributed as jax_distributed

        return getattr(jax_distributed.global_state, "coordinator_address", None)
    except (ImportError, AttributeError):  # pragma: no cover - depends on jax internals
        return None


def is_primary() -> bool:
    """Whether this is process 0, the one that prints and writes reports (True in one process).

    Call it after :func:`initialize` (it starts JAX's backend, after which joining is too late).
    """
    import jax

    return jax.process_index() == 0


def process_slice(n: int, *, index: int | None = None, count: int | None = None) -> slice:
    """The rows of a global batch of ``n`` that this process loads: the ``index``-th of ``count``
    equal, contiguous blocks.

    The blocks follow the process order of :func:`jaxpapers.core.sharding.data_parallel_mesh`,
    so ``shard_batch(batch[process_slice(n)], mesh)`` on every process is the global batch.

    Args:
      n: global batch size; a multiple of ``count``.
      index: process index (default ``jax.process_index()``).
      count: number of processes (default ``jax.process_count()``).

    Returns:
      ``slice(index * n // count, (index + 1) * n // count)``.

    Raises:
      ValueError: ``n`` is not a multiple of ``count``, or ``index`` is out of range.

    >>> process_slice(6, index=0, count=3), process_slice(6, index=2, count=3)
    (slice(0, 2, None), slice(4, 6, None))
    """
    n = _parse_int(n, name="n", env=None, minimum=0)
    if index is None or count is None:
        import jax

        index = jax.process_index() if index is None else index
        count = jax.process_count() if count is None else count
    count = _parse_int(count, name="count", env=None, minimum=1)
    index = _parse_int(index, name="index", env=None, minimum=0)
    if index >= count:
        raise ValueError(f"index must be < count={count}, got {index}")
    if n % count:
        raise ValueError(f"n={n} rows cannot be split evenly over {count} processes: make the "
                         f"global batch a multiple of {count}")
    per = n // count
    return slice(index * per, (index + 1) * per)
