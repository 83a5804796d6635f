"""A real toolsched server for the tests: the binary named by TOOLSCHED_BIN
(the Rust test that runs this suite passes the one Cargo built), on a free
loopback port, in a temporary workspace. Readiness is the server's own
"toolsched serving" log line, which names the bound address."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import toolsched

REPO = Path(__file__).resolve().parents[3]
READY_TIMEOUT_S = 60  # a bound on start-up, not a wait: readiness is the log line


def server_binary() -> Path:
    """TOOLSCHED_BIN, or the debug build in CARGO_TARGET_DIR or ./target.
    Missing is a failure, never a skip."""
    named = os.environ.get("TOOLSCHED_BIN")
    candidates = [Path(named)] if named else [
        Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "debug" / "toolsched"
    ]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    pytest.fail(
        f"no toolsched binary at {', '.join(map(str, candidates))}: run `cargo build` "
        "or set TOOLSCHED_BIN (cargo test --test clients does both)",
        pytrace=False,
    )


@dataclass
class Server:
    address: str
    workspace: Path
    process: subprocess.Popen[str]
    log: list[str] = field(default_factory=list)

    def path(self, rel: str) -> Path:
        return self.workspace / rel

    def client(self) -> toolsched.Client:
        return toolsched.Client(self.address)


def start_server(workspace: Path, *extra: str) -> Server:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLSCHED_")}
    env["RUST_LOG"] = "info,rmcp=warn"
    proc = subprocess.Popen(
        [str(server_binary()), "--listen", "127.0.0.1:0", "--workspace", str(workspace), "--log-format", "json", *extra],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    log: list[str] = []

    def drain() -> None:
        # Keeps reading for the server's whole life: a full pipe would stall it.
        assert proc.stderr is not None
        for line in proc.stderr:
            log.append(line)
            lines.put(line)
        lines.put(None)

    threading.Thread(target=drain, daemon=True).start()
    while True:
        try:
            line = lines.get(timeout=READY_TIMEOUT_S)
        except queue.Empty:
            proc.kill()
            pytest.fail(f"toolsched did not report serving within {READY_TIMEOUT_S} s:\n{''.join(log)}", pytrace=False)
        if line is None:
            pytest.fail(f"toolsched exited with {proc.wait()} before serving:\n{''.join(log)}", pytrace=False)
        try:
            fields = json.loads(line)  # --log-format json: fields at the top level
        except json.JSONDecodeError:
            continue
        if fields.get("message") == "toolsched serving":
            return Server(fields["listen"], workspace, proc, log)


def stop_server(server: Server) -> None:
    server.process.send_signal(signal.SIGTERM)
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
        raise AssertionError("toolsched did not stop within 30 s of SIGTERM")


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("workspace"))
    yield srv
    stop_server(srv)


@pytest.fixture()
def client(server: Server) -> Iterator[toolsched.Client]:
    with server.client() as c:
        yield c


@pytest.fixture()
def session(request: pytest.FixtureRequest) -> str:
    """A session id of the test's own, so tests never share a queue."""
    return request.node.name
