// @ts-check
/**
 * The life of one gated call on the agent's side, shared by the framework adapters (after the
 * Python `signoff_client.lifecycle`): find what was filed together, check the paused calls
 * against their approvals, claim the approved ones (one resumer wins), run each exactly as
 * claimed inside the resumed run, record its outcome as soon as it returns, and settle the
 * rest. A call that started and never reported is left to its lease: signoff then asks a human
 * whether to run it again. Nothing here guesses an outcome.
 * @module
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { createHash } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";

import { approvalHash, canonicalJson } from "./canonical.js";
import {
  ApprovalExpired, NotCanonical, NotPending, PolicyChanged, RequestTooLarge, SignoffError,
} from "./errors.js";
import { CLOSED } from "./records.js";

/**
 * @typedef {import("./records.js").ApprovalRecord} ApprovalRecord
 * @typedef {import("./records.js").Claim} Claim
 * @typedef {import("./client.js").SignoffClient} SignoffClient
 */

/** States in which someone claimed the call: the run was (or is being) resumed. */
export const TAKEN = new Set(["executing", "executed", "failed", "outcome_unknown"]);
/** The start of the note of a grant withdrawn because the paused run did not match it. */
export const REFUSED = "resume refused: ";
/** The server's bound on a completion's result, canonical bytes, less a margin. */
const RESULT_LIMIT = 16 * 1024 - 256;

/** The paused run does not match what was approved; its grants were withdrawn. */
export class ResumeRefused extends Error {
  name = "ResumeRefused";
}

