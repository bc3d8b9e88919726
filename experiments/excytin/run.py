"""ExCyTIn-Bench offline: tenant, graphs, questions, scripted investigators, SQLite vs DuckDB.

``run(config, key)``: generate a tenant from ``key``; build each incident's investigation graph
and its questions (official path rules, templates for the LLM writer); write the ``alert`` and
``log`` layers to SQLite (and DuckDB); run every (agent, layer) of ``config.runs`` on every
question through ``ExcytinEnv`` (one read-only sandboxed connection per episode); replay the
query log on DuckDB and compare; optionally run an LLM agent when ``JAXPAPERS_LLM_*`` is set.
No JAX computation: the key only seeds the tenant.
"""

from __future__ import annotations

import collections
import pathlib
import tempfile
import time
from typing import Any

from experiments.excytin.config import Config
from jaxpapers import agents as ag
from jaxpapers.benchmarks import excytin as ex
from jaxpapers.benchmarks.excytin.world import ALERT_TABLES
from jaxpapers.core import plotting, registry
from jaxpapers.core.report import claim, markdown_table
from jaxpapers.core.rng import numpy_seed

# Official investigation graphs (digest of the SecRL code): 8 incidents.
OFFICIAL_GRAPHS = {"nodes": (17, 169), "alerts": (4, 68), "entities": (13, 101),
                   "diameters": (4, 4, 4, 4, 8, 8, 8, 10)}
REPO_TABLE = {"o4-mini": 0.368, "GPT-4.1": 0.338, "GPT-4o": 0.293, "Phi-4": 0.085}


def _agent(name: str, layer: str, tasks: dict[str, dict], seed: int):
    if name == "oracle":
        return ex.OracleAgent(tasks)
    if name == "graph_walk":
        return ex.GraphWalkAgent()
    if name == "log_walk":
        return ex.LogWalkAgent()
    return ex.RandomSQLAgent(layer=layer, seed=seed)


def _episodes(cfg: Config, db: pathlib.Path, layer: str, agent, questions, *,
              backend: str = "sqlite"):
    env = ex.ExcytinEnv(db, layer=layer, backend=backend, max_steps=cfg.max_steps,
                        max_rows=cfg.max_rows, timeout_s=cfg.timeout_s, decay=cfg.decay)
    out = []
    for q in questions:
        ep = ag.run_episode(env, agent, q, max_steps=cfg.max_steps)
        info = ep.results[-1].info if ep.results else {}
        out.append({"id": q["id"], "reward": ep.reward, "steps": ep.steps,
                    "seconds": ep.seconds, "correct": bool(info.get("answer_correct", False)),
                    "error": ep.error})
    env.close()
    return out, env.query_log


def _value_in_logs(tenant: ex.Tenant) -> set[str]:
    """Every cell of the non-alert tables, lower-cased (the log layer's contents)."""
    cells = set()
    for table, rows in tenant.tables.items():
        if table in ALERT_TABLES:
            continue
        for row in rows:
            cells.update(str(v).lower() for v in row.values() if v is not None)
    return cells


def _norm_rows(res) -> list:
    return sorted((tuple("" if v is None else str(v) for v in row) for row in res.rows))


def _agree(a, b) -> str:
    """``"same"``: both succeed with the same columns, truncation, total and rows (compared as
    sorted lists: every agent query has a total ORDER BY, so the shown rows are the same set);
    ``"both_error"``: both refuse (the messages differ between engines); else ``"differ"``."""
    if a.error is not None and b.error is not None:
        return "both_error"
    if (a.error is None) != (b.error is None):
        return "differ"
    same = (list(a.columns) == list(b.columns) and a.truncated == b.truncated
            and a.total_rows == b.total_rows and _norm_rows(a) == _norm_rows(b))
    return "same" if same else "differ"


