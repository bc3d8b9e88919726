"""ExCyTIn-Bench offline: a seeded security tenant, investigation graphs, questions, an SQL env.

ExCyTIn-Bench (Microsoft SecRL) asks an LLM agent security questions about an incident and lets
it query 57 Sentinel log tables by SQL; questions come from paths in per-incident alert-entity
graphs, and the reward is 1 for the right answer, else step credit 0.4^k for the k-th solution
step before the answer that the agent's answer covers. This package rebuilds the pipeline
without downloads: :func:`generate_tenant` (world.py) writes kill chains into 27 Sentinel /
Defender tables; :func:`alert_graph` / :func:`alert_paths` / :func:`select_alert_paths`
(graph.py) follow the official graph and path rules; :func:`make_questions` writes questions by
template; :class:`ExcytinEnv` serves one read-only database connection per episode through the
project's SQL sandbox; :func:`step_credit_reward` / :func:`judge` score a submission; scripted
agents (oracle, graph walk, log walk, random) stand in for the LLM, and
``jaxpapers.agents.ToolCallingAgent`` runs an LLM when ``JAXPAPERS_LLM_*`` is set.

CLI: ``python -m jaxpapers.benchmarks.excytin --help``.
"""

from jaxpapers.benchmarks.excytin.agents import (GraphWalkAgent, LogWalkAgent, OracleAgent,
                                                 RandomSQLAgent)
from jaxpapers.benchmarks.excytin.db import (open_readonly, tables_for_layer, write_database,
                                             write_duckdb, write_sqlite)
from jaxpapers.benchmarks.excytin.env import ExcytinEnv
from jaxpapers.benchmarks.excytin.graph import (alert_graph, alert_paths, entity_identifiers,
                                                graph_stats, select_alert_paths)
from jaxpapers.benchmarks.excytin.judge import (LLMJudge, answer_matches, judge,
                                                step_credit_reward)
from jaxpapers.benchmarks.excytin.questions import find_leaks, make_questions
from jaxpapers.benchmarks.excytin.world import ALERT_TABLES, SCHEMA, Tenant, generate_tenant

__all__ = [
    "ALERT_TABLES", "SCHEMA", "Tenant", "generate_tenant", "alert_graph", "alert_paths",
    "entity_identifiers", "graph_stats", "select_alert_paths", "make_questions", "find_leaks",
    "write_sqlite", "write_duckdb", "write_database", "open_readonly", "tables_for_layer",
    "ExcytinEnv", "step_credit_reward", "judge", "answer_matches", "LLMJudge", "OracleAgent",
    "GraphWalkAgent", "LogWalkAgent", "RandomSQLAgent",
]
