// @ts-check
/**
 * Verifying signoff's decision webhooks, which follow the Standard Webhooks specification
 * (https://www.standardwebhooks.com), with that specification's library.
 * @module
 */
import { Webhook } from "standardwebhooks";

import { BadWebhookSignature } from "./errors.js";

const PREFIX = "whsec_";

/**
 * Why `secret` is not a usable Standard Webhooks secret, or null.
 * @param {string} secret
 * @returns {string | null}
 */
export function secretProblem(secret) {
  if (typeof secret !== "string" || !secret.startsWith(PREFIX)) {
    return "it does not start with whsec_ (make one with `signoff webhook-secret`)";
  }
  const encoded = secret.slice(PREFIX.length);
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(encoded) || encoded.length % 4 !== 0) {
    return "what follows whsec_ is not base64";
  }
  const size = Buffer.from(encoded, "base64").length;
  if (size < 24) return `its key is ${size} bytes; Standard Webhooks asks for 24 to 64`;
  return null;
}

/**
 * @param {Headers | Record<string, string | string[] | undefined>} headers
 * @returns {Record<string, string>}
 */
function lowerHeaders(headers) {
  /** @type {Record<string, string>} */
  const out = {};
  const entries = typeof Headers !== "undefined" && headers instanceof Headers
    ? [...headers.entries()]
    : Object.entries(headers);
  for (const [key, value] of entries) {
    if (value !== undefined) out[key.toLowerCase()] = Array.isArray(value) ? value.join(", ") : value;
  }
  return out;
}

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
export function verifyWebhook(headers, body, secret) {
  const secrets = typeof secret === "string" ? [secret] : [...secret];
  const flat = lowerHeaders(headers);
  const text = typeof body === "string" ? body : Buffer.from(body).toString("utf8");
  const reasons = [];
  for (const candidate of secrets) {
    const problem = secretProblem(candidate);
    if (problem) throw new BadWebhookSignature(`the webhook secret is unusable: ${problem}`);
    try {
      const event = new Webhook(candidate).verify(text, flat);
      return { id: flat["webhook-id"], event: /** @type {any} */ (event) };
    } catch (err) {
      reasons.push(err instanceof Error ? err.message : String(err));
    }
  }
  throw new BadWebhookSignature(`webhook does not verify: ${reasons.join("; ") || "no secret"}`);
}
