// @ts-check
/**
 * The server's errors, rebuilt from their stable `code` (docs/reference.md, "Errors"): switch on
 * the class (`instanceof NotPending`) or on `.code`; `.details` holds the error's other fields
 * (`state`, `fields`, `retry_after`, ...) and `.status` the HTTP status.
 * @module
 */

export class SignoffError extends Error {
  /** @type {string} */
  static code = "error";

  /**
   * @param {string} [message]
   * @param {{status?: number, details?: Record<string, unknown>, code?: string}} [info]
   */
  constructor(message, info = {}) {
    const own = /** @type {typeof SignoffError} */ (new.target);
    super(message ?? own.code);
    this.name = own.name;
    /** The server's stable code, e.g. `not_pending`. */
    this.code = info.code ?? own.code;
    /** The HTTP status, when the error came from an answer. */
    this.status = info.status;
    /** The error's other fields as the server sent them. */
    this.details = info.details ?? {};
  }
}

export class InvalidRequest extends SignoffError {
  static code = "invalid_request";
  /** Validation failures, `{field, message}` each. @returns {{field: string, message: string}[]} */
  get fields() {
    const fields = this.details.fields;
    return Array.isArray(fields) ? fields : [];
  }
}
export class MalformedJson extends InvalidRequest { static code = "malformed_json"; }
export class RequestTooLarge extends InvalidRequest { static code = "too_large"; }
export class NotCanonical extends InvalidRequest { static code = "not_canonical"; }
export class NoRoute extends InvalidRequest { static code = "no_route"; }
export class ApproversOutsideRoute extends InvalidRequest { static code = "approvers_outside_route"; }
export class NotFound extends SignoffError { static code = "not_found"; }
export class NotPending extends SignoffError {
  static code = "not_pending";
  /** The state the approval is in instead. @returns {string | undefined} */
  get state() {
    return typeof this.details.state === "string" ? this.details.state : undefined;
  }
}
export class ApprovalExpired extends NotPending { static code = "expired"; }
export class PolicyChanged extends NotPending { static code = "policy_changed"; }
export class ApprovalChanged extends SignoffError { static code = "approval_changed"; }
export class ApprovalCorrupt extends SignoffError { static code = "approval_corrupt"; }
export class LeaseExhausted extends SignoffError { static code = "lease_exhausted"; }
export class ClaimMismatch extends SignoffError { static code = "claim_mismatch"; }
export class Unauthorized extends SignoffError { static code = "unauthorized"; }
export class EditRefused extends SignoffError { static code = "edit_refused"; }
export class Overloaded extends SignoffError {
  static code = "overloaded";
  /** Seconds the server asked to wait. @type {number | undefined} */
  retryAfter;
}
/** The server holds as many waits as it may; `wait` waits Retry-After and waits again. */
export class TooManyWaits extends Overloaded { static code = "too_many_waits"; }
export class StoreUnavailable extends SignoffError { static code = "store_unavailable"; }
export class SchemaOutOfDate extends SignoffError { static code = "schema_out_of_date"; }
export class BadWebhookSignature extends SignoffError { static code = "bad_signature"; }

/** @type {Map<string, typeof SignoffError>} */
const BY_CODE = new Map(
  [
    InvalidRequest, MalformedJson, RequestTooLarge, NotCanonical, NoRoute, ApproversOutsideRoute,
    NotFound, NotPending, ApprovalExpired, PolicyChanged, ApprovalChanged, ApprovalCorrupt,
    LeaseExhausted, ClaimMismatch, Unauthorized, EditRefused, Overloaded, TooManyWaits, StoreUnavailable,
    SchemaOutOfDate,
  ].map((cls) => [cls.code, cls]),
);

/**
 * The error class for a server code; an unknown code is a plain SignoffError carrying it, so a
 * newer server's code still reaches the caller.
 * @param {string} code
 * @param {string} message
 * @param {Record<string, unknown>} [details]
 * @param {number} [status]
 * @returns {SignoffError}
 */
export function errorFromCode(code, message, details = {}, status) {
  const cls = BY_CODE.get(code) ?? SignoffError;
  return new cls(message, { code, details, status });
}
