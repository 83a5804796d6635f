"""An agent loop on toolsched: the model decides, toolsched runs the tools.

The loop of Gemini CLI's Turn / Scheduler split (see the project's reference
documents): ask the model -> collect its function calls -> ScheduleCalls ->
render every state, answer prompts (at the terminal or by a policy) -> send
the function responses back -> ask again. Tool calls take precedence over
ending: the loop stops only on a turn that has a finish reason and no
function calls, and maps that reason as the reference does (STOP ->
completed, MAX_TOKENS -> max_budget, SAFETY / RECITATION -> refusal,
MALFORMED_FUNCTION_CALL / OTHER -> failed).

The model sits behind `Model` (one method, `generate`, taking and returning
the provider's own JSON shapes). `ScriptedModel` replays a recorded
conversation; the README shows each provider's official SDK in its place.

    python examples/python/agent.py --provider anthropic --approve replace,run_shell_command
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import toolsched
from toolsched import (
    Answer,
    AwaitingApproval,
    BatchCompleted,
    Cancelled,
    EditDetails,
    Error,
    ExecDetails,
    Executing,
    Scheduled,
    Success,
)
from toolsched.adapters import Provider, declarations, function_calls, responses

HERE = Path(__file__).resolve().parent
RECORDINGS = HERE.parent / "recordings"
MAX_TURNS = 20  # a loop that never finishes ends as failed after this many model turns

# === the model seam ===


class Model(Protocol):
    """A model API: given the conversation so far (the provider's own
    message list) and the tools (from `adapters.declarations`), returns the
    provider's response as JSON data."""

    provider: Provider

    def generate(self, history: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]: ...


