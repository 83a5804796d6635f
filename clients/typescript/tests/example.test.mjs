// examples/typescript/agent.mts end to end against the real server: the
// recorded conversation in each provider's format (reads, a grep, an approved
// replace, a shell command, a rejected write). `npm test` compiles it first.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { adapters } from "../dist/index.js";
import { startServer } from "./server.mjs";

const AGENT = resolve(fileURLToPath(import.meta.url), "../../build/example/examples/typescript/agent.mjs");
const IDS = {
  gemini: [1, 2, 3, 4, 5, 6].map((i) => `gem-${i}`),
  openai_chat: [1, 2, 3, 4, 5, 6].map((i) => `call_0${i}`),
  openai_responses: [1, 2, 3, 4, 5, 6].map((i) => `call_0${i}`),
  anthropic: [1, 2, 3, 4, 5, 6].map((i) => `toolu_0${i}`),
};

for (const provider of adapters.PROVIDERS) {
  test(`${provider}: the recorded conversation runs end to end`, async () => {
    assert.ok(existsSync(AGENT), `${AGENT} is missing: run npm test (it compiles the example)`);
    const server = await startServer();
    let stdout;
    try {
      ({ stdout } = await promisify(execFile)(process.execPath, [
        AGENT,
        "--address", server.address,
        "--provider", provider,
        "--approve", "replace,run_shell_command",
        "--prepare-workspace", server.workspace,
      ]));
    } finally {
      await server.stop();
    }
    const lines = stdout.split("\n").filter((l) => l);
    const [r1, r2, grep, rep, sh, write] = IDS[provider];
    const states = lines
      .map((l) => l.match(/^ {2}\[(\S+)\] \S+: (scheduled|executing|awaiting approval|success|error|cancelled)/))
      .filter((m) => m)
      .map((m) => [m[1], m[2]]);
    assert.deepEqual(states, [
      [r1, "scheduled"], [r2, "scheduled"], [r1, "executing"], [r2, "executing"], [r1, "success"], [r2, "success"],
      [grep, "scheduled"], [grep, "executing"], [grep, "success"],
      [rep, "awaiting approval"], [rep, "scheduled"], [rep, "executing"], [rep, "success"],
      [sh, "scheduled"], [sh, "executing"], [sh, "success"],
      [write, "awaiting approval"], [write, "cancelled"],
    ]);
    assert.ok(lines.includes(`  [${rep}] policy: approve`));
    assert.ok(lines.includes(`  [${write}] policy: reject`));
    assert.ok(lines.includes(`  [${write}] write_file: cancelled (User denied execution.)`));
    assert.ok(lines.includes(`  [${sh}]   | 2:    return f"hello, {name}!"`));
    assert.ok(lines.includes("agent: completed (finish reason STOP) after 6 turns"));
    assert.match(lines.at(-1), /^final answer: The typo is fixed/);
    assert.match(readFileSync(join(server.workspace, "src", "app.py"), "utf8"), /return f"hello, \{name\}!"/);
    assert.equal(existsSync(join(server.workspace, "NOTES.md")), false);
  });
}
