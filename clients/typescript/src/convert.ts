/**
 * Generated messages <-> the typed values of `types.ts`: the one place that
 * knows the wire shapes.
 */

import { create, type JsonObject } from "@bufbuild/protobuf";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import * as pb from "./gen/toolsched/v1/toolsched_pb.js";
import * as t from "./types.js";

type EnumObject = Record<string, string | number>;

/** The snake-case name of `value` in a generated enum. */
function nameOf<N extends string>(e: EnumObject, value: number): N {
  const name = e[value];
  return (typeof name === "string" ? name.toLowerCase() : "unspecified") as N;
}

/** The generated enum value of a snake-case name. */
function valueOf(e: EnumObject, name: string, what: string): number {
  const v = e[name.toUpperCase()];
  if (typeof v !== "number" || v === 0) {
    throw new TypeError(`unknown ${what} ${JSON.stringify(name)}`);
  }
  return v;
}

const time = (ts: Timestamp | undefined): Date => (ts ? timestampDate(ts) : new Date(0));

// === requests ===

export interface ScheduleOptions {
  /** Switch the session to this mode first. */
  approvalMode?: t.ApprovalMode;
  /** `false`: a call that would ask ends in `error` (policy_violation). */
  interactive?: boolean;
  /** Switch the session to this sandbox level first. */
  sandboxLevel?: t.SandboxLevel;
  /**
   * The session's workspace on a server with `--workspaces-root` (required
   * on the session's first batch there; fixed for the session's life).
   */
  workspace?: string;
  /** Aborting it drops the stream, which cancels the batch. */
  signal?: AbortSignal;
  /** Bounds the whole stream, in milliseconds. */
  timeoutMs?: number;
}

export function scheduleRequest(session: string, calls: Iterable<t.Call>, o: ScheduleOptions): pb.ScheduleCallsRequest {
  return create(pb.ScheduleCallsRequestSchema, {
    sessionId: session,
    calls: [...calls].map((c) =>
      create(pb.FunctionCallSchema, { id: c.id, name: c.name, args: c.args ?? {}, waitForPrevious: c.waitForPrevious ?? false }),
    ),
    approvalMode: o.approvalMode ? valueOf(pb.ApprovalMode, o.approvalMode, "approval mode") : 0,
    interactive: o.interactive,
    sandboxLevel: o.sandboxLevel ? valueOf(pb.SandboxLevel, o.sandboxLevel, "sandbox level") : 0,
    workspace: o.workspace ?? "",
  });
}

export function confirmRequest(prompt: t.AwaitingApproval, outcome: t.Outcome, newContent?: string): pb.ConfirmRequest {
  return create(pb.ConfirmRequestSchema, {
    sessionId: prompt.sessionId,
    callId: prompt.callId,
    correlationId: prompt.correlationId,
    outcome: valueOf(pb.ConfirmationOutcome, outcome, "outcome"),
    newContent,
  });
}

// === responses ===

export function functionResponse(r: pb.FunctionResponse | undefined): t.FunctionResponse {
  return { id: r?.id ?? "", name: r?.name ?? "", response: (r?.response ?? {}) as JsonObject };
}

function details(a: pb.AwaitingApproval): t.PromptDetails | undefined {
  const d = a.details;
  switch (d.case) {
    case "edit":
      return { kind: "edit", filePath: d.value.filePath, diff: d.value.diff, isNewFile: d.value.isNewFile, newContent: d.value.newContent };
    case "exec":
      return { kind: "exec", command: d.value.command, rootCommands: [...d.value.rootCommands], dirPath: d.value.dirPath, writeTargets: [...d.value.writeTargets] };
    case "mcp":
      return { kind: "mcp", serverName: d.value.serverName, toolName: d.value.toolName, args: d.value.args ?? {}, description: d.value.description };
    case "info":
      return { kind: "info", prompt: d.value.prompt };
    default:
      return undefined;
  }
}