def _replay(cfg: Config, dbs: dict[tuple[str, str], pathlib.Path], logs) -> dict[str, Any]:
    counts, mismatches = collections.Counter(), []
    for layer, log in logs.items():
        conn = ex.open_readonly(dbs[(layer, "duckdb")], backend="duckdb",
                                timeout_s=cfg.timeout_s, max_rows=cfg.max_rows)
        seen = set()
        for _, sql, res in log:
            if sql in seen:
                continue
            seen.add(sql)
            other = conn.execute(sql)
            outcome = _agree(res, other)
            counts[outcome] += 1
            if outcome == "differ" and len(mismatches) < 5:
                mismatches.append({"layer": layer, "sql": sql[:300], "sqlite": res.text()[:300],
                                   "duckdb": other.text()[:300]})
        conn.close()
    return {"queries": sum(counts.values()), "same": counts["same"],
            "both_error": counts["both_error"], "differ": counts["differ"],
            "mismatches": mismatches}


def _llm_run(cfg: Config, dbs, questions) -> dict[str, Any] | None:
    client = ag.OpenAICompatClient.from_env()
    if client is None or cfg.llm_questions == 0:
        return None
    agent = ag.ToolCallingAgent(client, system_prompt=(
        "You are a security analyst. Investigate the question with SQL queries on the "
        "Microsoft Sentinel / Defender logs (execute_sql), then call submit with the answer."))
    eps, _ = _episodes(cfg, dbs[("alert", "sqlite")], "alert", agent,
                       questions[: cfg.llm_questions])
    return {"model": client.model, "episodes": eps}


def run(config: Config, key) -> dict[str, Any]:
    cfg = config
    seed = numpy_seed(key)
    t0 = time.perf_counter()
    tenant = ex.generate_tenant(seed, incidents=cfg.incidents, users=cfg.users,
                                hosts=cfg.hosts, noise_rows=cfg.noise_rows)
    questions, info = ex.make_questions(tenant, per_incident=cfg.per_incident, k=cfg.k,
                                        seed=seed)
    t_questions = time.perf_counter() - t0
    tasks = {q["id"]: q for q in questions}
    results, logs, timings = {}, {}, {"questions_s": t_questions}
    with tempfile.TemporaryDirectory(prefix="excytin-") as tmp:
        dbs = {}
        backends = ("sqlite", "duckdb") if cfg.replay_duckdb else ("sqlite",)
        for layer in ("alert", "log"):
            for backend in backends:
                path = pathlib.Path(tmp) / f"{layer}.{backend}"
                dbs[(layer, backend)] = ex.write_database(tenant, path, backend=backend,
                                                          layer=layer)
        for name, layer in cfg.runs:
            t1 = time.perf_counter()
            eps, log = _episodes(cfg, dbs[(layer, "sqlite")], layer,
                                 _agent(name, layer, tasks, seed), questions)
            results[(name, layer)] = eps
            logs.setdefault(layer, []).extend(log)
            timings[f"{name}_{layer}_s"] = time.perf_counter() - t1
        replay = _replay(cfg, dbs, logs) if cfg.replay_duckdb else None
        llm = _llm_run(cfg, dbs, questions)
    return _summarise(cfg, seed, tenant, questions, info, results, replay, llm, timings)


def _mean(xs) -> float:
    xs = list(xs)
    return float(sum(xs) / len(xs)) if xs else float("nan")


