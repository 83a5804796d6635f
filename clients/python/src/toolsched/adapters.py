"""toolsched <-> the tool-calling shapes of model providers' APIs.

Three directions, each for ``Provider.GEMINI``, ``OPENAI_CHAT`` (Chat
Completions), ``OPENAI_RESPONSES`` (the Responses API) and ``ANTHROPIC``
(Messages API):

- ``declarations(tools, provider)``: ``ListTools`` as the request's ``tools``;
- ``function_calls(output, provider)``: the model's tool calls as ``Call``s
  for ``schedule``, keeping the provider's call ids;
- ``responses(batch, provider)``: a ``BatchCompleted`` as what goes back to
  the model (Gemini ``functionResponse`` parts, OpenAI ``tool`` messages or
  ``function_call_output`` items, Anthropic ``tool_result`` blocks with
  ``is_error``).

Plain dicts in, plain dicts out: they go straight into the provider's JSON
request or its official SDK's ``create(...)`` call.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .types import BatchCompleted, Call, CompletedCall, FinalState, FunctionResponse, Tool
from .values import JSON, JSONObject

__all__ = ["Provider", "declarations", "function_calls", "response_text", "responses"]


class Provider(str, enum.Enum):
    """A model API's tool-calling format."""

    GEMINI = "gemini"
    OPENAI_CHAT = "openai_chat"
    OPENAI_RESPONSES = "openai_responses"
    ANTHROPIC = "anthropic"


def declarations(tools: Iterable[Tool], provider: Provider | str) -> list[dict[str, Any]]:
    """The ``tools`` member of the provider's request, declaring `tools`.

    Gemini gets one tool holding every ``functionDeclarations`` entry, with
    the JSON Schema as ``parametersJsonSchema`` (toolsched's schemas are
    JSON Schema, not the OpenAPI subset of ``parameters``). The Responses
    API's tools are not ``strict``: strict mode needs every property
    required, and toolsched's tools have optional ones.
    """
    p = Provider(provider)
    tools = list(tools)
    if p is Provider.GEMINI:
        return [
            {
                "functionDeclarations": [
                    {"name": t.name, "description": t.description, "parametersJsonSchema": t.parameters}
                    for t in tools
                ]
            }
        ]
    if p is Provider.OPENAI_CHAT:
        return [
            {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
            for t in tools
        ]
    if p is Provider.OPENAI_RESPONSES:
        return [
            {"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters, "strict": False}
            for t in tools
        ]
    return [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]


def _items(output: Any, *keys: str) -> list[Any]:
    """The list under the first of `keys` present (following nested dicts
    such as a response's first candidate), or `output` itself if a list."""
    if isinstance(output, list):
        return output
    if not isinstance(output, Mapping):
        raise TypeError(f"expected a provider response (dict or list), got {type(output).__name__}")
    for key in keys:
        if key in output:
            value = output[key]
            if key in ("candidates", "choices"):
                if not value:
                    return []
                return _items(value[0], *keys)
            if isinstance(value, Mapping):
                return _items(value, *keys)
            return list(value or [])
    return []


def _json_args(raw: Any, call_id: str) -> Mapping[str, JSON]:
    if isinstance(raw, Mapping):
        return raw
    try:
        args = json.loads(raw or "{}")
    except json.JSONDecodeError as e:
        raise ValueError(f"tool call {call_id!r}: arguments are not JSON ({e.msg} at {e.pos})") from e
    if not isinstance(args, dict):
        raise ValueError(f"tool call {call_id!r}: arguments are not a JSON object")
    return args


def function_calls(output: Any, provider: Provider | str) -> list[Call]:
    """The tool calls in a model's output, in order, as ``Call``s.

    `output` is the provider's response as JSON data, or the part of it that
    holds the calls: Gemini ``GenerateContentResponse`` / candidate /
    content / parts (``functionCall``; a call without an ``id`` gets
    ``"<name>-<index>"``); OpenAI chat completion / choice / message
    (``tool_calls``, arguments as a JSON string); Responses API response /
    ``output`` list (``function_call`` items, by ``call_id``); Anthropic
    message / ``content`` list (``tool_use`` blocks).
    Raises ``ValueError`` for arguments that are not a JSON object.
    """
    p = Provider(provider)
    calls: list[Call] = []
    if p is Provider.GEMINI:
        for i, part in enumerate(_items(output, "candidates", "content", "parts")):
            fc = part.get("functionCall") if isinstance(part, Mapping) else None
            if fc is not None:
                cid = fc.get("id") or f"{fc['name']}-{i}"
                calls.append(Call(cid, fc["name"], _json_args(fc.get("args") or {}, cid)))
    elif p is Provider.OPENAI_CHAT:
        for tc in _items(output, "choices", "message", "tool_calls"):
            if tc.get("type", "function") == "function":
                fn = tc["function"]
                calls.append(Call(tc["id"], fn["name"], _json_args(fn.get("arguments"), tc["id"])))
    elif p is Provider.OPENAI_RESPONSES:
        for item in _items(output, "output"):
            if item.get("type") == "function_call":
                calls.append(Call(item["call_id"], item["name"], _json_args(item.get("arguments"), item["call_id"])))
    else:
        for block in _items(output, "content"):
            if block.get("type") == "tool_use":
                calls.append(Call(block["id"], block["name"], _json_args(block.get("input") or {}, block["id"])))
    return calls


def response_text(response: FunctionResponse) -> str:
    """A function response as one text for the model: the output (JSON when
    it is not a string), or the error, followed by any partial output."""
    output = response.output
    out_text = output if isinstance(output, str) else (None if output is None else json.dumps(output))
    error = response.error
    if error is None:
        return out_text or ""
    if out_text:
        return f"{error}\n\nOutput before it ended:\n{out_text}"
    return error


def _calls(batch: BatchCompleted | Sequence[CompletedCall]) -> Sequence[CompletedCall]:
    return batch.calls if isinstance(batch, BatchCompleted) else batch


def responses(batch: BatchCompleted | Sequence[CompletedCall], provider: Provider | str) -> list[dict[str, Any]]:
    """What goes back to the model for a completed batch, one entry per
    call in request order:

    - Gemini: ``functionResponse`` parts (toolsched's responses are Gemini's
      shape already), for a ``{"role": "user", "parts": [...]}`` content;
    - OpenAI chat: ``{"role": "tool", "tool_call_id", "content"}`` messages;
    - Responses API: ``{"type": "function_call_output", "call_id",
      "output"}`` input items;
    - Anthropic: ``tool_result`` blocks for one user message, with
      ``is_error`` set for calls that did not succeed.
    """
    p = Provider(provider)
    out: list[dict[str, Any]] = []
    for c in _calls(batch):
        r = c.response
        if p is Provider.GEMINI:
            resp: JSONObject = dict(r.response)
            out.append({"functionResponse": {"id": r.id, "name": r.name, "response": resp}})
        elif p is Provider.OPENAI_CHAT:
            out.append({"role": "tool", "tool_call_id": r.id, "content": response_text(r)})
        elif p is Provider.OPENAI_RESPONSES:
            out.append({"type": "function_call_output", "call_id": r.id, "output": response_text(r)})
        else:
            out.append(
                {
                    "type": "tool_result",
                    "tool_use_id": r.id,
                    "content": response_text(r),
                    "is_error": c.state is not FinalState.SUCCESS,
                }
            )
    return out
