// @ts-check
/**
 * signoff for the Vercel AI SDK (`ai` 6+), on the SDK's own tool approval: a tool wrapped with
 * `signoffTool` needs approval, each `tool-approval-request` of a generation is filed as a
 * signoff request carrying the conversation, the turn ends, and the same or a later process
 * resumes from the decision (waiting for it by approval id, or on the decision webhook): the
 * approved calls are claimed (one resumer wins), answered to the SDK with
 * `tool-approval-response` parts, and run exactly as claimed, once.
 *
 *     const tools = { refund: signoffTool(tool({ inputSchema, execute })) };
 *     // turn 1
 *     const result = await generateText({ model, tools, messages });
 *     const filed = await fileApprovals(client, { result, messages, runId: "conv-42", capability: "payments.refund" });
 *     // then, with no public URL: wait for the decision (held on the server) and run on
 *     const run = (messages) => generateText({ model, tools, messages });
 *     const resumed = await resume(client, filed[0].id, { run, wait: 3600 });
 *     // or, later in any process, on the decision webhook
 *     const resumed = await resumeFromWebhook(client, headers, rawBody, secret, { run });
 *
 * The pause is the signoff request: nothing but the wait itself is held in memory. A call an approver edited runs
 * with the edited arguments and its output tells the model so; a rejection, expiry or answer
 * reaches the model as the SDK's `execution-denied` result, saying the tool did not run.
 * @module
 */
import {
  PausedCall, ResumeRefused, filedMeta, gates, idempotencyKeyFor, prepare, report, runGated,
  settle, sha256,
} from "./gate.js";
import { verifyWebhook } from "./webhooks.js";

export { ResumeRefused };

/**
 * @typedef {import("./client.js").SignoffClient} SignoffClient
 * @typedef {import("./records.js").ApprovalRecord} ApprovalRecord
 * @typedef {import("./records.js").Presentation} Presentation
 * @typedef {import("./gate.js").ResumeResult} ResumeResult
 * @typedef {{toolCallId: string, toolName: string, input: unknown}} ApprovalToolCall
 * @typedef {{type: "tool-approval-request", approvalId: string, toolCall: ApprovalToolCall}}
 *   ApprovalRequestPart
 */

/** The key under `resume` that marks an approval as filed by this adapter. */
export const MARKER = "ai_sdk";
const RESERVED = new Set(["run_id", "capability", "tool", "presentation", "resume", "kind", "step"]);
const GATED = Symbol.for("signoff.gated");

/**
 * Gate an AI SDK tool through signoff: it needs approval, and its `execute` runs only as a call
 * signoff approved, with the claimed arguments (an approver's revision when edited). The
 * execute options carry `idempotencyKey`, the claim's, for the effect's API.
 * @template {{execute?: (input: any, options: any) => any}} T
 * @param {T} aiTool a tool made with the SDK's `tool()`
 * @returns {T}
 */
export function signoffTool(aiTool) {
  const execute = aiTool.execute;
  if (typeof execute !== "function") throw new TypeError("signoffTool needs a tool with execute");
  return /** @type {T} */ ({
    ...aiTool,
    [GATED]: true,
    needsApproval: true,
    /** @param {unknown} _input @param {{toolCallId: string}} options */
    async execute(_input, options) {
      const { output, note } = await runGated(options.toolCallId, async (args, key) =>
        execute.call(aiTool, args, { ...options, idempotencyKey: key }));
      if (!note) return output;
      return typeof output === "string" ? `${note}\n\n${output}` : { signoff: note, output };
    },
  });
}

/** The idempotency key of the claim a gated tool's call runs under (also in its execute
 * options as `idempotencyKey`). @param {{toolCallId: string}} options */
export function idempotencyKey(options) {
  return idempotencyKeyFor(options.toolCallId);
}

/**
 * The approval requests a generation stopped at.
 * @param {{content?: readonly any[]}} result
 * @returns {ApprovalRequestPart[]}
 */
export function approvalRequests(result) {
  return (result.content ?? []).filter((part) => part?.type === "tool-approval-request");
}