def _summarise(cfg, seed, tenant, questions, info, results, replay, llm, timings):
    incs = info["incidents"]
    cells = _value_in_logs(tenant)
    n_q = len(questions)
    in_db = sum(q["answer"].lower() in cells for q in questions)
    leaks = ex.find_leaks(questions)
    # independent of find_leaks: submit each question's own text to the judge
    echo = sum(ex.judge(q["context"] + " " + q["question"], q["answer"], q["solution"],
                        q["context"] + " " + q["question"], decay=cfg.decay)["answer_correct"]
               for q in questions)
    m: dict[str, Any] = {
        "graph/incidents": len(incs),
        "graph/nodes_min": min(i["nodes"] for i in incs),
        "graph/nodes_max": max(i["nodes"] for i in incs),
        "graph/alerts_min": min(i["alerts"] for i in incs),
        "graph/alerts_max": max(i["alerts"] for i in incs),
        "graph/diameter_min": min(i["diameter"] for i in incs),
        "graph/diameter_max": max(i["diameter"] for i in incs),
        "graph/entity_types_min": min(len(i["entity_types"]) for i in incs),
        "questions/total": n_q,
        "questions/leaks": len(leaks),
        "questions/leaks_dropped": info["leaks_dropped"],
        "questions/echo_correct": echo,
        "questions/frac_3plus_steps": sum(q["path_length"] >= 3 for q in questions) / n_q,
        "questions/answer_in_db": in_db / n_q,
        "questions/ambiguous": sum(bool(q["ambiguous"]) for q in questions),
        "tables": len(ex.SCHEMA),
        "tenant/seed": seed,
    }
    by_len = collections.defaultdict(dict)
    for (name, layer), eps in results.items():
        m[f"reward/{name}/{layer}"] = _mean(e["reward"] for e in eps)
        m[f"correct/{name}/{layer}"] = _mean(e["correct"] for e in eps)
        m[f"steps/{name}/{layer}"] = _mean(e["steps"] for e in eps)
        m[f"errors/{name}/{layer}"] = sum(e["error"] is not None for e in eps)
        timings[f"latency_ms/{name}/{layer}"] = 1000 * _mean(e["seconds"] for e in eps)
        for q, e in zip(questions, eps):
            by_len[(name, layer)].setdefault(q["path_length"], []).append(e["reward"])
    amb_ids = {q["id"] for q in questions if q["ambiguous"]}
    if ("graph_walk", "alert") in results:
        gw = results[("graph_walk", "alert")]
        m["reward/graph_walk/alert_unambiguous"] = _mean(
            e["reward"] for e in gw if e["id"] not in amb_ids)
    if replay is not None:
        m["sql/queries_replayed"] = replay["queries"]
        m["sql/both_error"] = replay["both_error"]
        m["sql/differ"] = replay["differ"]
        m["sql/duckdb_agree"] = (replay["same"] + replay["both_error"]) / max(replay["queries"], 1)
        m["sql/duckdb_same_results"] = replay["same"] / max(
            replay["queries"] - replay["both_error"], 1)
    if llm is not None:
        m["reward/llm/alert"] = _mean(e["reward"] for e in llm["episodes"])

    lengths = sorted({q["path_length"] for q in questions})
    graph_rows = [[i["number"], i["kind"], i["nodes"], i["alerts"], i["entities"], i["diameter"],
                   len(i["entity_types"]), i["paths"]] for i in incs]
    tables = [
        "Investigation graphs (ours; official 8 graphs: 17-169 nodes, 4-68 alerts, 13-101 "
        "entities, diameters 4, 4, 4, 4, 8, 8, 8, 10)\n\n"
        + markdown_table(["incident", "chain", "nodes", "alerts", "entities", "diameter",
                          "entity types", "paths"], graph_rows),
        "Reward by agent, layer and path length (alerts on the path = solution steps)\n\n"
        + markdown_table(["agent", "layer", "mean reward", "answer right", "steps"]
                         + [f"len {n}" for n in lengths],
                         [[name, layer, f"{m[f'reward/{name}/{layer}']:.3f}",
                           f"{m[f'correct/{name}/{layer}']:.3f}",
                           f"{m[f'steps/{name}/{layer}']:.1f}"]
                          + [f"{_mean(by_len[(name, layer)].get(n, [])):.3f}" for n in lengths]
                          for name, layer in results]),
        "The paper's models (LLM agents, real tenant; not comparable with scripted agents on a "
        "generated tenant)\n\n"
        + markdown_table(["model", "reward"], [["best model in the paper (abstract)", 0.606]]
                         + [[k, v] for k, v in REPO_TABLE.items()]),
    ]
    if replay is not None:
        tables.append(f"Query log replayed on DuckDB: {replay['queries']} distinct queries, "
                      f"{replay['same']} identical results, {replay['both_error']} refused by "
                      f"both engines, {replay['differ']} different.")
    if replay is not None and replay["mismatches"]:
        tables.append("SQLite / DuckDB mismatches (first 5)\n\n" + markdown_table(
            ["layer", "sql", "sqlite", "duckdb"],
            [[x["layer"], x["sql"], x["sqlite"], x["duckdb"]] for x in replay["mismatches"]]))

    claims = _claims(cfg, m, questions)
    data = {"incident_graph": _graph_data(tenant, incs),
            "reward_by_length": {f"{n}/{lay}": {str(k): _mean(v) for k, v in d.items()}
                                 for (n, lay), d in by_len.items()},
            "lengths": lengths}
    return {"metrics": m, "claims": claims, "tables": tables, "data": data, "timings": timings}