function callEvent(sequence: number, at: Date, u: pb.ToolCallUpdate, session: string): t.CallEvent {
  const base = { sequence, time: at, callId: u.callId, toolName: u.toolName };
  const s = u.state;
  switch (s.case) {
    case "validating":
      return { ...base, type: "validating", args: s.value.args ?? {} };
    case "scheduled":
      return { ...base, type: "scheduled" };
    case "awaitingApproval": {
      const a = s.value;
      const outcomes = a.outcomes.map((o) => nameOf<t.Outcome | "unspecified">(pb.ConfirmationOutcome, o));
      return {
        ...base,
        type: "awaiting_approval",
        sessionId: session,
        correlationId: a.correlationId,
        details: details(a),
        outcomes: outcomes.filter((o): o is t.Outcome => o !== "unspecified"),
        deadline: a.deadline ? timestampDate(a.deadline) : undefined,
        reason: a.reason,
        policyRule: a.policyRule ? { file: a.policyRule.file, line: a.policyRule.line, rule: a.policyRule.rule, segment: a.policyRule.segment } : undefined,
      };
    }
    case "executing": {
      const x = s.value;
      return { ...base, type: "executing", pid: x.pid, outputChunk: x.outputChunk, progress: x.progress, total: x.total, percent: x.percent, message: x.message };
    }
    case "success": {
      const x = s.value;
      return {
        ...base,
        type: "success",
        response: functionResponse(x.response),
        result: x.result ?? {},
        durationMs: Number(x.durationMs),
        exitCode: x.exitCode,
      };
    }
    case "error":
      return {
        ...base,
        type: "error",
        errorType: nameOf<t.ErrorType | "unspecified">(pb.ErrorType, s.value.type),
        message: s.value.message,
        response: functionResponse(s.value.response),
      };
    case "cancelled":
      return { ...base, type: "cancelled", reason: s.value.reason, response: functionResponse(s.value.response) };
    default:
      throw new t.ToolschedError("UNIMPLEMENTED", `call update of ${JSON.stringify(u.callId)} has no state this client knows`);
  }
}

function completed(sequence: number, at: Date, c: pb.BatchCompleted): t.BatchCompleted {
  if (c.calls.length !== c.responses.length) {
    throw new t.ToolschedError(
      "UNIMPLEMENTED",
      `BatchCompleted has ${c.responses.length} responses but ${c.calls.length} call states; the server predates BatchCompleted.calls`,
    );
  }
  const calls = c.calls.map((call, i): t.CompletedCall => {
    const state = nameOf<t.FinalState | "unspecified">(pb.FinalState, call.state);
    if (state === "unspecified") {
      throw new t.ToolschedError("UNIMPLEMENTED", `call ${JSON.stringify(call.callId)} ended in an unknown state ${call.state}`);
    }
    return {
      callId: call.callId,
      toolName: call.toolName,
      state,
      errorType: state === "error" ? nameOf<t.ErrorType | "unspecified">(pb.ErrorType, call.errorType) : undefined,
      message: call.message,
      durationMs: Number(call.durationMs),
      exitCode: call.exitCode,
      response: functionResponse(c.responses[i]),
    };
  });
  return { type: "batch_completed", sequence, time: at, batchId: c.batchId, calls, responses: calls.map((x) => x.response) };
}

/** One stream message as a typed event. */
export function event(msg: pb.ScheduleCallsResponse, session: string): t.Event {
  const sequence = Number(msg.sequence);
  const at = time(msg.time);
  const e = msg.event;
  switch (e.case) {
    case "callUpdate":
      return callEvent(sequence, at, e.value, session);
    case "batchAccepted":
      return { type: "batch_accepted", sequence, time: at, batchId: e.value.batchId, queued: e.value.queued, batchesAhead: e.value.batchesAhead };
    case "batchStarted":
      return { type: "batch_started", sequence, time: at, batchId: e.value.batchId };
    case "batchCompleted":
      return completed(sequence, at, e.value);
    default:
      throw new t.ToolschedError("UNIMPLEMENTED", `stream message ${sequence} has no event this client knows`);
  }
}

export function tool(d: pb.FunctionDeclaration): t.Tool {
  return {
    name: d.name,
    description: d.description,
    parameters: d.parameters ?? {},
    kind: nameOf<t.ToolKind>(pb.ToolKind, d.kind),
    parallelizable: d.parallelizable,
    readOnly: d.readOnly,
  };
}

/** Any error of an RPC as a ToolschedError with the gRPC status name. */
export function rpcError(e: unknown): t.ToolschedError {
  if (e instanceof t.ToolschedError) return e;
  const ce = ConnectError.from(e);
  // Code.InvalidArgument -> "INVALID_ARGUMENT"
  const code = (Code[ce.code] ?? "Unknown").replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
  return new t.ToolschedError(code === "CANCELED" ? "CANCELLED" : code, ce.rawMessage, { cause: e });
}
