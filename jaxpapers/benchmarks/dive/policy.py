"""A small next-tool policy trained by behaviour cloning on verified programs (JAX).

DIVE fine-tunes Qwen3-8B on 48k agent trajectories. Offline and on CPU, the learner is a
scorer over the offered tools: at each step it sees crc32-hashed bag-of-token embeddings of the
question, of every offered tool's spec (name, verb, object, description, argument and return
types) and of the state (the type of the last output, the step number); an MLP scores each tool
and STOP. Training is cross-entropy on the steps of verified programs with
:func:`jaxpapers.core.train.fit`; several seeds are trained at once (parameters stacked on a
leading axis, one jitted program). Rollouts are greedy: the chosen tool's first argument is the
previous output (the seed at first), every other argument follows one fixed type rule
(:func:`fill_argument`); a rollout succeeds iff its final output is the task's answer.

Shapes: D hashed features, T offered-tool slots (15: the largest toolset), S seeds, B decisions.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers.benchmarks.dive.synth import answer_text
from jaxpapers.benchmarks.dive.worlds import call_tool, domain_tools, make_world, registry
from jaxpapers.core import train

__all__ = ["DIM", "MAX_TOOLS", "tokens", "embed", "decisions", "init_params", "logits",
           "loss_fn", "train_policy", "fill_argument", "rollout", "random_rollout",
           "parse_seed"]

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
    words += [f"in_{v['x-type']}" for v in spec.parameters["properties"].values()]
    return words + [f"out_{spec.returns['x-type']}", f"kind_{spec.kind}"]


def _state_words(last_type: str, step: int) -> list[str]:
    return [f"last_{last_type}", f"step_{step}"]


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
    """MLP parameters (unbatched): tool scorer on [q, tool, state], STOP scorer on [q, state]."""
    k1, k2, k3, k4 = jax.random.split(key, 4)

    def dense(k, n_in, n_out):
        return {"w": jax.random.normal(k, (n_in, n_out)) * jnp.sqrt(2.0 / n_in),
                "b": jnp.zeros(n_out)}

    return {"tool1": dense(k1, 3 * dim, hidden), "tool2": dense(k2, hidden, 1),
            "stop1": dense(k3, 2 * dim, hidden), "stop2": dense(k4, hidden, 1)}


def logits(params: dict, q, tools, state, mask) -> jax.Array:
    """Scores [T + 1] of one decision (unbatched): offered tools, then STOP; -inf off the mask.

    q [D], tools [T, D], state [D], mask [T].
    """
    t = tools.shape[0]
    x = jnp.concatenate([jnp.broadcast_to(q, (t, q.shape[0])), tools,
                         jnp.broadcast_to(state, (t, state.shape[0]))], axis=-1)
    h = jax.nn.relu(x @ params["tool1"]["w"] + params["tool1"]["b"])
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


def random_rollout(task: dict, rng) -> bool:
    """A uniformly random policy (offered tools and STOP) with the same argument rule."""
    return _episode(task, lambda n, k, last: (lambda c: STOP if c == n else c)(
        rng.randrange(n + 1)), STOP)


def parse_seed(question: str) -> tuple[str, str] | None:
    """``(type and value words, domain)`` of a synthesised question's first sentence."""
    m = re.match(r"Start from the (.+?) \((\w+)\)\. ", question)
    return (m.group(1), m.group(2)) if m else None


def fill_argument(schema: dict, name: str, question: str, world):
    """The fixed type rule for arguments after the first: the longest lexicon value of the
    argument's type that the question names; for an integer without a lexicon, the integer
    after the argument's name in the question; else None (the call is not made)."""
    values = [v for v in world.lexicon.get(schema["x-type"], ()) if str(v) in question]
    if values:
        return sorted(values, key=lambda v: (-len(str(v)), str(v)))[0]
    if schema["type"] == "integer":
        m = re.search(re.escape(name.replace("_", " ")) + r" (-?\d+)", question)
        if m:
            return int(m.group(1))
    return None


def _episode(task: dict, choose, stop_index: int, *, max_steps: int = 5,
             sandboxed: bool = False) -> bool:
    """Run ``choose(n_offered, step) -> slot`` (``stop_index``: STOP) from the seed."""
    world = make_world(task["domain"], task["world_seed"])
    offered = list(task["toolset"])[:MAX_TOOLS]
    tools = domain_tools(task["domain"])
    seed = parse_seed(task["question"])
    if seed is None:
        return False
    found = [(t, v) for t, vals in world.lexicon.items() for v in vals
             if seed[0] == f"{t.replace('_', ' ')} {v}"]
    if not found:
        return False
    last_type, cur = found[0]
    extra = {"sandboxed": True} if sandboxed else {}
    for k in range(max_steps + 1):
        choice = choose(len(offered), k, last_type)
        if choice == stop_index or choice >= len(offered):
            return answer_text(cur) == task["answer"]
        spec = tools[offered[choice]].spec
        props = list(spec.parameters["properties"].items())
        args = {props[0][0]: cur}
        for arg_name, schema in props[1:]:
            value = fill_argument(schema, arg_name, task["question"], world)
            if value is None:
                return False
            args[arg_name] = value
        ok, cur = call_tool(world, spec.name, args, **extra)
        if not ok:
            return False
        last_type = spec.returns["x-type"]
    return False


def rollout(params: dict, task: dict, *, max_steps: int = 5, sandboxed: bool = False) -> bool:
    """Greedy episode of one (unbatched) policy on ``task``; True iff it ends on the answer."""
    tools = domain_tools(task["domain"])
    offered = list(task["toolset"])[:MAX_TOOLS]
    dim = params["tool1"]["w"].shape[0] // 3
    tool_vecs = np.zeros((MAX_TOOLS, dim), np.float32)
    mask = np.zeros(MAX_TOOLS, bool)
    for i, name in enumerate(offered):
        tool_vecs[i] = embed(_tool_words(tools[name].spec), dim)
        mask[i] = True
    q = embed(tokens(task["question"]), dim)

    def choose(n, k, last_type):
        lg = _logits_jit(params, q, tool_vecs, embed(_state_words(last_type, k), dim), mask)
        return int(np.argmax(np.asarray(lg)))

    return _episode(task, choose, STOP, max_steps=max_steps, sandboxed=sandboxed)


_logits_jit = jax.jit(logits)
