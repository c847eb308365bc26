// @ts-check
/**
 * signoff for the OpenAI Agents SDK for JavaScript (`@openai/agents`), after the Python
 * `signoff_client.openai_agents`: a tool made with `gatedTool` needs approval; the run's
 * `needsApproval` interruptions are filed as signoff requests carrying the serialised
 * `RunState`; the turn ends; the same or a later process, waiting for the decision by approval
 * id (or on the decision webhook), loads the state, checks every paused call against its
 * approval, claims the approved ones (one resumer wins), approves or rejects each in the state
 * and continues the run, in which the SDK runs each approved tool once, exactly as claimed.
 *
 *     const refund = gatedTool({ name: "refund", parameters, execute });
 *     const agent = new Agent({ name: "support", tools: [refund] });
 *     // turn 1
 *     const result = await run(agent, "Refund order 8812");
 *     const filed = await fileInterruptions(client, result, { runId: "conv-42", capability: "payments.refund" });
 *     // then, with no public URL: wait for the decision (held on the server) and run on
 *     const resumed = await resume(client, agent, filed[0].id, { wait: 3600 });
 *     // or, later in any process, on the decision webhook
 *     const resumed = await resumeFromWebhook(client, agent, headers, rawBody, secret);
 *
 * A call an approver edited runs with the edited arguments, and its output tells the model
 * so; a rejection, expiry or answer reaches the model as the rejection text, saying the tool
 * did not run.
 * @module
 */
import { RunState, Runner, tool } from "@openai/agents";

import {
  PausedCall, ResumeRefused, filedMeta, gates, idempotencyKeyFor, prepare, refuse, report,
  runGated, settle, sha256,
} from "./gate.js";
import { verifyWebhook } from "./webhooks.js";

export { ResumeRefused };

/**
 * @typedef {import("./client.js").SignoffClient} SignoffClient
 * @typedef {import("./records.js").ApprovalRecord} ApprovalRecord
 * @typedef {import("./records.js").Presentation} Presentation
 * @typedef {import("./gate.js").ResumeResult} ResumeResult
 * @typedef {import("@openai/agents").RunToolApprovalItem} ApprovalItem
 */

/** The key under `resume` that marks an approval as filed by this adapter. */
export const MARKER = "openai_agents_js";
const RESERVED = new Set(["run_id", "capability", "tool", "presentation", "resume", "kind", "step"]);
const GATED = Symbol.for("signoff.gated");

/**
 * A function tool gated by signoff: `tool()` with `needsApproval: true`, whose `execute` runs
 * only as a call signoff approved, with the claimed arguments (an approver's revision when
 * edited, validated by `parameters` when it is a Zod schema). `details.idempotencyKey` is the
 * claim's, for the effect's API.
 * @param {any} options the options of the SDK's `tool()`, without `needsApproval`
 * @returns {ReturnType<typeof tool>}
 */
export function gatedTool(options) {
  const execute = options.execute;
  const parameters = options.parameters;
  const gated = tool({
    ...options,
    needsApproval: true,
    /** @param {unknown} _input @param {any} context @param {any} details */
    async execute(_input, context, details) {
      const { output, note } = await runGated(details?.toolCall?.callId, async (args, key) => {
        const input = typeof parameters?.parse === "function" ? parameters.parse(args) : args;
        return execute(input, context, { ...details, idempotencyKey: key });
      });
      if (!note) return output;
      return `${note}\n\n${typeof output === "string" ? output : JSON.stringify(output)}`;
    },
  });
  return Object.assign(gated, { [GATED]: true });
}

/** The idempotency key of the claim a gated tool's call runs under, from its `details`.
 * @param {{toolCall?: {callId?: string}} | undefined} details */
export function idempotencyKey(details) {
  return idempotencyKeyFor(details?.toolCall?.callId);
}

/**
 * The call an interruption stands for, as signoff stores and hashes it.
 * @param {ApprovalItem} item
 * @returns {{name: string, arguments: Record<string, unknown>}}
 */
export function callOf(item) {
  const name = item.name;
  if (!name) throw new TypeError(`interruption ${callIdOf(item)} names no tool`);
  const raw = item.arguments;
  if (raw === undefined || raw === "") return { name, arguments: {} };
  let parsed;
  try {
    parsed = JSON.parse(raw);
  } catch {
    return { name, arguments: { input: raw } };
  }
  return {
    name,
    arguments: parsed && typeof parsed === "object" && !Array.isArray(parsed) ? parsed : { input: parsed },
  };
}

