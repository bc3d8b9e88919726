"""``python -m jaxpapers.benchmarks.excytin``: build a tenant, run an agent, query a database.

  generate --seed 0 --incidents 8 --out DIR   tenant -> DIR/{alert,log}.{sqlite,duckdb},
                                              DIR/questions.jsonl, DIR/graphs.json
  run --dir DIR --agent graph_walk --layer alert [--backend sqlite] [--limit N]
                                              mean reward of an agent (``llm``: the
                                              JAXPAPERS_LLM_* model) on DIR's questions
  sql --db FILE [--backend duckdb] "SELECT ..."  one query through the read-only sandbox
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

from jaxpapers.benchmarks import excytin as ex

_AGENTS = ("oracle", "graph_walk", "log_walk", "random", "llm")


def _generate(args) -> int:
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tenant = ex.generate_tenant(args.seed, incidents=args.incidents)
    qs, info = ex.make_questions(tenant, per_incident=args.per_incident, seed=args.seed)
    for layer in ex.db.LAYERS:
        for backend in args.backend:
            ex.write_database(tenant, out / f"{layer}.{backend}", backend=backend, layer=layer,
                              overwrite=args.overwrite)
    tmp = out / "questions.jsonl.tmp"
    tmp.write_text("".join(json.dumps(q, sort_keys=True) + "\n" for q in qs))
    tmp.replace(out / "questions.jsonl")
    (out / "graphs.json").write_text(json.dumps(info, indent=1, sort_keys=True))
    print(f"{len(qs)} questions from {len(tenant.incidents)} incidents -> {out}")
    return 0


def _agent(name: str, layer: str, qs: list[dict]):
    from jaxpapers import agents as ag

    if name == "oracle":
        return ex.OracleAgent({q["id"]: q for q in qs})
    if name == "graph_walk":
        return ex.GraphWalkAgent()
    if name == "log_walk":
        return ex.LogWalkAgent()
    if name == "random":
        return ex.RandomSQLAgent(layer=layer)
    client = ag.OpenAICompatClient.from_env()
    if client is None:
        raise SystemExit("--agent llm needs JAXPAPERS_LLM_BASE_URL and JAXPAPERS_LLM_MODEL")
    return ag.ToolCallingAgent(client)


def _run(args) -> int:
    from tqdm import tqdm

    from jaxpapers import agents as ag

    d = pathlib.Path(args.dir)
    qs = [json.loads(line) for line in (d / "questions.jsonl").read_text().splitlines()]
    qs = qs[: args.limit] if args.limit else qs
    env = ex.ExcytinEnv(d / f"{args.layer}.{args.backend}", layer=args.layer,
                        backend=args.backend, max_steps=args.max_steps)
    agent = _agent(args.agent, args.layer, qs)
    rewards = []
    for q in tqdm(qs, desc=f"{args.agent}/{args.layer}", disable=not sys.stderr.isatty()):
        rewards.append(ag.run_episode(env, agent, q, max_steps=args.max_steps).reward)
    print(f"{args.agent} on {args.layer} ({args.backend}): mean reward "
          f"{sum(rewards) / max(len(rewards), 1):.3f} over {len(rewards)} questions")
    return 0


def _sql(args) -> int:
    with ex.open_readonly(args.db, backend=args.backend, max_rows=args.max_rows) as conn:
        res = conn.execute(args.query)
    print(res.text())
    return 0 if res.error is None else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m jaxpapers.benchmarks.excytin",
                                description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="write a tenant's databases and questions")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--incidents", type=int, default=8)
    g.add_argument("--per-incident", type=int, default=100)
    g.add_argument("--backend", nargs="+", choices=ex.db.BACKENDS, default=["sqlite"])
    g.add_argument("--out", required=True)
    g.add_argument("--overwrite", action="store_true")
    r = sub.add_parser("run", help="run an agent on a generated folder's questions")
    r.add_argument("--dir", required=True)
    r.add_argument("--agent", choices=_AGENTS, default="graph_walk")
    r.add_argument("--layer", choices=ex.db.LAYERS, default="alert")
    r.add_argument("--backend", choices=ex.db.BACKENDS, default="sqlite")
    r.add_argument("--max-steps", type=int, default=15)
    r.add_argument("--limit", type=int, default=0)
    s = sub.add_parser("sql", help="run one query read-only")
    s.add_argument("--db", required=True)
    s.add_argument("--backend", choices=ex.db.BACKENDS, default="sqlite")
    s.add_argument("--max-rows", type=int, default=15)
    s.add_argument("query")
    args = p.parse_args(argv)
    return {"generate": _generate, "run": _run, "sql": _sql}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
