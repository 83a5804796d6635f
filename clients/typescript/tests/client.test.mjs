// The client against the real server: typed events, prompts answered with
// approve/reject/modify, cancel of a running command (cancel() and an
// AbortSignal), errors and the bearer token.
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { Answer, ToolschedClient, ToolschedError } from "../dist/index.js";
import { startServer } from "./server.mjs";

let server;
let client;
before(async () => {
  server = await startServer();
  client = new ToolschedClient(server.address);
});
after(async () => {
  client?.close();
  await server?.stop();
});

const types = (events) => events.map((e) => e.type);

async function untilPrompt(batch) {
  const seen = [];
  for await (const ev of batch) {
    seen.push(ev);
    if (ev.type === "awaiting_approval") return { seen, prompt: ev };
  }
  assert.fail(`no prompt in ${JSON.stringify(seen)}`);
}

test("a read yields each typed event in order", async () => {
  writeFileSync(server.path("hello.txt"), "hello\n");
  const batch = client.schedule("ts-read", [{ id: "r", name: "read_file", args: { file_path: "hello.txt" } }]);
  const events = [];
  for await (const ev of batch) events.push(ev);
  assert.deepEqual(types(events), [
    "batch_accepted",
    "batch_started",
    "validating",
    "scheduled",
    "executing",
    "success",
    "batch_completed",
  ]);
  assert.deepEqual(events.map((e) => e.sequence), [1, 2, 3, 4, 5, 6, 7]);
  const [accepted, started, validating, , executing, success, done] = events;
  assert.equal(accepted.queued, false);
  assert.equal(started.batchId, accepted.batchId);
  assert.equal(batch.batchId, accepted.batchId);
  assert.deepEqual(validating.args, { file_path: "hello.txt" });
  assert.equal(executing.pid, undefined);
  assert.equal(success.response.response.output, "hello\n");
  assert.equal(success.exitCode, undefined);
  assert.equal(success.result.total_lines, 1);
  assert.ok(success.time instanceof Date);
  assert.equal(done, batch.completed);
  assert.deepEqual(done.calls, [
    {
      callId: "r",
      toolName: "read_file",
      state: "success",
      errorType: undefined,
      message: "",
      durationMs: success.durationMs,
      exitCode: undefined,
      response: success.response,
    },
  ]);
  assert.deepEqual(done.responses, [success.response]);
});

test("a prompt approved runs the write", async () => {
  const batch = client.schedule("ts-approve", [{ id: "w", name: "write_file", args: { file_path: "approved.txt", content: "yes\n" } }]);
  const { seen, prompt } = await untilPrompt(batch);
  assert.deepEqual(types(seen), ["batch_accepted", "batch_started", "validating", "awaiting_approval"]);
  assert.equal(prompt.sessionId, "ts-approve");
  assert.equal(prompt.details.kind, "edit");
  assert.equal(prompt.details.filePath, "approved.txt");
  assert.equal(prompt.details.isNewFile, true);
  assert.match(prompt.details.diff, /\+yes/);
  assert.deepEqual(prompt.outcomes, ["proceed_once", "proceed_always", "modify_with_editor", "cancel"]);
  assert.ok(prompt.deadline instanceof Date);
  assert.equal(prompt.policyRule.file, "<built-in>");
  assert.equal(existsSync(server.path("approved.txt")), false);
  await client.approve(prompt);
  const rest = [];
  for await (const ev of batch) rest.push(ev);
  assert.deepEqual(types(rest), ["scheduled", "executing", "success", "batch_completed"]);
  assert.equal(readFileSync(server.path("approved.txt"), "utf8"), "yes\n");
});

test("a rejected prompt cancels the call and the ones queued behind it", async () => {
  const batch = client.schedule("ts-reject", [
    { id: "w", name: "write_file", args: { file_path: "rejected.txt", content: "no\n" } },
    { id: "w2", name: "write_file", args: { file_path: "rejected2.txt", content: "no\n" } },
  ]);
  const { prompt } = await untilPrompt(batch);
  await client.reject(prompt);
  const done = await batch.result();
  assert.deepEqual(done.calls.map((c) => [c.callId, c.state]), [["w", "cancelled"], ["w2", "cancelled"]]);
  assert.equal(done.calls[0].message, "User denied execution.");
  assert.equal(done.calls[0].response.response.error, "[Operation Cancelled] User denied execution.");
  assert.equal(existsSync(server.path("rejected.txt")), false);
  await assert.rejects(client.approve(prompt), (e) => e instanceof ToolschedError && e.code === "FAILED_PRECONDITION");
});

test("modify runs the edit with the new content", async () => {
  const done = await client.run("ts-modify", [{ id: "w", name: "write_file", args: { file_path: "modified.txt", content: "proposed\n" } }], {
    onPrompt: () => Answer.modify("edited by the person\n"),
  });
  assert.equal(done.calls[0].state, "success");
  assert.equal(readFileSync(server.path("modified.txt"), "utf8"), "edited by the person\n");
});

async function untilRunning(batch) {
  for await (const ev of batch) {
    assert.notEqual(ev.type, "awaiting_approval");
    if (ev.type === "executing" && ev.pid !== undefined) return ev.pid;
  }
  assert.fail("the command never ran");
}

const gone = (pid) => {
  try {
    process.kill(pid, 0);
    return false;
  } catch (e) {
    return e.code === "ESRCH";
  }
};

