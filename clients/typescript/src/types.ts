/**
 * Typed events and values of the toolsched API.
 *
 * Every message of a `ScheduleCalls` stream becomes one object whose `type`
 * tells it apart (`"batch_accepted"`, `"validating"`, …, `"batch_completed"`);
 * `switch (event.type)` narrows it to that state's own data, as the server's
 * state machine carries it. Enumerations are their stable snake-case names
 * (`"file_not_found"`), derived from the generated enums so they cannot
 * drift from the proto.
 */

import type { JsonObject } from "@bufbuild/protobuf";
import type * as pb from "./gen/toolsched/v1/toolsched_pb.js";

type Names<E> = Lowercase<Extract<keyof E, string>>;
type Known<E> = Exclude<Names<E>, "unspecified">;

/** Stable error types of a failed call. */
export type ErrorType = Known<typeof pb.ErrorType>;
/** An answer to an approval prompt. */
export type Outcome = Known<typeof pb.ConfirmationOutcome>;
/** How much runs without asking a person. */
export type ApprovalMode = Known<typeof pb.ApprovalMode>;
/** What commands may do. */
export type SandboxLevel = Known<typeof pb.SandboxLevel>;
/** What a tool does, by Gemini CLI's kinds. */
export type ToolKind = Names<typeof pb.ToolKind>;
/** The terminal state a call ended in. */
export type FinalState = Known<typeof pb.FinalState>;

export type { JsonObject, JsonValue } from "@bufbuild/protobuf";

/** One function call as the model returned it (`id` unique in the batch). */
export interface Call {
  id: string;
  name: string;
  args?: JsonObject;
  /** Never join a parallel wave: wait for every earlier call. */
  waitForPrevious?: boolean;
}

/**
 * A function response in Gemini's shape: `response` is `{output}` on
 * success, `{error}` on error, `{error: "[Operation Cancelled] …"}` (with
 * `output` when there was partial output) when cancelled.
 */
export interface FunctionResponse {
  id: string;
  name: string;
  response: JsonObject;
}

/** A function declaration from `listTools`. */
export interface Tool {
  name: string;
  description: string;
  /** JSON Schema of the arguments (an object schema). */
  parameters: JsonObject;
  kind: ToolKind;
  parallelizable: boolean;
  readOnly: boolean;
}

/** What a `cancel` did. */
export interface CancelResult {
  cancelledCalls: number;
  cancelledBatches: number;
}

interface EventBase {
  /** 1, 2, 3, … within the stream. */
  sequence: number;
  /** When it happened on the server. */
  time: Date;
}

/** First event of every stream. */
export interface BatchAccepted extends EventBase {
  type: "batch_accepted";
  batchId: string;
  /** Another batch of the session runs or waits; this one starts later. */
  queued: boolean;
  batchesAhead: number;
}

/** The batch left the session queue; its calls start. */
export interface BatchStarted extends EventBase {
  type: "batch_started";
  batchId: string;
}

interface CallBase extends EventBase {
  callId: string;
  toolName: string;
}

/** Arguments passed the schema check; the policy decides. */
export interface Validating extends CallBase {
  type: "validating";
  args: JsonObject;
}

/** Approved; waits for its wave to execute. */
export interface Scheduled extends CallBase {
  type: "scheduled";
}

/** What a prompt asks about. */
export type PromptDetails =
  | { kind: "edit"; filePath: string; diff: string; isNewFile: boolean; newContent: string }
  | { kind: "exec"; command: string; rootCommands: string[]; dirPath: string; writeTargets: string[] }
  | { kind: "mcp"; serverName: string; toolName: string; args: JsonObject; description: string }
  | { kind: "info"; prompt: string };

/** The policy rule that asked. */
export interface PolicyRule {
  file: string;
  line: number;
  rule: string;
  segment: string;
}

/**
 * Waits for an answer: pass it to `approve`, `reject` or `modify`. It knows
 * its session, call and correlation id.
 */
export interface AwaitingApproval extends CallBase {
  type: "awaiting_approval";
  sessionId: string;
  correlationId: string;
  details?: PromptDetails;
  /** The answers the server accepts for this prompt. */
  outcomes: Outcome[];
  deadline?: Date;
  reason: string;
  policyRule?: PolicyRule;
}

/** Running; sent on entry and for every progress update. */
export interface Executing extends CallBase {
  type: "executing";
  pid?: number;
  outputChunk: string;
  progress?: number;
  total?: number;
  percent?: number;
  message: string;
}

/** Terminal: the tool ran (a non-zero exit is a success with its `exitCode`). */
export interface Success extends CallBase {
  type: "success";
  response: FunctionResponse;
  /** Tool-specific structured result. */
  result: JsonObject;
  durationMs: number;
  /** `run_shell_command`'s exit code; absent for other tools or a signal. */
  exitCode?: number;
}

/** Terminal: the call failed. */
export interface CallError extends CallBase {
  type: "error";
  errorType: ErrorType | "unspecified";
  message: string;
  response: FunctionResponse;
}

/** Terminal: cancelled (cancel, a rejection, a timeout, shutdown, …). */
export interface Cancelled extends CallBase {
  type: "cancelled";
  reason: string;
  response: FunctionResponse;
}

/** One call of a completed batch: its final state and function response. */
export interface CompletedCall {
  callId: string;
  toolName: string;
  state: FinalState;
  /** Set when `state` is `"error"`. */
  errorType?: ErrorType | "unspecified";
  /** The error message or the cancellation reason; empty on success. */
  message: string;
  /** Execution wall time; 0 when the call never started executing. */
  durationMs: number;
  exitCode?: number;
  response: FunctionResponse;
}

/** Last event of every stream: every call, in request order. */
export interface BatchCompleted extends EventBase {
  type: "batch_completed";
  batchId: string;
  calls: CompletedCall[];
  /** The function responses in request order. */
  responses: FunctionResponse[];
}

/** A state event of one call. */
export type CallEvent = Validating | Scheduled | AwaitingApproval | Executing | Success | CallError | Cancelled;

/** Any event of a `ScheduleCalls` stream. */
export type Event = BatchAccepted | BatchStarted | CallEvent | BatchCompleted;

/** What a prompt callback (`run`'s `onPrompt`) decides. */
export interface Answer {
  outcome: Outcome;
  newContent?: string;
}

/** Answers for `run`'s `onPrompt`. */
export const Answer = {
  /** Run the call (`always`: and allow the same for the session). */
  approve: (opts: { always?: boolean } = {}): Answer => ({ outcome: opts.always ? "proceed_always" : "proceed_once" }),
  /** Do not run it: it ends cancelled, "User denied execution.". */
  reject: (): Answer => ({ outcome: "cancel" }),
  /** Run it with this content instead of the proposed one. */
  modify: (newContent: string): Answer => ({ outcome: "proceed_once", newContent }),
};

/**
 * A request the server refused, or that failed on the way. `code` is the
 * gRPC status name (`"INVALID_ARGUMENT"`, `"NOT_FOUND"`, …). Tool failures
 * are never thrown: they are `error` events.
 */
export class ToolschedError extends Error {
  constructor(
    readonly code: string,
    readonly detail: string,
    options?: { cause?: unknown },
  ) {
    super(`${code}: ${detail}`, options);
    this.name = "ToolschedError";
  }
}
