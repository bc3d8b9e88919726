"""ExcytinEnv and the scripted agents on a tiny tenant, SQLite and DuckDB."""

from __future__ import annotations

import hashlib
import os

import pytest

from jaxpapers import agents as ag
from jaxpapers.benchmarks import excytin as ex


pytest.importorskip("duckdb")  # the test extra has it; the DuckDB backend and replay need it


@pytest.fixture(scope="module", autouse=True)
def _no_idle_sql_workers():
    """Leave no pooled SQL worker processes behind for later tests in this process."""
    yield
    from jaxpapers.core import _sandbox_sql

    _sandbox_sql.close_idle_workers()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tenant = ex.generate_tenant(3, incidents=3, noise_rows=20)
    qs, _ = ex.make_questions(tenant, per_incident=25, seed=3)
    d = tmp_path_factory.mktemp("excytin")
    dbs = {(layer, backend): ex.write_database(tenant, d / f"{layer}.{backend}",
                                               backend=backend, layer=layer)
           for layer in ("alert", "log") for backend in ("sqlite", "duckdb")}
    return tenant, qs, dbs


def _sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _rewards(env, agent, qs):
    return [ag.run_episode(env, agent, q, max_steps=env.max_steps).reward for q in qs]


def test_tools_and_reset_hide_the_answer(world):
    _, qs, dbs = world
    env = ex.ExcytinEnv(dbs[("alert", "sqlite")])
    assert [t["function"]["name"] for t in env.tools()] == ["execute_sql", "submit"]
    obs = env.reset(qs[0])
    assert qs[0]["question"] in obs.text and qs[0]["context"] in obs.text
    assert "answer" not in obs.data and "solution" not in obs.data and "path" not in obs.data
    assert obs.data["question_id"] == qs[0]["id"]
    env.close()


def test_submit_right_wrong_and_step_credit(world):
    _, qs, dbs = world
    env = ex.ExcytinEnv(dbs[("alert", "sqlite")])
    q = next(q for q in qs if q["path_length"] >= 3)
    env.reset(q)
    r = env.step(ag.ToolCall("submit", {"answer": q["answer"].upper()}))
    assert r.done and r.reward == 1.0 and r.info["answer_correct"]
    # the answer is wrong but names the IOC of the step just before the answer step
    env.reset(q)
    link = q["solution"][-2].split("`")[1]
    r = env.step(ag.ToolCall("submit", {"answer": f"it was {link}"}))
    assert r.done and not r.info["answer_correct"] and r.reward == pytest.approx(0.4)
    env.reset(q)
    assert env.step(ag.ToolCall("submit", {"answer": "nothing"})).reward == 0.0


def test_out_of_steps_errors_cost_a_step(world):
    _, qs, dbs = world
    env = ex.ExcytinEnv(dbs[("alert", "sqlite")], max_steps=3)
    env.reset(qs[0])
    r1 = env.step(ag.ToolCall("execute_sql", {"query": "SELEC nonsense"}))
    assert not r1.done and r1.observation.data["error"] and "rror" in r1.observation.text
    r2 = env.step(ag.ToolCall("lookup", {"x": 1}))
    assert not r2.done and "unknown tool" in r2.observation.text
    r3 = env.step(ag.ToolCall("execute_sql", {"sql": "SELECT 1"}))  # wrong argument name
    assert r3.done and r3.reward == 0.0 and r3.info["out_of_steps"]
    for call in (ag.ToolCall("submit", {"answer": qs[0]["answer"]}),
                 ag.ToolCall("execute_sql", {"query": "SELECT 1"})):
        with pytest.raises(RuntimeError, match="over"):
            env.step(call)  # nothing is judged or run after the end
    with pytest.raises(RuntimeError):
        ex.ExcytinEnv(dbs[("alert", "sqlite")]).step(ag.ToolCall("submit", {"answer": "x"}))


