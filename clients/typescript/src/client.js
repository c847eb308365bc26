// @ts-check
/**
 * The agent-side client of signoff's HTTP API (docs/reference.md), after the Python
 * `signoff_client.SignoffClient`:
 *
 *     const client = new SignoffClient();            // SIGNOFF_URL, SIGNOFF_API_KEY
 *     const approval = await client.create({ run_id, capability, tool, presentation });
 *     // wait for the decision, held on the server (no public URL needed); or end the turn
 *     // and act on the signed decision webhook (verifyWebhook)
 *     const decided = await client.wait(approval.id, { maxWait: 3600 });
 *     if (decided.state !== "approved") return decided.state;
 *     const claim = await client.claim(approval.id);
 *     const outcome = await runTool(claim.tool, claim.idempotency_key);
 *     await client.complete(approval.id, claim.claim_token, "succeeded", outcome);
 *
 * Errors are the server's, rebuilt from their code (errors.js). A network failure is fetch's
 * own TypeError, or a TimeoutError after `timeoutMs`: every call is safe to repeat (a create is
 * found again, a claim with the same Idempotency-Key is the same claim, a repeated completion
 * returns the recorded outcome), and `claim` repeats a lost answer itself.
 *
 * A 429, or a 503 with Retry-After, changed nothing: every call but `cancel` and `supersede` is
 * asked again after the wait the server names (at most `overloadWaitMax` seconds, plus up to a
 * quarter at random so refused agents do not return together), within `overloadAttempts`
 * attempts and `overloadBudget` seconds of waiting; then the answer's error is thrown
 * (`Overloaded` with `retryAfter`, `StoreUnavailable`).
 *
 * `wait`, `waitAny` and `waitAll` hold a request open on the server (`?wait=`, at most 60 s,
 * renewed until their deadline), which answers when the decision is committed. Against a server
 * without waits (no `Signoff-Wait` header in its answer) they poll, backing off from
 * `pollFirst` to `pollMost` seconds; a wait refused with 429 (`too_many_waits`) is asked again
 * after its Retry-After, within the deadline.
 * @module
 */
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";

import { InvalidRequest, NotFound, Overloaded, SignoffError, errorFromCode } from "./errors.js";

/**
 * @typedef {import("./records.js").ApprovalRecord} ApprovalRecord
 * @typedef {import("./records.js").CreateBody} CreateBody
 * @typedef {import("./records.js").Claim} Claim
 * @typedef {import("./records.js").ApprovalState} ApprovalState
 */

/**
 * @typedef {object} ClientOptions
 * @property {string} [baseUrl] The server, e.g. `https://signoff.internal`; default
 *   `$SIGNOFF_URL`.
 * @property {string} [apiKey] The tenant's API key; default `$SIGNOFF_API_KEY`.
 * @property {number} [timeoutMs] Per request (default 30,000).
 * @property {number} [overloadAttempts] Attempts in all for a refused call (default 8; 1 never
 *   retries).
 * @property {number} [overloadBudget] Seconds of waiting per call, at most (default 120).
 * @property {number} [overloadWaitMax] Seconds per wait, at most (default 30).
 * @property {number} [pollFirst] Against a server without waits, `wait` polls after this many
 *   seconds first (default 0.5)...
 * @property {number} [pollMost] ...doubling up to this many (default 10).
 * @property {typeof fetch} [fetch] For tests and proxies.
 */

/**
 * @typedef {object} ListFilters
 * @property {ApprovalState} [state]
 * @property {string} [run_id]
 * @property {string} [capability]
 * @property {string} [assignee]
 * @property {number} [limit] 1-500 (default 50).
 * @property {string | null} [cursor] The previous page's `nextCursor`.
 */

/**
 * @typedef {object} Page
 * @property {ApprovalRecord[]} approvals Newest first.
 * @property {string | null} nextCursor Null on the last page.
 * @property {boolean} truncated The page was cut short by size.
 */

/** @typedef {{method: string, path: string, body?: unknown, query?: Record<string, unknown>,
 *   headers?: Record<string, string>, retry?: boolean, extraMs?: number,
 *   answer?: {headers?: Headers}}} Call `extraMs`: added to the timeout (a held wait);
 *   `answer.headers`: set to the response's headers. */

