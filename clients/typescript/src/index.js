// @ts-check
/**
 * `@signoff/client`: signoff's agent API for JavaScript and TypeScript. The framework adapters
 * are `@signoff/client/ai` (the Vercel AI SDK) and `@signoff/client/openai-agents`.
 * @module
 */
export { SignoffClient, retryAfterSeconds } from "./client.js";
export { approvalHash, canonicalHash, canonicalJson, shortHash, MAX_DEPTH } from "./canonical.js";
export { verifyWebhook, secretProblem } from "./webhooks.js";
export { CLOSED } from "./records.js";
export * from "./errors.js";
/**
 * @typedef {import("./records.js").ApprovalRecord} ApprovalRecord
 * @typedef {import("./records.js").ApprovalState} ApprovalState
 * @typedef {import("./records.js").ApprovalKind} ApprovalKind
 * @typedef {import("./records.js").Answer} Answer
 * @typedef {import("./records.js").Claim} Claim
 * @typedef {import("./records.js").CreateBody} CreateBody
 * @typedef {import("./records.js").Presentation} Presentation
 * @typedef {import("./records.js").Question} Question
 * @typedef {import("./records.js").ToolCall} ToolCall
 * @typedef {import("./records.js").WebhookEvent} WebhookEvent
 * @typedef {import("./canonical.js").HashedCall} HashedCall
 * @typedef {import("./client.js").ClientOptions} ClientOptions
 */
