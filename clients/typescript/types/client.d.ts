/**
 * Seconds from a Retry-After header (seconds or an HTTP date), or undefined.
 * @param {string | null} value
 * @returns {number | undefined}
 */
export function retryAfterSeconds(value: string | null): number | undefined;
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
export const WAIT_MAX: 60;
/** How many ids one batch wait names, at most. */
export const WAIT_IDS_MAX: 100;
export class SignoffClient {
    /** @param {ClientOptions} [options] */
    constructor(options?: ClientOptions);
    /** @readonly */
    readonly baseUrl: string;
    /** @private */
    private apiKey;
    /** @private */
    private timeoutMs;
    overloadAttempts: number;
    overloadBudget: number;
    overloadWaitMax: number;
    pollFirst: number;
    pollMost: number;
    /** @private */
    private fetch;
    /**
     * One call, asked again after a 429 (or a 503 with Retry-After) within the overload budget.
     * @private
     * @param {Call} call
     * @returns {Promise<any>}
     */
    private call;
    /**
     * @private
     * @param {Call} call
     * @returns {Promise<any>}
     */
    private once;
    /**
     * Ask for a decision: creates the request, or finds it again (same run_id and call).
     * @param {CreateBody} body
     * @returns {Promise<ApprovalRecord>}
     */
    create(body: CreateBody): Promise<ApprovalRecord>;
    /** @param {string} id @returns {Promise<ApprovalRecord>} */
    get(id: string): Promise<ApprovalRecord>;
    /**
     * One page of approvals, newest first.
     * @param {ListFilters} [filters]
     * @returns {Promise<Page>}
     */
    list(filters?: ListFilters): Promise<Page>;
    /**
     * Every approval matching `filters`, page by page.
     * @param {Omit<ListFilters, "cursor">} [filters]
     * @returns {AsyncGenerator<ApprovalRecord>}
     */
    all(filters?: Omit<ListFilters, "cursor">): AsyncGenerator<ApprovalRecord>;
    /**
     * The route a request for `capability` would take now, or null (it would be `no_route`).
     * @param {string} capability
     * @returns {Promise<{capability: string, approvers: string[], required_approvals: number} | null>}
     */
    route(capability: string): Promise<{
        capability: string;
        approvers: string[];
        required_approvals: number;
    } | null>;
    /**
     * Wait until the approval leaves `pending` or `maxWait` seconds pass; the latest record (still
     * pending if the time ran out). The wait is held on the server and answered when the decision
     * is committed: no public URL, no polling. `maxWait` may be hours; a process that may not live
     * that long ends its turn and waits again later (or resumes on the webhook).
     * @param {string} id
     * @param {WaitOptions} [options]
     * @returns {Promise<ApprovalRecord>}
     */
    wait(id: string, options?: WaitOptions): Promise<ApprovalRecord>;
    /**
     * The answer to a question (or to a call answered instead of run): the words, or the option
     * chosen, waiting as `wait` does; null if still unanswered when the time runs out, or if the
     * request ended otherwise (expired, cancelled: `get` says which).
     * @param {string} id
     * @param {WaitOptions} [options]
     * @returns {Promise<string | null>}
     */
    answer(id: string, options?: WaitOptions): Promise<string | null>;
    /**
     * Wait until any of the approvals (up to 100) leaves `pending`, on one held request
     * (`GET /v1/approvals?ids=...&wait=`); their records in the order asked (ids this tenant has no
     * request of are left out). A server without waits is polled one id at a time.
     * @param {string[]} ids
     * @param {WaitOptions} [options]
     * @returns {Promise<ApprovalRecord[]>}
     */
    waitAny(ids: string[], options?: WaitOptions): Promise<ApprovalRecord[]>;
    /**
     * Wait until none of the approvals is `pending` (the requests of one agent turn, all decided),
     * or `maxWait` seconds pass; every record, in the order asked.
     * @param {string[]} ids
     * @param {WaitOptions} [options]
     * @returns {Promise<ApprovalRecord[]>}
     */
    waitAll(ids: string[], options?: WaitOptions): Promise<ApprovalRecord[]>;
    /**
     * The loop behind the waits: hold a server wait of min(60 s, what is left) and renew it; once
     * an answer comes without `Signoff-Wait`, poll with backoff instead.
     * @private
     * @param {string[]} ids
     * @param {WaitOptions} options
     * @param {boolean} single
     * @returns {Promise<ApprovalRecord[]>}
     */
    private waitUntil;
    /**
     * One held wait: the records, and whether the server honoured it (`Signoff-Wait`).
     * @private
     * @param {string[]} ids @param {number} seconds @param {boolean} single
     * @returns {Promise<[ApprovalRecord[], boolean]>}
     */
    private heldWait;
    /**
     * The records as they stand, one plain read each (what any server answers).
     * @private
     * @param {string[]} ids @param {boolean} single
     * @returns {Promise<ApprovalRecord[]>}
     */
    private read;
    /**
     * Take the approved call for execution; one caller wins, the others get NotPending. The claim
     * carries an Idempotency-Key (a new UUID unless you pass one stored with your run, so that a
     * restarted process recovers its claim); a lost answer is asked again with the same key, up to
     * `attempts` tries, and the server hands back the same claim.
     * @param {string} id
     * @param {{lease?: string, idempotencyKey?: string, attempts?: number}} [options]
     * @returns {Promise<Claim>}
     */
    claim(id: string, { lease, idempotencyKey, attempts }?: {
        lease?: string;
        idempotencyKey?: string;
        attempts?: number;
    }): Promise<Claim>;
    /**
     * Hold a claimed call longer: `lease` from now (default the server's), never past 24 h from
     * the claim (LeaseExhausted).
     * @param {string} id @param {string} claimToken @param {string} [lease]
     * @returns {Promise<ApprovalRecord>}
     */
    renew(id: string, claimToken: string, lease?: string): Promise<ApprovalRecord>;
    /**
     * Hand a claimed call back without having started it: approved again.
     * @param {string} id @param {string} claimToken
     * @returns {Promise<ApprovalRecord>}
     */
    release(id: string, claimToken: string): Promise<ApprovalRecord>;
    /**
     * Report what the claimed call did; recorded whenever it arrives, safe to repeat.
     * @param {string} id @param {string} claimToken
     * @param {"succeeded" | "failed"} outcome
     * @param {unknown} [result] Any JSON, up to 16 KiB in canonical form.
     * @returns {Promise<ApprovalRecord>}
     */
    complete(id: string, claimToken: string, outcome: "succeeded" | "failed", result?: unknown): Promise<ApprovalRecord>;
    /**
     * Withdraw a pending or approved request (not asked again when refused for load: the caller
     * decides whether a withdrawal is still wanted).
     * @param {string} id @param {string} [reason]
     * @returns {Promise<ApprovalRecord>}
     */
    cancel(id: string, reason?: string): Promise<ApprovalRecord>;
    /**
     * Close a pending or approved request whose preconditions no longer hold.
     * @param {string} id @param {string} reason
     * @returns {Promise<ApprovalRecord>}
     */
    supersede(id: string, reason: string): Promise<ApprovalRecord>;
}
export type ApprovalRecord = import("./records.js").ApprovalRecord;
export type CreateBody = import("./records.js").CreateBody;
export type Claim = import("./records.js").Claim;
export type ApprovalState = import("./records.js").ApprovalState;
export type ClientOptions = {
    /**
     * The server, e.g. `https://signoff.internal`; default
     * `$SIGNOFF_URL`.
     */
    baseUrl?: string | undefined;
    /**
     * The tenant's API key; default `$SIGNOFF_API_KEY`.
     */
    apiKey?: string | undefined;
    /**
     * Per request (default 30,000).
     */
    timeoutMs?: number | undefined;
    /**
     * Attempts in all for a refused call (default 8; 1 never
     * retries).
     */
    overloadAttempts?: number | undefined;
    /**
     * Seconds of waiting per call, at most (default 120).
     */
    overloadBudget?: number | undefined;
    /**
     * Seconds per wait, at most (default 30).
     */
    overloadWaitMax?: number | undefined;
    /**
     * Against a server without waits, `wait` polls after this many
     * seconds first (default 0.5)...
     */
    pollFirst?: number | undefined;
    /**
     * ...doubling up to this many (default 10).
     */
    pollMost?: number | undefined;
    /**
     * For tests and proxies.
     */
    fetch?: typeof fetch | undefined;
};
export type ListFilters = {
    state?: import("./records.js").ApprovalState | undefined;
    run_id?: string | undefined;
    capability?: string | undefined;
    assignee?: string | undefined;
    /**
     * 1-500 (default 50).
     */
    limit?: number | undefined;
    /**
     * The previous page's `nextCursor`.
     */
    cursor?: string | null | undefined;
};
export type Page = {
    /**
     * Newest first.
     */
    approvals: ApprovalRecord[];
    /**
     * Null on the last page.
     */
    nextCursor: string | null;
    /**
     * The page was cut short by size.
     */
    truncated: boolean;
};
/**
 * `extraMs`: added to the timeout (a held wait);
 *  `answer.headers`: set to the response's headers.
 */
export type Call = {
    method: string;
    path: string;
    body?: unknown;
    query?: Record<string, unknown>;
    headers?: Record<string, string>;
    retry?: boolean;
    extraMs?: number;
    answer?: {
        headers?: Headers;
    };
};
export type WaitOptions = {
    /**
     * Seconds to wait in all (default 60; hours are fine).
     */
    maxWait?: number | undefined;
    /**
     * Polling only: the first delay (default the client's `pollFirst`).
     */
    first?: number | undefined;
    /**
     * Polling only: the longest delay (default the client's `pollMost`).
     */
    most?: number | undefined;
    /**
     * Stops the wait (the promise rejects with the reason).
     */
    signal?: AbortSignal | undefined;
};