/**
 * @typedef {object} WaitOptions
 * @property {number} [maxWait] Seconds to wait in all (default 60; hours are fine).
 * @property {number} [first] Polling only: the first delay (default the client's `pollFirst`).
 * @property {number} [most] Polling only: the longest delay (default the client's `pollMost`).
 * @property {AbortSignal} [signal] Stops the wait (the promise rejects with the reason).
 */

/** The longest wait a server holds; a longer deadline renews it. */
export const WAIT_MAX = 60;
/** How many ids one batch wait names, at most. */
export const WAIT_IDS_MAX = 100;

/**
 * Seconds from a Retry-After header (seconds or an HTTP date), or undefined.
 * @param {string | null} value
 * @returns {number | undefined}
 */
export function retryAfterSeconds(value) {
  if (value == null || value.trim() === "") return undefined;
  const text = value.trim();
  let seconds = /^\d+(\.\d+)?$/.test(text) ? Number(text) : NaN;
  if (Number.isNaN(seconds)) {
    const when = Date.parse(text);
    if (Number.isNaN(when)) return undefined;
    seconds = (when - Date.now()) / 1000;
  }
  return Math.max(0, seconds);
}

class Refused extends Error {
  /** @param {SignoffError} error @param {number} wait */
  constructor(error, wait) {
    super(error.message);
    this.error = error;
    this.wait = wait;
  }
}

export class SignoffClient {
  /** @param {ClientOptions} [options] */
  constructor(options = {}) {
    const baseUrl = options.baseUrl ?? process.env.SIGNOFF_URL;
    const apiKey = options.apiKey ?? process.env.SIGNOFF_API_KEY;
    if (!baseUrl) throw new TypeError("no signoff URL: pass baseUrl or set SIGNOFF_URL");
    if (!apiKey) throw new TypeError("no API key: pass apiKey or set SIGNOFF_API_KEY");
    const attempts = options.overloadAttempts ?? 8;
    if (!(attempts >= 1)) throw new RangeError("overloadAttempts must be at least 1");
    /** @readonly */
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    /** @private */
    this.apiKey = apiKey;
    /** @private */
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.overloadAttempts = attempts;
    this.overloadBudget = options.overloadBudget ?? 120;
    this.overloadWaitMax = options.overloadWaitMax ?? 30;
    this.pollFirst = options.pollFirst ?? 0.5;
    this.pollMost = options.pollMost ?? 10;
    if (!(this.pollFirst > 0 && this.pollFirst <= this.pollMost)) {
      throw new RangeError("pollFirst must be above 0 and at most pollMost");
    }
    /** @private */
    this.fetch = options.fetch ?? globalThis.fetch;
  }

