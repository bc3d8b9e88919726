"""A small next-tool policy trained by behaviour cloning on verified programs (JAX).

DIVE fine-tunes Qwen3-8B on 48k agent trajectories. Offline and on CPU, the learner is a
scorer over the offered tools: at each step it sees crc32-hashed bag-of-token embeddings of the
question, of every offered tool's spec (name, verb, object, description, argument and return
types) and of the state (the type of the last output, the step number). Tool ``j`` is scored by
an MLP on ``[q, t_j, s, q & t_j, s & t_j]``, where ``a & b`` is the 0/1 indicator of hashed
buckets both bags contain (token overlap: the question's words shared with the spec, the last
output's type shared with the tool's first argument type, one ``flow_<type>`` token on both
sides); STOP by an MLP on ``[q, s]``. Without the overlap terms a concatenation MLP has to learn
every (question word, tool word) pair from data and does not transfer to held-out tools (see
``experiments/dive/README.md``). Training is cross-entropy on the steps of verified programs
with :func:`jaxpapers.core.train.fit`; many policies are trained at once (parameters stacked on
a leading axis, one jitted program). Rollouts are greedy; the chosen tool's arguments follow
one fixed rule reading the current step's clause of the question (:func:`step_arguments`: what
the step applies to, joined step results, named constants); a rollout succeeds iff it stops on
the task's answer.

Shapes: D hashed features, T offered-tool slots (15: the largest toolset), M stacked models,
B decisions.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers.benchmarks.dive.synth import answer_text
from jaxpapers.benchmarks.dive.verify import _TARGET, _parse_steps, _source
from jaxpapers.benchmarks.dive.worlds import (call_tool, domain_tools, dumps, make_world,
                                              registry)
from jaxpapers.core import train

__all__ = ["DIM", "MAX_TOOLS", "STOP", "tokens", "embed", "decisions", "init_params", "logits",
           "loss_fn", "train_policy", "fill_argument", "rollout", "rollout_many",
           "random_rollout", "parse_seed", "predict", "error_kinds", "ERROR_KINDS",
           "step_arguments"]

DIM = 256
MAX_TOOLS = 15
STOP = MAX_TOOLS  # the STOP action's index


def tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def embed(words: Sequence[str], dim: int = DIM) -> np.ndarray:
    """L2-normalised bag of crc32-hashed tokens: [dim] float32."""
    v = np.zeros(dim, np.float32)
    for w in words:
        v[zlib.crc32(w.encode()) % dim] += 1.0
    n = np.linalg.norm(v)
    return v / n if n > 0 else v


def _tool_words(spec) -> list[str]:
    words = tokens(f"{spec.name} {spec.verb} {spec.obj} {spec.description}")
    props = list(spec.parameters["properties"].values())
    words.append(f"flow_{props[0]['x-type']}")  # the type its first argument takes
    words += [f"in_{v['x-type']}" for v in props[1:]]
    return words + [f"out_{spec.returns['x-type']}", f"kind_{spec.kind}"]


def _state_words(last_type: str, step: int) -> list[str]:
    return [f"flow_{last_type}", f"step_{step}"]  # flow_: shared with the tools' first type


def decisions(tasks: Sequence[dict], dim: int = DIM) -> dict[str, np.ndarray]:
    """Every decision of every task's program: ``q`` [B, D], ``tools`` [B, T, D], ``state``
    [B, D], ``mask`` [B, T] (offered slots), ``label`` [B] (tool slot or ``STOP``)."""
    reg = registry()
    out = {"q": [], "tools": [], "state": [], "mask": [], "label": []}
    for task in tasks:
        offered = list(task["toolset"])[:MAX_TOOLS]
        tool_vecs = np.zeros((MAX_TOOLS, dim), np.float32)
        mask = np.zeros(MAX_TOOLS, bool)
        for i, name in enumerate(offered):
            tool_vecs[i] = embed(_tool_words(reg[name].spec), dim)
            mask[i] = True
        q = embed(tokens(task["question"]), dim)
        last = task["seed_entity"]["type"]
        for k in range(len(task["program"]) + 1):
            if k < len(task["program"]):
                name = task["program"][k]["tool"]
                label = offered.index(name)
            else:
                label = STOP
            out["q"].append(q)
            out["tools"].append(tool_vecs)
            out["state"].append(embed(_state_words(last, k), dim))
            out["mask"].append(mask)
            out["label"].append(label)
            if k < len(task["program"]):
                last = reg[task["program"][k]["tool"]].spec.returns["x-type"]
    return {k: np.asarray(v) for k, v in out.items()}


def init_params(key, *, dim: int = DIM, hidden: int = 64) -> dict:
    """MLP parameters (unbatched). Tool scorer: one first-layer matrix per input block
    (``q``, ``t``, ``s``, ``qt``, ``st``: the question, tool and state bags and the two overlap
    indicators), then ``tool2``; STOP scorer ``stop1`` on ``[q, s]``, then ``stop2``."""
    keys = jax.random.split(key, 8)
    fan_in = 5 * dim

    def dense(k, n_in, n_out):
        return {"w": jax.random.normal(k, (n_in, n_out)) * jnp.sqrt(2.0 / n_in),
                "b": jnp.zeros(n_out)}

    first = {name: jax.random.normal(k, (dim, hidden)) * jnp.sqrt(2.0 / fan_in)
             for name, k in zip(("q", "t", "s", "qt", "st"), keys[:5])}
    return {"tool1": {**first, "b": jnp.zeros(hidden)}, "tool2": dense(keys[5], hidden, 1),
            "stop1": dense(keys[6], 2 * dim, hidden), "stop2": dense(keys[7], hidden, 1)}


def logits(params: dict, q, tools, state, mask) -> jax.Array:
    """Scores [T + 1] of one decision (unbatched): offered tools, then STOP; -inf off the mask.

    q [D], tools [T, D], state [D] (bags, >= 0), mask [T] bool.
    """
    w = params["tool1"]
    qt = ((q > 0) & (tools > 0)).astype(tools.dtype)       # [T, D] shared question words
    st = ((state > 0) & (tools > 0)).astype(tools.dtype)   # [T, D] last type == first arg
    pre = (q @ w["q"] + state @ w["s"] + w["b"])[None, :] + tools @ w["t"] + qt @ w["qt"] \
        + st @ w["st"]
    h = jax.nn.relu(pre)
    s_tools = (h @ params["tool2"]["w"] + params["tool2"]["b"])[:, 0]
    hs = jax.nn.relu(jnp.concatenate([q, state]) @ params["stop1"]["w"] + params["stop1"]["b"])
    s_stop = (hs @ params["stop2"]["w"] + params["stop2"]["b"])[0]
    return jnp.concatenate([jnp.where(mask, s_tools, -jnp.inf), s_stop[None]])


def loss_fn(params: dict, batch: dict, key=None):
    """Mean cross-entropy of one seed's parameters on a batch of decisions."""
    lg = jax.vmap(logits, in_axes=(None, 0, 0, 0, 0))(params, batch["q"], batch["tools"],
                                                       batch["state"], batch["mask"])
    logp = jax.nn.log_softmax(lg)
    nll = -jnp.take_along_axis(logp, batch["label"][:, None], axis=1)[:, 0]
    acc = jnp.mean(jnp.argmax(lg, axis=-1) == batch["label"])
    return jnp.mean(nll), {"acc": acc}


