/**
 * The error class for a server code; an unknown code is a plain SignoffError carrying it, so a
 * newer server's code still reaches the caller.
 * @param {string} code
 * @param {string} message
 * @param {Record<string, unknown>} [details]
 * @param {number} [status]
 * @returns {SignoffError}
 */
export function errorFromCode(code: string, message: string, details?: Record<string, unknown>, status?: number): SignoffError;
/**
 * The server's errors, rebuilt from their stable `code` (docs/reference.md, "Errors"): switch on
 * the class (`instanceof NotPending`) or on `.code`; `.details` holds the error's other fields
 * (`state`, `fields`, `retry_after`, ...) and `.status` the HTTP status.
 * @module
 */
export class SignoffError extends Error {
    /** @type {string} */
    static code: string;
    /**
     * @param {string} [message]
     * @param {{status?: number, details?: Record<string, unknown>, code?: string}} [info]
     */
    constructor(message?: string, info?: {
        status?: number;
        details?: Record<string, unknown>;
        code?: string;
    });
    /** The server's stable code, e.g. `not_pending`. */
    code: string;
    /** The HTTP status, when the error came from an answer. */
    status: number | undefined;
    /** The error's other fields as the server sent them. */
    details: Record<string, unknown>;
}
export class InvalidRequest extends SignoffError {
    /** Validation failures, `{field, message}` each. @returns {{field: string, message: string}[]} */
    get fields(): {
        field: string;
        message: string;
    }[];
}
export class MalformedJson extends InvalidRequest {
}
export class RequestTooLarge extends InvalidRequest {
}
export class NotCanonical extends InvalidRequest {
}
export class NoRoute extends InvalidRequest {
}
export class ApproversOutsideRoute extends InvalidRequest {
}
export class NotFound extends SignoffError {
}
export class NotPending extends SignoffError {
    /** The state the approval is in instead. @returns {string | undefined} */
    get state(): string | undefined;
}
export class ApprovalExpired extends NotPending {
}
export class PolicyChanged extends NotPending {
}
export class ApprovalChanged extends SignoffError {
}
export class ApprovalCorrupt extends SignoffError {
}
export class LeaseExhausted extends SignoffError {
}
export class ClaimMismatch extends SignoffError {
}
export class Unauthorized extends SignoffError {
}
export class EditRefused extends SignoffError {
}
export class Overloaded extends SignoffError {
    /** Seconds the server asked to wait. @type {number | undefined} */
    retryAfter: number | undefined;
}
/** The server holds as many waits as it may; `wait` waits Retry-After and waits again. */
export class TooManyWaits extends Overloaded {
}
export class StoreUnavailable extends SignoffError {
}
export class SchemaOutOfDate extends SignoffError {
}
export class BadWebhookSignature extends SignoffError {
}
