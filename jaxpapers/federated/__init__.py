"""Federated learning building blocks, shared by FedGCM and FedPDG.

Clients (or groups of clients) are the leading axis of stacked parameter pytrees; every function
is pure and works under ``jax.jit`` / ``jax.vmap`` (``dirichlet_partition`` is host-side NumPy).

* aggregation: :func:`fedavg`, :func:`grouped_average`, :func:`fedprox_penalty`,
  :func:`flatten`, :func:`unflatten_like`;
* sampling: :func:`sample_clients`, :func:`dirichlet_partition`;
* client training: :func:`local_train` (one client), :func:`client_map` (vmap / shard_map over
  clients);
* FedPDG (reconstruction): :func:`prediction_discrepancy`, :func:`select_top`,
  :func:`preference_pairs` and the balance-oriented baseline :func:`balanced_allocation`;
* server-side surgery: :func:`rpgrad` and :func:`fedgcm_server_step` (FedGCM), :func:`pcgrad`,
  :func:`group_clients`;
* whole runs: :func:`grouped_rounds` (one ``lax.scan`` over rounds of grouped models with an
  RPGrad or PCGrad server; FedAvg, FedProx and local training are special cases),
  :func:`cosine_lr`;
* Flower: :mod:`jaxpapers.federated.flower` runs the same local step and FedAvg as a Flower
  ClientApp / ServerApp (``flwr`` imported lazily; extra ``federated``).
"""

from jaxpapers.federated.aggregate import (fedavg, fedprox_penalty, flatten, grouped_average,
                                           unflatten_like)
from jaxpapers.federated.fedpdg import (balanced_allocation, prediction_discrepancy,
                                        preference_pairs, select_top)
from jaxpapers.federated.flower import (arrays_to_params, make_client_app, make_server_app,
                                        params_to_arrays, run_simulation)
from jaxpapers.federated.local import client_map, local_train
from jaxpapers.federated.rounds import cosine_lr, grouped_rounds
from jaxpapers.federated.sampling import dirichlet_partition, sample_clients
from jaxpapers.federated.surgery import fedgcm_server_step, group_clients, pcgrad, rpgrad

__all__ = [
    "arrays_to_params",
    "balanced_allocation",
    "client_map",
    "cosine_lr",
    "dirichlet_partition",
    "fedavg",
    "fedgcm_server_step",
    "fedprox_penalty",
    "flatten",
    "group_clients",
    "grouped_rounds",
    "grouped_average",
    "local_train",
    "make_client_app",
    "make_server_app",
    "params_to_arrays",
    "pcgrad",
    "prediction_discrepancy",
    "preference_pairs",
    "rpgrad",
    "run_simulation",
    "sample_clients",
    "select_top",
    "unflatten_like",
]
