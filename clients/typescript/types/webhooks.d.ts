/**
 * Why `secret` is not a usable Standard Webhooks secret, or null.
 * @param {string} secret
 * @returns {string | null}
 */
export function secretProblem(secret: string): string | null;
/**
 * Verify a decision webhook as received: its headers (a Fetch `Headers` or Node's
 * `req.headers`) and the raw body, before any JSON parsing. Returns the parsed event and the
 * delivery id (`webhook-id`, stable across retries: dedupe on it).
 *
 * `secret` may be a list while you rotate: the webhook verifies if it is signed by any of them
 * (signoff signs with every configured secret during a rotation). Throws BadWebhookSignature
 * when a header is missing, the timestamp is more than five minutes from now, or no signature
 * matches.
 * @param {Headers | Record<string, string | string[] | undefined>} headers
 * @param {string | Uint8Array} body
 * @param {string | readonly string[]} secret
 * @returns {{id: string, event: import("./records.js").WebhookEvent}}
 */
export function verifyWebhook(headers: Headers | Record<string, string | string[] | undefined>, body: string | Uint8Array, secret: string | readonly string[]): {
    id: string;
    event: import("./records.js").WebhookEvent;
};
