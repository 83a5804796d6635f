"""Provider adapters: declarations, tool calls and responses compared with
fixtures written from each provider's documented shapes, then the same
adapters on a real server's tools and a real batch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolsched import Call, CompletedCall, ErrorType, FinalState, FunctionResponse, Tool, ToolKind
from toolsched.adapters import Provider, declarations, function_calls, responses

# Shared with the TypeScript client's tests.
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "providers"

READ_FILE = Tool(
    name="read_file",
    description="Reads a file.",
    parameters={
        "type": "object",
        "properties": {"file_path": {"type": "string"}, "start_line": {"type": "integer", "minimum": 1}},
        "required": ["file_path"],
    },
    kind=ToolKind.READ,
    parallelizable=True,
    read_only=True,
)


def completed(call_id, name, state, response, error_type=None, message=""):
    return CompletedCall(call_id, name, state, error_type, message, 0, None, FunctionResponse(call_id, name, response))


BATCH = [
    completed("call_1", "read_file", FinalState.SUCCESS, {"output": "hello\n"}),
    completed(
        "call_2",
        "grep_search",
        FinalState.ERROR,
        {"error": "Search path not found: src"},
        ErrorType.SEARCH_PATH_NOT_FOUND,
        "Search path not found: src",
    ),
    completed(
        "call_3",
        "run_shell_command",
        FinalState.CANCELLED,
        {"error": "[Operation Cancelled] user pressed Esc", "output": "partial\n"},
        message="user pressed Esc",
    ),
    completed("call_4", "glob", FinalState.SUCCESS, {"output": {"files": ["a.py", "b.py"], "count": 2}}),
]

PROVIDERS = {
    Provider.GEMINI: "gemini.json",
    Provider.OPENAI_CHAT: "openai_chat.json",
    Provider.OPENAI_RESPONSES: "openai_responses.json",
    Provider.ANTHROPIC: "anthropic.json",
}


def fixture(provider: Provider) -> dict:
    return json.loads((FIXTURES / PROVIDERS[provider]).read_text())


@pytest.mark.parametrize("provider", list(Provider))
def test_declarations_match_the_documented_shape(provider):
    assert declarations([READ_FILE], provider) == fixture(provider)["declarations"]


@pytest.mark.parametrize("provider", list(Provider))
def test_function_calls_are_read_from_the_documented_response(provider):
    f = fixture(provider)
    calls = function_calls(f["model_output"], provider)
    assert [{"id": c.id, "name": c.name, "args": dict(c.args)} for c in calls] == f["function_calls"]


@pytest.mark.parametrize("provider", list(Provider))
def test_responses_match_the_documented_shape(provider):
    assert responses(BATCH, provider) == fixture(provider)["responses"]


def test_provider_names_are_accepted_as_strings():
    assert declarations([READ_FILE], "anthropic") == declarations([READ_FILE], Provider.ANTHROPIC)
    with pytest.raises(ValueError):
        declarations([READ_FILE], "palm")


def test_arguments_that_are_not_a_json_object_are_refused():
    call = {"id": "c", "type": "function", "function": {"name": "glob", "arguments": "{oops"}}
    bad = {"choices": [{"message": {"tool_calls": [call]}}]}
    with pytest.raises(ValueError, match="tool call 'c': arguments are not JSON"):
        function_calls(bad, Provider.OPENAI_CHAT)


def test_a_response_without_tool_calls_has_none():
    assert function_calls({"candidates": [{"content": {"parts": [{"text": "done"}]}, "finishReason": "STOP"}]}, "gemini") == []
    assert function_calls({"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn"}, "anthropic") == []


@pytest.mark.parametrize("provider", list(Provider))
def test_the_real_servers_tools_and_a_real_batch(server, client, session, provider):
    tools = client.list_tools()
    decls = declarations(tools, provider)
    names = [t.name for t in tools]
    if provider is Provider.GEMINI:
        [tool] = decls
        assert [d["name"] for d in tool["functionDeclarations"]] == names
        assert all(d["parametersJsonSchema"]["type"] == "object" for d in tool["functionDeclarations"])
    elif provider is Provider.OPENAI_CHAT:
        assert [d["function"]["name"] for d in decls] == names
        assert all(d["type"] == "function" and d["function"]["parameters"]["type"] == "object" for d in decls)
    elif provider is Provider.OPENAI_RESPONSES:
        assert [d["name"] for d in decls] == names
        assert all(d["type"] == "function" and d["strict"] is False for d in decls)
    else:
        assert [d["name"] for d in decls] == names
        assert all(d["input_schema"]["type"] == "object" for d in decls)
    json.dumps(decls)  # plain JSON data throughout

    server.path("adapters.txt").write_text("adapted\n")
    done = client.run(
        session,
        [Call("ok", "read_file", {"file_path": "adapters.txt"}), Call("bad", "read_file", {"file_path": "nope.txt"})],
    )
    out = responses(done, provider)
    assert len(out) == 2
    if provider is Provider.ANTHROPIC:
        assert [(b["tool_use_id"], b["is_error"]) for b in out] == [("ok", False), ("bad", True)]
        assert out[0]["content"] == "adapted\n"
        assert out[1]["content"].startswith("File not found: nope.txt")
    elif provider is Provider.GEMINI:
        assert out[0] == {"functionResponse": {"id": "ok", "name": "read_file", "response": {"output": "adapted\n"}}}
        assert "error" in out[1]["functionResponse"]["response"]
    elif provider is Provider.OPENAI_CHAT:
        assert out[0] == {"role": "tool", "tool_call_id": "ok", "content": "adapted\n"}
    else:
        assert out[0] == {"type": "function_call_output", "call_id": "ok", "output": "adapted\n"}