/** @param {ApprovalItem} item @returns {string} */
function callIdOf(item) {
  const raw = /** @type {any} */ (item.rawItem);
  return String(raw.callId ?? raw.id);
}

/**
 * `Run <tool>`, one field per argument, and the call id (each interruption its own request).
 * @param {ApprovalItem} item
 * @returns {Presentation}
 */
export function defaultPresentation(item) {
  const { name, arguments: args } = callOf(item);
  const fields = Object.entries(args).map(([key, value]) => ({
    label: (key || "(empty)").slice(0, 200),
    value: value === null || ["string", "number", "boolean"].includes(typeof value)
      ? /** @type {string | number | boolean | null} */ (value)
      : JSON.stringify(value),
  }));
  fields.push({ label: "Tool call id", value: callIdOf(item) });
  return { title: `Run ${name}`.slice(0, 300), fields };
}

/**
 * @typedef {object} FileOptions
 * @property {string} runId
 * @property {string | Record<string, string> | ((item: ApprovalItem) => string)} capability
 * @property {(item: ApprovalItem) => Presentation} [presentation]
 * @property {string | ((item: ApprovalItem) => string | undefined)} [reason]
 * @property {string} [requestedBy]
 * @property {Record<string, unknown>} [request] more create-body fields
 */

/**
 * File one signoff request per interruption of a run that stopped for approvals, each
 * carrying the serialised RunState. Safe to call again for the same result. Then end the turn.
 * @param {SignoffClient} client
 * @param {{interruptions?: ApprovalItem[], state: {toString(): string}}} result
 * @param {FileOptions} options
 * @returns {Promise<ApprovalRecord[]>}
 */
export async function fileInterruptions(client, result, options) {
  const interruptions = result.interruptions ?? [];
  if (!interruptions.length) return [];
  const extra = options.request ?? {};
  const clash = Object.keys(extra).filter((k) => RESERVED.has(k));
  if (clash.length) throw new TypeError(`${clash} are set by the adapter`);
  const state = result.state.toString();
  const digest = sha256(state);
  const callIds = interruptions.map(callIdOf);
  if (new Set(callIds).size !== callIds.length) throw new TypeError("interruption call ids repeat");
  const records = [];
  for (const [index, item] of interruptions.entries()) {
    const call = callOf(item);
    const capability = typeof options.capability === "string"
      ? options.capability
      : typeof options.capability === "function"
        ? options.capability(item)
        : options.capability[call.name];
    if (!capability) throw new TypeError(`no capability for tool ${call.name}`);
    const reason = typeof options.reason === "function" ? options.reason(item) : options.reason;
    const meta = { format: 1, call_id: callIds[index], call_ids: callIds, state_sha256: digest, run_state: state };
    const record = await client.create({
      ...extra,
      run_id: options.runId,
      capability,
      tool: call,
      presentation: (options.presentation ?? defaultPresentation)(item),
      resume: { [MARKER]: meta },
      ...(reason ? { reason } : {}),
      ...(options.requestedBy ? { requested_by: options.requestedBy } : {}),
    });
    const filed = filedMeta(record, MARKER);
    if (filed?.call_id !== callIds[index] || filed?.state_sha256 !== digest) {
      throw new Error(`signoff returned the earlier approval ${record.id} (${record.state}) for `
        + `${call.name} call ${callIds[index]}: this run already asked for the identical call from `
        + "another paused state. Put the call id in the presentation or use a new runId.");
    }
    records.push(record);
  }
  return records;
}

/** Every tool of the agent graph, by name. @param {any} agent */
function toolsOf(agent, seen = new Set(), found = new Map()) {
  if (!agent || seen.has(agent)) return found;
  seen.add(agent);
  for (const t of agent.tools ?? []) if (t?.name && !found.has(t.name)) found.set(t.name, t);
  for (const h of agent.handoffs ?? []) toolsOf(h?.agent ?? h, seen, found);
  return found;
}

/**
 * @typedef {object} ResumeOptions
 * @property {Runner} [runner] default a new Runner()
 * @property {string} [lease]
 * @property {number} [wait] seconds to wait for the turn's undecided approvals, held on the
 *   server and answered as soon as the last is decided: how an agent with no public URL
 *   resumes. Without it (or once it runs out), an undecided turn comes back `waiting` at once.
 * @property {Record<string, unknown>} [runOptions] passed to `runner.run`
 */