def train_policy(data: dict[str, np.ndarray], key, *, ranges=None, num_seeds: int = 5,
                 steps: int = 300, batch_size: int = 64, lr: float = 3e-3, hidden: int = 32,
                 progress: bool = False):
    """Train many policies in one jitted ``fit``: ``num_seeds`` per range of ``data``.

    ``ranges``: ``[(start, count), ...]`` slices of the decision arrays (one training set
    each, e.g. arms and dataset sizes; default the whole data). Model ``g * num_seeds + s``
    trains on range ``g`` with seed ``s``: its own initialisation and minibatches
    (``fold_in(step key, model)``). Parameters are stacked on a leading axis [M, ...]; Adam is
    elementwise and the summed loss separates, so this equals M separate runs.
    Returns (params [M, ...], history of the summed loss and mean accuracy).
    """
    n = int(data["label"].shape[0])
    if n == 0:
        raise ValueError("data has no decisions")
    ranges = [(0, n)] if ranges is None else [(int(a), int(c)) for a, c in ranges]
    if any(c < 1 or a < 0 or a + c > n for a, c in ranges):
        raise ValueError(f"ranges must be non-empty slices of the {n} decisions, got {ranges}")
    m = len(ranges) * num_seeds
    starts = jnp.asarray(np.repeat([a for a, _ in ranges], num_seeds), jnp.int32)
    counts = jnp.asarray(np.repeat([c for _, c in ranges], num_seeds), jnp.int32)
    k_init, k_run = jax.random.split(key)
    # model i's initial key and minibatch keys depend on i only (not on how many are stacked)
    params = jax.vmap(lambda i: init_params(jax.random.fold_in(k_init, i),
                                            dim=data["q"].shape[1], hidden=hidden))(
        jnp.arange(m))
    arrays = {k: jnp.asarray(v) for k, v in data.items()}

    def stacked_loss(p, batch, step_key):
        def one(ps, i):
            u = jax.random.randint(jax.random.fold_in(step_key, i), (batch_size,), 0,
                                   counts[i])
            idx = starts[i] + u
            return loss_fn(ps, {k: v[idx] for k, v in batch.items()})

        losses, aux = jax.vmap(one)(p, jnp.arange(m))
        return jnp.sum(losses), {"acc": jnp.mean(aux["acc"])}

    opt = optax.adam(lr)
    state = train.init_train_state(params, opt, k_run)
    step = train.make_train_step(stacked_loss, opt, has_aux=True)
    state, hist = train.fit(step, state, lambda t, d: d, num_steps=steps, chunk_size=steps,
                            progress=progress, desc="dive policy", data=arrays)
    return state.params, hist


