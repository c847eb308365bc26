/**
 * Gate an AI SDK tool through signoff: it needs approval, and its `execute` runs only as a call
 * signoff approved, with the claimed arguments (an approver's revision when edited). The
 * execute options carry `idempotencyKey`, the claim's, for the effect's API.
 * @template {{execute?: (input: any, options: any) => any}} T
 * @param {T} aiTool a tool made with the SDK's `tool()`
 * @returns {T}
 */
export function signoffTool<T extends {
    execute?: (input: any, options: any) => any;
}>(aiTool: T): T;
/** The idempotency key of the claim a gated tool's call runs under (also in its execute
 * options as `idempotencyKey`). @param {{toolCallId: string}} options */
export function idempotencyKey(options: {
    toolCallId: string;
}): string | null;
/**
 * The approval requests a generation stopped at.
 * @param {{content?: readonly any[]}} result
 * @returns {ApprovalRequestPart[]}
 */
export function approvalRequests(result: {
    content?: readonly any[];
}): ApprovalRequestPart[];
/**
 * `Run <tool>`, one field per argument, and the tool call id (which makes each call its own
 * request: signoff hands back the earlier request for the same run and hash).
 * @param {ApprovalToolCall} call
 * @returns {Presentation}
 */
export function defaultPresentation(call: ApprovalToolCall): Presentation;
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
export function fileApprovals(client: SignoffClient, options: FileOptions): Promise<ApprovalRecord[]>;
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
export function resume<R>(client: SignoffClient, approvalId: string, options: ResumeOptions<R>): Promise<AiResumeResult<R>>;
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
export function resumeFromWebhook<R>(client: SignoffClient, headers: Headers | Record<string, string | string[] | undefined>, body: string | Uint8Array, secret: string | readonly string[], options: ResumeOptions<R>): Promise<AiResumeResult<R>>;
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
export const MARKER: "ai_sdk";
export type FileOptions = {
    /**
     * what
     * `generateText` returned
     */
    result: {
        content?: readonly any[];
        response: {
            messages: readonly unknown[];
        };
    };
    /**
     * the messages the generation was given
     */
    messages: readonly unknown[];
    runId: string;
    /**
     *   one capability, one per tool name, or a function of the call
     */
    capability: string | Record<string, string> | ((call: ApprovalToolCall) => string);
    presentation?: ((call: ApprovalToolCall) => Presentation) | undefined;
    reason?: string | ((call: ApprovalToolCall) => string | undefined) | undefined;
    requestedBy?: string | undefined;
    /**
     * more create-body fields (approval_ttl,
     * approvers, input_schema, callback_url, ...)
     */
    request?: Record<string, unknown> | undefined;
};
export type ResumeOptions<R> = {
    /**
     * continue the conversation, e.g.
     * `(messages) => generateText({ model, tools, messages })`; the gated tools run inside it
     */
    run: (messages: unknown[]) => Promise<R>;
    /**
     * how long each claim holds its call (default the server's)
     */
    lease?: string | undefined;
    /**
     * seconds to wait for the turn's undecided approvals, held on the
     * server and answered as soon as the last is decided: how an agent with no public URL
     * resumes. Without it (or once it runs out), an undecided turn comes back `waiting` at once.
     */
    wait?: number | undefined;
};
/**
 * `messages`: the
 *   conversation `run` was given (the stored one and the approval responses).
 */
export type AiResumeResult<R> = ResumeResult & {
    result?: R;
    messages?: unknown[];
};
export type SignoffClient = import("./client.js").SignoffClient;
export type ApprovalRecord = import("./records.js").ApprovalRecord;
export type Presentation = import("./records.js").Presentation;
export type ResumeResult = import("./gate.js").ResumeResult;
export type ApprovalToolCall = {
    toolCallId: string;
    toolName: string;
    input: unknown;
};
export type ApprovalRequestPart = {
    type: "tool-approval-request";
    approvalId: string;
    toolCall: ApprovalToolCall;
};
import { ResumeRefused } from "./gate.js";
