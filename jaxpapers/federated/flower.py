"""Flower integration: the same local step and FedAvg aggregation as Flower apps.

Our own runs put all clients and seeds in one compiled call (``jax.vmap`` / ``jax.shard_map``
over the client axis, :func:`jaxpapers.federated.client_map`), which is the fast way to study an
algorithm on one machine. This module exists so that the *same* client update,
:func:`jaxpapers.federated.local_train`, runs under `Flower <https://flower.ai>`_ with Flower's
own ``FedAvg`` strategy doing the aggregation (McMahan et al. 2017, Alg. 1: ``w <- sum_k n_k / n
w_k``). A test checks that a Flower run equals the vmapped run to float rounding.

* :func:`make_client_app` builds a ``flwr.clientapp.ClientApp`` whose ``train`` handler runs the
  jitted :func:`~jaxpapers.federated.local_train` on the data of its partition;
* :func:`make_server_app` builds a ``flwr.serverapp.ServerApp`` that runs
  ``flwr.serverapp.strategy.FedAvg`` and hands the final global parameters to a callback;
* :func:`run_simulation` runs both with Flower's Simulation Engine (Ray) on one machine, with a
  small Ray footprint by default;
* :func:`params_to_arrays` / :func:`arrays_to_params` are the wire format: a parameter pytree
  becomes its leaves as NumPy arrays in ``jax.tree_util`` leaf order (named by their
  ``jax.tree_util.keystr`` paths in the ``ArrayRecord``) and is rebuilt from a template.

Scale-out beyond one machine needs no change to the apps: the same ``ClientApp`` and
``ServerApp`` objects run on Flower's Deployment Engine (a SuperLink and one SuperNode per client,
started with ``flwr run``; each SuperNode's ``--node-config`` sets its ``partition-id``).

Simulation caveats. Flower's Simulation Engine runs clients in Ray actors. Flower users have hit
Ray memory limits there (flwrlabs/flower issue #5855: too many actors on one node, GPU OOM;
#1376: GPU memory held by idle Ray workers), and a Ray-free backend has been proposed (pull request
#3989, ``SimpleBackend``). Hence the small default here (one CPU per client, no GPU, at most two
CPUs in all). Each actor is its own process with its own JAX: on a GPU machine set
``XLA_PYTHON_CLIENT_PREALLOCATE=false`` (inherited by the actors) before giving clients GPUs.
The client app travels to the actors with every message (cloudpickle), so pass module-level
functions as ``loss_fn`` and ``client_fn_data``: they are pickled by reference and each actor's
compiled step is reused; a lambda or closure arrives as a new object each round and recompiles.
Flower sums the client arrays in arrival order, so reruns agree to float rounding, not bit for
bit; with ``fraction_train < 1`` Flower samples clients with Python's ``random`` module, which
this module does not seed.

Flower is an optional dependency, imported only inside these functions::

    pip install "flwr[simulation]>=1.42,<2"

>>> import jax.numpy as jnp
>>> params = {"b": jnp.zeros(()), "w": jnp.arange(3.0)}
>>> arrays = params_to_arrays(params)                      # leaf order: b, then w
>>> [a.shape for a in arrays]
[(), (3,)]
>>> arrays_to_params(params, arrays)["w"].tolist()
[0.0, 1.0, 2.0]
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import importlib.util
import logging
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxpapers.core.checks import check_bool, check_int, check_key, check_range
from jaxpapers.federated.local import local_train

__all__ = [
    "arrays_to_params",
    "make_client_app",
    "make_server_app",
    "params_to_arrays",
    "run_simulation",
]

INSTALL_HINT = 'pip install "flwr[simulation]>=1.42,<2"'
NUM_EXAMPLES_KEY = "num-examples"  # the MetricRecord key Flower's FedAvg weights by
SERVER_ROUND_KEY = "server-round"  # injected into the train ConfigRecord by Flower's strategies
PARTITION_ID_KEY = "partition-id"  # the node_config key Flower's Simulation Engine sets
ARRAYS_KEY = "arrays"  # FedAvg's default arrayrecord_key
METRICS_KEY = "metrics"

# The per-client step, compiled once per worker process. Static: the injected loss, the step
# count and the two FedProx / clipping switches (fixed per app; a concrete proximal_mu == 0 lets
# local_train skip the proximal term exactly as the vmapped reference does).
_local_train_jit = jax.jit(local_train,
                           static_argnames=("loss_fn", "num_steps", "clip_norm", "proximal_mu"))

# num_clients of each ServerApp made here, so run_simulation can refuse a mismatch (Flower's
# FedAvg would otherwise wait forever for nodes that never connect).
_SERVER_NUM_CLIENTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _require_flwr() -> None:
    """Import Flower's Message API or raise an ImportError that names the extra to install."""
    try:
        for module in ("flwr.app", "flwr.clientapp", "flwr.serverapp.strategy"):
            importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f"jaxpapers.federated.flower needs Flower >= 1.42 (its Message API: "
                          f"flwr.clientapp / flwr.serverapp); install it with {INSTALL_HINT}"
                          ) from err