/** A SHA-256 hex digest of text. @param {string} text */
export function sha256(text) {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

/**
 * What an adapter filed under `marker` in an approval's `resume`, or null.
 * @param {{resume?: unknown}} approval
 * @param {string} marker
 * @returns {Record<string, any> | null}
 */
export function filedMeta(approval, marker) {
  const resume = /** @type {any} */ (approval?.resume);
  const meta = resume && typeof resume === "object" ? resume[marker] : null;
  return meta && typeof meta === "object" && meta.format === 1 ? meta : null;
}

/**
 * What the model reads for a call that did not run, from its approval's record.
 * @param {ApprovalRecord} record
 * @returns {string}
 */
export function notRunMessage(record) {
  const note = record.decision_note ? `: ${record.decision_note}` : "";
  const who = record.decided_by ?? "a human";
  if (record.state === "answered" && record.answer) {
    const answer = "option" in record.answer
      ? `chose "${record.answer.option}"`
      : `answered: ${record.answer.text}`;
    return `The tool did not run: instead of approving it, ${who} ${answer}`;
  }
  if (record.kind === "interrupted_side_effect") {
    return "This call was approved and started earlier, but its outcome was never reported; "
      + `a human declined to run it again${note}. It may or may not have taken effect.`;
  }
  if (record.state === "rejected") return `The tool did not run: ${who} rejected it${note}.`;
  if (record.state === "expired") {
    return "The tool did not run: nobody decided on it before the approval expired.";
  }
  if (record.state === "cancelled") {
    return `The tool did not run: its approval request was cancelled${note}.`;
  }
  return `The tool did not run: its approval was withdrawn (${record.state})${note}.`;
}

/**
 * What the model reads about an approver's edit, with the tool's output.
 * @param {ApprovalRecord} record
 * @param {Record<string, unknown>} asked
 * @param {Record<string, unknown>} ran
 */
export function editNote(record, asked, ran) {
  const keys = [...new Set([...Object.keys(asked), ...Object.keys(ran)])].sort();
  const changes = keys
    .filter((k) => !(k in asked && k in ran && canonicalJson(asked[k]) === canonicalJson(ran[k])))
    .map((k) => !(k in ran)
      ? `${k} removed`
      : !(k in asked)
        ? `${k} = ${canonicalJson(ran[k])} added`
        : `${k}: ${canonicalJson(asked[k])} -> ${canonicalJson(ran[k])}`);
  const who = record.decided_by ?? "an approver";
  return `${who} edited this call before approving it, and the tool ran with the edited `
    + `arguments (${changes.join("; ")}), not the ones you asked for.`;
}

/**
 * Whether the call the paused run would make is the one its approval was decided on: the
 * agent's own call (`original_arguments` when an approver edited it) must hash to the hash it
 * asked with, and the record's stored call to its `hash`.
 * @param {ApprovalRecord} record
 * @param {string} name
 * @param {unknown} args
 */
export function matchesApproval(record, name, args) {
  try {
    if (!record.tool || record.tool.name !== name || approvalHash(record) !== record.hash) {
      return false;
    }
    const asked = { ...record, tool: { name, arguments: /** @type {any} */ (args) } };
    if (record.edited) {
      return record.original_hash !== null
        && canonicalJson(record.original_arguments) === canonicalJson(args)
        && approvalHash(asked) === record.original_hash;
    }
    return approvalHash(asked) === record.hash;
  } catch (err) {
    if (err instanceof NotCanonical) return false;
    throw err;
  }
}

/**
 * Why a claimed call must not run, or null: it must hash to the approval's hash, be the hash
 * checked before claiming, and (unless an approver edited it) be the call the agent asked for.
 * @param {Claim} claim
 * @param {ApprovalRecord} checked
 * @param {{name: string, arguments: unknown}} asked
 */
export function claimMismatch(claim, checked, asked) {
  const approval = claim.approval;
  const claimed = { ...approval, tool: claim.tool };
  if (approvalHash(claimed) !== approval.hash) {
    return `approval ${approval.id}: the claimed call does not hash to the approved hash`;
  }
  if (approval.hash !== checked.hash) {
    return `approval ${approval.id}: the approval's hash changed since it was read`;
  }
  if (claim.tool.name !== asked.name) {
    return `approval ${approval.id}: the claimed tool is not the tool the agent asked for`;
  }
  if (!claim.edited && canonicalJson(claim.tool.arguments) !== canonicalJson(asked.arguments)) {
    return `approval ${approval.id}: the claimed call is not the call the agent asked for`;
  }
  return null;
}

/**
 * A tool's output as a result signoff takes (16 KiB canonical at most).
 * @param {unknown} value
 */
export function resultOf(value) {
  let doc;
  try {
    doc = JSON.parse(JSON.stringify(value ?? null));
    canonicalJson(doc);
  } catch {
    doc = String(value);
  }
  const text = canonicalJson(doc);
  if (Buffer.byteLength(text) <= RESULT_LIMIT) return { output: doc };
  const flat = typeof doc === "string" ? doc : text;
  let cut = Math.floor(RESULT_LIMIT / 4);
  while (Buffer.byteLength(canonicalJson(flat.slice(0, cut))) > RESULT_LIMIT - 64) cut >>= 1;
  return { output_truncated: flat.slice(0, cut), output_chars: flat.length };
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
  constructor(callId, name, args, record) {
    this.callId = callId;
    this.name = name;
    this.arguments = args;
    this.record = record;
    /** @type {Claim | null} */
    this.claim = null;
    /** What the model reads when the call does not run. @type {string | null} */
    this.message = null;
    this.started = false;
    /** @type {["succeeded" | "failed", unknown] | null} */
    this.outcome = null;
    this.recorded = false;
    /** What the tool returned. @type {unknown} */
    this.output = undefined;
  }

  /** The arguments to run: the claimed call's (an approver's revision when edited). */
  get runArguments() {
    return this.claim ? this.claim.tool.arguments : this.arguments;
  }

  /** @param {SignoffClient} client @param {"succeeded" | "failed"} outcome @param {unknown} result */
  async finish(client, outcome, result) {
    this.started = true;
    if (!this.outcome) this.outcome = [outcome, result];
    return this.resend(client);
  }

  /** Send an outcome signoff has not acknowledged yet; true once it holds one.
   * @param {SignoffClient} client */
  async resend(client) {
    if (this.recorded || !this.outcome || !this.claim) return this.recorded;
    const [outcome, result] = this.outcome;
    for (let attempt = 0; attempt < 3 && !this.recorded; attempt++) {
      try {
        try {
          await client.complete(this.record.id, this.claim.claim_token, outcome, result);
        } catch (err) {
          if (!(err instanceof RequestTooLarge)) throw err;
          const standIn = { truncated: true, text: JSON.stringify(result).slice(0, 2000) };
          await client.complete(this.record.id, this.claim.claim_token, outcome, standIn);
        }
        this.recorded = true;
      } catch (err) {
        if (err instanceof SignoffError) { // refused: asking again would not change it
          console.error(`signoff refused the outcome of ${this.record.id}: ${err.message}`);
          return false;
        }
        await sleep(200 * 2 ** attempt); // the network: the lease is the last resort
      }
    }
    return this.recorded;
  }

  /** Hand back a claim whose call never started. @param {SignoffClient} client */
  async release(client) {
    if (!this.claim || this.started) return;
    try {
      await client.release(this.record.id, this.claim.claim_token);
    } catch (err) {
      console.error(`could not release approval ${this.record.id}: ${err}`);
    }
    this.claim = null;
  }

  /** Spend a claim whose call never started and never will. @param {SignoffClient} client
   * @param {string} why */
  async notRun(client, why) {
    if (!this.claim || this.recorded || this.started) return;
    this.outcome = ["failed", { ran: false, error: why }];
    await this.resend(client);
  }
}

/** The resumed run this async context belongs to: its client and gated calls by call id.
 * @type {AsyncLocalStorage<{client: SignoffClient, calls: Map<string, PausedCall>}>} */
export const gates = new AsyncLocalStorage();

/**
 * The approvals filed together with `trigger` (one model turn), newest per call id, and the
 * call ids not filed (yet).
 * @param {SignoffClient} client
 * @param {ApprovalRecord} trigger
 * @param {Record<string, any>} meta
 * @param {string} marker
 */
export async function filedTogether(client, trigger, meta, marker) {
  const callIds = (meta.call_ids ?? [meta.call_id]).map(String);
  /** @type {Map<string, ApprovalRecord>} */
  const found = new Map([[String(meta.call_id), trigger]]);
  if (callIds.length > 1) {
    for await (const record of client.all({ run_id: trigger.run_id, limit: 500 })) {
      const other = filedMeta(record, marker);
      if (other && other.state_sha256 === meta.state_sha256 && callIds.includes(String(other.call_id))
        && !found.has(String(other.call_id))) {
        found.set(String(other.call_id), record);
      }
      if (found.size === callIds.length) break;
    }
  }
  return { found, missing: callIds.filter((/** @type {string} */ c) => !found.has(c)) };
}

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
export function report(call) {
  return {
    approvalId: call.record.id,
    callId: call.callId,
    tool: { name: call.name, arguments: call.runArguments },
    edited: Boolean(call.claim?.edited),
    decision: call.claim ? "approved" : call.record.state,
    execution: call.outcome ? "finished" : call.started ? "started" : "not_started",
    outcome: call.outcome ? call.outcome[0] : null,
    output: call.output,
    message: call.message,
  };
}

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
export async function prepare(client, approvalId, marker, load, { lease, wait = 0 } = {}) {
  /** @param {ResumeResult["status"]} status @param {string} detail */
  const done = (status, detail) => ({ done: { status, approvalId, calls: [], detail } });
  const trigger = await client.get(approvalId);
  const meta = filedMeta(trigger, marker);
  if (!meta) throw new TypeError(`approval ${approvalId} was not filed by this adapter`);
  if (trigger.state === "pending" && !(wait > 0)) return done("waiting", "its decision is pending");
  if (trigger.state === "superseded" && (trigger.decision_note ?? "").startsWith(REFUSED)) {
    return done("refused", trigger.decision_note ?? "");
  }
  if (TAKEN.has(trigger.state)) return done("already_resumed", `it is ${trigger.state}`);
  const { found, missing } = await filedTogether(client, trigger, meta, marker);
  if (missing.length) return done("waiting", `calls ${missing} of this turn are not filed yet`);
  const records = [...found.values()];
  const pending = records.filter((r) => r.state === "pending").map((r) => r.id);
  if (pending.length && wait > 0) {
    await client.waitAll(pending, { maxWait: wait });
    return prepare(client, approvalId, marker, load, { lease }); // read the turn afresh
  }
  if (pending.length) return done("waiting", `still pending: ${pending}`);
  const taken = records.filter((r) => TAKEN.has(r.state)).map((r) => r.id);
  if (taken.length) return done("already_resumed", `already claimed: ${taken}`);

  const { calls, context } = await load(meta, found);
  for (const call of calls) {
    if (!matchesApproval(call.record, call.name, call.arguments)) {
      await refuse(client, calls, `approval ${call.record.id}: the paused run would call `
        + `${call.name} with arguments that do not hash to what was approved`);
    }
  }
  for (const call of calls) {
    if (call.record.state !== "approved") {
      call.message = notRunMessage(call.record);
      continue;
    }
    try {
      call.claim = await client.claim(call.record.id, { lease });
    } catch (err) {
      if (err instanceof ApprovalExpired || err instanceof PolicyChanged) {
        call.record = await client.get(call.record.id);
        call.message = notRunMessage(call.record);
        continue;
      }
      if (err instanceof NotPending) {
        if (err.state && TAKEN.has(err.state)) { // another resumer has this run
          await releaseAll(client, calls);
          return done("already_resumed", `${call.record.id} is ${err.state}`);
        }
        call.record = await client.get(call.record.id);
        if (/** @type {readonly string[]} */ (CLOSED).includes(call.record.state)) {
          call.message = notRunMessage(call.record); // withdrawn since we looked
          continue;
        }
      }
      await releaseAll(client, calls);
      throw err;
    }
    const why = claimMismatch(call.claim, call.record, { name: call.name, arguments: call.arguments });
    if (why) await refuse(client, calls, why);
  }
  return { calls, context };
}

/** @param {SignoffClient} client @param {PausedCall[]} calls */
export async function releaseAll(client, calls) {
  for (const call of calls) await call.release(client);
}

/**
 * Release what this process claimed, withdraw the grants the paused run does not match (so
 * nothing else claims them), and throw.
 * @param {SignoffClient} client @param {PausedCall[]} calls @param {string} message
 * @returns {Promise<never>}
 */
export async function refuse(client, calls, message) {
  await releaseAll(client, calls);
  for (const call of calls) {
    if (call.record.state === "pending" || call.record.state === "approved") {
      try {
        await client.supersede(call.record.id, `${REFUSED}${message}`.slice(0, 4000));
      } catch (err) {
        if (!(err instanceof SignoffError)) throw err; // it moved on by itself
      }
    }
  }
  throw new ResumeRefused(message);
}

/**
 * The second half: after the framework's run returned or threw. A claimed call whose tool
 * never started is released when the run threw before anything started (the paused state is
 * still the truth, and a later resume may retry), and otherwise recorded as not run (the run
 * went on without it, and handing it back would let it run out of turn). A call that started
 * and never returned is left to its lease.
 * @param {SignoffClient} client @param {PausedCall[]} calls @param {boolean} threw
 */
export async function settle(client, calls, threw) {
  for (const call of calls) await call.resend(client);
  const anyStarted = calls.some((c) => c.claim && c.started);
  for (const call of calls) {
    if (!call.claim || call.started) continue;
    if (threw && !anyStarted) await call.release(client);
    else await call.notRun(client, threw
      ? "the resumed run failed before running the tool"
      : "the resumed run went on without running the tool");
  }
}

/**
 * Run a gated tool's body for the call `callId` of the resumed run in this async context:
 * exactly the claimed call, recorded in signoff as soon as it returns. Outside a resume, or for
 * a call signoff did not approve, it refuses to run.
 * @template T
 * @param {string | undefined} callId
 * @param {(args: Record<string, unknown>, key: string) => Promise<T>} body
 * @returns {Promise<{output: T, note: string | null}>}
 */
export async function runGated(callId, body) {
  const run = gates.getStore();
  const call = callId ? run?.calls.get(callId) : undefined;
  if (!run || !call || !call.claim || call.started) {
    throw new Error("this tool runs only as a call approved through signoff "
      + "(resume the run with the signoff adapter)");
  }
  const claim = call.claim;
  call.started = true;
  let output;
  try {
    output = await body(claim.tool.arguments, claim.idempotency_key);
  } catch (err) {
    call.output = String(err);
    await call.finish(run.client, "failed", { error: String(err) });
    throw err;
  }
  call.output = output;
  await call.finish(run.client, "succeeded", resultOf(output));
  const note = claim.edited ? editNote(call.record, call.arguments, claim.tool.arguments) : null;
  return { output, note };
}

/** The idempotency key of the claim the current gated call runs under, or null.
 * @param {string | undefined} callId */
export function idempotencyKeyFor(callId) {
  const call = callId ? gates.getStore()?.calls.get(callId) : undefined;
  return call?.claim?.idempotency_key ?? null;
}
