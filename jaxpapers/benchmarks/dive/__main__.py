"""``python -m jaxpapers.benchmarks.dive``: synthesise, verify and inspect DIVE-style tasks.

  synth --n 1000 --seed 0 [--domains bio ...] [--verify] [--llm] --out tasks.jsonl
                                      tasks as JSONL (same seed: byte-identical file);
                                      --verify keeps replay- and solver-verified tasks
                                      and prints the raw pass rates; --llm explores with
                                      the JAXPAPERS_LLM_* model
  verify tasks.jsonl [--in-process]   replay (in the sandbox worker unless --in-process) and
                                      solver verdicts (exit 1 if any fails)
  stats tasks.jsonl                   diversity counts (JSON)
  tools [--domain bio]                the tool registry: name, kind, signature
  call --domain bio --world-seed 0 bio.get_gc '{"gene": "..."}' [--sandboxed]
                                      one tool call
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

from jaxpapers.benchmarks import dive
from jaxpapers.benchmarks.dive.worlds import DOMAINS, call_tool, dumps, make_world, registry


def read_tasks(path) -> list[dict]:
    """Tasks from a JSONL file; ValueError naming the file and line of a malformed one."""
    tasks = []
    for i, line in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            task = json.loads(line)
            dive.check_task(task)
        except ValueError as err:  # json.JSONDecodeError is a ValueError
            raise ValueError(f"{path}:{i}: malformed task: {err}") from None
        tasks.append(task)
    return tasks


def _write_jsonl(tasks: list[dict], out: pathlib.Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tmp.write_text("".join(json.dumps(t, sort_keys=True) + "\n" for t in tasks))
    tmp.replace(out)  # never a half-written file under the final name


def _synth(args) -> int:
    explorer = None
    if args.llm:
        from jaxpapers import agents as ag

        client = ag.OpenAICompatClient.from_env()
        if client is None:
            raise SystemExit("--llm needs JAXPAPERS_LLM_BASE_URL and JAXPAPERS_LLM_MODEL")
        explorer = dive.LLMExplorer(client)
    tasks = dive.synthesize(args.n, seed=args.seed, domains=args.domains,
                            toolset_min=args.toolset_min, toolset_max=args.toolset_max,
                            explorer=explorer)
    if args.verify:
        ok = [(dive.replay(t), dive.solver_verified(t)) for t in tasks]
        print(f"replay {sum(a for a, _ in ok)}/{len(tasks)}, solver "
              f"{sum(b for _, b in ok)}/{len(tasks)}")
        tasks = [t for t, (a, b) in zip(tasks, ok) if a and b]
    _write_jsonl(tasks, pathlib.Path(args.out))
    print(f"{len(tasks)} tasks -> {args.out}")
    return 0


def _verify(args) -> int:
    tasks = read_tasks(args.file)
    bad = 0
    for t in tasks:
        r = dive.replay(t, sandboxed=not args.in_process)
        s = dive.solver_verified(t)
        if not (r and s):
            bad += 1
            print(f"{t['id']}: replay {'ok' if r else 'FAILED'}, solver {'ok' if s else 'FAILED'}")
    print(f"{len(tasks) - bad}/{len(tasks)} tasks verified")
    return 1 if bad else 0


def _stats(args) -> int:
    print(json.dumps(dive.diversity(read_tasks(args.file)), indent=1, sort_keys=True))
    return 0


def _tools(args) -> int:
    for name, t in sorted(registry().items()):
        if args.domain and not name.startswith(args.domain + "."):
            continue
        params = ", ".join(f"{k}: {v['x-type']}" for k, v in
                           t.spec.parameters["properties"].items())
        print(f"{name} [{t.spec.kind}] ({params}) -> {t.spec.returns['x-type']}")
    return 0


def _call(args) -> int:
    try:
        call_args = json.loads(args.args)
    except json.JSONDecodeError as err:
        raise SystemExit(f"args must be a JSON object: {err}") from None
    ok, out = call_tool(make_world(args.domain, args.world_seed), args.tool, call_args,
                        sandboxed=args.sandboxed)
    print(dumps(out) if ok else f"error: {out}")
    return 0 if ok else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m jaxpapers.benchmarks.dive",
                                description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("synth", help="synthesise tasks to JSONL")
    s.add_argument("--n", type=int, default=1000)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--domains", nargs="+", choices=DOMAINS, default=None)
    s.add_argument("--toolset-min", type=int, default=5)
    s.add_argument("--toolset-max", type=int, default=15)
    s.add_argument("--verify", action="store_true")
    s.add_argument("--llm", action="store_true")
    s.add_argument("--out", required=True)
    v = sub.add_parser("verify", help="replay and solver-verify a JSONL file")
    v.add_argument("file")
    v.add_argument("--in-process", action="store_true")
    st = sub.add_parser("stats", help="diversity of a JSONL file")
    st.add_argument("file")
    t = sub.add_parser("tools", help="list the tools")
    t.add_argument("--domain", choices=DOMAINS, default=None)
    c = sub.add_parser("call", help="call one tool")
    c.add_argument("--domain", choices=DOMAINS, required=True)
    c.add_argument("--world-seed", type=int, default=0)
    c.add_argument("--sandboxed", action="store_true")
    c.add_argument("tool")
    c.add_argument("args")
    args = p.parse_args(argv)
    try:
        return {"synth": _synth, "verify": _verify, "stats": _stats, "tools": _tools,
                "call": _call}[args.cmd](args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
