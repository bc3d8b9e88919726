"""Diversity statistics of synthesised tasks (DIVE's table: toolsets, sequences, call graphs).

The official code does not define a "tool-call graph"; here it is the DAG of a task's program:
one node per call labelled with the tool's name, an edge from a call to each later call that
takes its output as an argument. Graphs are compared by the directed Weisfeiler-Lehman hash of
networkx (>= 3.5, which tracks in- and out-edges separately; 3 iterations). The R/P topology is
the same graph labelled with the tools' kinds (retrieval / processing).
"""

from __future__ import annotations

import warnings

import networkx as nx

from jaxpapers.benchmarks.dive.worlds import registry

__all__ = ["call_graph", "call_graph_hash", "topology_hash", "diversity"]


def call_graph(task: dict, *, label: str = "tool") -> nx.DiGraph:
    """The program's call DAG; node attribute ``label``: the tool name or (``label="kind"``)
    its R/P kind. Call ids only name nodes, so they do not enter any hash."""
    tools = registry()
    g = nx.DiGraph()
    for call in task["program"]:
        name = call["tool"]
        lab = name if label == "tool" else (tools[name].spec.kind if name in tools else "?")
        g.add_node(call["id"], label=lab)
    for call in task["program"]:
        for v in call["args"].values():
            if isinstance(v, dict) and "ref" in v:
                g.add_edge(v["ref"], call["id"])
    return g


def _wl(g: nx.DiGraph) -> str:
    with warnings.catch_warnings():  # networkx 3.5+ warns that directed hashes changed in 3.5
        warnings.simplefilter("ignore", UserWarning)
        return nx.weisfeiler_lehman_graph_hash(g, node_attr="label", iterations=3)


def call_graph_hash(task: dict) -> str:
    """Directed WL hash (3 iterations) of the call DAG with tool-name labels (contract)."""
    return _wl(call_graph(task))


def topology_hash(task: dict) -> str:
    """The same hash with R/P labels: the retrieval / processing topology class."""
    return _wl(call_graph(task, label="kind"))


def diversity(tasks: list[dict]) -> dict:
    """Counts over ``tasks``: unique offered / used toolsets, call sequences, call graphs,
    R/P topologies, tools covered (fraction of the registry), mean groups per task."""
    tools = registry()
    used = [tuple(sorted({c["tool"] for c in t["program"]})) for t in tasks]
    covered = {c["tool"] for t in tasks for c in t["program"]}
    groups = [len({tools[c["tool"]].spec.group for c in t["program"]}) for t in tasks]
    return {
        "tasks": len(tasks),
        "unique_toolsets": len({tuple(t["toolset"]) for t in tasks}),
        "unique_used_toolsets": len(set(used)),
        "unique_call_sequences": len({tuple(c["tool"] for c in t["program"]) for t in tasks}),
        "unique_call_graphs": len({call_graph_hash(t) for t in tasks}),
        "unique_topologies": len({topology_hash(t) for t in tasks}),
        "tools_covered_frac": len(covered) / len(tools),
        "groups_per_task": sum(groups) / max(len(groups), 1),
    }
