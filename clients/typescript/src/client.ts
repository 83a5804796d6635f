/**
 * The client: `ToolschedClient` over Connect's gRPC transport for Node
 * (HTTP/2). Streams are async iterators; an `AbortSignal` cancels.
 */

import { create } from "@bufbuild/protobuf";
import { createClient, type CallOptions, type Client } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import * as conv from "./convert.js";
import * as pb from "./gen/toolsched/v1/toolsched_pb.js";
import * as t from "./types.js";

/** Where `toolsched serve` listens by default. */
export const DEFAULT_ADDRESS = "127.0.0.1:50051";

export type { ScheduleOptions } from "./convert.js";

/**
 * An open `ScheduleCalls` stream. `for await` it for the typed events; the
 * last is `batch_completed`, also kept in `completed`. Leaving a loop early
 * keeps the stream open (read on later, e.g. after answering a prompt);
 * `cancel()` or the `signal` given to `schedule` drops it, which cancels the
 * batch on the server.
 */
export class Batch implements AsyncIterableIterator<t.Event> {
  /** Set by the first event (`batch_accepted`). */
  batchId?: string;
  /** Set by the last event. */
  completed?: t.BatchCompleted;
  readonly #it: AsyncIterator<pb.ScheduleCallsResponse>;
  readonly #abort: AbortController;

  constructor(
    stream: AsyncIterable<pb.ScheduleCallsResponse>,
    readonly sessionId: string,
    abort: AbortController,
  ) {
    this.#it = stream[Symbol.asyncIterator]();
    this.#abort = abort;
  }

  [Symbol.asyncIterator](): Batch {
    return this;
  }

  async next(): Promise<IteratorResult<t.Event>> {
    if (this.completed) return { done: true, value: undefined };
    let r: IteratorResult<pb.ScheduleCallsResponse>;
    try {
      r = await this.#it.next();
    } catch (e) {
      throw conv.rpcError(e);
    }
    if (r.done) throw new t.ToolschedError("INTERNAL", "the stream ended without BatchCompleted");
    const ev = conv.event(r.value, this.sessionId);
    if (ev.type === "batch_accepted") this.batchId = ev.batchId;
    if (ev.type === "batch_completed") this.completed = ev;
    return { done: false, value: ev };
  }

  /** Reads the remaining events; resolves to `batch_completed`. */
  async result(): Promise<t.BatchCompleted> {
    for await (const _ of this) {
      // drain
    }
    return this.completed as t.BatchCompleted;
  }

  /** Drops the stream; a batch not yet completed is cancelled. */
  cancel(): void {
    this.#abort.abort();
  }
}

export interface ClientOptions {
  /** Sent as `authorization: Bearer <token>`. */
  token?: string;
}

export interface RunOptions extends Omit<conv.ScheduleOptions, "interactive"> {
  /** Answers each prompt; without it the batch is non-interactive. */
  onPrompt?: (prompt: t.AwaitingApproval) => t.Answer | Promise<t.Answer>;
  /** Sees every event, in order. */
  onEvent?: (event: t.Event) => void | Promise<void>;
}

/**
 * A client of one toolsched server. `address` is `host:port` or an
 * `http://` / `https://` URL. `close()` it when done (it holds an HTTP/2
 * connection). Methods reject with `ToolschedError` when the server refuses
 * a request.
 */
export class ToolschedClient {
  readonly #rpc: Client<typeof pb.ToolScheduler>;
  readonly #session: Http2SessionManager;
  readonly #headers: Record<string, string>;