def _leaf_spec(leaf: Any) -> jax.ShapeDtypeStruct:
    dtype = leaf.dtype if hasattr(leaf, "dtype") else np.asarray(leaf).dtype
    return jax.ShapeDtypeStruct(np.shape(leaf), dtype)


def _wire_names(tree: Any) -> list[str]:
    return [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_leaves_with_path(tree)]


def params_to_arrays(params: Any) -> list[np.ndarray]:
    """A parameter pytree as the list of its leaves (NumPy arrays, ``jax.tree_util`` leaf order).

    Args:
      params: a pytree of floating arrays (any shapes; NumPy builtin float dtypes only, since
        Flower serialises with ``np.save`` and its FedAvg multiplies every array by a float).

    Returns:
      ``[np.asarray(leaf) for leaf in jax.tree.leaves(params)]``.

    Raises:
      ValueError: a leaf that is not a floating array of a NumPy builtin dtype (integers, bools,
        ``bfloat16``; Flower's ``Array`` turns ``bfloat16`` into raw bytes: cast to float32).

    >>> import jax.numpy as jnp
    >>> [a.tolist() for a in params_to_arrays({"a": jnp.ones(2), "b": (jnp.zeros(()),)})]
    [[1.0, 1.0], 0.0]
    """
    out = []
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        a = np.asarray(leaf)
        if not (np.issubdtype(a.dtype, np.inexact) and a.dtype.isbuiltin == 1):
            raise ValueError(f"params leaf {jax.tree_util.keystr(path)} must be a float array "
                             f"of a NumPy builtin dtype (float16/32/64), got dtype {a.dtype}")
        out.append(a)
    return out


def arrays_to_params(template: Any, arrays: list[ArrayLike]) -> Any:
    """The inverse of :func:`params_to_arrays`: ``arrays`` rebuilt into ``template``'s structure.

    Args:
      template: a pytree with the structure, leaf shapes and dtypes of the parameters (arrays or
        ``jax.ShapeDtypeStruct`` leaves; values are not read).
      arrays: one array per template leaf, in ``jax.tree_util`` leaf order.

    Returns:
      a pytree like ``template`` with ``jax.Array`` leaves, each cast to its template dtype.

    Raises:
      ValueError: a different number of arrays than template leaves, or a leaf of another shape.

    >>> import jax.numpy as jnp, numpy as np
    >>> arrays_to_params({"w": jnp.zeros(2)}, [np.array([1.0, 2.0])])["w"].dtype
    dtype('float32')
    """
    paths_leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    arrays = list(arrays)
    if len(arrays) != len(paths_leaves):
        raise ValueError(f"arrays must hold one array per template leaf ({len(paths_leaves)}), "
                         f"got {len(arrays)}")
    leaves = []
    for (path, leaf), a in zip(paths_leaves, arrays):
        spec = _leaf_spec(leaf)
        a = np.asarray(a)
        if a.shape != tuple(spec.shape):
            raise ValueError(f"array for leaf {jax.tree_util.keystr(path)} must have shape "
                             f"{tuple(spec.shape)}, got {a.shape}")
        leaves.append(jnp.asarray(a.astype(spec.dtype, copy=False)))
    return jax.tree_util.tree_unflatten(treedef, leaves)