test("cancel stops a running command", async () => {
  const batch = client.schedule("ts-cancel", [{ id: "x", name: "run_shell_command", args: { command: "sleep 60" } }], { approvalMode: "yolo" });
  const pid = await untilRunning(batch);
  assert.deepEqual(await client.cancel("ts-cancel", batch.batchId, "user pressed Esc"), { cancelledCalls: 1, cancelledBatches: 1 });
  const rest = [];
  for await (const ev of batch) rest.push(ev);
  assert.deepEqual(types(rest).slice(-2), ["cancelled", "batch_completed"]);
  assert.equal(rest.at(-2).reason, "user pressed Esc");
  const call = batch.completed.calls[0];
  assert.deepEqual([call.state, call.message, call.exitCode], ["cancelled", "user pressed Esc", undefined]);
  assert.ok(gone(pid), `process ${pid} still runs`);
});

test("aborting the signal drops the stream and cancels the batch", async () => {
  const controller = new AbortController();
  const batch = client.schedule("ts-abort", [{ id: "x", name: "run_shell_command", args: { command: "sleep 60" } }], {
    approvalMode: "yolo",
    signal: controller.signal,
  });
  const pid = await untilRunning(batch);
  controller.abort();
  await assert.rejects(batch.next(), (e) => e instanceof ToolschedError && e.code === "CANCELLED");
  // The session's next batch starts only once the first has ended.
  const done = await client.run("ts-abort", [{ id: "g", name: "glob", args: { pattern: "*.txt" } }]);
  assert.equal(done.calls[0].state, "success");
  assert.ok(gone(pid), `process ${pid} still runs`);
});

test("the shell exit code is a number", async () => {
  const prompts = [];
  const done = await client.run("ts-exit", [{ id: "x", name: "run_shell_command", args: { command: "echo out > out.txt; exit 3" } }], {
    onPrompt: (p) => {
      prompts.push(p);
      return Answer.approve();
    },
  });
  assert.equal(prompts.length, 1);
  assert.deepEqual(prompts[0].details, {
    kind: "exec",
    command: "echo out > out.txt; exit 3",
    rootCommands: ["echo", "exit"],
    dirPath: ".",
    writeTargets: ["out.txt"],
  });
  assert.equal(done.calls[0].exitCode, 3);
  assert.match(done.calls[0].response.response.output, /Exit Code: 3/);
});

test("integers and nested lists round-trip exactly", async () => {
  writeFileSync(server.path("lines.txt"), "a\nb\nc\nd\n");
  const args = { file_path: "lines.txt", start_line: 2, end_line: 3 };
  const batch = client.schedule("ts-ints", [{ id: "r", name: "read_file", args }]);
  const events = [];
  for await (const ev of batch) events.push(ev);
  assert.deepEqual(events.find((e) => e.type === "validating").args, args);
  const schema = (await client.listTools()).find((t) => t.name === "read_file").parameters;
  assert.deepEqual(schema.required, ["file_path"]);
});

test("run without a prompt callback is non-interactive", async () => {
  const done = await client.run("ts-nonint", [{ id: "w", name: "write_file", args: { file_path: "never.txt", content: "x" } }]);
  assert.equal(done.calls[0].state, "error");
  assert.equal(done.calls[0].errorType, "policy_violation");
});

test("bad requests reject with the status code", async () => {
  await assert.rejects(
    client.schedule("", [{ id: "a", name: "read_file", args: { file_path: "x" } }]).result(),
    (e) => e instanceof ToolschedError && e.code === "INVALID_ARGUMENT" && /session_id/.test(e.detail),
  );
  await assert.rejects(client.cancel("ts-no-such-session"), (e) => e instanceof ToolschedError && e.code === "NOT_FOUND");
});

test("listTools gives typed declarations", async () => {
  const tools = Object.fromEntries((await client.listTools()).map((t) => [t.name, t]));
  for (const name of ["read_file", "write_file", "replace", "grep_search", "run_shell_command"]) assert.ok(tools[name], name);
  assert.equal(tools.read_file.kind, "read");
  assert.equal(tools.read_file.readOnly, true);
  assert.equal(tools.run_shell_command.kind, "execute");
});

test("a token is sent as a bearer header", async () => {
  const srv = await startServer("--auth-token", "s3cret");
  const good = new ToolschedClient(srv.address, { token: "s3cret" });
  const anonymous = new ToolschedClient(srv.address);
  try {
    assert.ok((await good.listTools()).length > 0);
    await assert.rejects(anonymous.listTools(), (e) => e instanceof ToolschedError && e.code === "UNAUTHENTICATED");
  } finally {
    good.close();
    anonymous.close();
    await srv.stop();
  }
});

test("a named workspace is sent and used", async () => {
  const root = mkdtempSync(join(tmpdir(), "toolsched-ts-root-"));
  const srv = await startServer("--workspaces-root", root, "--create-workspaces");
  const c = new ToolschedClient(srv.address);
  try {
    const done = await c.run("ts-ws", [{ id: "w", name: "write_file", args: { file_path: "f.txt", content: "hi\n" } }], {
      approvalMode: "yolo",
      workspace: "main",
    });
    assert.equal(done.calls[0].state, "success");
    // No token: tenant "default".
    assert.equal(readFileSync(join(root, "default", "main", "f.txt"), "utf8"), "hi\n");
    await assert.rejects(
      c.run("ts-ws", [{ id: "r", name: "read_file", args: { file_path: "f.txt" } }], { workspace: "other" }),
      (e) => e instanceof ToolschedError && e.code === "FAILED_PRECONDITION" && /'main'/.test(e.detail),
    );
  } finally {
    c.close();
    await srv.stop();
  }
});
