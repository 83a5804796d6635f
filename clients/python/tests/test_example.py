"""examples/python/agent.py end to end against the real server: the recorded
conversation in each provider's format (reads, a grep, an approved replace,
a shell command, a rejected write), and the Turn loop's ending rules."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, start_server, stop_server
from toolsched.adapters import Provider

AGENT = REPO / "examples" / "python" / "agent.py"


def load_agent():
    spec = importlib.util.spec_from_file_location("agent_example", AGENT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["agent_example"] = module
    spec.loader.exec_module(module)
    return module


IDS = {
    Provider.GEMINI: [f"gem-{i}" for i in range(1, 7)],
    Provider.OPENAI_CHAT: [f"call_{i:02d}" for i in range(1, 7)],
    Provider.OPENAI_RESPONSES: [f"call_{i:02d}" for i in range(1, 7)],
    Provider.ANTHROPIC: [f"toolu_{i:02d}" for i in range(1, 7)],
}


@pytest.mark.parametrize("provider", list(Provider))
def test_the_recorded_conversation_runs_end_to_end(tmp_path, provider):
    srv = start_server(tmp_path)
    try:
        run = subprocess.run(
            [
                sys.executable,
                str(AGENT),
                "--address",
                srv.address,
                "--provider",
                provider.value,
                "--approve",
                "replace,run_shell_command",
                "--prepare-workspace",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
        )
    finally:
        stop_server(srv)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    r1, r2, grep, rep, sh, write = IDS[provider]
    states = [
        (m.group(1), m.group(2))
        for m in (re.match(r"  \[(\S+)\] \S+: (scheduled|executing|awaiting approval|success|error|cancelled)", l) for l in lines)
        if m
    ]
    assert states == [
        (r1, "scheduled"), (r2, "scheduled"), (r1, "executing"), (r2, "executing"), (r1, "success"), (r2, "success"),
        (grep, "scheduled"), (grep, "executing"), (grep, "success"),
        (rep, "awaiting approval"), (rep, "scheduled"), (rep, "executing"), (rep, "success"),
        (sh, "scheduled"), (sh, "executing"), (sh, "success"),
        (write, "awaiting approval"), (write, "cancelled"),
    ]  # fmt: skip
    assert f"  [{rep}] policy: approve" in lines
    assert f"  [{write}] policy: reject" in lines
    assert f"  [{write}] write_file: cancelled (User denied execution.)" in lines
    assert f'  [{sh}]   | 2:    return f"hello, {{name}}!"' in lines
    assert any(re.fullmatch(rf"  \[{sh}\] run_shell_command: success \(\d+ ms, exit code 0\)", l) for l in lines)
    assert "agent: completed (finish reason STOP) after 6 turns" in lines
    assert lines[-1].startswith('final answer: The typo is fixed: src/app.py now greets with "hello"')
    assert 'return f"hello, {name}!"' in (tmp_path / "src" / "app.py").read_text()
    assert not (tmp_path / "NOTES.md").exists()


def gemini_turn(text, calls=(), finish="STOP"):
    parts = [{"text": text}] + [{"functionCall": {"id": cid, "name": n, "args": a}} for cid, n, a in calls]
    candidate = {"content": {"role": "model", "parts": parts}}
    if finish is not None:
        candidate["finishReason"] = finish
    return {"candidates": [candidate]}


def run_recorded(server, client, session, tmp_path, turns):
    agent = load_agent()
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps({"provider": "gemini", "user": "task", "turns": turns}))
    model = agent.ScriptedModel(rec)
    out: list[str] = []
    end = agent.run_agent(model, client, session, model.task, on_prompt=agent.policy(set(), out.append), out=out.append)
    return end, out


@pytest.mark.parametrize(
    ("finish", "end"),
    [
        ("STOP", "completed"),
        ("MAX_TOKENS", "max_budget"),
        ("SAFETY", "refusal"),
        ("RECITATION", "refusal"),
        ("MALFORMED_FUNCTION_CALL", "failed"),
        ("OTHER", "failed"),
    ],
)
def test_finish_reasons_map_as_the_reference_does(server, client, session, tmp_path, finish, end):
    got, _ = run_recorded(server, client, session, tmp_path, [gemini_turn("bye", finish=finish)])
    assert (got.end, got.finish_reason, got.answer, got.turns) == (end, finish, "bye", 1)


def test_function_calls_go_first_even_on_a_turn_with_a_finish_reason(server, client, session, tmp_path):
    server.path("first.txt").write_text("1\n")
    turns = [
        # A finish reason and a call: the call runs and the loop goes on.
        gemini_turn("reading", [("a", "read_file", {"file_path": "first.txt"})], finish="MAX_TOKENS"),
        # Neither calls nor a finish reason: not an end; the model is asked again.
        gemini_turn("thinking", finish=None),
        gemini_turn("done"),
    ]
    got, out = run_recorded(server, client, session, tmp_path, turns)
    assert (got.end, got.finish_reason, got.turns) == ("completed", "STOP", 3)
    assert [l for l in out if l.startswith("  [a] read_file: ")][-1].startswith("  [a] read_file: success (")
    assert "model: thinking" in out


def test_the_scripted_model_refuses_a_loop_that_drops_a_response(tmp_path):
    agent = load_agent()
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps({"provider": "gemini", "user": "t", "turns": [gemini_turn("x", [("a", "glob", {"pattern": "*"})]), gemini_turn("y")]}))
    model = agent.ScriptedModel(rec)
    model.generate([], [{"functionDeclarations": []}])
    with pytest.raises(AssertionError, match=r"without a response in the history: \['a'\]"):
        model.generate([], [{"functionDeclarations": []}])