class ScriptedModel:
    """Replays the responses a real model gave in a recorded conversation,
    turn by turn. It checks what a real model would reject: every function
    call of its previous turn must have been answered, by id, in the
    history it is given."""

    def __init__(self, recording: Path) -> None:
        import json

        data = json.loads(recording.read_text())
        self.provider = Provider(data["provider"])
        self.task: str = data["user"]
        self._turns: list[dict[str, Any]] = data["turns"]
        self._next = 0
        self._expected: list[str] = []

    def generate(self, history: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        if not tools:
            raise AssertionError("the request declares no tools")
        answered = Conversation.answered_ids(self.provider, history)
        missing = [cid for cid in self._expected if cid not in answered]
        if missing:
            raise AssertionError(f"function calls without a response in the history: {missing}")
        if self._next == len(self._turns):
            raise AssertionError("the loop asked for a turn after the recorded conversation ended")
        response = self._turns[self._next]
        self._next += 1
        self._expected = [c.id for c in function_calls(response, self.provider)]
        return response


# === one provider's conversation shapes ===

# Each provider's finish reason as Gemini's FinishReason name, which the
# reference maps.
_OPENAI_CHAT_FINISH = {"stop": "STOP", "tool_calls": "STOP", "function_call": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY"}
_ANTHROPIC_STOP = {
    "end_turn": "STOP",
    "tool_use": "STOP",
    "stop_sequence": "STOP",
    "pause_turn": "STOP",
    "max_tokens": "MAX_TOKENS",
    "refusal": "SAFETY",
}

# The reference's mapping of a finish reason to how the agent ended.
END_OF = {
    "STOP": "completed",
    "MAX_TOKENS": "max_budget",
    "SAFETY": "refusal",
    "RECITATION": "refusal",
    "MALFORMED_FUNCTION_CALL": "failed",
    "OTHER": "failed",
}


@dataclass
class Turn:
    """What one model response holds: its text, its function calls and its
    finish reason (as a Gemini FinishReason name; None when it has none)."""

    text: str
    calls: list[toolsched.Call]
    finish_reason: str | None


@dataclass
class Conversation:
    """The history in `provider`'s message format."""

    provider: Provider
    history: list[dict[str, Any]] = field(default_factory=list)

    def user(self, text: str) -> None:
        if self.provider is Provider.GEMINI:
            self.history.append({"role": "user", "parts": [{"text": text}]})
        else:
            self.history.append({"role": "user", "content": text})

    def turn(self, response: dict[str, Any]) -> Turn:
        """Parses `response` and appends the model's message to the history."""
        p = self.provider
        calls = function_calls(response, p)
        if p is Provider.GEMINI:
            candidate = (response.get("candidates") or [{}])[0]
            content = candidate.get("content") or {"role": "model", "parts": []}
            self.history.append(content)
            text = "".join(part.get("text", "") for part in content.get("parts", []))
            return Turn(text, calls, candidate.get("finishReason"))
        if p is Provider.OPENAI_CHAT:
            choice = response["choices"][0]
            self.history.append(choice["message"])
            reason = choice.get("finish_reason")
            return Turn(choice["message"].get("content") or "", calls, _OPENAI_CHAT_FINISH.get(reason, "OTHER") if reason else None)
        if p is Provider.OPENAI_RESPONSES:
            output = response.get("output", [])
            self.history.extend(output)
            text = "".join(
                c.get("text", "") for item in output if item.get("type") == "message" for c in item.get("content", [])
            )
            status = response.get("status")
            reason = (response.get("incomplete_details") or {}).get("reason")
            finish = {
                "completed": "STOP",
                "incomplete": "MAX_TOKENS" if reason == "max_output_tokens" else "SAFETY" if reason == "content_filter" else "OTHER",
                "failed": "OTHER",
            }.get(status or "")
            return Turn(text, calls, finish)
        self.history.append({"role": "assistant", "content": response["content"]})
        text = "".join(b.get("text", "") for b in response["content"] if b.get("type") == "text")
        reason = response.get("stop_reason")
        return Turn(text, calls, _ANTHROPIC_STOP.get(reason, "OTHER") if reason else None)

    def results(self, done: BatchCompleted) -> None:
        """Appends the function responses of a completed batch."""
        out = responses(done, self.provider)
        if self.provider is Provider.GEMINI:
            self.history.append({"role": "user", "parts": out})
        elif self.provider is Provider.ANTHROPIC:
            self.history.append({"role": "user", "content": out})
        else:
            self.history.extend(out)

    @staticmethod
    def answered_ids(provider: Provider, history: list[dict[str, Any]]) -> set[str]:
        """The call ids that have a function response in `history`."""
        ids: set[str] = set()
        for entry in history:
            if provider is Provider.GEMINI:
                ids.update(p["functionResponse"]["id"] for p in entry.get("parts", []) if "functionResponse" in p)
            elif provider is Provider.OPENAI_CHAT:
                if entry.get("role") == "tool":
                    ids.add(entry["tool_call_id"])
            elif provider is Provider.OPENAI_RESPONSES:
                if entry.get("type") == "function_call_output":
                    ids.add(entry["call_id"])
            elif isinstance(entry.get("content"), list):
                ids.update(b["tool_use_id"] for b in entry["content"] if b.get("type") == "tool_result")
        return ids


# === rendering and answering ===

Out = Callable[[str], None]


def render(out: Out) -> Callable[[toolsched.Event], None]:
    """Prints each call's states as they happen."""

    def on_event(ev: toolsched.Event) -> None:
        if isinstance(ev, Scheduled):
            out(f"  [{ev.call_id}] {ev.tool_name}: scheduled")
        elif isinstance(ev, Executing):
            if ev.output_chunk:
                for line in ev.output_chunk.splitlines():
                    out(f"  [{ev.call_id}]   | {line}")
            elif ev.pid is None:
                out(f"  [{ev.call_id}] {ev.tool_name}: executing")
        elif isinstance(ev, AwaitingApproval):
            out(f"  [{ev.call_id}] {ev.tool_name}: awaiting approval ({ev.reason})")
            if isinstance(ev.details, EditDetails):
                for line in ev.details.diff.splitlines():
                    out(f"  [{ev.call_id}]   {line}")
            elif isinstance(ev.details, ExecDetails):
                out(f"  [{ev.call_id}]   $ {ev.details.command}")
        elif isinstance(ev, Success):
            code = f", exit code {ev.exit_code}" if ev.exit_code is not None else ""
            out(f"  [{ev.call_id}] {ev.tool_name}: success ({ev.duration_ms} ms{code})")
        elif isinstance(ev, Error):
            out(f"  [{ev.call_id}] {ev.tool_name}: error {ev.error_type.value}: {ev.message}")
        elif isinstance(ev, Cancelled):
            out(f"  [{ev.call_id}] {ev.tool_name}: cancelled ({ev.reason})")

    return on_event


def policy(approved_tools: set[str], out: Out) -> Callable[[AwaitingApproval], Answer]:
    """Approves prompts of `approved_tools`, rejects the rest."""

    def decide(prompt: AwaitingApproval) -> Answer:
        ok = prompt.tool_name in approved_tools
        out(f"  [{prompt.call_id}] policy: {'approve' if ok else 'reject'}")
        return Answer.approve() if ok else Answer.reject()

    return decide


def ask_terminal(prompt: AwaitingApproval) -> Answer:
    """Asks the person at the terminal."""
    while True:
        reply = input(f"  [{prompt.call_id}] approve {prompt.tool_name}? [y]es once, [a]lways, [n]o: ").strip().lower()
        if reply in ("y", "yes"):
            return Answer.approve()
        if reply in ("a", "always"):
            return Answer.approve(always=True)
        if reply in ("n", "no"):
            return Answer.reject()


# === the loop ===


@dataclass
class AgentEnd:
    """How the agent ended: `end` is completed / max_budget / refusal /
    failed; `finish_reason` the model's (Gemini names) or None."""

    end: str
    finish_reason: str | None
    answer: str
    turns: int


def run_agent(
    model: Model,
    client: toolsched.Client,
    session: str,
    task: str,
    *,
    on_prompt: Callable[[AwaitingApproval], Answer],
    out: Out = print,
    max_turns: int = MAX_TURNS,
) -> AgentEnd:
    """Runs `task` to the end (see the module docstring)."""
    tools = declarations(client.list_tools(), model.provider)
    convo = Conversation(model.provider)
    convo.user(task)
    out(f"user: {task}")
    for n in range(1, max_turns + 1):
        try:
            turn = convo.turn(model.generate(convo.history, tools))
        except ValueError as e:  # e.g. tool arguments that are not JSON
            out(f"agent: failed: {e}")
            return AgentEnd("failed", "MALFORMED_FUNCTION_CALL", "", n)
        if turn.text:
            out(f"model: {turn.text}")
        if turn.calls:
            # Tool requests first: a finish reason on this turn does not end it.
            out("  " + ", ".join(f"[{c.id}] {c.name}" for c in turn.calls))
            done = client.run(session, turn.calls, on_prompt=on_prompt, on_event=render(out))
            convo.results(done)
            continue
        if turn.finish_reason is not None:
            end = END_OF.get(turn.finish_reason, "failed")
            out(f"agent: {end} (finish reason {turn.finish_reason}) after {n} turns")
            return AgentEnd(end, turn.finish_reason, turn.text, n)
        # Neither calls nor a finish reason: the response was cut short; ask again.
    out(f"agent: failed (no finish within {max_turns} turns)")
    return AgentEnd("failed", None, "", max_turns)


# === the demo ===

DEMO_FILES = {
    "README.md": "# greeter\n\nSays hello. `src/app.py` holds the greeting.\n",
    "src/app.py": 'def greet(name):\n    return f"helo, {name}!"\n\n\nif __name__ == "__main__":\n    print(greet("world"))\n',
}


def prepare_workspace(root: Path) -> None:
    """Writes the demo project the recorded conversation works on."""
    for rel, text in DEMO_FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="An agent loop on toolsched with a recorded model.")
    ap.add_argument("--address", default=toolsched.DEFAULT_ADDRESS, help="toolsched server (host:port)")
    ap.add_argument("--token", default=None, help="bearer token, if the server has --auth-token")
    ap.add_argument("--provider", choices=[p.value for p in Provider], default="gemini")
    ap.add_argument("--recording", type=Path, help="recorded conversation (default: examples/recordings/<provider>.json)")
    ap.add_argument("--session", default="agent-example")
    ap.add_argument(
        "--approve",
        default=None,
        help="answer prompts by policy: approve these tools (comma-separated), reject the others; "
        "without it, ask at the terminal",
    )
    ap.add_argument("--prepare-workspace", type=Path, help="first write the demo files into this directory (the server's workspace)")
    args = ap.parse_args(argv)

    if args.prepare_workspace:
        prepare_workspace(args.prepare_workspace)
    model = ScriptedModel(args.recording or RECORDINGS / f"{args.provider}.json")
    if args.approve is not None:
        on_prompt = policy({t for t in args.approve.split(",") if t}, print)
    elif sys.stdin.isatty():
        on_prompt = ask_terminal
    else:
        ap.error("stdin is not a terminal: pass --approve TOOLS to answer prompts by policy")
    with toolsched.Client(args.address, token=args.token) as client:
        end = run_agent(model, client, args.session, model.task, on_prompt=on_prompt)
    print(f"final answer: {end.answer}")
    return 0 if end.end == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