/** @param {unknown} input @returns {Record<string, unknown>} */
function argumentsOf(input) {
  return input && typeof input === "object" && !Array.isArray(input)
    ? /** @type {Record<string, unknown>} */ (input)
    : { input: input ?? null };
}

/** @param {unknown} value */
function fieldValue(value) {
  return value === null || ["string", "number", "boolean"].includes(typeof value)
    ? /** @type {string | number | boolean | null} */ (value)
    : JSON.stringify(value);
}

/**
 * `Run <tool>`, one field per argument, and the tool call id (which makes each call its own
 * request: signoff hands back the earlier request for the same run and hash).
 * @param {ApprovalToolCall} call
 * @returns {Presentation}
 */
export function defaultPresentation(call) {
  const fields = Object.entries(argumentsOf(call.input)).map(([key, value]) => ({
    label: (key || "(empty)").slice(0, 200),
    value: fieldValue(value),
  }));
  fields.push({ label: "Tool call id", value: call.toolCallId });
  return { title: `Run ${call.toolName}`.slice(0, 300), fields };
}

/**
 * @typedef {object} FileOptions
 * @property {{content?: readonly any[], response: {messages: readonly unknown[]}}} result what
 *   `generateText` returned
 * @property {readonly unknown[]} messages the messages the generation was given
 * @property {string} runId
 * @property {string | Record<string, string> | ((call: ApprovalToolCall) => string)} capability
 *   one capability, one per tool name, or a function of the call
 * @property {(call: ApprovalToolCall) => Presentation} [presentation]
 * @property {string | ((call: ApprovalToolCall) => string | undefined)} [reason]
 * @property {string} [requestedBy]
 * @property {Record<string, unknown>} [request] more create-body fields (approval_ttl,
 *   approvers, input_schema, callback_url, ...)
 */

/**
 * File one signoff request per approval request of a generation, each carrying the whole
 * conversation so far (the pause). Safe to call again for the same result: signoff returns
 * the same approvals. Then end the turn.
 * @param {SignoffClient} client
 * @param {FileOptions} options
 * @returns {Promise<ApprovalRecord[]>}
 */
export async function fileApprovals(client, options) {
  const requests = approvalRequests(options.result);
  if (!requests.length) return [];
  const extra = options.request ?? {};
  const clash = Object.keys(extra).filter((k) => RESERVED.has(k));
  if (clash.length) throw new TypeError(`${clash} are set by the adapter`);
  const messages = JSON.stringify([...options.messages, ...options.result.response.messages]);
  const digest = sha256(messages);
  const callIds = requests.map((r) => r.toolCall.toolCallId);
  if (new Set(callIds).size !== callIds.length) throw new TypeError("tool call ids repeat");
  const records = [];
  for (const request of requests) {
    const call = request.toolCall;
    const capability = typeof options.capability === "string"
      ? options.capability
      : typeof options.capability === "function"
        ? options.capability(call)
        : options.capability[call.toolName];
    if (!capability) throw new TypeError(`no capability for tool ${call.toolName}`);
    const reason = typeof options.reason === "function" ? options.reason(call) : options.reason;
    const meta = {
      format: 1, call_id: call.toolCallId, call_ids: callIds,
      approval_request_id: request.approvalId, state_sha256: digest, messages,
    };
    const record = await client.create({
      ...extra,
      run_id: options.runId,
      capability,
      tool: { name: call.toolName, arguments: argumentsOf(call.input) },
      presentation: (options.presentation ?? defaultPresentation)(call),
      resume: { [MARKER]: meta },
      ...(reason ? { reason } : {}),
      ...(options.requestedBy ? { requested_by: options.requestedBy } : {}),
    });
    const filed = filedMeta(record, MARKER);
    if (filed?.call_id !== call.toolCallId || filed?.state_sha256 !== digest) {
      throw new Error(`signoff returned the earlier approval ${record.id} (${record.state}) for `
        + `${call.toolName} call ${call.toolCallId}: this run already asked for the identical call `
        + "and presentation from another pause. Put the call id in the presentation (as "
        + "defaultPresentation does) or use a new runId.");
    }
    records.push(record);
  }
  return records;
}