@pytest.mark.parametrize("backend", ["sqlite", "duckdb"])
def test_agent_sql_cannot_change_the_database(world, backend):
    _, qs, dbs = world
    path = dbs[("alert", backend)]
    before, listing = _sha(path), sorted(os.listdir(path.parent))
    env = ex.ExcytinEnv(path, backend=backend)
    env.reset(qs[0])
    for sql in ("DROP TABLE SecurityAlert", "DELETE FROM SigninLogs",
                "UPDATE SecurityAlert SET AlertName = 'x'", "CREATE TABLE t (a INT)",
                f"ATTACH '{path.parent / 'evil.db'}' AS evil"):
        r = env.step(ag.ToolCall("execute_sql", {"query": sql}))
        assert r.observation.data["error"], sql
    env.close()
    assert _sha(path) == before and sorted(os.listdir(path.parent)) == listing


def test_layer_must_match_the_file(world):
    _, _, dbs = world
    with pytest.raises(ValueError, match="layer"):
        ex.ExcytinEnv(dbs[("alert", "sqlite")], layer="log")
    with pytest.raises(ValueError, match="layer"):
        ex.ExcytinEnv(dbs[("log", "duckdb")], layer="alert", backend="duckdb")


def test_llm_judge_in_the_env(world):
    """``judge_fn=LLMJudge(client).judge``: the env's verdict comes from the model's reply."""
    _, qs, dbs = world

    class Client:
        def __init__(self, verdict):
            self.verdict = verdict

        def chat(self, messages, *, tools=None, **params):
            return {"role": "assistant", "content": f'{{"correct": {self.verdict}}}'}

    for verdict, reward in (("true", 1.0), ("false", 0.0)):
        env = ex.ExcytinEnv(dbs[("alert", "sqlite")],
                            judge_fn=ex.LLMJudge(Client(verdict)).judge)
        env.reset(qs[0])
        r = env.step(ag.ToolCall("submit", {"answer": "whatever the model says"}))
        assert r.done and r.reward == reward


def test_log_layer_has_no_alert_tables(world):
    _, qs, dbs = world
    env = ex.ExcytinEnv(dbs[("log", "sqlite")], layer="log")
    env.reset(qs[0])
    r = env.step(ag.ToolCall("execute_sql", {"query": "SELECT * FROM SecurityAlert"}))
    assert r.observation.data["error"]
    r = env.step(ag.ToolCall("execute_sql", {"query": "SELECT COUNT(*) FROM SigninLogs"}))
    assert r.observation.data["error"] is None and r.observation.data["rows"][0][0] > 0


def test_scripted_agents_alert_layer(world):
    _, qs, dbs = world
    env = ex.ExcytinEnv(dbs[("alert", "sqlite")])
    tasks = {q["id"]: q for q in qs}
    oracle = _rewards(env, ex.OracleAgent(tasks), qs)
    walk = _rewards(env, ex.GraphWalkAgent(), qs)
    rand = _rewards(env, ex.RandomSQLAgent(seed=0), qs)
    assert oracle == [1.0] * len(qs)
    assert sum(walk) / len(qs) >= 0.8
    unambiguous = [w for w, q in zip(walk, qs) if not q["ambiguous"]]
    assert sum(unambiguous) / len(unambiguous) >= 0.95
    assert sum(rand) / len(qs) <= 0.05
    assert _rewards(env, ex.GraphWalkAgent(), qs) == walk  # deterministic


def test_duckdb_gives_the_same_rewards(world):
    _, qs, dbs = world
    for layer, make in (("alert", ex.GraphWalkAgent), ("log", ex.LogWalkAgent)):
        r = {b: _rewards(ex.ExcytinEnv(dbs[(layer, b)], layer=layer, backend=b), make(), qs[::4])
             for b in ("sqlite", "duckdb")}
        assert r["sqlite"] == r["duckdb"], layer


def test_log_walk_finds_some_answers(world):
    _, qs, dbs = world
    rewards = _rewards(ex.ExcytinEnv(dbs[("log", "sqlite")], layer="log"), ex.LogWalkAgent(), qs)
    assert 0 < sum(rewards) / len(qs) < 1  # reported either way; here: not nothing, not all


