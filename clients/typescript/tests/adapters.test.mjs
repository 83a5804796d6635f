// Provider adapters against the fixtures written from each provider's
// documented shapes (shared with the Python client's tests), then on the
// real server's tools and a real batch.
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { adapters, ToolschedClient } from "../dist/index.js";
import { REPO, startServer } from "./server.mjs";

const { declarations, functionCalls, responses, PROVIDERS } = adapters;
const fixture = (p) => JSON.parse(readFileSync(join(REPO, "clients", "fixtures", "providers", `${p}.json`), "utf8"));

const READ_FILE = {
  name: "read_file",
  description: "Reads a file.",
  parameters: {
    type: "object",
    properties: { file_path: { type: "string" }, start_line: { type: "integer", minimum: 1 } },
    required: ["file_path"],
  },
  kind: "read",
  parallelizable: true,
  readOnly: true,
};

const completed = (callId, name, state, response, errorType, message = "") => ({
  callId,
  toolName: name,
  state,
  errorType,
  message,
  durationMs: 0,
  exitCode: undefined,
  response: { id: callId, name, response },
});

const BATCH = [
  completed("call_1", "read_file", "success", { output: "hello\n" }),
  completed("call_2", "grep_search", "error", { error: "Search path not found: src" }, "search_path_not_found", "Search path not found: src"),
  completed("call_3", "run_shell_command", "cancelled", { error: "[Operation Cancelled] user pressed Esc", output: "partial\n" }, undefined, "user pressed Esc"),
  completed("call_4", "glob", "success", { output: { files: ["a.py", "b.py"], count: 2 } }),
];

for (const provider of PROVIDERS) {
  test(`${provider}: declarations match the documented shape`, () => {
    assert.deepEqual(declarations([READ_FILE], provider), fixture(provider).declarations);
  });
  test(`${provider}: function calls are read from the documented response`, () => {
    const f = fixture(provider);
    assert.deepEqual(
      functionCalls(f.model_output, provider).map(({ id, name, args }) => ({ id, name, args })),
      f.function_calls,
    );
  });
  test(`${provider}: responses match the documented shape`, () => {
    assert.deepEqual(responses(BATCH, provider), fixture(provider).responses);
  });
}

test("unknown providers and arguments that are not JSON are refused", () => {
  assert.throws(() => declarations([READ_FILE], "palm"), TypeError);
  const bad = { choices: [{ message: { tool_calls: [{ id: "c", type: "function", function: { name: "glob", arguments: "{oops" } }] } }] };
  assert.throws(() => functionCalls(bad, "openai_chat"), /tool call "c": arguments are not JSON/);
});

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

test("the real server's tools and a real batch", async () => {
  const tools = await client.listTools();
  const names = tools.map((t) => t.name);
  assert.deepEqual(declarations(tools, "gemini")[0].functionDeclarations.map((d) => d.name), names);
  assert.deepEqual(declarations(tools, "openai_chat").map((d) => d.function.name), names);
  assert.ok(declarations(tools, "openai_responses").every((d) => d.type === "function" && d.strict === false));
  assert.ok(declarations(tools, "anthropic").every((d) => d.input_schema.type === "object"));
  writeFileSync(server.path("adapters.txt"), "adapted\n");
  const done = await client.run("ts-adapters", [
    { id: "ok", name: "read_file", args: { file_path: "adapters.txt" } },
    { id: "bad", name: "read_file", args: { file_path: "nope.txt" } },
  ]);
  const blocks = responses(done, "anthropic");
  assert.deepEqual(blocks.map((b) => [b.tool_use_id, b.is_error]), [["ok", false], ["bad", true]]);
  assert.equal(blocks[0].content, "adapted\n");
  assert.match(blocks[1].content, /^File not found: nope.txt/);
  assert.deepEqual(responses(done, "gemini")[0], { functionResponse: { id: "ok", name: "read_file", response: { output: "adapted\n" } } });
  assert.deepEqual(responses(done, "openai_chat")[0], { role: "tool", tool_call_id: "ok", content: "adapted\n" });
  assert.deepEqual(responses(done, "openai_responses")[0], { type: "function_call_output", call_id: "ok", output: "adapted\n" });
});
