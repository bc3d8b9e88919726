"""``python -m jaxpapers.benchmarks.dive``: synth / verify / stats / tools / call."""

from __future__ import annotations

import json

import pytest

from jaxpapers.benchmarks.dive.__main__ import main, read_tasks


def test_synth_verify_stats_round_trip(tmp_path, capsys):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert main(["synth", "--n", "25", "--seed", "3", "--verify", "--out", str(a)]) == 0
    assert "replay 25/25, solver 25/25" in capsys.readouterr().out
    assert main(["synth", "--n", "25", "--seed", "3", "--verify", "--out", str(b)]) == 0
    assert a.read_bytes() == b.read_bytes()  # same seed: byte-identical file
    assert len(read_tasks(a)) == 25
    capsys.readouterr()
    assert main(["verify", str(a)]) == 0
    assert "25/25 tasks verified" in capsys.readouterr().out
    assert main(["stats", str(a)]) == 0
    assert json.loads(capsys.readouterr().out)["tasks"] == 25
    # an altered answer fails verification and names the task
    lines = a.read_text().splitlines()
    task = json.loads(lines[0])
    task["answer"] += "x"
    a.write_text("\n".join([json.dumps(task)] + lines[1:]) + "\n")
    assert main(["verify", str(a), "--in-process"]) == 1
    assert f"{task['id']}: replay FAILED" in capsys.readouterr().out


def test_malformed_file_names_the_line(tmp_path, capsys):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"id": "x"}\n')
    assert main(["stats", str(f)]) == 2
    assert "bad.jsonl:1: malformed task" in capsys.readouterr().err
    f.write_text("not json\n")
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        read_tasks(f)


def test_tools_and_call(capsys):
    assert main(["tools", "--domain", "general"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(line.startswith("general.") for line in lines)
    from jaxpapers.benchmarks.dive import synthesize
    from jaxpapers.benchmarks.dive.worlds import dumps

    task = synthesize(1, seed=0)[0]
    call = task["program"][0]  # the first call's arguments are literal
    for extra in ([], ["--sandboxed"]):
        assert main(["call", "--domain", task["domain"], "--world-seed",
                     str(task["world_seed"]), *extra, call["tool"],
                     json.dumps(call["args"])]) == 0
        assert capsys.readouterr().out.strip() == dumps(call["output"])
    assert main(["call", "--domain", "general", "general.no_such_tool", "{}"]) == 1
    assert "error: unknown tool" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="JSON"):
        main(["call", "--domain", "general", "x", "{not json"])


def test_llm_needs_the_environment(tmp_path, monkeypatch):
    for k in ("JAXPAPERS_LLM_BASE_URL", "JAXPAPERS_LLM_MODEL"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(SystemExit, match="JAXPAPERS_LLM_BASE_URL"):
        main(["synth", "--n", "1", "--llm", "--out", str(tmp_path / "x.jsonl")])