@pytest.mark.parametrize("kwargs, name", [
    ({"layer": "raw"}, "layer"), ({"backend": "mysql"}, "backend"), ({"max_steps": 0}, "max_steps"),
    ({"max_rows": 0}, "max_rows"), ({"timeout_s": 0}, "timeout_s"), ({"timeout_s": -1.0},
                                                                     "timeout_s"),
    ({"decay": 1.5}, "decay"), ({"decay": 0.0}, "decay")])
def test_env_bad_input(world, kwargs, name):
    _, _, dbs = world
    with pytest.raises(ValueError, match=name):
        ex.ExcytinEnv(dbs[("alert", "sqlite")], **kwargs)


def test_missing_database_is_never_created(tmp_path):
    for backend in ("sqlite", "duckdb"):
        path = tmp_path / f"missing.{backend}"
        with pytest.raises(FileNotFoundError):
            ex.ExcytinEnv(path, backend=backend)
        with pytest.raises(FileNotFoundError):
            ex.open_readonly(path, backend=backend)
        assert not path.exists()
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match="backend"):
        ex.open_readonly(tmp_path / "x", backend="postgres")


def test_write_refuses_to_overwrite(world, tmp_path):
    tenant, _, _ = world
    path = ex.write_sqlite(tenant, tmp_path / "a.sqlite")
    before = _sha(path)
    with pytest.raises(FileExistsError):
        ex.write_sqlite(tenant, path)
    assert _sha(path) == before
    with pytest.raises(ValueError, match="layer"):
        ex.write_sqlite(tenant, tmp_path / "b.sqlite", layer="raw")
    assert sorted(os.listdir(tmp_path)) == ["a.sqlite"]


def test_same_seed_same_database_bytes(tmp_path):
    a = ex.write_sqlite(ex.generate_tenant(5, incidents=1, noise_rows=3), tmp_path / "a.db")
    b = ex.write_sqlite(ex.generate_tenant(5, incidents=1, noise_rows=3), tmp_path / "b.db")
    assert _sha(a) == _sha(b)


def test_cli_generate_run_sql(tmp_path, capsys):
    from jaxpapers.benchmarks.excytin.__main__ import main

    out = tmp_path / "t"
    assert main(["generate", "--incidents", "1", "--per-incident", "5", "--out", str(out)]) == 0
    assert main(["run", "--dir", str(out), "--agent", "oracle"]) == 0
    assert "mean reward 1.000" in capsys.readouterr().out
    assert main(["sql", "--db", str(out / "alert.sqlite"), "SELECT COUNT(*) AS n FROM "
                 "SecurityIncident"]) == 0
    assert main(["sql", "--db", str(out / "alert.sqlite"), "DROP TABLE SigninLogs"]) == 1
    with pytest.raises(FileExistsError):
        main(["generate", "--incidents", "1", "--out", str(out)])


def test_llm_agent_over_a_fake_chat_server(world, httpserver):
    """ToolCallingAgent + ExcytinEnv end to end: the model's SQL runs, its answer is judged."""
    import json

    _, qs, dbs = world
    q = qs[0]

    def reply(*call):
        return {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [{
                "id": call[0], "type": "function",
                "function": {"name": call[1], "arguments": json.dumps(call[2])}}]}}]}

    path = "/v1/chat/completions"
    httpserver.expect_ordered_request(path, method="POST").respond_with_json(
        reply("c1", "execute_sql", {"query": "SELECT COUNT(*) AS n FROM SecurityAlert"}))
    httpserver.expect_ordered_request(path, method="POST").respond_with_json(
        reply("c2", "submit", {"answer": q["answer"]}))
    client = ag.OpenAICompatClient(httpserver.url_for("/v1"), "toy", sleep=lambda s: None)
    env = ex.ExcytinEnv(dbs[("alert", "sqlite")])
    ep = ag.run_episode(env, ag.ToolCallingAgent(client), q, max_steps=15)
    assert ep.error is None and ep.done and ep.reward == 1.0 and ep.steps == 2
    second = json.loads(httpserver.log[1][0].get_data())
    tool_msg = second["messages"][-1]
    assert tool_msg["role"] == "tool" and tool_msg["tool_call_id"] == "c1"
    assert q["answer"] not in json.dumps(second["messages"])  # the answer never reaches the LLM