/**
 * @typedef {ResumeResult & {result?: any}} AgentsResumeResult `result`: the resumed RunResult
 *   (file its interruptions again if it has some).
 */

/**
 * Continue the run an approval paused, once every interruption of that turn is decided.
 * `agent` is the same agent graph as turn 1, tools included.
 * @param {SignoffClient} client
 * @param {any} agent
 * @param {string} approvalId
 * @param {ResumeOptions} [options]
 * @returns {Promise<AgentsResumeResult>}
 */
export async function resume(client, agent, approvalId, options = {}) {
  /** @type {Map<string, ApprovalItem>} */
  const items = new Map();
  const prepared = await prepare(client, approvalId, MARKER, async (meta, records) => {
    if (typeof meta.run_state !== "string" || sha256(meta.run_state) !== meta.state_sha256) {
      throw new ResumeRefused(`approval ${approvalId}: the stored run state is not the one filed`);
    }
    const state = await RunState.fromString(agent, meta.run_state);
    for (const item of state.getInterruptions()) items.set(callIdOf(item), item);
    const filed = [...records.keys()].sort();
    if (JSON.stringify([...items.keys()].sort()) !== JSON.stringify(filed)) {
      throw new ResumeRefused(`approval ${approvalId}: the run state pauses at `
        + `${[...items.keys()]}, not at the filed calls ${filed}`);
    }
    const calls = meta.call_ids.map(String).map((/** @type {string} */ callId) => {
      const { name, arguments: args } = callOf(/** @type {ApprovalItem} */ (items.get(callId)));
      return new PausedCall(callId, name, args, /** @type {ApprovalRecord} */ (records.get(callId)));
    });
    return { calls, context: state };
  }, options);
  if ("done" in prepared) return prepared.done;
  const { calls, context: state } = prepared;
  const tools = toolsOf(agent);
  for (const call of calls) {
    if (call.claim?.edited && !tools.get(call.name)?.[GATED]) {
      // Only a gated tool runs the claimed arguments; the SDK would run the model's.
      await refuse(client, calls, `approval ${call.record.id} was approved as edited, but `
        + `${call.name} is not a gatedTool, which alone can run an approver's revision`);
    }
  }
  for (const call of calls) {
    const item = /** @type {ApprovalItem} */ (items.get(call.callId));
    if (call.claim) state.approve(item);
    else state.reject(item, { message: call.message ?? undefined });
  }
  const runner = options.runner ?? new Runner();
  let result;
  try {
    result = await gates.run({ client, calls: new Map(calls.map((c) => [c.callId, c])) },
      () => runner.run(agent, state, /** @type {any} */ (options.runOptions ?? {})));
  } catch (err) {
    await settle(client, calls, true);
    throw err;
  }
  // A tool that is not a gatedTool has no hook: its output item says it ran.
  for (const item of result.newItems ?? []) {
    if (item.type !== "tool_call_output_item") continue;
    const call = calls.find((c) => c.callId === String(item.rawItem?.callId));
    if (call?.claim && !call.started) {
      call.started = true;
      call.output = item.output;
      await call.finish(client, "succeeded", { output: item.output });
    }
  }
  await settle(client, calls, false);
  return { status: "resumed", approvalId, calls: calls.map(report), result };
}

/**
 * Verify a decision webhook and `resume` the run of its approval; webhooks for approvals this
 * adapter did not file come back `ignored`, a redelivery `already_resumed`.
 * @param {SignoffClient} client
 * @param {any} agent
 * @param {Headers | Record<string, string | string[] | undefined>} headers
 * @param {string | Uint8Array} body
 * @param {string | readonly string[]} secret
 * @param {ResumeOptions} [options]
 * @returns {Promise<AgentsResumeResult>}
 */
export async function resumeFromWebhook(client, agent, headers, body, secret, options) {
  const { id, event } = verifyWebhook(headers, body, secret);
  const approval = event.approval;
  if (!filedMeta(approval, MARKER)) {
    return { status: "ignored", approvalId: approval?.id, calls: [], deliveryId: id };
  }
  return { ...(await resume(client, agent, approval.id, options)), deliveryId: id };
}
