/** A SHA-256 hex digest of text. @param {string} text */
export function sha256(text: string): string;
/**
 * What an adapter filed under `marker` in an approval's `resume`, or null.
 * @param {{resume?: unknown}} approval
 * @param {string} marker
 * @returns {Record<string, any> | null}
 */
export function filedMeta(approval: {
    resume?: unknown;
}, marker: string): Record<string, any> | null;
/**
 * What the model reads for a call that did not run, from its approval's record.
 * @param {ApprovalRecord} record
 * @returns {string}
 */
export function notRunMessage(record: ApprovalRecord): string;
/**
 * What the model reads about an approver's edit, with the tool's output.
 * @param {ApprovalRecord} record
 * @param {Record<string, unknown>} asked
 * @param {Record<string, unknown>} ran
 */
export function editNote(record: ApprovalRecord, asked: Record<string, unknown>, ran: Record<string, unknown>): string;
/**
 * Whether the call the paused run would make is the one its approval was decided on: the
 * agent's own call (`original_arguments` when an approver edited it) must hash to the hash it
 * asked with, and the record's stored call to its `hash`.
 * @param {ApprovalRecord} record
 * @param {string} name
 * @param {unknown} args
 */
export function matchesApproval(record: ApprovalRecord, name: string, args: unknown): boolean;
/**
 * Why a claimed call must not run, or null: it must hash to the approval's hash, be the hash
 * checked before claiming, and (unless an approver edited it) be the call the agent asked for.
 * @param {Claim} claim
 * @param {ApprovalRecord} checked
 * @param {{name: string, arguments: unknown}} asked
 */
export function claimMismatch(claim: Claim, checked: ApprovalRecord, asked: {
    name: string;
    arguments: unknown;
}): string | null;
/**
 * A tool's output as a result signoff takes (16 KiB canonical at most).
 * @param {unknown} value
 */
export function resultOf(value: unknown): {
    output: any;
    output_truncated?: undefined;
    output_chars?: undefined;
} | {
    output_truncated: string;
    output_chars: number;
    output?: undefined;
};
/**
 * The approvals filed together with `trigger` (one model turn), newest per call id, and the
 * call ids not filed (yet).
 * @param {SignoffClient} client
 * @param {ApprovalRecord} trigger
 * @param {Record<string, any>} meta
 * @param {string} marker
 */
export function filedTogether(client: SignoffClient, trigger: ApprovalRecord, meta: Record<string, any>, marker: string): Promise<{
    found: Map<string, import("./records.js").ApprovalRecord>;
    missing: any;
}>;
/**
 * @typedef {object} ResumeResult What a resume did.
 * @property {"resumed" | "waiting" | "already_resumed" | "refused" | "ignored"} status
 *   `resumed`: this process continued the run. `waiting`: a call of the same model turn is
 *   still undecided (the last decision's webhook resumes it). `already_resumed`: another
 *   resumer claimed the calls, or they ran: nothing was done (a redelivered webhook ends here).
 *   `refused`: an earlier resume found the paused run did not match and withdrew it.
 *   `ignored`: the webhook is not for an approval this adapter filed.
 * @property {string} approvalId
 * @property {GatedCallReport[]} calls
 * @property {string} [detail]
 * @property {string} [deliveryId]
 */
/**
 * @typedef {object} GatedCallReport What became of one gated call in this process.
 * @property {string} approvalId
 * @property {string} callId
 * @property {{name: string, arguments: Record<string, unknown>}} tool The call that ran (or
 *   would have): an approver's revision when `edited`.
 * @property {boolean} edited
 * @property {string} decision `approved`, or the state it was closed in.
 * @property {"not_started" | "started" | "finished"} execution
 * @property {"succeeded" | "failed" | null} outcome
 * @property {unknown} output
 * @property {string | null} message What the model was told instead of a result.
 */
/** @param {PausedCall} call @returns {GatedCallReport} */
export function report(call: PausedCall): GatedCallReport;
/**
 * The first half of every resume: read the trigger and its siblings, decide whether to go on,
 * check the paused calls against their approvals and claim the approved ones.
 * @param {SignoffClient} client
 * @param {string} approvalId
 * @param {string} marker
 * @param {(meta: Record<string, any>, records: Map<string, ApprovalRecord>) =>
 *   Promise<{calls: PausedCall[], context: any}>} load the paused calls, in filing order
 * @param {{lease?: string, wait?: number}} [options] `wait`: seconds to wait for the turn's
 *   undecided approvals, held on the server (`client.waitAll`); without it, `waiting` at once
 * @returns {Promise<{done: ResumeResult} | {calls: PausedCall[], context: any}>}
 */
export function prepare(client: SignoffClient, approvalId: string, marker: string, load: (meta: Record<string, any>, records: Map<string, ApprovalRecord>) => Promise<{
    calls: PausedCall[];
    context: any;
}>, { lease, wait }?: {
    lease?: string;
    wait?: number;
}): Promise<{
    done: ResumeResult;
} | {
    calls: PausedCall[];
    context: any;
}>;
/** @param {SignoffClient} client @param {PausedCall[]} calls */
export function releaseAll(client: SignoffClient, calls: PausedCall[]): Promise<void>;
/**
 * Release what this process claimed, withdraw the grants the paused run does not match (so
 * nothing else claims them), and throw.
 * @param {SignoffClient} client @param {PausedCall[]} calls @param {string} message
 * @returns {Promise<never>}
 */