def _to_array_record(params: Any):
    """``params`` as a Flower ``ArrayRecord``: leaves in leaf order, named by keystr path."""
    from flwr.app import Array, ArrayRecord

    names = _wire_names(params)
    return ArrayRecord({n: Array(a) for n, a in zip(names, params_to_arrays(params))})


def _from_array_record(record: Any, template: Any) -> Any:
    """An ``ArrayRecord`` made by :func:`_to_array_record` (or aggregated from such) as a pytree."""
    names = _wire_names(template)
    if set(record.keys()) != set(names):
        raise ValueError(f"the ArrayRecord must hold the arrays {names} (keystr paths of the "
                         f"template leaves), got {sorted(record.keys())}")
    return arrays_to_params(template, [record[n].numpy() for n in names])


@dataclasses.dataclass(frozen=True)
class _ClientSpec:
    """Everything a ClientApp's train handler needs (pickled to the Ray actors per message)."""

    client_fn_data: Callable[[int], tuple[Any, int]]
    template: Any  # pytree of jax.ShapeDtypeStruct
    key: jax.Array
    loss_fn: Callable[[Any, Any, jax.Array], jax.Array]
    num_steps: int
    learning_rate: float
    clip_norm: float | None
    proximal_mu: float


def _client_train(spec: _ClientSpec, msg: Any, context: Any) -> Any:
    """Flower ``train`` handler: global params in, ``local_train`` on this partition, params out.

    The step key is ``fold_in(fold_in(key, server_round), partition_id)``.
    """
    from flwr.app import Message, MetricRecord, RecordDict

    if PARTITION_ID_KEY not in context.node_config:
        raise ValueError(f"the node config must set {PARTITION_ID_KEY!r} (the Simulation Engine "
                         f"does; a SuperNode needs --node-config \"{PARTITION_ID_KEY}=<int>\"), "
                         f"got keys {sorted(context.node_config)}")
    partition_id = check_int(PARTITION_ID_KEY, context.node_config[PARTITION_ID_KEY], minimum=0)
    array_records = msg.content.array_records
    if len(array_records) != 1:
        raise ValueError(f"a train message must carry exactly one ArrayRecord, got "
                         f"{len(array_records)}")
    params = _from_array_record(next(iter(array_records.values())), spec.template)
    configs = list(msg.content.config_records.values())
    if len(configs) != 1 or SERVER_ROUND_KEY not in configs[0]:
        raise ValueError(f"a train message must carry one ConfigRecord with "
                         f"{SERVER_ROUND_KEY!r} (Flower's strategies add it)")
    server_round = check_int(SERVER_ROUND_KEY, configs[0][SERVER_ROUND_KEY], minimum=0)

    data, num_examples = spec.client_fn_data(partition_id)
    num_examples = check_int(f"client_fn_data({partition_id})[1] (num_examples)", num_examples,
                             minimum=1)
    key = jax.random.fold_in(jax.random.fold_in(spec.key, server_round), partition_id)
    new_params, metrics = _local_train_jit(
        params, data, key, spec.learning_rate, loss_fn=spec.loss_fn, num_steps=spec.num_steps,
        clip_norm=spec.clip_norm, proximal_mu=spec.proximal_mu)
    reported: dict[str, int | float] = {NUM_EXAMPLES_KEY: num_examples}
    for name, value in metrics.items():  # per-step traces: report the last step's value
        reported[name] = float(np.ravel(np.asarray(value))[-1])
    content = RecordDict({ARRAYS_KEY: _to_array_record(new_params),
                          METRICS_KEY: MetricRecord(reported)})
    return Message(content=content, reply_to=msg)