def parse_seed(question: str) -> tuple[str, str] | None:
    """``(type and value words, domain)`` of a synthesised question's first sentence."""
    m = re.match(r"Start from the (.+?) \((\w+)\)\. ", question)
    return (m.group(1), m.group(2)) if m else None


def fill_argument(schema: dict, name: str, text: str, world):
    """The fixed type rule for a named constant: the longest lexicon value of the argument's
    type that ``text`` (a step's clause) names; for an integer without a lexicon, the integer
    after the argument's name; else None (the call is not made)."""
    values = [v for v in world.lexicon.get(schema["x-type"], ()) if str(v) in text]
    if values:
        return sorted(values, key=lambda v: (-len(str(v)), str(v)))[0]
    if schema["type"] == "integer":
        m = re.search(re.escape(name.replace("_", " ")) + r" (-?\d+)", text)
        if m:
            return int(m.group(1))
    return None


class _Episodes:
    """Lock-step greedy episodes of several policies on one task (shared world and cache).

    ``alive[i]``: episode ``i`` still runs; ``outs[i]``: its outputs so far; ``last[i]``: the
    type of its last output; ``ok[i]``: its final verdict. Identical calls of different
    episodes run once. Arguments follow one fixed rule reading the question's clause for the
    current step (:func:`step_arguments`).
    """

    def __init__(self, task: dict, n: int, *, sandboxed: bool = False):
        self.task, self.n = task, n
        self.world = make_world(task["domain"], task["world_seed"])
        self.offered = list(task["toolset"])[:MAX_TOOLS]
        self.tools = domain_tools(task["domain"])
        self.extra = {"sandboxed": True} if sandboxed else {}
        self.cache: dict[str, tuple[bool, Any]] = {}
        self.ok = [False] * n
        parsed = _parse_steps(task["question"])
        self.clauses = parsed[2] if parsed else []
        seed = parse_seed(task["question"])
        found = [] if seed is None else [
            (t, v) for t, vals in self.world.lexicon.items() for v in vals
            if seed[0] == f"{t.replace('_', ' ')} {v}"]
        self.seed = found[0][1] if found else None
        self.alive = [bool(found) and bool(self.clauses)] * n
        self.last = [found[0][0] if found else ""] * n
        self.outs: list[list[Any]] = [[] for _ in range(n)]

    def step(self, i: int, choice: int) -> None:
        """Episode ``i`` takes slot ``choice`` (``>= len(offered)``: STOP)."""
        outs = self.outs[i]
        if choice >= len(self.offered):
            self.ok[i] = bool(outs) and answer_text(outs[-1]) == self.task["answer"]
            self.alive[i] = False
            return
        k = len(outs)
        spec = self.tools[self.offered[choice]].spec
        args = None if k >= len(self.clauses) else step_arguments(
            spec, self.clauses[k], k, self.seed, outs, self.world)
        if args is None:
            self.alive[i] = False
            return
        key = dumps([spec.name, args])
        if key not in self.cache:
            self.cache[key] = call_tool(self.world, spec.name, args, **self.extra)
        good, out = self.cache[key]
        if not good:
            self.alive[i] = False
            return
        outs.append(out)
        self.last[i] = spec.returns["x-type"]