def _claims(cfg, m, questions) -> list[dict]:
    pid = "excytin"
    n = m["questions/total"]
    ok_graph = (17 <= m["graph/nodes_min"] and m["graph/nodes_max"] <= 170
                and 4 <= m["graph/alerts_min"] and m["graph/alerts_max"] <= 68
                and 4 <= m["graph/diameter_min"] and m["graph/diameter_max"] <= 10
                and m["graph/diameter_max"] >= 8 and m["graph/entity_types_min"] >= 3)
    out = [
        claim("graph_questions", m["questions/total"], paper=registry.paper_says(pid,
              "graph_questions"),
              criterion="every incident graph within the official graphs' ranges (17-170 nodes, "
              "4-68 alerts, diameter 4-10, >= 3 entity types, one of diameter >= 8); questions "
              ">= half of incidents x per_incident (400 at 8 x 100), >= 15% with >= 3 steps "
              "(official test set 22%)",
              passed=(ok_graph and n >= 0.5 * cfg.incidents * cfg.per_incident
                      and m["questions/frac_3plus_steps"] >= 0.15),
              note=f"nodes {m['graph/nodes_min']}-{m['graph/nodes_max']}, alerts "
              f"{m['graph/alerts_min']}-{m['graph/alerts_max']}, diameter "
              f"{m['graph/diameter_min']}-{m['graph/diameter_max']}; "
              f"{m['questions/frac_3plus_steps']:.1%} with >= 3 steps"),
        claim("explicit_ground_truth", m["reward/oracle/alert"] if "reward/oracle/alert" in m
              else float("nan"), paper=registry.paper_says(pid, "explicit_ground_truth"),
              criterion="0 leaks (answers in their own question text are dropped at generation; "
              "none of the emitted ones is judged right when its own text is submitted), every "
              "answer a cell of a log (non-alert) table, and the oracle that walks the stored "
              "path by SQL scores 1.000 with the deterministic judge",
              passed=(m["questions/leaks"] == 0 and m["questions/echo_correct"] == 0
                      and m["questions/answer_in_db"] == 1.0
                      and m.get("reward/oracle/alert") == 1.0),
              note=f"{m['questions/leaks_dropped']} leaking questions dropped at generation"),
        claim("graph_questions", m.get("reward/graph_walk/alert", float("nan")),
              paper=registry.paper_says(pid, "graph_questions"),
              criterion="the end node is reachable from the start node through the data: a "
              "breadth-first walk over alerts and entities by SQL (alert layer) scores >= 0.8 "
              "(the issue's bar) while random SQL scores <= 0.05",
              passed=(m.get("reward/graph_walk/alert", 0) >= 0.8
                      and m.get("reward/random/alert", 1) <= 0.05),
              baselines={"random/alert": m.get("reward/random/alert")},
              note=f"{m['questions/ambiguous']} questions ambiguous (the end alert names several "
              "values of the asked kind); graph walk on the others: "
              f"{m.get('reward/graph_walk/alert_unambiguous', float('nan')):.3f}"),
        claim("best_model_reward", m.get("reward/llm/alert",
                                         m.get("reward/graph_walk/alert", float("nan"))),
              paper=registry.paper_says(pid, "best_model_reward"),
              criterion=("not comparable: the LLM set by JAXPAPERS_LLM_MODEL on a generated "
                         "tenant, alert layer" if "reward/llm/alert" in m else
                         "not comparable: no LLM offline; ours is a scripted breadth-first walk "
                         "over alerts by SQL on a generated tenant (the random agent is the "
                         "floor)"),
              passed=None, baselines={"random/alert": m.get("reward/random/alert"),
                                      "log_walk/log": m.get("reward/log_walk/log"),
                                      **{f"repo {k}": v for k, v in REPO_TABLE.items()}}),
        claim("num_questions", n, paper=registry.paper_says(pid, "num_questions"),
              criterion=f"not comparable: {cfg.incidents} generated incidents x <= "
              f"{cfg.per_incident} questions", passed=None),
        claim("num_log_tables", m["tables"], paper=registry.paper_says(pid, "num_log_tables"),
              criterion="not comparable: the generated tenant writes 27 of the Sentinel / "
              "Defender tables (real column names)", passed=None),
    ]
    return out