def make_client_app(client_fn_data: Callable[[int], tuple[Any, int]], *, template: Any,
                    key: jax.Array, loss_fn: Callable[[Any, Any, jax.Array], jax.Array],
                    num_steps: int, learning_rate: float, clip_norm: float | None = None,
                    proximal_mu: float = 0.0) -> Any:
    """A Flower ``ClientApp`` whose ``train`` handler runs :func:`local_train` on one client.

    On each train message the handler (FedAvg ClientUpdate, McMahan et al. 2017, Alg. 1):
    reads its partition id ``p`` from ``context.node_config["partition-id"]`` and the round ``r``
    from the message's ConfigRecord (``"server-round"``); rebuilds the global parameters from the
    message's ArrayRecord with ``template``; runs the jitted
    ``local_train(params, data, fold_in(fold_in(key, r), p), learning_rate, loss_fn=loss_fn,
    num_steps=num_steps, clip_norm=clip_norm, proximal_mu=proximal_mu)`` (the FedProx anchor is
    the received global model); and replies with the new parameters (ArrayRecord ``"arrays"``)
    and a MetricRecord ``"metrics"`` holding ``"num-examples"`` (the weight Flower's FedAvg
    averages with) and the last-step value of each ``local_train`` metric (``"loss"``: the loss
    before the final step).

    Args:
      client_fn_data: ``client_fn_data(partition_id) -> (data, num_examples)``: the client's
        full batch (any pytree ``loss_fn`` understands) and its example count ``>= 1``. Called in
        the client's worker on every round; use a module-level function (see the module notes).
      template: a pytree with the structure, shapes and dtypes of the parameters (e.g. the
        initial parameters; arrays or ``jax.ShapeDtypeStruct`` leaves; values are not read).
      key: a typed key (``jax.random.key(seed)``); each client and round folds in its own ids.
      loss_fn: ``loss_fn(params, data, key) -> scalar`` (static: a module-level function).
      num_steps: local Adam steps per round ``>= 1``.
      learning_rate: local step size ``>= 0``.
      clip_norm: global gradient-norm clip ``> 0``, or None.
      proximal_mu: FedProx ``mu >= 0`` (0: plain FedAvg).

    Returns:
      a ``flwr.clientapp.ClientApp``.

    Raises:
      ImportError: Flower is not installed (the message names the pip extra).
      TypeError: ``key`` is not a typed key; ``num_steps`` not an int.
      ValueError: a callable argument that is not callable; a value out of range; a template
        leaf that is not a float array of a NumPy builtin dtype.

    Example (needs Flower, an optional dependency, so it is not a doctest;
    ``tests/federated/test_flower.py`` runs the same calls end to end)::

        def loss(w, d, k):
            return jnp.mean((d["x"] @ w - d["y"]) ** 2)

        def data(partition_id):
            return {"x": jnp.eye(2), "y": jnp.full(2, partition_id)}, 2

        app = make_client_app(data, template=jnp.zeros(2), key=jax.random.key(0),
                              loss_fn=loss, num_steps=5, learning_rate=0.1)
    """
    if not callable(client_fn_data):
        raise ValueError(f"client_fn_data must be callable, got {type(client_fn_data).__name__}")
    if not callable(loss_fn):
        raise ValueError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
    check_key("key", key)
    num_steps = check_int("num_steps", num_steps, minimum=1)
    check_range("learning_rate", learning_rate, low=0.0, scalar=True)
    if clip_norm is not None:
        check_range("clip_norm", clip_norm, low=0.0, low_open=True, scalar=True)
        clip_norm = float(clip_norm)
    check_range("proximal_mu", proximal_mu, low=0.0, scalar=True)
    template = jax.tree.map(_leaf_spec, template)
    params_to_arrays(jax.tree.map(lambda s: np.zeros((), s.dtype), template))  # dtype check
    _require_flwr()
    from flwr.clientapp import ClientApp

    spec = _ClientSpec(client_fn_data=client_fn_data, template=template, key=key,
                       loss_fn=loss_fn, num_steps=num_steps, learning_rate=float(learning_rate),
                       clip_norm=clip_norm, proximal_mu=float(proximal_mu))
    app = ClientApp()
    # a partial of a module-level function: pickled by reference, so every Ray actor reuses its
    # own compiled _local_train_jit across rounds
    app.train()(functools.partial(_client_train, spec))
    return app


