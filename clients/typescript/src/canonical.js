// @ts-check
/**
 * The request hash a decision binds to: SHA-256 of the RFC 8785 (JCS) form of
 * `{kind, capability, presentation, tool: {name, arguments}}` (a question: `question` in place of
 * `tool`), exactly as the server computes it (bot/canonical.py, docs/hashing.md).
 *
 * The serialiser is our own rather than a package's: it refuses what the server refuses
 * (`not_canonical`) instead of writing a stand-in, where JSON.stringify-based implementations
 * turn NaN into `null`, drop `undefined` members and call `toJSON`. A hash of a stand-in would
 * bind a human's decision to something other than what runs.
 * @module
 */
import { createHash } from "node:crypto";

import { NotCanonical } from "./errors.js";

/** The server's bound on nesting, counting the hashed document itself. */
export const MAX_DEPTH = 64;
const EXPONENT_FROM = 1e21; // from here up JCS, like ECMAScript, writes an exponent

/**
 * RFC 8785 canonical text of a JSON value, or NotCanonical for what has no faithful canonical
 * form: NaN and infinities, numbers beyond ±(2^53 − 1) that JCS would write as bare integers
 * (below 1e21), lone surrogates, non-JSON values (undefined, functions, bigints, symbols, class
 * instances such as Date), and nesting deeper than `maxDepth`.
 * @param {unknown} value
 * @param {number} [maxDepth]
 * @returns {string}
 */
export function canonicalJson(value, maxDepth = MAX_DEPTH) {
  return write(value, "$", 0, maxDepth);
}

/**
 * @param {unknown} value
 * @param {string} path
 * @param {number} depth
 * @param {number} most
 * @returns {string}
 */
function write(value, path, depth, most) {
  if (value === null) return "null";
  switch (typeof value) {
    case "boolean":
      return value ? "true" : "false";
    case "number":
      return number(value, path);
    case "string":
      return string(value, path);
    case "object":
      break;
    default:
      throw new NotCanonical(`${path}: a ${typeof value} is not a JSON value`);
  }
  if (depth + 1 > most) throw new NotCanonical(`nested deeper than ${most} levels`);
  if (Array.isArray(value)) {
    const items = [];
    for (let i = 0; i < value.length; i++) {
      if (!(i in value)) throw new NotCanonical(`${path}[${i}]: a hole is not a JSON value`);
      items.push(write(value[i], `${path}[${i}]`, depth + 1, most));
    }
    return `[${items.join(",")}]`;
  }
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) {
    const name = value.constructor?.name ?? "object";
    throw new NotCanonical(`${path}: a ${name} is not a JSON value (convert it first)`);
  }
  // Sorted by UTF-16 code units, which is what Array.prototype.sort compares by default.
  const keys = Object.keys(value).sort();
  const record = /** @type {Record<string, unknown>} */ (value);
  const members = keys.map(
    (key) => `${string(key, `${path} key`)}:${write(record[key], `${path}.${key}`, depth + 1, most)}`,
  );
  return `{${members.join(",")}}`;
}

/** @param {number} value @param {string} path */
function number(value, path) {
  if (!Number.isFinite(value)) {
    throw new NotCanonical(`${path}: ${value} is not a JSON number`);
  }
  const size = Math.abs(value);
  if (size > Number.MAX_SAFE_INTEGER && size < EXPONENT_FROM) {
    throw new NotCanonical(
      `${path}: ${value} is outside ±(2^53 - 1), which a double cannot hold exactly; send it as a string`,
    );
  }
  // ECMAScript's Number::toString is JCS's number form (RFC 8785 section 3.2.2.3); -0 is "0".
  return Object.is(value, -0) ? "0" : String(value);
}

/** @param {string} value @param {string} path */
function string(value, path) {
  if (!value.isWellFormed()) {
    throw new NotCanonical(`${path}: the string contains a lone surrogate`);
  }
  // JSON.stringify of a well-formed string escapes exactly as JCS does: \" \\ \b \f \n \r \t,
  // other controls as lowercase \u00xx, everything else (/, U+2028, non-ASCII) raw.
  return JSON.stringify(value);
}

/**
 * Lowercase hex SHA-256 of the UTF-8 canonical form of `value`.
 * @param {unknown} value
 * @returns {string}
 */
export function canonicalHash(value) {
  return createHash("sha256").update(canonicalJson(value), "utf8").digest("hex");
}

/**
 * @typedef {object} HashedCall What the hash covers: the request's kind (`tool_call` when left
 *   out), capability, presentation, and its `tool` (a question: its `question`).
 * @property {string} [kind]
 * @property {string} capability
 * @property {unknown} presentation
 * @property {{name: string, arguments: unknown} | null} [tool]
 * @property {unknown} [question]
 */

/**
 * The request hash of a create body or a record (docs/hashing.md): a record's `hash` equals
 * `approvalHash(record)`, also for a call approved as edited (the revision is hashed).
 * @param {HashedCall} call
 * @returns {string}
 */
export function approvalHash(call) {
  const kind = call.kind ?? "tool_call";
  /** @type {Record<string, unknown>} */
  const document = { kind, capability: call.capability, presentation: call.presentation };
  if (kind === "question") {
    document.question = call.question;
  } else {
    if (!call.tool) throw new NotCanonical("a tool call needs `tool`");
    document.tool = { name: call.tool.name, arguments: call.tool.arguments };
  }
  return canonicalHash(document);
}

/** The form cards print: `sha256:` and the first 12 hex digits. @param {string} hash */
export function shortHash(hash) {
  return `sha256:${hash.slice(0, 12)}`;
}
