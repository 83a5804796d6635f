/**
 * An agent loop on toolsched (TypeScript): the model decides, toolsched runs
 * the tools. The same loop as examples/python/agent.py, after Gemini CLI's
 * Turn / Scheduler split: ask the model -> collect its function calls ->
 * ScheduleCalls -> render states, answer prompts (terminal or policy) -> send
 * the function responses back -> ask again; stop only on a turn with a
 * finish reason and no function calls, mapping it as the reference does
 * (STOP -> completed, MAX_TOKENS -> max_budget, SAFETY / RECITATION ->
 * refusal, MALFORMED_FUNCTION_CALL / OTHER -> failed).
 *
 *   npm run example -- --provider anthropic --approve replace,run_shell_command
 */

import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline/promises";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import {
  adapters,
  Answer,
  DEFAULT_ADDRESS,
  ToolschedClient,
  type AwaitingApproval,
  type BatchCompleted,
  type Call,
  type Event,
  type Provider,
} from "@toolsched/client";

/** examples/recordings, found upwards from this file (it runs from a build directory). */
function recordings(): string {
  for (let dir = dirname(fileURLToPath(import.meta.url)); dir !== dirname(dir); dir = dirname(dir)) {
    const candidate = join(dir, "examples", "recordings");
    if (existsSync(candidate)) return candidate;
  }
  throw new Error("examples/recordings not found above this script; pass --recording");
}
/** A loop that never finishes ends as failed after this many model turns. */
const MAX_TURNS = 20;

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

// === the model seam ===

/**
 * A model API: given the conversation so far (the provider's own message
 * list) and the tools (from `adapters.declarations`), returns the provider's
 * response as JSON data.
 */
export interface Model {
  readonly provider: Provider;
  generate(history: Json[], tools: Json[]): Promise<Json>;
}

/**
 * Replays the responses a real model gave in a recorded conversation; checks
 * that every call of its previous turn was answered, by id, as a real model
 * API would.
 */
export class ScriptedModel implements Model {
  readonly provider: Provider;
  readonly task: string;
  readonly #turns: Json[];
  #next = 0;
  #expected: string[] = [];

  constructor(recording: string) {
    const data = JSON.parse(readFileSync(recording, "utf8"));
    this.provider = data.provider;
    this.task = data.user;
    this.#turns = data.turns;
  }

  async generate(history: Json[], tools: Json[]): Promise<Json> {
    if (tools.length === 0) throw new Error("the request declares no tools");
    const answered = answeredIds(this.provider, history);
    const missing = this.#expected.filter((id) => !answered.has(id));
    if (missing.length) throw new Error(`function calls without a response in the history: ${missing.join(", ")}`);
    if (this.#next === this.#turns.length) throw new Error("the loop asked for a turn after the recorded conversation ended");
    const response = this.#turns[this.#next++];
    this.#expected = adapters.functionCalls(response, this.provider).map((c) => c.id);
    return response;
  }
}

// === one provider's conversation shapes ===

const OPENAI_CHAT_FINISH: Record<string, string> = { stop: "STOP", tool_calls: "STOP", function_call: "STOP", length: "MAX_TOKENS", content_filter: "SAFETY" };
const ANTHROPIC_STOP: Record<string, string> = {
  end_turn: "STOP",
  tool_use: "STOP",
  stop_sequence: "STOP",
  pause_turn: "STOP",
  max_tokens: "MAX_TOKENS",
  refusal: "SAFETY",
};
/** The reference's mapping of a finish reason (Gemini names) to how the agent ended. */
export const END_OF: Record<string, string> = {
  STOP: "completed",
  MAX_TOKENS: "max_budget",
  SAFETY: "refusal",
  RECITATION: "refusal",
  MALFORMED_FUNCTION_CALL: "failed",
  OTHER: "failed",
};

interface Turn {
  text: string;
  calls: Call[];
  /** As a Gemini FinishReason name; undefined when the response has none. */
  finishReason?: string;
}

class Conversation {
  readonly history: Json[] = [];
  constructor(readonly provider: Provider) {}

  user(text: string): void {
    this.history.push(this.provider === "gemini" ? { role: "user", parts: [{ text }] } : { role: "user", content: text });
  }

