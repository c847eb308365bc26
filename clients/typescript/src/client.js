// @ts-check
/**
 * The agent-side client of signoff's HTTP API (docs/reference.md), after the Python
 * `signoff_client.SignoffClient`:
 *
 *     const client = new SignoffClient();            // SIGNOFF_URL, SIGNOFF_API_KEY
 *     const approval = await client.create({ run_id, capability, tool, presentation });
 *     // ...end the turn; the signed webhook (verifyWebhook) says when it is decided
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
 * @module
 */
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";

import { Overloaded, SignoffError, errorFromCode } from "./errors.js";

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
 *   headers?: Record<string, string>, retry?: boolean}} Call */

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
  async once({ method, path, body, query, headers }) {
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
      signal: AbortSignal.timeout(this.timeoutMs),
    });
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
   * Poll until the approval leaves `pending` or `maxWait` seconds pass, backing off from `first`
   * to `most` seconds. For short waits in scripts: a human may take days, so a real agent ends
   * its turn and resumes on the webhook. Returns the latest record (pending if time ran out).
   * @param {string} id
   * @param {{maxWait?: number, first?: number, most?: number, signal?: AbortSignal}} [options]
   * @returns {Promise<ApprovalRecord>}
   */
  async wait(id, { maxWait = 60, first = 0.5, most = 10, signal } = {}) {
    const deadline = performance.now() + maxWait * 1000;
    let delay = first;
    for (;;) {
      const record = await this.get(id);
      const left = (deadline - performance.now()) / 1000;
      if (record.state !== "pending" || left <= 0) return record;
      await sleep(Math.min(delay, left) * 1000, undefined, { signal });
      delay = Math.min(delay * 2, most);
    }
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
