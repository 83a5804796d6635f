"""The blocking client against the real server: typed events, prompts
answered with approve/reject/modify, cancel of a running command, errors."""

from __future__ import annotations

import os

import pytest

import toolsched
from toolsched import (
    AwaitingApproval,
    BatchAccepted,
    BatchCompleted,
    BatchStarted,
    Call,
    Cancelled,
    CancelResult,
    EditDetails,
    Error,
    ErrorType,
    ExecDetails,
    Executing,
    FinalState,
    Outcome,
    Scheduled,
    Success,
    ToolKind,
    ToolschedError,
    Validating,
)


def until_prompt(batch: toolsched.Batch) -> tuple[list[toolsched.Event], AwaitingApproval]:
    seen = []
    for ev in batch:
        seen.append(ev)
        if isinstance(ev, AwaitingApproval):
            return seen, ev
    raise AssertionError(f"no prompt in {seen}")


def kinds(events: list[toolsched.Event]) -> list[str]:
    return [type(e).__name__ for e in events]


def test_a_read_yields_each_typed_event_in_order(server, client, session):
    server.path("hello.txt").write_text("hello\n")
    batch = client.schedule(session, [Call("r", "read_file", {"file_path": "hello.txt"})])
    events = list(batch)
    assert kinds(events) == [
        "BatchAccepted",
        "BatchStarted",
        "Validating",
        "Scheduled",
        "Executing",
        "Success",
        "BatchCompleted",
    ]
    assert [e.sequence for e in events] == [1, 2, 3, 4, 5, 6, 7]
    accepted, started, validating, scheduled, executing, success, done = events
    assert isinstance(accepted, BatchAccepted) and not accepted.queued and accepted.batches_ahead == 0
    assert isinstance(started, BatchStarted) and started.batch_id == accepted.batch_id == batch.batch_id
    assert isinstance(validating, Validating)
    assert (validating.call_id, validating.tool_name, validating.args) == ("r", "read_file", {"file_path": "hello.txt"})
    assert isinstance(scheduled, Scheduled) and scheduled.call_id == "r"
    assert isinstance(executing, Executing) and executing.pid is None
    assert isinstance(success, Success)
    assert success.response.output == "hello\n" and success.response.error is None
    assert success.exit_code is None
    # Integral numbers of the structured result are ints, not 1.0.
    assert success.result["total_lines"] == 1 and type(success.result["total_lines"]) is int
    assert isinstance(done, BatchCompleted) and done is batch.completed
    assert done.batch_id == accepted.batch_id
    [call] = done.calls
    assert call.call_id == "r" and call.tool_name == "read_file"
    assert call.state is FinalState.SUCCESS and call.ok
    assert (call.error_type, call.message, call.exit_code) == (None, "", None)
    assert call.duration_ms == success.duration_ms
    assert call.response == success.response
    assert done.responses == [success.response]
    assert done["r"] is call
    # Reading past the end stops, it does not block or raise.
    assert list(batch) == []


def test_a_prompt_approved_runs_the_write(server, client, session):
    batch = client.schedule(
        session, [Call("w", "write_file", {"file_path": "approved.txt", "content": "yes\n"})]
    )
    seen, prompt = until_prompt(batch)
    assert kinds(seen) == ["BatchAccepted", "BatchStarted", "Validating", "AwaitingApproval"]
    assert prompt.session_id == session and prompt.call_id == "w" and prompt.tool_name == "write_file"
    assert prompt.details == EditDetails(
        file_path="approved.txt",
        diff=prompt.details.diff,
        is_new_file=True,
        new_content="yes\n",
    )
    assert "+yes" in prompt.details.diff
    assert prompt.outcomes == (
        Outcome.PROCEED_ONCE,
        Outcome.PROCEED_ALWAYS,
        Outcome.MODIFY_WITH_EDITOR,
        Outcome.CANCEL,
    )
    assert prompt.correlation_id and prompt.deadline is not None
    assert prompt.policy_rule is not None and prompt.policy_rule.file == "<built-in>"
    assert not server.path("approved.txt").exists()
    client.approve(prompt)
    rest = list(batch)
    assert kinds(rest) == ["Scheduled", "Executing", "Success", "BatchCompleted"]
    assert rest[2].response.output == "Successfully created and wrote to new file: approved.txt."
    assert server.path("approved.txt").read_text() == "yes\n"
    assert batch.completed.calls[0].state is FinalState.SUCCESS


def test_a_rejected_prompt_cancels_the_call_and_the_ones_queued_behind_it(server, client, session):
    batch = client.schedule(
        session,
        [
            Call("w", "write_file", {"file_path": "rejected.txt", "content": "no\n"}),
            Call("w2", "write_file", {"file_path": "rejected2.txt", "content": "no\n"}),
        ],
    )
    _, prompt = until_prompt(batch)
    client.reject(prompt)
    done = batch.result()
    assert [(c.call_id, c.state) for c in done.calls] == [
        ("w", FinalState.CANCELLED),
        ("w2", FinalState.CANCELLED),
    ]
    assert done["w"].message == "User denied execution."
    assert done["w"].response.error == "[Operation Cancelled] User denied execution."
    assert done["w"].duration_ms == 0
    assert not server.path("rejected.txt").exists() and not server.path("rejected2.txt").exists()
    # The prompt is answered: answering again with another outcome is refused.
    with pytest.raises(ToolschedError) as err:
        client.approve(prompt)
    assert err.value.code == "FAILED_PRECONDITION"


