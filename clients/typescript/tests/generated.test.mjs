// The committed generated code (src/gen) matches a fresh generation from the
// proto with the locked protoc-gen-es.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const PKG = resolve(fileURLToPath(import.meta.url), "../..");

test("src/gen matches the proto", () => {
  const out = mkdtempSync(join(tmpdir(), "toolsched-gen-"));
  const template = join(out, "buf.gen.yaml");
  writeFileSync(template, readFileSync(join(PKG, "buf.gen.yaml"), "utf8").replace("out: src/gen", `out: ${join(out, "gen")}`));
  execFileSync(join(PKG, "node_modules", ".bin", "buf"), ["generate", join(PKG, "..", "..", "proto"), "--template", template], {
    cwd: PKG,
    env: { ...process.env, PATH: `${join(PKG, "node_modules", ".bin")}:${process.env.PATH}` },
  });
  const rel = join("toolsched", "v1", "toolsched_pb.ts");
  assert.equal(
    readFileSync(join(PKG, "src", "gen", rel), "utf8"),
    readFileSync(join(out, "gen", rel), "utf8"),
    "src/gen is stale: run `npm run generate`",
  );
});