def step_arguments(spec, clause: str, index: int, seed, outputs: list, world) -> dict | None:
    """The fixed argument rule of rollouts, reading only step ``index``'s clause: the first
    argument is what the clause applies it to ("that" / "the start value": the seed, "it": the
    previous output, "the result of step k": output k); a later argument is output k where the
    clause says "<name> the result of step k", else :func:`fill_argument`. None when the rule
    finds nothing (the call is not made)."""
    props = list(spec.parameters["properties"].items())
    m = re.search(r" for " + _TARGET, clause)
    source = _source(m.group(1), index) if m else None
    if source is None:
        return None
    args = {props[0][0]: seed if source == "seed" else outputs[source - 1]}
    for name, schema in props[1:]:
        ref = re.search(re.escape(name.replace("_", " ")) + r" the result of step (\d+)", clause)
        if ref:
            j = int(ref.group(1))
            if not 1 <= j <= len(outputs):
                return None
            args[name] = outputs[j - 1]
            continue
        value = fill_argument(schema, name, clause, world)
        if value is None:
            return None
        args[name] = value
    return args


def random_rollout(task: dict, rng, *, max_steps: int = 8) -> bool:
    """A uniformly random policy (offered tools and STOP) with the same argument rule."""
    ep = _Episodes(task, 1)
    for _ in range(max_steps + 1):
        if not ep.alive[0]:
            break
        ep.step(0, rng.randrange(len(ep.offered) + 1))
    return ep.ok[0]