@functools.cache
def _strict_fedavg() -> type:
    """Flower's FedAvg that raises when a sampled client fails instead of averaging the rest."""
    from flwr.serverapp.strategy import FedAvg

    class StrictFedAvg(FedAvg):
        """``FedAvg`` whose rounds fail loudly: every sampled node must reply without error."""

        def configure_train(self, server_round, arrays, config, grid):
            messages = list(super().configure_train(server_round, arrays, config, grid))
            self._num_sampled = len(messages)
            return messages

        def aggregate_train(self, server_round, replies):
            replies = list(replies)
            errors = [f"node {m.metadata.src_node_id}: {m.error.reason}"
                      for m in replies if m.has_error()]
            if errors or len(replies) != self._num_sampled:
                raise RuntimeError(
                    f"round {server_round}: {len(replies) - len(errors)} of {self._num_sampled} "
                    f"sampled clients replied without error; errors: {errors or 'none (timeout)'}")
            return super().aggregate_train(server_round, replies)

    return StrictFedAvg


def make_server_app(initial_params: Any, *, num_rounds: int, num_clients: int,
                    fraction_train: float = 1.0,
                    on_result: Callable[[Any], None] | None = None) -> Any:
    """A Flower ``ServerApp`` running Flower's ``FedAvg`` from ``initial_params``.

    Each round, ``flwr.serverapp.strategy.FedAvg`` sends the global parameters to
    ``max(1, int(fraction_train * num_clients))`` sampled clients and replaces them with the
    ``num-examples``-weighted mean of the replies (McMahan et al. 2017, Alg. 1, server update).
    The strategy is built with ``min_available_nodes=num_clients`` (it waits until every client
    has connected before sampling; otherwise round 1 samples among the nodes connected so far),
    ``min_train_nodes`` equal to the sample size, and ``fraction_evaluate=0.0`` (no federated
    evaluation rounds). A round in which a sampled client fails or times out raises
    ``RuntimeError`` (plain FedAvg would average the clients that replied).

    Args:
      initial_params: the initial global parameter pytree (float arrays; also the template the
        final parameters are rebuilt with).
      num_rounds: FedAvg rounds ``>= 1``.
      num_clients: the number of client nodes ``>= 1`` (``run_simulation``'s must match).
      fraction_train: fraction of the clients trained per round, in ``(0, 1]``.
      on_result: called once at the end with the final global parameter pytree (``jax.Array``
        leaves, the structure and dtypes of ``initial_params``).

    Returns:
      a ``flwr.serverapp.ServerApp``.

    Raises:
      ImportError: Flower is not installed (the message names the pip extra).
      TypeError: ``num_rounds`` / ``num_clients`` not ints.
      ValueError: a value out of range; ``on_result`` not callable; a leaf of ``initial_params``
        that is not a float array of a NumPy builtin dtype.

    Example (needs Flower, so it is not a doctest; see ``tests/federated/test_flower.py``)::

        final = []
        server = make_server_app(jnp.zeros(2), num_rounds=3, num_clients=4,
                                 on_result=final.append)
        run_simulation(client, server, num_clients=4)   # final[0]: the global parameters
    """
    num_rounds = check_int("num_rounds", num_rounds, minimum=1)
    num_clients = check_int("num_clients", num_clients, minimum=1)
    check_range("fraction_train", fraction_train, low=0.0, high=1.0, low_open=True, scalar=True)
    if on_result is not None and not callable(on_result):
        raise ValueError(f"on_result must be callable or None, got {type(on_result).__name__}")
    initial_arrays = params_to_arrays(initial_params)
    template = jax.tree.map(_leaf_spec, initial_params)
    num_train = max(1, int(float(fraction_train) * num_clients))
    _require_flwr()
    from flwr.serverapp import ServerApp

    app = ServerApp()

    @app.main()
    def _main(grid: Any, context: Any) -> None:
        del context
        strategy = _strict_fedavg()(fraction_train=float(fraction_train), fraction_evaluate=0.0,
                                    min_train_nodes=num_train, min_evaluate_nodes=0,
                                    min_available_nodes=num_clients)
        start = jax.tree_util.tree_unflatten(jax.tree.structure(template), initial_arrays)
        result = strategy.start(grid=grid, initial_arrays=_to_array_record(start),
                                num_rounds=num_rounds)
        if on_result is not None:
            on_result(_from_array_record(result.arrays, template))

    _SERVER_NUM_CLIENTS[app] = num_clients
    return app