  /** Parses `response` and appends the model's message to the history. */
  turn(response: Json): Turn {
    const calls = adapters.functionCalls(response, this.provider);
    switch (this.provider) {
      case "gemini": {
        const candidate = response.candidates?.[0] ?? {};
        const content = candidate.content ?? { role: "model", parts: [] };
        this.history.push(content);
        return { text: content.parts.map((p: Json) => p.text ?? "").join(""), calls, finishReason: candidate.finishReason };
      }
      case "openai_chat": {
        const choice = response.choices[0];
        this.history.push(choice.message);
        const r = choice.finish_reason;
        return { text: choice.message.content ?? "", calls, finishReason: r ? (OPENAI_CHAT_FINISH[r] ?? "OTHER") : undefined };
      }
      case "openai_responses": {
        const output: Json[] = response.output ?? [];
        this.history.push(...output);
        const text = output.filter((i) => i.type === "message").flatMap((i) => i.content.map((c: Json) => c.text ?? "")).join("");
        const reason = response.incomplete_details?.reason;
        const finish: Record<string, string> = {
          completed: "STOP",
          incomplete: reason === "max_output_tokens" ? "MAX_TOKENS" : reason === "content_filter" ? "SAFETY" : "OTHER",
          failed: "OTHER",
        };
        return { text, calls, finishReason: finish[response.status] };
      }
      case "anthropic": {
        this.history.push({ role: "assistant", content: response.content });
        const text = response.content.filter((b: Json) => b.type === "text").map((b: Json) => b.text).join("");
        const r = response.stop_reason;
        return { text, calls, finishReason: r ? (ANTHROPIC_STOP[r] ?? "OTHER") : undefined };
      }
    }
  }

