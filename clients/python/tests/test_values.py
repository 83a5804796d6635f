"""Struct <-> Python values (exact, ints kept as int), enum coverage of the
proto, and the generated code matching the proto."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import struct_pb2

import toolsched
from toolsched import Call, FinalState, Validating, from_struct, to_struct
from toolsched import _convert as conv
from toolsched import types as t
from toolsched.v1 import toolsched_pb2 as pb

NESTED = {
    "int": 3,
    "negative": -42,
    "zero": 0,
    "big": 2**53,
    "float": 2.5,
    "tiny": 1e-300,
    "bool": True,
    "false": False,
    "null": None,
    "text": "héllo ✓",
    "empty_list": [],
    "empty_object": {},
    "lists": [[1, 2, [3, [4.5, "x", None]]], [], [{"deep": [True, {"n": 7}]}]],
    "object": {"a": {"b": {"c": [1, -1, 0.25]}}},
}


def same(a: object, b: object) -> bool:
    """Equal, and of the same types all the way down (1 == 1.0 == True is
    not enough)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)  # type: ignore[union-attr]
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))  # type: ignore[arg-type]
    return a == b


def test_struct_round_trips_exactly_through_the_wire_encoding():
    wire = to_struct(NESTED).SerializeToString()
    back = from_struct(struct_pb2.Struct.FromString(wire))
    assert same(back, NESTED), back


def test_integral_doubles_come_back_as_int_and_others_as_float():
    s = struct_pb2.Struct()
    s.update({"three": 3.0, "half": 0.5, "huge": 2.0**60, "inf": float("inf")})
    got = from_struct(s)
    assert same(got["three"], 3)
    assert same(got["half"], 0.5)
    # Beyond 2**53 a double is not an exact integer any more: stays float.
    assert same(got["huge"], 2.0**60)
    assert same(got["inf"], float("inf"))


def test_what_a_struct_cannot_carry_is_refused():
    with pytest.raises(ValueError, match=r"\$\.n\[1\]: .* beyond 2\*\*53"):
        to_struct({"n": [1, 2**53 + 1]})
    with pytest.raises(TypeError, match=r"\$\.b: bytes is not a JSON value"):
        to_struct({"b": b"raw"})
    with pytest.raises(TypeError, match="key 1 is not a string"):
        to_struct({1: "x"})  # type: ignore[dict-item]


def test_arguments_round_trip_through_the_server(server, client, session):
    # Validating echoes the arguments as the tool sees them: ints stay ints.
    server.path("lines.txt").write_text("a\nb\nc\nd\n")
    args = {"file_path": "lines.txt", "start_line": 2, "end_line": 3}
    events = list(client.schedule(session, [Call("r", "read_file", args)]))
    [validating] = [e for e in events if isinstance(e, Validating)]
    assert same(validating.args, args)
    done = events[-1]
    assert done.calls[0].state is FinalState.SUCCESS
    assert str(done.calls[0].response.output).endswith("--- FILE CONTENT (truncated) ---\nb\nc\n")
    # JSON Schemas from ListTools: nested objects and lists, as plain data.
    schema = {tool.name: tool for tool in client.list_tools()}["read_file"].parameters
    assert same(schema["required"], ["file_path"])
    assert isinstance(schema["properties"]["start_line"], dict)


@pytest.mark.parametrize(
    ("cls", "pb_enum", "prefix"),
    [
        (t.ErrorType, pb.ErrorType, "ERROR_TYPE_"),
        (t.Outcome, pb.ConfirmationOutcome, "CONFIRMATION_OUTCOME_"),
        (t.ApprovalMode, pb.ApprovalMode, "APPROVAL_MODE_"),
        (t.SandboxLevel, pb.SandboxLevel, "SANDBOX_LEVEL_"),
        (t.ToolKind, pb.ToolKind, "TOOL_KIND_"),
        (t.FinalState, pb.FinalState, "FINAL_STATE_"),
    ],
)
def test_every_proto_enum_value_has_a_python_member(cls, pb_enum, prefix):
    names = {n[len(prefix) :].lower() for n in pb_enum.keys()} - {"unspecified"}
    members = {m.value for m in cls} - {"unspecified"}
    assert names == members


def test_requests_carry_the_enums_by_name():
    req = conv.schedule_request("s", [{"id": "a", "name": "glob", "args": {"pattern": "*"}}], "yolo", False, t.SandboxLevel.READ_ONLY)
    assert req.approval_mode == pb.APPROVAL_MODE_YOLO
    assert req.sandbox_level == pb.SANDBOX_LEVEL_READ_ONLY
    assert req.HasField("interactive") and req.interactive is False
    assert from_struct(req.calls[0].args) == {"pattern": "*"}


def test_the_generated_code_matches_the_proto():
    script = Path(__file__).resolve().parents[1] / "tools" / "gen_proto.py"
    run = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_the_package_is_typed():
    assert (Path(toolsched.__file__).parent / "py.typed").is_file()


def test_the_package_type_checks(tmp_path):
    # mypy --strict over the package (settings in pyproject.toml).
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy")],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
