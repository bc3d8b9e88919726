"""A worker program for tests/core/test_distributed.py, run in its own processes.

    python tests/core/_distributed_worker.py train --out DIR --stops 4,8 [--devices D]
        [--ckpt DIR --every K] [--fail-rank R --fail-after J [--hang-rank H]] [--report DIR]
        [--check-local-state]
    python tests/core/_distributed_worker.py reproduce --out DIR

Started by ``jaxpapers launch`` (which sets the JAXPAPERS_* variables) or alone (one process).
Not collected by pytest (no ``test_`` prefix). jax is configured here, in the worker's own
process, never in the pytest process: ``--devices`` fake CPU devices per process.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import sys
import time
import types

ROWS, FEATURES, HIDDEN = 16, 6, 8  # the global batch: 16 rows


def _setup_jax(devices: int):
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", devices)
    from jaxpapers.core import distributed

    return distributed.initialize(timeout_s=60)


def global_batch():
    """The global batch every run trains on (each process keeps only its rows)."""
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
    return {"x": x, "y": np.sin(x.sum(-1)).astype(np.float32)}


def loss_fn(params, batch, key):
    """MLP regression with a dropout-like mask drawn from the step key."""
    import jax
    import jax.numpy as jnp

    mask = jax.random.bernoulli(key, 0.9, (HIDDEN,)).astype(jnp.float32)
    h = jnp.tanh(batch["x"] @ params["w1"]) * mask
    return jnp.mean((h @ params["w2"] - batch["y"]) ** 2)


def whole_batch(step, data):  # module level: one static batch_fn object
    del step
    return data


def train(args) -> int:
    info = _setup_jax(args.devices)
    import jax
    import numpy as np
    import optax

    from jaxpapers.core import distributed, report, sharding
    from jaxpapers.core import train as core_train

    mesh = sharding.data_parallel_mesh()
    batch = global_batch()
    rows = distributed.process_slice(ROWS)
    data = sharding.shard_batch({k: v[rows] for k, v in batch.items()}, mesh)
    opt = optax.adam(0.05)
    kw, kr = jax.random.split(jax.random.key(1))
    params = {"w1": 0.5 * jax.random.normal(kw, (FEATURES, HIDDEN)),
              "w2": jax.numpy.zeros((HIDDEN,))}
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    local_state = core_train.init_train_state(params, opt, kr)
    state = sharding.replicate(local_state, mesh)
    step_fn = core_train.make_train_step(loss_fn, opt)
    if args.check_local_state and info.num_processes > 1:
        try:
            core_train.fit(step_fn, local_state, whole_batch, num_steps=1, data=data,
                           checkpoint_dir=out / "never", checkpoint_every=1)
        except ValueError as e:
            assert "place the state on a mesh over all of them" in str(e), e
            print("local state rejected", flush=True)
    stops = sorted({int(s) for s in args.stops.split(",")} | (
        {args.fail_after} if args.fail_rank is not None else set()))
    saved = {}
    for stop in stops:
        state, hist = core_train.fit(step_fn, state, whole_batch, num_steps=stop, chunk_size=2,
                                     checkpoint_dir=args.ckpt, checkpoint_every=args.every,
                                     progress=True, data=data)
        saved[f"w1@{stop}"] = np.asarray(state.params["w1"])
        saved[f"w2@{stop}"] = np.asarray(state.params["w2"])
        saved[f"loss@{stop}"] = hist["loss"]
        if args.fail_rank == info.process_id and stop == args.fail_after:
            raise RuntimeError(f"process {info.process_id} fails after {stop} steps")
        if args.hang_rank == info.process_id and stop == args.fail_after:
            print(f"process {info.process_id} hangs", flush=True)
            time.sleep(600)  # outside any collective: only the launcher can stop it
    np.savez(out / f"rank{info.process_id}.npz", **saved,
             meta=json.dumps({"process_id": info.process_id, "num_processes": info.num_processes,
                              "devices": len(jax.devices()), "mesh": mesh.shape["data"],
                              "data_devices": len(data["x"].sharding.device_set)}))
    if args.report:
        loss = float(saved[f"loss@{stops[-1]}"][-1])
        report.write_report(args.report, paper_id="worker", scale="tiny", seed=0,
                            result={"metrics": {"loss": loss}}, config={"stops": stops},
                            wall_time_s=0.0)
    print(f"process {info.process_id} of {info.num_processes} done", flush=True)
    return 0


def _register_fake_paper(log: pathlib.Path, rank: int):
    """A tiny paper (like tests/core/test_cli.py's) whose run trains data-parallel over the
    processes; plot() and report writes are logged as "<rank> <path>" lines."""
    from jaxpapers.core import registry, report

    cfg = types.ModuleType("experiments.fake_paper.config")

    @dataclasses.dataclass(frozen=True)
    class Config:
        steps: int

    cfg.tiny = cfg.small = cfg.full = lambda: Config(4)
    run = types.ModuleType("experiments.fake_paper.run")

    def run_fn(config, key):
        import jax
        import optax

        from jaxpapers.core import distributed, sharding
        from jaxpapers.core import train as core_train

        mesh = sharding.data_parallel_mesh()
        batch = global_batch()
        data = sharding.shard_batch(
            {k: v[distributed.process_slice(ROWS)] for k, v in batch.items()}, mesh)
        opt = optax.sgd(0.1)
        params = {"w1": 0.5 * jax.random.normal(key, (FEATURES, HIDDEN)),
                  "w2": jax.numpy.zeros((HIDDEN,))}
        state = sharding.replicate(core_train.init_train_state(params, opt, key), mesh)
        _, hist = core_train.fit(core_train.make_train_step(loss_fn, opt), state, whole_batch,
                                 num_steps=config.steps, chunk_size=2, data=data)
        loss = float(hist["loss"][-1])
        return {"metrics": {"loss": loss, "processes": jax.process_count()},
                "claims": [{"metric": "loss", "ours": loss, "paper": 1.0,
                            "criterion": "loss < 1", "verdict": "reproduced"}]}

    def plot(result, out_dir):
        p = pathlib.Path(out_dir) / "fake.png"
        p.write_bytes(b"\x89PNG\r\n\x1a\n")
        with open(log, "a") as f:
            f.write(f"{rank} {p.name}\n")
        return [p]

    run.run, run.plot = run_fn, plot
    sys.modules["experiments.fake_paper"] = types.ModuleType("experiments.fake_paper")
    sys.modules["experiments.fake_paper.config"] = cfg
    sys.modules["experiments.fake_paper.run"] = run
    paper = registry.Paper("fake_paper", "A fake paper", "jaxpapers.core",
                           "experiments.fake_paper", registry.Status.IMPLEMENTED)
    registry.PAPERS = registry.PAPERS + (paper,)
    registry._BY_ID["fake_paper"] = paper
    write = report.atomic_write_text

    def logged_write(path, text):
        with open(log, "a") as f:
            f.write(f"{rank} {pathlib.Path(path).name}\n")
        write(path, text)

    report.atomic_write_text = logged_write


def reproduce(args) -> int:
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", args.devices)
    rank = int(os.environ.get("JAXPAPERS_PROCESS_ID", "0"))
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _register_fake_paper(out / "writes.log", rank)
    from jaxpapers import cli

    # reproduce() joins the processes itself (distributed.initialize() from the environment)
    return cli.main(["reproduce", "fake_paper", "--scale", "tiny", "--out", str(out / "results")])


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("train")
    t.add_argument("--out", required=True)
    t.add_argument("--stops", required=True)
    t.add_argument("--devices", type=int, default=1)
    t.add_argument("--ckpt", default=None)
    t.add_argument("--every", type=int, default=None)
    t.add_argument("--fail-rank", type=int, default=None)
    t.add_argument("--fail-after", type=int, default=None)
    t.add_argument("--hang-rank", type=int, default=None)
    t.add_argument("--report", default=None)
    t.add_argument("--check-local-state", action="store_true")
    r = sub.add_parser("reproduce")
    r.add_argument("--out", required=True)
    r.add_argument("--devices", type=int, default=1)
    args = p.parse_args(argv)
    return train(args) if args.mode == "train" else reproduce(args)


if __name__ == "__main__":
    sys.exit(main())
