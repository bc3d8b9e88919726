"""The CGPO experiment's pieces: config validation, the MuJoCo host loop (50 gymnasium steps),
its resumable command and output files."""

import dataclasses
import json

import numpy as np
import pytest

from experiments.cgpo import config

pytest.importorskip("gymnasium")
pytest.importorskip("mujoco")

from experiments.cgpo import mujoco  # noqa: E402

TINY_GYM = dict(env="HalfCheetah-v5", steps=50, warmup=20, update_every=5, batch=16,
                num_steps=3, guidance_steps=1, hidden=(16,), eval_every=25, eval_episodes=1)


def test_config_validation():
    config.Config()
    with pytest.raises(ValueError, match="guidance_steps"):
        config.Config(num_steps=4, guidance_steps=5)
    with pytest.raises(ValueError, match="bandit_runs"):
        config.Config(bandit_runs=("cgpo", "qgrad"))
    with pytest.raises(ValueError, match="eval_every"):
        config.Config(bandit_iters=150, eval_every=100)
    with pytest.raises(ValueError, match="steps"):
        mujoco.GymRunConfig(steps=50, eval_every=30)


def test_fifty_gymnasium_steps_and_resume(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MuJoCo writes MUJOCO_LOG.TXT into the working directory
    cfg = mujoco.GymRunConfig(**TINY_GYM)
    ckpt = tmp_path / "ck" / "cgpo.msgpack"
    out = mujoco.train_gym(dataclasses.replace(cfg, eval_every=50), "cgpo", 0,
                           checkpoint=ckpt, evaluate=False)
    assert out["updates"] == 7  # at steps 20, 25, ..., 50
    assert len(out["train_returns"]) == 0  # HalfCheetah episodes last 1000 steps
    # with evaluation: the curve has one point per eval_every; a rerun resumes from the
    # finished checkpoint and returns the same curve without training again
    a = mujoco.train_gym(cfg, "sac", 1, checkpoint=tmp_path / "ck" / "sac.msgpack")
    assert len(a["returns"]) == 2 and all(np.isfinite(a["returns"]))
    b = mujoco.train_gym(cfg, "sac", 1, checkpoint=tmp_path / "ck" / "sac.msgpack")
    assert b["returns"] == a["returns"] and b["updates"] == a["updates"]


def test_resume_from_a_mid_run_checkpoint(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = mujoco.GymRunConfig(**TINY_GYM)
    real_save, at_25 = mujoco._save, {}

    def spy(tree, path):  # keep a copy of the checkpoint written at step 25
        real_save(tree, path)
        if int(tree["step"]) == 25:
            at_25["bytes"] = path.read_bytes()

    monkeypatch.setattr(mujoco, "_save", spy)
    full = mujoco.train_gym(cfg, "sac", 2, checkpoint=tmp_path / "a.msgpack")
    (tmp_path / "b.msgpack").write_bytes(at_25["bytes"])  # "killed" after step 25
    resumed = mujoco.train_gym(cfg, "sac", 2, checkpoint=tmp_path / "b.msgpack")
    assert resumed["returns"][0] == full["returns"][0]  # restored, not recomputed
    assert np.isfinite(resumed["returns"][1]) and resumed["updates"] == full["updates"] == 7
    with pytest.raises(ValueError, match="does not match"):  # another network size
        mujoco.train_gym(dataclasses.replace(cfg, hidden=(8,)), "sac", 2,
                         checkpoint=tmp_path / "b.msgpack")


def test_command_writes_the_contract_json(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["--steps", "40", "--seeds", "1", "--methods", "cgpo,sac", "--warmup", "20",
            "--eval-every", "20", "--num-steps", "2", "--hidden", "16", "--batch", "16",
            "--update-every", "5", "--out", str(tmp_path)]
    mujoco.main(args)
    res = json.loads((tmp_path / "mujoco_results.json").read_text())
    assert res["env"] == "HalfCheetah-v5" and res["env_steps"] == [20, 40]
    assert set(res["methods"]) == {"cgpo", "sac"}
    for m in ("cgpo", "sac"):
        assert len(res["methods"][m]["returns"]) == 1
        assert len(res["methods"][m]["returns"][0]) == 2
    assert (tmp_path / "mujoco_table.md").exists() and (tmp_path / "mujoco_curves.png").exists()
    mujoco.main(args)  # every run done: nothing retrains, the file is unchanged
    assert json.loads((tmp_path / "mujoco_results.json").read_text()) == res