  /**
   * One call, asked again after a 429 (or a 503 with Retry-After) within the overload budget.
   * @private
   * @param {Call} call
   * @returns {Promise<any>}
   */
  async call(call) {
    let waited = 0;
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.once(call);
      } catch (err) {
        if (!(err instanceof Refused)) throw err;
        const wait = Math.min(Math.min(err.wait, this.overloadWaitMax) * (1 + Math.random() / 4),
          this.overloadWaitMax);
        if (call.retry === false || attempt >= this.overloadAttempts
          || waited + wait > this.overloadBudget) {
          throw err.error;
        }
        await sleep(wait * 1000);
        waited += wait;
      }
    }
  }

  /**
   * @private
   * @param {Call} call
   * @returns {Promise<any>}
   */
  async once({ method, path, body, query, headers, extraMs = 0, answer }) {
    const url = new URL(this.baseUrl + path);
    for (const [key, value] of Object.entries(query ?? {})) {
      if (value !== undefined && value !== null) url.searchParams.set(key, String(value));
    }
    const response = await this.fetch(url, {
      method,
      headers: {
        Authorization: `Bearer ${this.apiKey}`,
        ...(body === undefined ? {} : { "Content-Type": "application/json" }),
        ...headers,
      },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(Math.ceil(this.timeoutMs + extraMs)),
    });
    if (answer) answer.headers = response.headers;
    const text = await response.text();
    let data;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (response.ok) return data;
    const wait = retryAfterSeconds(response.headers.get("Retry-After"));
    const error = data?.error;
    let found;
    if (error && typeof error === "object" && typeof error.code === "string") {
      const { code, message, ...details } = error;
      found = errorFromCode(code, String(message), details, response.status);
    } else if (response.status === 429) {
      found = new Overloaded(`HTTP 429 from ${path}`, { status: 429 }); // a proxy's own limit
    } else {
      found = new SignoffError(`HTTP ${response.status} from ${path}`, { status: response.status });
    }
    if (found instanceof Overloaded) found.retryAfter = wait;
    if (response.status === 429) throw new Refused(found, wait ?? 1);
    if (response.status === 503 && wait !== undefined) throw new Refused(found, wait);
    throw found;
  }

  /**
   * Ask for a decision: creates the request, or finds it again (same run_id and call).
   * @param {CreateBody} body
   * @returns {Promise<ApprovalRecord>}
   */
  create(body) {
    return this.call({ method: "POST", path: "/v1/approvals", body });
  }

  /** @param {string} id @returns {Promise<ApprovalRecord>} */
  get(id) {
    return this.call({ method: "GET", path: `/v1/approvals/${encodeURIComponent(id)}` });
  }

  /**
   * One page of approvals, newest first.
   * @param {ListFilters} [filters]
   * @returns {Promise<Page>}
   */
  async list(filters = {}) {
    const data = await this.call({ method: "GET", path: "/v1/approvals", query: { ...filters } });
    return {
      approvals: data.approvals,
      nextCursor: data.next_cursor ?? null,
      truncated: Boolean(data.truncated),
    };
  }

  /**
   * Every approval matching `filters`, page by page.
   * @param {Omit<ListFilters, "cursor">} [filters]
   * @returns {AsyncGenerator<ApprovalRecord>}
   */
  async *all(filters = {}) {
    /** @type {string | null} */
    let cursor = null;
    do {
      const page = await this.list({ ...filters, cursor });
      yield* page.approvals;
      cursor = page.nextCursor;
    } while (cursor);
  }

  /**
   * The route a request for `capability` would take now, or null (it would be `no_route`).
   * @param {string} capability
   * @returns {Promise<{capability: string, approvers: string[], required_approvals: number} | null>}
   */
  async route(capability) {
    const data = await this.call({ method: "GET", path: "/v1/routes/match", query: { capability } });
    return data.route;
  }

  /**
   * Wait until the approval leaves `pending` or `maxWait` seconds pass; the latest record (still
   * pending if the time ran out). The wait is held on the server and answered when the decision
   * is committed: no public URL, no polling. `maxWait` may be hours; a process that may not live
   * that long ends its turn and waits again later (or resumes on the webhook).
   * @param {string} id
   * @param {WaitOptions} [options]
   * @returns {Promise<ApprovalRecord>}
   */
  async wait(id, options = {}) {
    const [record] = await this.waitUntil([id], options, true);
    return record;
  }

  /**
   * The answer to a question (or to a call answered instead of run): the words, or the option
   * chosen, waiting as `wait` does; null if still unanswered when the time runs out, or if the
   * request ended otherwise (expired, cancelled: `get` says which).
   * @param {string} id
   * @param {WaitOptions} [options]
   * @returns {Promise<string | null>}
   */
  async answer(id, options = {}) {
    const record = await this.wait(id, options);
    const given = record.state === "answered" ? record.answer : null;
    if (!given) return null;
    return "text" in given ? String(given.text) : String(given.option);
  }

  /**
   * Wait until any of the approvals (up to 100) leaves `pending`, on one held request
   * (`GET /v1/approvals?ids=...&wait=`); their records in the order asked (ids this tenant has no
   * request of are left out). A server without waits is polled one id at a time.
   * @param {string[]} ids
   * @param {WaitOptions} [options]
   * @returns {Promise<ApprovalRecord[]>}
   */
  async waitAny(ids, options = {}) {
    if (!ids.length) throw new TypeError("waitAny needs at least one approval id");
    if (ids.length > WAIT_IDS_MAX) throw new RangeError(`waitAny takes at most ${WAIT_IDS_MAX} ids`);
    return this.waitUntil(ids, options, false);
  }

  /**
   * Wait until none of the approvals is `pending` (the requests of one agent turn, all decided),
   * or `maxWait` seconds pass; every record, in the order asked.
   * @param {string[]} ids
   * @param {WaitOptions} [options]
   * @returns {Promise<ApprovalRecord[]>}
   */
  async waitAll(ids, options = {}) {
    const deadline = performance.now() + (options.maxWait ?? 60) * 1000;
    /** @type {Map<string, ApprovalRecord>} */
    const latest = new Map();
    let waiting = [...new Set(ids)];
    while (waiting.length) {
      const left = Math.max(0, (deadline - performance.now()) / 1000);
      for (const record of await this.waitAny(waiting, { ...options, maxWait: left })) {
        latest.set(record.id, record);
      }
      waiting = waiting.filter((id) => latest.get(id)?.state === "pending");
      if (left <= 0) break;
    }
    return [...new Set(ids)].flatMap((id) => latest.has(id) ? [/** @type {ApprovalRecord} */ (latest.get(id))] : []);
  }

  /**
   * The loop behind the waits: hold a server wait of min(60 s, what is left) and renew it; once
   * an answer comes without `Signoff-Wait`, poll with backoff instead.
   * @private
   * @param {string[]} ids
   * @param {WaitOptions} options
   * @param {boolean} single
   * @returns {Promise<ApprovalRecord[]>}
   */
  async waitUntil(ids, { maxWait = 60, first, most, signal } = {}, single) {
    const deadline = performance.now() + maxWait * 1000;
    const leftNow = () => (deadline - performance.now()) / 1000;
    let delay = first ?? this.pollFirst;
    const longest = most ?? this.pollMost;
    let held = true; // until a server answers a wait without the header
    for (;;) {
      signal?.throwIfAborted();
      let offered = false;
      /** @type {ApprovalRecord[]} */
      let records;
      if (held && leftNow() >= 0.001) {
        try {
          [records, offered] = await this.heldWait(ids, Math.min(WAIT_MAX, leftNow()), single);
        } catch (err) {
          if (!(err instanceof Refused)) throw err;
          if (leftNow() <= 0) throw err.error;
          await sleep(Math.min(err.wait, leftNow()) * 1000, undefined, { signal });
          continue; // too many waits open: come back when told
        }
        held = offered;
      } else {
        records = await this.read(ids, single);
      }
      const left = leftNow();
      if (left <= 0 || !records.length || records.some((r) => r.state !== "pending")) return records;
      if (offered) continue;
      await sleep(Math.min(delay, left) * 1000, undefined, { signal });
      delay = Math.min(delay * 2, longest);
    }
  }

  /**
   * One held wait: the records, and whether the server honoured it (`Signoff-Wait`).
   * @private
   * @param {string[]} ids @param {number} seconds @param {boolean} single
   * @returns {Promise<[ApprovalRecord[], boolean]>}
   */
  async heldWait(ids, seconds, single) {
    /** @type {{headers?: Headers}} */
    const answer = {};
    const wait = seconds.toFixed(3);
    const path = single ? `/v1/approvals/${encodeURIComponent(ids[0])}` : "/v1/approvals";
    // `ids` keeps the page to these requests, `limit` all of them on it.
    const query = single ? { wait, seen: "pending" }
      : { ids: ids.join(","), limit: ids.length, wait, seen: "pending" };
    let data;
    try {
      data = await this.once({ method: "GET", path, query, extraMs: seconds * 1000, answer });
    } catch (err) {
      const named = new Set((err instanceof InvalidRequest ? err.fields : []).map((f) => f?.field));
      if (single || !["ids", "wait", "seen"].some((f) => named.has(f))) throw err;
      return [await this.read(ids, single), false]; // older than the batch form: one by one
    }
    const offered = answer.headers?.has("Signoff-Wait") ?? false;
    if (single) return [[data], offered];
    if (!offered) return [await this.read(ids, single), false];
    const found = new Map(data.approvals.map((/** @type {ApprovalRecord} */ a) => [a.id, a]));
    return [ids.flatMap((id) => found.has(id) ? [found.get(id)] : []), true]; // in asked order
  }

  /**
   * The records as they stand, one plain read each (what any server answers).
   * @private
   * @param {string[]} ids @param {boolean} single
   * @returns {Promise<ApprovalRecord[]>}
   */
  async read(ids, single) {
    if (single) return [await this.get(ids[0])];
    const found = [];
    for (const id of ids) {
      try {
        found.push(await this.get(id));
      } catch (err) {
        if (!(err instanceof NotFound)) throw err; // as the batch form: left out
      }
    }
    return found;
  }

  /**
   * Take the approved call for execution; one caller wins, the others get NotPending. The claim
   * carries an Idempotency-Key (a new UUID unless you pass one stored with your run, so that a
   * restarted process recovers its claim); a lost answer is asked again with the same key, up to
   * `attempts` tries, and the server hands back the same claim.
   * @param {string} id
   * @param {{lease?: string, idempotencyKey?: string, attempts?: number}} [options]
   * @returns {Promise<Claim>}
   */
  async claim(id, { lease, idempotencyKey, attempts = 3 } = {}) {
    const key = idempotencyKey ?? randomUUID();
    const call = {
      method: "POST",
      path: `/v1/approvals/${encodeURIComponent(id)}/claim`,
      body: lease ? { lease } : {},
      headers: { "Idempotency-Key": key },
    };
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.call(call);
      } catch (err) {
        if (err instanceof SignoffError || attempt >= attempts) throw err;
        await sleep(200 * 2 ** attempt); // the network lost the answer: same key, same claim
      }
    }
  }

  /**
   * Hold a claimed call longer: `lease` from now (default the server's), never past 24 h from
   * the claim (LeaseExhausted).
   * @param {string} id @param {string} claimToken @param {string} [lease]
   * @returns {Promise<ApprovalRecord>}
   */
  renew(id, claimToken, lease) {
    const body = lease ? { claim_token: claimToken, lease } : { claim_token: claimToken };
    return this.call({ method: "POST", path: `/v1/approvals/${encodeURIComponent(id)}/renew`, body });
  }

  /**
   * Hand a claimed call back without having started it: approved again.
   * @param {string} id @param {string} claimToken
   * @returns {Promise<ApprovalRecord>}
   */
  release(id, claimToken) {
    return this.call({
      method: "POST",
      path: `/v1/approvals/${encodeURIComponent(id)}/release`,
      body: { claim_token: claimToken },
    });
  }

  /**
   * Report what the claimed call did; recorded whenever it arrives, safe to repeat.
   * @param {string} id @param {string} claimToken
   * @param {"succeeded" | "failed"} outcome
   * @param {unknown} [result] Any JSON, up to 16 KiB in canonical form.
   * @returns {Promise<ApprovalRecord>}
   */
  complete(id, claimToken, outcome, result = null) {
    return this.call({
      method: "POST",
      path: `/v1/approvals/${encodeURIComponent(id)}/complete`,
      body: { claim_token: claimToken, outcome, result },
    });
  }

  /**
   * Withdraw a pending or approved request (not asked again when refused for load: the caller
   * decides whether a withdrawal is still wanted).
   * @param {string} id @param {string} [reason]
   * @returns {Promise<ApprovalRecord>}
   */
  cancel(id, reason) {
    return this.call({
      method: "POST",
      path: `/v1/approvals/${encodeURIComponent(id)}/cancel`,
      body: reason ? { reason } : {},
      retry: false,
    });
  }

  /**
   * Close a pending or approved request whose preconditions no longer hold.
   * @param {string} id @param {string} reason
   * @returns {Promise<ApprovalRecord>}
   */
  supersede(id, reason) {
    return this.call({
      method: "POST",
      path: `/v1/approvals/${encodeURIComponent(id)}/supersede`,
      body: { reason },
      retry: false,
    });
  }
}
