/**
 * toolsched <-> the tool-calling shapes of model providers' APIs, as in the
 * Python client: `declarations(tools, provider)` for the request's `tools`,
 * `functionCalls(output, provider)` for the model's calls, and
 * `responses(batch, provider)` for what goes back (Gemini `functionResponse`
 * parts, OpenAI `tool` messages or `function_call_output` items, Anthropic
 * `tool_result` blocks with `is_error`). Plain JSON in and out.
 */

import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import type { BatchCompleted, Call, CompletedCall, FunctionResponse, Tool } from "./types.js";

/** A model API's tool-calling format. */
export type Provider = "gemini" | "openai_chat" | "openai_responses" | "anthropic";

export const PROVIDERS: readonly Provider[] = ["gemini", "openai_chat", "openai_responses", "anthropic"];

// Provider payloads are foreign JSON: read them loosely, check what is used.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

function check(provider: string): Provider {
  if (!(PROVIDERS as readonly string[]).includes(provider)) {
    throw new TypeError(`unknown provider ${JSON.stringify(provider)}; one of ${PROVIDERS.join(", ")}`);
  }
  return provider as Provider;
}

/**
 * The `tools` member of the provider's request. Gemini gets one tool with
 * every `functionDeclarations` entry and the JSON Schema as
 * `parametersJsonSchema`; Responses API tools are not `strict` (toolsched's
 * tools have optional parameters).
 */
export function declarations(tools: Iterable<Tool>, provider: Provider): JsonObject[] {
  const p = check(provider);
  const list = [...tools];
  switch (p) {
    case "gemini":
      return [
        { functionDeclarations: list.map((t) => ({ name: t.name, description: t.description, parametersJsonSchema: t.parameters })) },
      ];
    case "openai_chat":
      return list.map((t) => ({ type: "function", function: { name: t.name, description: t.description, parameters: t.parameters } }));
    case "openai_responses":
      return list.map((t) => ({ type: "function", name: t.name, description: t.description, parameters: t.parameters, strict: false }));
    case "anthropic":
      return list.map((t) => ({ name: t.name, description: t.description, input_schema: t.parameters }));
  }
}

/** The list under the first of `keys` present, following nested objects. */
function items(output: Json, keys: string[]): Json[] {
  if (Array.isArray(output)) return output;
  if (output === null || typeof output !== "object") {
    throw new TypeError(`expected a provider response (object or array), got ${typeof output}`);
  }
  for (const key of keys) {
    if (key in output) {
      const value = output[key];
      if (key === "candidates" || key === "choices") return value?.length ? items(value[0], keys) : [];
      if (value !== null && typeof value === "object" && !Array.isArray(value)) return items(value, keys);
      return Array.isArray(value) ? value : [];
    }
  }
  return [];
}

function jsonArgs(raw: Json, callId: string): JsonObject {
  if (raw !== null && typeof raw === "object" && !Array.isArray(raw)) return raw;
  let args: unknown;
  try {
    args = JSON.parse(raw || "{}");
  } catch (e) {
    throw new SyntaxError(`tool call ${JSON.stringify(callId)}: arguments are not JSON (${(e as Error).message})`);
  }
  if (args === null || typeof args !== "object" || Array.isArray(args)) {
    throw new SyntaxError(`tool call ${JSON.stringify(callId)}: arguments are not a JSON object`);
  }
  return args as JsonObject;
}

/**
 * The tool calls in a model's output, in order (see the Python client's
 * `function_calls` for the accepted shapes). A Gemini call without an `id`
 * gets `"<name>-<index>"`.
 */
export function functionCalls(output: Json, provider: Provider): Call[] {
  const p = check(provider);
  const calls: Call[] = [];
  switch (p) {
    case "gemini":
      items(output, ["candidates", "content", "parts"]).forEach((part, i) => {
        const fc = part?.functionCall;
        if (fc) {
          const id = fc.id || `${fc.name}-${i}`;
          calls.push({ id, name: fc.name, args: jsonArgs(fc.args ?? {}, id) });
        }
      });
      break;
    case "openai_chat":
      for (const tc of items(output, ["choices", "message", "tool_calls"])) {
        if ((tc.type ?? "function") === "function") {
          calls.push({ id: tc.id, name: tc.function.name, args: jsonArgs(tc.function.arguments, tc.id) });
        }
      }
      break;
    case "openai_responses":
      for (const item of items(output, ["output"])) {
        if (item.type === "function_call") calls.push({ id: item.call_id, name: item.name, args: jsonArgs(item.arguments, item.call_id) });
      }
      break;
    case "anthropic":
      for (const block of items(output, ["content"])) {
        if (block.type === "tool_use") calls.push({ id: block.id, name: block.name, args: jsonArgs(block.input ?? {}, block.id) });
      }
      break;
  }
  return calls;
}

/** A function response as one text: the output (JSON if not a string), or the error and any partial output. */
export function responseText(r: FunctionResponse): string {
  const output: JsonValue | undefined = r.response.output;
  const outText = typeof output === "string" ? output : output === undefined || output === null ? undefined : pyJson(output);
  const error = typeof r.response.error === "string" ? r.response.error : undefined;
  if (error === undefined) return outText ?? "";
  return outText ? `${error}\n\nOutput before it ended:\n${outText}` : error;
}

/** JSON with ", " and ": " separators, as the Python client writes it, so both give the model the same text. */
function pyJson(v: JsonValue): string {
  if (Array.isArray(v)) return `[${v.map(pyJson).join(", ")}]`;
  if (v !== null && typeof v === "object") {
    return `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${pyJson(x as JsonValue)}`).join(", ")}}`;
  }
  return JSON.stringify(v);
}

/** What goes back to the model for a completed batch, one entry per call in request order. */
export function responses(batch: BatchCompleted | CompletedCall[], provider: Provider): JsonObject[] {
  const p = check(provider);
  const calls = Array.isArray(batch) ? batch : batch.calls;
  return calls.map((c): JsonObject => {
    const r = c.response;
    switch (p) {
      case "gemini":
        return { functionResponse: { id: r.id, name: r.name, response: r.response } };
      case "openai_chat":
        return { role: "tool", tool_call_id: r.id, content: responseText(r) };
      case "openai_responses":
        return { type: "function_call_output", call_id: r.id, output: responseText(r) };
      case "anthropic":
        return { type: "tool_result", tool_use_id: r.id, content: responseText(r), is_error: c.state !== "success" };
    }
  });
}
