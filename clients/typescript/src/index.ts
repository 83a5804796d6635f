/**
 * `@toolsched/client`: the TypeScript client of toolsched, the gRPC service
 * that schedules, approves and executes an LLM agent's tool calls.
 *
 * ```ts
 * import { ToolschedClient } from "@toolsched/client";
 * const client = new ToolschedClient("127.0.0.1:50051");
 * const batch = client.schedule("my-session", [{ id: "c1", name: "read_file", args: { file_path: "README.md" } }]);
 * for await (const ev of batch) if (ev.type === "awaiting_approval") await client.approve(ev);
 * console.log(batch.completed?.responses);
 * client.close();
 * ```
 */

export * from "./types.js";
export { Batch, DEFAULT_ADDRESS, ToolschedClient, type ClientOptions, type RunOptions, type ScheduleOptions } from "./client.js";
export * as adapters from "./adapters.js";
export type { Provider } from "./adapters.js";
/** The generated messages and service (the wire contract), for what the typed client does not cover. */
export * as pb from "./gen/toolsched/v1/toolsched_pb.js";
