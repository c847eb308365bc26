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
export function retryAfterSeconds(value: string | null): number | undefined;
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
     * Poll until the approval leaves `pending` or `maxWait` seconds pass, backing off from `first`
     * to `most` seconds. For short waits in scripts: a human may take days, so a real agent ends
     * its turn and resumes on the webhook. Returns the latest record (pending if time ran out).
     * @param {string} id
     * @param {{maxWait?: number, first?: number, most?: number, signal?: AbortSignal}} [options]
     * @returns {Promise<ApprovalRecord>}
     */
    wait(id: string, { maxWait, first, most, signal }?: {
        maxWait?: number;
        first?: number;
        most?: number;
        signal?: AbortSignal;
    }): Promise<ApprovalRecord>;
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
export type Call = {
    method: string;
    path: string;
    body?: unknown;
    query?: Record<string, unknown>;
    headers?: Record<string, string>;
    retry?: boolean;
};