def _graph_data(tenant, incs) -> dict:
    """The incident with the largest diameter, as nodes and edges for the plot."""
    best = max(incs, key=lambda i: (i["diameter"], -i["number"]))
    g = ex.alert_graph(tenant.alerts(best["number"]))
    index = {node: i for i, node in enumerate(g.nodes)}
    nodes = [{"type": d["type"], "label": d.get("name") if d["type"] == "alert"
              else d.get("node_type")} for _, d in g.nodes(data=True)]
    edges = [[index[u], index[v]] for u, v in g.edges()]
    return {"number": best["number"], "nodes": nodes, "edges": edges}


def plot(result: dict[str, Any], out_dir) -> list[pathlib.Path]:
    import networkx as nx

    plt = plotting.pyplot()
    data = result["data"]
    out = []
    gd = data["incident_graph"]
    g = nx.Graph()
    g.add_nodes_from(range(len(gd["nodes"])))
    g.add_edges_from(map(tuple, gd["edges"]))
    pos = nx.kamada_kawai_layout(g)
    fig, ax = plt.subplots(figsize=(8, 6.5))
    kinds = sorted({n["label"] for n in gd["nodes"] if n["type"] == "entity"})
    cmap = plt.get_cmap("tab10")
    nx.draw_networkx_edges(g, pos, ax=ax, alpha=0.4)
    alerts = [i for i, n in enumerate(gd["nodes"]) if n["type"] == "alert"]
    nx.draw_networkx_nodes(g, pos, nodelist=alerts, node_shape="s", node_color="crimson",
                           node_size=160, ax=ax, label="alert")
    for j, kind in enumerate(kinds):
        nodes = [i for i, n in enumerate(gd["nodes"]) if n["label"] == kind
                 and n["type"] == "entity"]
        nx.draw_networkx_nodes(g, pos, nodelist=nodes, node_color=[cmap(j % 10)],
                               node_size=60, ax=ax, label=kind)
    ax.legend(fontsize=7, loc="best")
    ax.set_title(f"Investigation graph of incident {gd['number']} (alerts: squares)")
    ax.axis("off")
    out.append(plotting.save(fig, out_dir, "incident_graph"))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    lengths = data["lengths"]
    for name, by in sorted(data["reward_by_length"].items()):
        ys = [by.get(str(n), float("nan")) for n in lengths]
        ax.plot(lengths, ys, marker="o", label=name)
    ax.set_xlabel("alerts on the question's path (solution steps)")
    ax.set_ylabel("mean reward")
    ax.set_ylim(-0.03, 1.03)
    ax.legend(fontsize=8)
    ax.set_title("Reward by path length (scripted agents)")
    out.append(plotting.save(fig, out_dir, "reward_by_length"))
    return out
