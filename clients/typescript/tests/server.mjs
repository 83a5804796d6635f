// A real toolsched server for the tests: the binary named by TOOLSCHED_BIN
// (tests/clients.rs passes the one Cargo built), on a free loopback port, in a
// fresh temporary workspace. Readiness is the server's own "toolsched
// serving" log line, which names the bound address.
import { spawn } from "node:child_process";
import { accessSync, constants, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

export const REPO = resolve(fileURLToPath(import.meta.url), "../../../..");
const READY_TIMEOUT_MS = 60_000; // a bound on start-up, not a wait

export function serverBinary() {
  const path = process.env.TOOLSCHED_BIN ?? join(process.env.CARGO_TARGET_DIR ?? join(REPO, "target"), "debug", "toolsched");
  try {
    accessSync(path, constants.X_OK);
  } catch {
    throw new Error(`no toolsched binary at ${path}: run \`cargo build\` or set TOOLSCHED_BIN (cargo test --test clients does both)`);
  }
  return path;
}

export async function startServer(...extra) {
  const workspace = mkdtempSync(join(tmpdir(), "toolsched-ts-"));
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("TOOLSCHED_")));
  const child = spawn(serverBinary(), ["--listen", "127.0.0.1:0", "--workspace", workspace, "--log-format", "json", ...extra], {
    stdio: ["ignore", "ignore", "pipe"],
    env: { ...env, RUST_LOG: "info,rmcp=warn" },
  });
  const log = [];
  const lines = createInterface({ input: child.stderr });
  const address = await new Promise((ok, fail) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      fail(new Error(`toolsched did not report serving within ${READY_TIMEOUT_MS} ms:\n${log.join("\n")}`));
    }, READY_TIMEOUT_MS);
    child.on("exit", (code) => {
      clearTimeout(timer);
      fail(new Error(`toolsched exited with ${code} before serving:\n${log.join("\n")}`));
    });
    lines.on("line", (line) => {
      log.push(line);
      try {
        const fields = JSON.parse(line); // --log-format json: fields at the top level
        if (fields.message === "toolsched serving") {
          clearTimeout(timer);
          ok(fields.listen);
        }
      } catch {
        // not a JSON log line
      }
    });
  });
  return {
    address,
    workspace,
    path: (rel) => join(workspace, rel),
    log,
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((ok) => child.once("exit", ok));
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
      await exited;
      clearTimeout(timer);
    },
  };
}