def _task_arrays(task: dict, dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    tools = domain_tools(task["domain"])
    tool_vecs = np.zeros((MAX_TOOLS, dim), np.float32)
    mask = np.zeros(MAX_TOOLS, bool)
    for i, name in enumerate(list(task["toolset"])[:MAX_TOOLS]):
        tool_vecs[i] = embed(_tool_words(tools[name].spec), dim)
        mask[i] = True
    return embed(tokens(task["question"]), dim), tool_vecs, mask


def rollout_many(params: dict, task: dict, *, max_steps: int = 8,
                 sandboxed: bool = False) -> np.ndarray:
    """Greedy episodes of M stacked policies (params [M, ...]) on ``task``: bool [M], True
    where the episode ends (STOP) on the answer within ``max_steps`` calls. One jitted scorer
    call per step for all M; a failed call or an argument the rule cannot fill ends it."""
    m = int(jax.tree.leaves(params)[0].shape[0])
    dim = params["stop1"]["w"].shape[1] // 2
    q, tool_vecs, mask = _task_arrays(task, dim)
    ep = _Episodes(task, m, sandboxed=sandboxed)
    for k in range(max_steps + 1):
        live = [i for i in range(m) if ep.alive[i]]
        if not live:
            break
        states = np.stack([embed(_state_words(ep.last[i], k), dim) for i in range(m)])
        lg = np.asarray(_many_logits(params, q, tool_vecs, states, mask))
        for i in live:
            ep.step(i, int(np.argmax(lg[i])))
    return np.asarray(ep.ok)


def rollout(params: dict, task: dict, *, max_steps: int = 8, sandboxed: bool = False) -> bool:
    """Greedy episode of one (unbatched) policy on ``task``; True iff it ends on the answer."""
    return bool(rollout_many(jax.tree.map(lambda x: x[None], params), task,
                             max_steps=max_steps, sandboxed=sandboxed)[0])


_many_logits = jax.jit(jax.vmap(logits, in_axes=(0, None, None, 0, None)))
_batch_logits = jax.jit(jax.vmap(jax.vmap(logits, in_axes=(None, 0, 0, 0, 0)),
                                 in_axes=(0, None, None, None, None)))


def predict(params: dict, data: dict[str, np.ndarray], *, chunk: int = 4096) -> np.ndarray:
    """Teacher-forced greedy choices of M stacked policies on every decision of ``data``
    (from :func:`decisions`): int [M, B] (a slot, or ``STOP``)."""
    out = []
    for a in range(0, int(data["label"].shape[0]), chunk):
        lg = _batch_logits(params, *(data[k][a:a + chunk] for k in ("q", "tools", "state",
                                                                    "mask")))
        out.append(np.asarray(jnp.argmax(lg, axis=-1)))
    return np.concatenate(out, axis=1)


ERROR_KINDS = ("correct", "stop_early", "no_stop", "type_mismatch", "other_step", "wrong_tool")


def error_kinds(tasks: Sequence[dict], choices: np.ndarray) -> list[dict]:
    """Classify teacher-forced choices (one row of :func:`predict` on ``decisions(tasks)``).

    Per decision: ``task`` index, ``step``, ``gold`` (tool name or ``"STOP"``) and ``kind``:
    ``correct``; ``stop_early`` (STOP before the program ends); ``no_stop`` (a tool after
    it); ``type_mismatch`` (a tool whose first argument type is not the last output's);
    ``other_step`` (a tool of another step of the program: order confused); ``wrong_tool``
    (any other type-correct tool).
    """
    reg = registry()
    want = sum(len(t["program"]) + 1 for t in tasks)
    if len(choices) != want:
        raise ValueError(f"choices has {len(choices)} decisions, the tasks have {want}")
    rows, b = [], 0
    for ti, task in enumerate(tasks):
        offered = list(task["toolset"])[:MAX_TOOLS]
        program = [c["tool"] for c in task["program"]]
        last = task["seed_entity"]["type"]
        for k in range(len(program) + 1):
            gold = program[k] if k < len(program) else "STOP"
            c = int(choices[b])
            b += 1
            pick = offered[c] if c < len(offered) else "STOP"
            if pick == gold:
                kind = "correct"
            elif pick == "STOP":
                kind = "stop_early"
            elif gold == "STOP":
                kind = "no_stop"
            elif next(iter(reg[pick].spec.parameters["properties"].values()))["x-type"] != last:
                kind = "type_mismatch"
            elif pick in program:
                kind = "other_step"
            else:
                kind = "wrong_tool"
            rows.append({"task": ti, "step": k, "gold": gold, "kind": kind})
            if k < len(program):
                last = reg[program[k]].spec.returns["x-type"]
    return rows