  constructor(address: string = DEFAULT_ADDRESS, options: ClientOptions = {}) {
    const baseUrl = /^https?:\/\//.test(address) ? address : `http://${address}`;
    this.#session = new Http2SessionManager(baseUrl);
    const transport = createGrpcTransport({ baseUrl, sessionManager: this.#session });
    this.#rpc = createClient(pb.ToolScheduler, transport);
    this.#headers = options.token ? { authorization: `Bearer ${options.token}` } : {};
  }

  #opts(signal?: AbortSignal, timeoutMs?: number): CallOptions {
    return { headers: this.#headers, signal, timeoutMs };
  }

  async #unary<T>(f: () => Promise<T>): Promise<T> {
    try {
      return await f();
    } catch (e) {
      throw conv.rpcError(e);
    }
  }

  /**
   * Sends one batch of function calls (in the model's order) and returns its
   * open stream.
   */
  schedule(session: string, calls: Iterable<t.Call>, options: conv.ScheduleOptions = {}): Batch {
    const req = conv.scheduleRequest(session, calls, options);
    const abort = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, abort.signal]) : abort.signal;
    const stream = this.#rpc.scheduleCalls(req, this.#opts(signal, options.timeoutMs));
    return new Batch(stream, session, abort);
  }

  /**
   * Runs a batch to completion: every event goes to `onEvent`, every prompt
   * to `onPrompt`, whose answer is sent at once.
   */
  async run(session: string, calls: Iterable<t.Call>, options: RunOptions = {}): Promise<t.BatchCompleted> {
    const { onPrompt, onEvent, ...rest } = options;
    const batch = this.schedule(session, calls, { ...rest, interactive: onPrompt ? undefined : false });
    try {
      for await (const ev of batch) {
        if (onEvent) await onEvent(ev);
        if (ev.type === "awaiting_approval" && onPrompt) {
          const answer = await onPrompt(ev);
          await this.confirm(ev, answer.outcome, answer.newContent);
        }
      }
    } finally {
      if (!batch.completed) batch.cancel();
    }
    return batch.completed as t.BatchCompleted;
  }

  /** Answers `prompt` with any offered outcome. */
  async confirm(prompt: t.AwaitingApproval, outcome: t.Outcome, newContent?: string): Promise<void> {
    await this.#unary(() => this.#rpc.confirm(conv.confirmRequest(prompt, outcome, newContent), this.#opts()));
  }

  /** Runs the call; `always` also allows the same for the session. */
  approve(prompt: t.AwaitingApproval, options: { always?: boolean } = {}): Promise<void> {
    return this.confirm(prompt, options.always ? "proceed_always" : "proceed_once");
  }

  /** Does not run it: it ends cancelled, and the calls queued behind it too. */
  reject(prompt: t.AwaitingApproval): Promise<void> {
    return this.confirm(prompt, "cancel");
  }

  /**
   * Replaces an edit's proposed content and runs it, or with `reprompt`
   * shows the modified diff in a new prompt first.
   */
  modify(prompt: t.AwaitingApproval, newContent: string, options: { reprompt?: boolean } = {}): Promise<void> {
    return this.confirm(prompt, options.reprompt ? "modify_with_editor" : "proceed_once", newContent);
  }

  /** Cancels the session's queued batches and non-terminal calls (or one batch's). */
  async cancel(session: string, batch?: string, reason = ""): Promise<t.CancelResult> {
    const r = await this.#unary(() =>
      this.#rpc.cancel(create(pb.CancelRequestSchema, { sessionId: session, batchId: batch, reason }), this.#opts()),
    );
    return { cancelledCalls: r.cancelledCalls, cancelledBatches: r.cancelledBatches };
  }

  /** The function declarations for the model's request. */
  async listTools(): Promise<t.Tool[]> {
    const r = await this.#unary(() => this.#rpc.listTools({}, this.#opts()));
    return r.tools.map(conv.tool);
  }

  /** Version, sandbox, MCP servers and the replica id (`replicaId`, with a
   * durable store), as the generated message. */
  serverInfo(): Promise<pb.GetServerInfoResponse> {
    return this.#unary(() => this.#rpc.getServerInfo({}, this.#opts()));
  }

  /** Closes the connection (open streams end). */
  close(): void {
    this.#session.abort();
  }
}
