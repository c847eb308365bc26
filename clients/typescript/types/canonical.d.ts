/**
 * RFC 8785 canonical text of a JSON value, or NotCanonical for what has no faithful canonical
 * form: NaN and infinities, numbers beyond ±(2^53 − 1) that JCS would write as bare integers
 * (below 1e21), lone surrogates, non-JSON values (undefined, functions, bigints, symbols, class
 * instances such as Date), and nesting deeper than `maxDepth`.
 * @param {unknown} value
 * @param {number} [maxDepth]
 * @returns {string}
 */
export function canonicalJson(value: unknown, maxDepth?: number): string;
/**
 * Lowercase hex SHA-256 of the UTF-8 canonical form of `value`.
 * @param {unknown} value
 * @returns {string}
 */
export function canonicalHash(value: unknown): string;
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
export function approvalHash(call: HashedCall): string;
/** The form cards print: `sha256:` and the first 12 hex digits. @param {string} hash */
export function shortHash(hash: string): string;
/** The server's bound on nesting, counting the hashed document itself. */
export const MAX_DEPTH: 64;
/**
 * What the hash covers: the request's kind (`tool_call` when left
 *   out), capability, presentation, and its `tool` (a question: its `question`).
 */
export type HashedCall = {
    kind?: string | undefined;
    capability: string;
    presentation: unknown;
    tool?: {
        name: string;
        arguments: unknown;
    } | null | undefined;
    question?: unknown;
};