@contextlib.contextmanager
def _flwr_log_level(level: int) -> Iterator[None]:
    logger = logging.getLogger("flwr")
    old = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(old)


def run_simulation(client_app: Any, server_app: Any, *, num_clients: int,
                   backend_config: dict | None = None, verbose: bool = False) -> None:
    """Run ``server_app`` against ``num_clients`` copies of ``client_app`` in Flower's simulation.

    A thin wrapper over ``flwr.simulation.run_simulation(server_app=..., client_app=...,
    num_supernodes=num_clients, backend_config=...)`` (Ray backend); client ``i`` gets
    ``partition-id`` ``i``. The default ``backend_config`` keeps Ray small and quiet::

        {"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
         "init_args": {"num_cpus": min(2, num_clients), "num_gpus": 0,
                       "include_dashboard": False, "logging_level": "ERROR",
                       "log_to_driver": False}}

    i.e. at most two client actors at a time, no GPU. A given ``backend_config`` updates these
    defaults per section (``client_resources``, ``init_args``, ``actor``; ``init_args`` go to
    ``ray.init``, except ``runtime_env``, which Flower sets itself). Flower shuts Ray down at the
    end. Results come back through ``make_server_app(..., on_result=...)``.

    Args:
      client_app: a ``ClientApp`` (e.g. from :func:`make_client_app`).
      server_app: a ``ServerApp`` (e.g. from :func:`make_server_app`).
      num_clients: number of simulated client nodes ``>= 1``.
      backend_config: optional overrides of the Ray backend settings above.
      verbose: show Flower's INFO/DEBUG log and the actors' output (default: Flower errors only).

    Raises:
      ImportError: Flower or Ray is not installed (the message names the pip extra).
      TypeError: ``num_clients`` not an int.
      ValueError: ``num_clients`` out of range or different from the ``num_clients`` the
        ``server_app`` was made with; ``backend_config`` not a dict of dicts.
      RuntimeError: a round failed (raised by the server app) or the simulation crashed.

    Example (needs Flower and starts Ray, so it is not a doctest; see
    ``tests/federated/test_flower.py``)::

        run_simulation(make_client_app(...), make_server_app(...), num_clients=4)
    """
    num_clients = check_int("num_clients", num_clients, minimum=1)
    verbose = check_bool("verbose", verbose)
    expected = _SERVER_NUM_CLIENTS.get(server_app)
    if expected is not None and expected != num_clients:
        raise ValueError(f"num_clients must match the server app's num_clients ({expected}), "
                         f"got {num_clients}")
    config: dict[str, dict] = {
        "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
        "init_args": {"num_cpus": min(2, num_clients), "num_gpus": 0,
                      "include_dashboard": False,
                      "logging_level": "INFO" if verbose else "ERROR",
                      "log_to_driver": verbose},
    }
    if backend_config is not None:
        if not isinstance(backend_config, dict) or not all(
                isinstance(v, dict) for v in backend_config.values()):
            raise ValueError(f"backend_config must be a dict of dicts (sections client_resources,"
                             f" init_args, actor), got {backend_config!r}")
        for section, values in backend_config.items():
            config[section] = {**config.get(section, {}), **values}
    _require_flwr()
    if importlib.util.find_spec("ray") is None:
        raise ImportError(f"Flower's Simulation Engine needs Ray; install it with {INSTALL_HINT}")
    from flwr.simulation import run_simulation as flwr_run_simulation

    with _flwr_log_level(logging.DEBUG if verbose else logging.ERROR), \
            warnings.catch_warnings():
        # ray.init warns that a future Ray will stop hiding accelerators from num_gpus=0 actors
        warnings.filterwarnings("ignore", message=".*RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO.*",
                                category=FutureWarning)
        # JAX warns on any fork; Ray starts its processes with subprocess (fork, then exec at
        # once, before any JAX thread can be touched in the child), which is safe
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called",
                                category=RuntimeWarning)
        flwr_run_simulation(server_app=server_app, client_app=client_app,
                            num_supernodes=num_clients, backend_config=config,
                            verbose_logging=verbose)