  /** Appends the function responses of a completed batch. */
  results(done: BatchCompleted): void {
    const out = adapters.responses(done, this.provider);
    if (this.provider === "gemini") this.history.push({ role: "user", parts: out });
    else if (this.provider === "anthropic") this.history.push({ role: "user", content: out });
    else this.history.push(...out);
  }
}

function answeredIds(provider: Provider, history: Json[]): Set<string> {
  const ids = new Set<string>();
  for (const entry of history) {
    if (provider === "gemini") for (const p of entry.parts ?? []) if (p.functionResponse) ids.add(p.functionResponse.id);
    if (provider === "openai_chat" && entry.role === "tool") ids.add(entry.tool_call_id);
    if (provider === "openai_responses" && entry.type === "function_call_output") ids.add(entry.call_id);
    if (provider === "anthropic" && Array.isArray(entry.content)) {
      for (const b of entry.content) if (b.type === "tool_result") ids.add(b.tool_use_id);
    }
  }
  return ids;
}

// === rendering and answering ===

type Out = (line: string) => void;

function render(out: Out): (ev: Event) => void {
  return (ev) => {
    switch (ev.type) {
      case "scheduled":
        return out(`  [${ev.callId}] ${ev.toolName}: scheduled`);
      case "executing":
        if (ev.outputChunk) for (const line of ev.outputChunk.split("\n").filter((l) => l)) out(`  [${ev.callId}]   | ${line}`);
        else if (ev.pid === undefined) out(`  [${ev.callId}] ${ev.toolName}: executing`);
        return;
      case "awaiting_approval":
        out(`  [${ev.callId}] ${ev.toolName}: awaiting approval (${ev.reason})`);
        if (ev.details?.kind === "edit") for (const line of ev.details.diff.split("\n").filter((l) => l)) out(`  [${ev.callId}]   ${line}`);
        if (ev.details?.kind === "exec") out(`  [${ev.callId}]   $ ${ev.details.command}`);
        return;
      case "success":
        return out(`  [${ev.callId}] ${ev.toolName}: success (${ev.durationMs} ms${ev.exitCode !== undefined ? `, exit code ${ev.exitCode}` : ""})`);
      case "error":
        return out(`  [${ev.callId}] ${ev.toolName}: error ${ev.errorType}: ${ev.message}`);
      case "cancelled":
        return out(`  [${ev.callId}] ${ev.toolName}: cancelled (${ev.reason})`);
    }
  };
}

/** Approves prompts of `approved` tools, rejects the rest. */
export function policy(approved: Set<string>, out: Out): (p: AwaitingApproval) => Answer {
  return (prompt) => {
    const ok = approved.has(prompt.toolName);
    out(`  [${prompt.callId}] policy: ${ok ? "approve" : "reject"}`);
    return ok ? Answer.approve() : Answer.reject();
  };
}

/** Asks the person at the terminal. */
async function askTerminal(prompt: AwaitingApproval): Promise<Answer> {
  const rl = createInterface({ input: process.stdin, output: process.stdout });
  try {
    for (;;) {
      const reply = (await rl.question(`  [${prompt.callId}] approve ${prompt.toolName}? [y]es once, [a]lways, [n]o: `)).trim().toLowerCase();
      if (reply === "y" || reply === "yes") return Answer.approve();
      if (reply === "a" || reply === "always") return Answer.approve({ always: true });
      if (reply === "n" || reply === "no") return Answer.reject();
    }
  } finally {
    rl.close();
  }
}

// === the loop ===

export interface AgentEnd {
  end: string;
  finishReason?: string;
  answer: string;
  turns: number;
}

export async function runAgent(
  model: Model,
  client: ToolschedClient,
  session: string,
  task: string,
  onPrompt: (p: AwaitingApproval) => Answer | Promise<Answer>,
  out: Out = console.log,
): Promise<AgentEnd> {
  const tools = adapters.declarations(await client.listTools(), model.provider);
  const convo = new Conversation(model.provider);
  convo.user(task);
  out(`user: ${task}`);
  for (let n = 1; n <= MAX_TURNS; n++) {
    let turn: Turn;
    try {
      turn = convo.turn(await model.generate(convo.history, tools));
    } catch (e) {
      if (!(e instanceof SyntaxError)) throw e; // tool arguments that are not JSON
      out(`agent: failed: ${e.message}`);
      return { end: "failed", finishReason: "MALFORMED_FUNCTION_CALL", answer: "", turns: n };
    }
    if (turn.text) out(`model: ${turn.text}`);
    if (turn.calls.length) {
      // Tool requests first: a finish reason on this turn does not end it.
      out("  " + turn.calls.map((c) => `[${c.id}] ${c.name}`).join(", "));
      convo.results(await client.run(session, turn.calls, { onPrompt, onEvent: render(out) }));
      continue;
    }
    if (turn.finishReason !== undefined) {
      const end = END_OF[turn.finishReason] ?? "failed";
      out(`agent: ${end} (finish reason ${turn.finishReason}) after ${n} turns`);
      return { end, finishReason: turn.finishReason, answer: turn.text, turns: n };
    }
    // Neither calls nor a finish reason: the response was cut short; ask again.
  }
  out(`agent: failed (no finish within ${MAX_TURNS} turns)`);
  return { end: "failed", answer: "", turns: MAX_TURNS };
}

// === the demo ===

const DEMO_FILES: Record<string, string> = {
  "README.md": "# greeter\n\nSays hello. `src/app.py` holds the greeting.\n",
  "src/app.py": 'def greet(name):\n    return f"helo, {name}!"\n\n\nif __name__ == "__main__":\n    print(greet("world"))\n',
};

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      address: { type: "string", default: DEFAULT_ADDRESS },
      token: { type: "string" },
      provider: { type: "string", default: "gemini" },
      recording: { type: "string" },
      session: { type: "string", default: "agent-example-ts" },
      approve: { type: "string" },
      "prepare-workspace": { type: "string" },
    },
  });
  const provider = values.provider as Provider;
  if (!adapters.PROVIDERS.includes(provider)) throw new Error(`--provider: one of ${adapters.PROVIDERS.join(", ")}`);
  const workspace = values["prepare-workspace"];
  if (workspace) {
    for (const [rel, text] of Object.entries(DEMO_FILES)) {
      mkdirSync(dirname(join(workspace, rel)), { recursive: true });
      writeFileSync(join(workspace, rel), text);
    }
  }
  const model = new ScriptedModel(values.recording ?? join(recordings(), `${provider}.json`));
  let onPrompt: (p: AwaitingApproval) => Answer | Promise<Answer>;
  if (values.approve !== undefined) onPrompt = policy(new Set(values.approve.split(",").filter((t) => t)), console.log);
  else if (process.stdin.isTTY) onPrompt = askTerminal;
  else throw new Error("stdin is not a terminal: pass --approve TOOLS to answer prompts by policy");
  const client = new ToolschedClient(values.address, { token: values.token });
  try {
    const end = await runAgent(model, client, values.session!, model.task, onPrompt);
    console.log(`final answer: ${end.answer}`);
    return end.end === "completed" ? 0 : 1;
  } finally {
    client.close();
  }
}

process.exitCode = await main();
