/**
 * A function tool gated by signoff: `tool()` with `needsApproval: true`, whose `execute` runs
 * only as a call signoff approved, with the claimed arguments (an approver's revision when
 * edited, validated by `parameters` when it is a Zod schema). `details.idempotencyKey` is the
 * claim's, for the effect's API.
 * @param {any} options the options of the SDK's `tool()`, without `needsApproval`
 * @returns {ReturnType<typeof tool>}
 */
export function gatedTool(options: any): ReturnType<typeof tool>;
/** The idempotency key of the claim a gated tool's call runs under, from its `details`.
 * @param {{toolCall?: {callId?: string}} | undefined} details */
export function idempotencyKey(details: {
    toolCall?: {
        callId?: string;
    };
} | undefined): string | null;
/**
 * The call an interruption stands for, as signoff stores and hashes it.
 * @param {ApprovalItem} item
 * @returns {{name: string, arguments: Record<string, unknown>}}
 */
export function callOf(item: ApprovalItem): {
    name: string;
    arguments: Record<string, unknown>;
};
/**
 * `Run <tool>`, one field per argument, and the call id (each interruption its own request).
 * @param {ApprovalItem} item
 * @returns {Presentation}
 */
export function defaultPresentation(item: ApprovalItem, ...args: any[]): Presentation;
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
export function fileInterruptions(client: SignoffClient, result: {
    interruptions?: ApprovalItem[];
    state: {
        toString(): string;
    };
}, options: FileOptions): Promise<ApprovalRecord[]>;
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
export function resume(client: SignoffClient, agent: any, approvalId: string, options?: ResumeOptions): Promise<AgentsResumeResult>;
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
export function resumeFromWebhook(client: SignoffClient, agent: any, headers: Headers | Record<string, string | string[] | undefined>, body: string | Uint8Array, secret: string | readonly string[], options?: ResumeOptions): Promise<AgentsResumeResult>;
export { ResumeRefused };
/**
 * @typedef {import("./client.js").SignoffClient} SignoffClient
 * @typedef {import("./records.js").ApprovalRecord} ApprovalRecord
 * @typedef {import("./records.js").Presentation} Presentation
 * @typedef {import("./gate.js").ResumeResult} ResumeResult
 * @typedef {import("@openai/agents").RunToolApprovalItem} ApprovalItem
 */
/** The key under `resume` that marks an approval as filed by this adapter. */
export const MARKER: "openai_agents_js";
export type FileOptions = {
    runId: string;
    capability: string | Record<string, string> | ((item: ApprovalItem) => string);
    presentation?: ((item: ApprovalItem) => Presentation) | undefined;
    reason?: string | ((item: ApprovalItem) => string | undefined) | undefined;
    requestedBy?: string | undefined;
    /**
     * more create-body fields
     */
    request?: Record<string, unknown> | undefined;
};
export type ResumeOptions = {
    /**
     * default a new Runner()
     */
    runner?: Runner | undefined;
    lease?: string | undefined;
    /**
     * seconds to wait for the turn's undecided approvals, held on the
     * server and answered as soon as the last is decided: how an agent with no public URL
     * resumes. Without it (or once it runs out), an undecided turn comes back `waiting` at once.
     */
    wait?: number | undefined;
    /**
     * passed to `runner.run`
     */
    runOptions?: Record<string, unknown> | undefined;
};
/**
 * `result`: the resumed RunResult
 *   (file its interruptions again if it has some).
 */
export type AgentsResumeResult = ResumeResult & {
    result?: any;
};
export type SignoffClient = import("./client.js").SignoffClient;
export type ApprovalRecord = import("./records.js").ApprovalRecord;
export type Presentation = import("./records.js").Presentation;
export type ResumeResult = import("./gate.js").ResumeResult;
export type ApprovalItem = import("@openai/agents").RunToolApprovalItem;
import { tool } from "@openai/agents";
import { ResumeRefused } from "./gate.js";
import { Runner } from "@openai/agents";