/**
 * @template R
 * @typedef {object} ResumeOptions
 * @property {(messages: unknown[]) => Promise<R>} run continue the conversation, e.g.
 *   `(messages) => generateText({ model, tools, messages })`; the gated tools run inside it
 * @property {string} [lease] how long each claim holds its call (default the server's)
 * @property {number} [wait] seconds to wait for the turn's undecided approvals, held on the
 *   server and answered as soon as the last is decided: how an agent with no public URL
 *   resumes. Without it (or once it runs out), an undecided turn comes back `waiting` at once.
 */

/**
 * @template R
 * @typedef {ResumeResult & {result?: R, messages?: unknown[]}} AiResumeResult `messages`: the
 *   conversation `run` was given (the stored one and the approval responses).
 */

/**
 * Continue the conversation an approval paused, once every approval request of that turn is
 * decided: claim the approved calls, answer each approval request (a call that will not run
 * gets the reason the model reads), and `run` the next generation, in which the SDK runs the
 * approved tools once.
 * @template R
 * @param {SignoffClient} client
 * @param {string} approvalId
 * @param {ResumeOptions<R>} options
 * @returns {Promise<AiResumeResult<R>>}
 */
export async function resume(client, approvalId, options) {
  /** @type {Map<string, string>} */
  const requestIds = new Map();
  const prepared = await prepare(client, approvalId, MARKER, async (meta, records) => {
    if (sha256(meta.messages) !== meta.state_sha256) {
      throw new ResumeRefused(`approval ${approvalId}: the stored conversation is not the one filed`);
    }
    const messages = JSON.parse(meta.messages);
    /** @type {Map<string, {toolName: string, input: unknown}>} */
    const asked = new Map();
    for (const message of messages) {
      for (const part of Array.isArray(message?.content) ? message.content : []) {
        if (part?.type === "tool-call") asked.set(part.toolCallId, part);
      }
    }
    const calls = [];
    for (const callId of meta.call_ids.map(String)) {
      const record = /** @type {ApprovalRecord} */ (records.get(callId));
      const part = asked.get(callId);
      if (!part) throw new ResumeRefused(`approval ${record.id}: the conversation has no call ${callId}`);
      const filed = /** @type {Record<string, any>} */ (filedMeta(record, MARKER));
      requestIds.set(callId, String(filed.approval_request_id));
      calls.push(new PausedCall(callId, part.toolName, argumentsOf(part.input), record));
    }
    return { calls, context: messages };
  }, options);
  if ("done" in prepared) return prepared.done;
  const { calls, context: stored } = prepared;
  const answers = calls.map((call) => ({
    type: "tool-approval-response",
    approvalId: requestIds.get(call.callId),
    approved: call.claim !== null,
    ...(call.claim ? {} : { reason: call.message }),
  }));
  const messages = [...stored, { role: "tool", content: answers }];
  let result;
  try {
    result = await gates.run({ client, calls: new Map(calls.map((c) => [c.callId, c])) },
      () => options.run(messages));
  } catch (err) {
    await settle(client, calls, true);
    throw err;
  }
  await settle(client, calls, false);
  return { status: "resumed", approvalId, calls: calls.map(report), result, messages };
}

/**
 * Verify a decision webhook (headers and raw body as received; BadWebhookSignature if it does
 * not verify) and `resume` the conversation of its approval. Webhooks for approvals this
 * adapter did not file come back `ignored`; a redelivery comes back `already_resumed`.
 * @template R
 * @param {SignoffClient} client
 * @param {Headers | Record<string, string | string[] | undefined>} headers
 * @param {string | Uint8Array} body
 * @param {string | readonly string[]} secret
 * @param {ResumeOptions<R>} options
 * @returns {Promise<AiResumeResult<R>>}
 */
export async function resumeFromWebhook(client, headers, body, secret, options) {
  const { id, event } = verifyWebhook(headers, body, secret);
  const approval = event.approval;
  if (!filedMeta(approval, MARKER)) {
    return { status: "ignored", approvalId: approval?.id, calls: [], deliveryId: id };
  }
  return { ...(await resume(client, approval.id, options)), deliveryId: id };
}