def test_modify_runs_the_edit_with_the_new_content(server, client, session):
    batch = client.schedule(
        session, [Call("w", "write_file", {"file_path": "modified.txt", "content": "proposed\n"})]
    )
    _, prompt = until_prompt(batch)
    client.modify(prompt, "edited by the person\n")
    done = batch.result()
    assert done["w"].state is FinalState.SUCCESS
    assert server.path("modified.txt").read_text() == "edited by the person\n"


def test_cancel_stops_a_running_command(server, client, session):
    batch = client.schedule(
        session,
        [Call("x", "run_shell_command", {"command": "sleep 60"})],
        approval_mode=toolsched.ApprovalMode.YOLO,
    )
    pid = None
    for ev in batch:
        assert not isinstance(ev, AwaitingApproval)
        if isinstance(ev, Executing) and ev.pid is not None:
            pid = ev.pid
            break
    assert pid is not None
    assert client.cancel(session, batch.batch_id, reason="user pressed Esc") == CancelResult(1, 1)
    rest = list(batch)
    assert kinds(rest)[-2:] == ["Cancelled", "BatchCompleted"]
    cancelled = rest[-2]
    assert isinstance(cancelled, Cancelled) and cancelled.reason == "user pressed Esc"
    call = batch.completed["x"]
    assert (call.state, call.message, call.exit_code) == (FinalState.CANCELLED, "user pressed Esc", None)
    # The command's process is gone, not left running.
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_the_shell_exit_code_is_an_int(server, client, session):
    prompts: list[AwaitingApproval] = []

    def approve(p: AwaitingApproval) -> toolsched.Answer:
        prompts.append(p)
        return toolsched.Answer.approve()

    done = client.run(
        session,
        [Call("x", "run_shell_command", {"command": "echo out > out.txt; exit 3"})],
        on_prompt=approve,
    )
    # Writing a file through a redirection asks in the default mode.
    [prompt] = prompts
    assert isinstance(prompt.details, ExecDetails)
    assert prompt.details.command == "echo out > out.txt; exit 3"
    assert prompt.details.root_commands == ("echo", "exit")
    assert prompt.details.write_targets == ("out.txt",)
    call = done["x"]
    assert call.state is FinalState.SUCCESS
    assert call.exit_code == 3 and type(call.exit_code) is int
    assert "Exit Code: 3" in call.response.output
    assert server.path("out.txt").read_text() == "out\n"


def test_run_without_a_prompt_callback_is_non_interactive(client, session):
    events: list[toolsched.Event] = []
    done = client.run(
        session, [Call("w", "write_file", {"file_path": "never.txt", "content": "x"})], on_event=events.append
    )
    assert done["w"].state is FinalState.ERROR
    assert done["w"].error_type is ErrorType.POLICY_VIOLATION
    assert isinstance(events[-2], Error) and events[-2].error_type is ErrorType.POLICY_VIOLATION
    assert events[-1] is done


def test_bad_requests_raise_with_the_status_code(client, session):
    with pytest.raises(ToolschedError) as err:
        client.schedule("", [Call("a", "read_file", {"file_path": "x"})]).result()
    assert err.value.code == "INVALID_ARGUMENT"
    assert "session_id" in err.value.message
    with pytest.raises(ToolschedError) as err:
        client.cancel("no-such-session-" + session)
    assert err.value.code == "NOT_FOUND"


def test_list_tools_gives_typed_declarations(client):
    tools = {t.name: t for t in client.list_tools()}
    assert {"read_file", "write_file", "replace", "grep_search", "run_shell_command"} <= tools.keys()
    read = tools["read_file"]
    assert read.kind is ToolKind.READ and read.read_only and read.parallelizable
    assert read.parameters["type"] == "object"
    assert "file_path" in read.parameters["required"]
    shell = tools["run_shell_command"]
    assert shell.kind is ToolKind.EXECUTE and not shell.read_only


def test_a_token_is_sent_as_a_bearer_header(tmp_path):
    from conftest import start_server, stop_server

    srv = start_server(tmp_path, "--auth-token", "s3cret")
    try:
        with toolsched.Client(srv.address, token="s3cret") as good:
            assert good.list_tools()
        with toolsched.Client(srv.address) as anonymous, pytest.raises(ToolschedError) as err:
            anonymous.list_tools()
        assert err.value.code == "UNAUTHENTICATED"
    finally:
        stop_server(srv)


def test_a_named_workspace_is_sent_and_used(tmp_path):
    from conftest import start_server, stop_server

    root = tmp_path / "root"
    root.mkdir()
    srv = start_server(tmp_path, "--workspaces-root", str(root), "--create-workspaces")
    try:
        with toolsched.Client(srv.address) as c:
            done = c.run(
                "ws",
                [Call("w", "write_file", {"file_path": "f.txt", "content": "hi\n"})],
                approval_mode="yolo",
                workspace="main",
            )
            assert done["w"].state is FinalState.SUCCESS
            # No token: tenant "default".
            assert (root / "default" / "main" / "f.txt").read_text() == "hi\n"
            with pytest.raises(ToolschedError) as err:
                c.run("ws", [Call("r", "read_file", {"file_path": "f.txt"})], workspace="other")
            assert err.value.code == "FAILED_PRECONDITION"
            assert "'main'" in err.value.message
    finally:
        stop_server(srv)