export function refuse(client: SignoffClient, calls: PausedCall[], message: string): Promise<never>;
/**
 * The second half: after the framework's run returned or threw. A claimed call whose tool
 * never started is released when the run threw before anything started (the paused state is
 * still the truth, and a later resume may retry), and otherwise recorded as not run (the run
 * went on without it, and handing it back would let it run out of turn). A call that started
 * and never returned is left to its lease.
 * @param {SignoffClient} client @param {PausedCall[]} calls @param {boolean} threw
 */
export function settle(client: SignoffClient, calls: PausedCall[], threw: boolean): Promise<void>;
/**
 * Run a gated tool's body for the call `callId` of the resumed run in this async context:
 * exactly the claimed call, recorded in signoff as soon as it returns. Outside a resume, or for
 * a call signoff did not approve, it refuses to run.
 * @template T
 * @param {string | undefined} callId
 * @param {(args: Record<string, unknown>, key: string) => Promise<T>} body
 * @returns {Promise<{output: T, note: string | null}>}
 */
export function runGated<T>(callId: string | undefined, body: (args: Record<string, unknown>, key: string) => Promise<T>): Promise<{
    output: T;
    note: string | null;
}>;
/** The idempotency key of the claim the current gated call runs under, or null.
 * @param {string | undefined} callId */
export function idempotencyKeyFor(callId: string | undefined): string | null;
/**
 * @typedef {import("./records.js").ApprovalRecord} ApprovalRecord
 * @typedef {import("./records.js").Claim} Claim
 * @typedef {import("./client.js").SignoffClient} SignoffClient
 */
/** States in which someone claimed the call: the run was (or is being) resumed. */
export const TAKEN: Set<string>;
/** The start of the note of a grant withdrawn because the paused run did not match it. */
export const REFUSED: "resume refused: ";
/** The paused run does not match what was approved; its grants were withdrawn. */
export class ResumeRefused extends Error {
}
/**
 * One gated call of a paused run, while it is resumed: its approval, the claim this process
 * holds (null when it was not approved, or was handed back), and how far the tool got.
 */
export class PausedCall {
    /**
     * @param {string} callId
     * @param {string} name
     * @param {Record<string, unknown>} args the call as the agent asked for it
     * @param {ApprovalRecord} record
     */
    constructor(callId: string, name: string, args: Record<string, unknown>, record: ApprovalRecord);
    callId: string;
    name: string;
    arguments: Record<string, unknown>;
    record: import("./records.js").ApprovalRecord;
    /** @type {Claim | null} */
    claim: Claim | null;
    /** What the model reads when the call does not run. @type {string | null} */
    message: string | null;
    started: boolean;
    /** @type {["succeeded" | "failed", unknown] | null} */
    outcome: ["succeeded" | "failed", unknown] | null;
    recorded: boolean;
    /** What the tool returned. @type {unknown} */
    output: unknown;
    /** The arguments to run: the claimed call's (an approver's revision when edited). */
    get runArguments(): Record<string, unknown>;
    /** @param {SignoffClient} client @param {"succeeded" | "failed"} outcome @param {unknown} result */
    finish(client: SignoffClient, outcome: "succeeded" | "failed", result: unknown): Promise<boolean>;
    /** Send an outcome signoff has not acknowledged yet; true once it holds one.
     * @param {SignoffClient} client */
    resend(client: SignoffClient): Promise<boolean>;
    /** Hand back a claim whose call never started. @param {SignoffClient} client */
    release(client: SignoffClient): Promise<void>;
    /** Spend a claim whose call never started and never will. @param {SignoffClient} client
     * @param {string} why */
    notRun(client: SignoffClient, why: string): Promise<void>;
}
/** The resumed run this async context belongs to: its client and gated calls by call id.
 * @type {AsyncLocalStorage<{client: SignoffClient, calls: Map<string, PausedCall>}>} */
export const gates: AsyncLocalStorage<{
    client: SignoffClient;
    calls: Map<string, PausedCall>;
}>;
/**
 * What a resume did.
 */
export type ResumeResult = {
    /**
     *   `resumed`: this process continued the run. `waiting`: a call of the same model turn is
     *   still undecided (the last decision's webhook resumes it). `already_resumed`: another
     *   resumer claimed the calls, or they ran: nothing was done (a redelivered webhook ends here).
     *   `refused`: an earlier resume found the paused run did not match and withdrew it.
     *   `ignored`: the webhook is not for an approval this adapter filed.
     */
    status: "resumed" | "waiting" | "already_resumed" | "refused" | "ignored";
    approvalId: string;
    calls: GatedCallReport[];
    detail?: string | undefined;
    deliveryId?: string | undefined;
};
/**
 * What became of one gated call in this process.
 */
export type GatedCallReport = {
    approvalId: string;
    callId: string;
    /**
     * The call that ran (or
     * would have): an approver's revision when `edited`.
     */
    tool: {
        name: string;
        arguments: Record<string, unknown>;
    };
    edited: boolean;
    /**
     * `approved`, or the state it was closed in.
     */
    decision: string;
    execution: "not_started" | "started" | "finished";
    outcome: "succeeded" | "failed" | null;
    output: unknown;
    /**
     * What the model was told instead of a result.
     */
    message: string | null;
};
export type ApprovalRecord = import("./records.js").ApprovalRecord;
export type Claim = import("./records.js").Claim;
export type SignoffClient = import("./client.js").SignoffClient;
import { AsyncLocalStorage } from "node:async_hooks";
