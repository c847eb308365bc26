// @ts-check
/**
 * The shapes the API speaks (docs/reference.md, "The record"; bot/openapi.json). Records are
 * plain parsed JSON: fields a newer server adds are kept.
 * @module
 */

/**
 * @typedef {"pending" | "approved" | "executing" | "executed" | "failed" | "rejected" | "expired"
 *   | "cancelled" | "superseded" | "outcome_unknown" | "answered"} ApprovalState
 * @typedef {"tool_call" | "question" | "interrupted_side_effect"} ApprovalKind
 * @typedef {"not_started" | "started" | "finished"} Execution
 * @typedef {{name: string, arguments: Record<string, unknown>}} ToolCall
 * @typedef {{label: string, value: string | number | boolean | null}} Field
 * @typedef {{title: string, summary?: string, fields?: Field[]}} Presentation
 * @typedef {{options?: string[]}} Question
 * @typedef {{text: string} | {option: string}} Answer
 * @typedef {{principal: string, decision: "approve" | "reject", at: string, via: string | null,
 *   as_delegate_of: string | null, note: string | null}} Vote
 * @typedef {{status: "succeeded" | "failed", result: unknown}} Outcome
 */

/**
 * An approval as every answer returns it.
 * @typedef {object} ApprovalRecord
 * @property {string} id
 * @property {string} tenant
 * @property {string} run_id
 * @property {ApprovalKind} kind
 * @property {string} capability
 * @property {ToolCall | null} tool The call to run (approved as edited: the approver's revision);
 *   null for a question.
 * @property {Question | null} question
 * @property {Answer | null} answer Once `answered`: the reply; the call did not run.
 * @property {boolean} edited Approved as edited: `tool` and `hash` are an approver's revision.
 * @property {string | null} original_hash The hash the agent asked with, when edited.
 * @property {Record<string, unknown> | null} original_arguments The arguments the agent asked
 *   for, when edited.
 * @property {Presentation} presentation
 * @property {string | null} reason
 * @property {string} hash
 * @property {ApprovalState} state
 * @property {Execution} execution
 * @property {string | null} requested_by
 * @property {string} assignee
 * @property {string[]} approvers
 * @property {number} required_approvals
 * @property {string} created_at
 * @property {string | null} expires_at
 * @property {string | null} decided_by
 * @property {string | null} decided_at
 * @property {string | null} decision_note
 * @property {Vote[]} votes
 * @property {string | null} grant_expires_at
 * @property {string | null} claimed_at
 * @property {string | null} lease_until
 * @property {string | null} executed_at
 * @property {Outcome | null} outcome
 * @property {string | null} origin_id
 * @property {string | null} follow_up_id
 * @property {string | null} superseded_by
 * @property {number} escalation_level
 * @property {unknown} step
 * @property {unknown} preconditions
 * @property {unknown} resume
 * @property {number} version
 */

/**
 * The create body (docs/reference.md, "The create body").
 * @typedef {object} CreateBody
 * @property {string} run_id
 * @property {string} capability
 * @property {Presentation} presentation
 * @property {ToolCall} [tool] Required for a tool call.
 * @property {Question} [question] Required for a question.
 * @property {"tool_call" | "question"} [kind]
 * @property {Record<string, unknown>} [input_schema] JSON Schema an approver's edit must satisfy.
 * @property {unknown} [step]
 * @property {string} [reason]
 * @property {string} [requested_by]
 * @property {string[]} [approvers]
 * @property {string} [approval_ttl]
 * @property {string} [grant_ttl]
 * @property {number} [required_approvals]
 * @property {unknown} [preconditions]
 * @property {unknown} [resume]
 * @property {string} [callback_url]
 */

/**
 * A claim: the approved call, held by this caller until `lease_until`. Run `tool` exactly (it is
 * the approver's revision when `edited`), pass `idempotency_key` to the effect's API, then
 * `complete` with `claim_token`.
 * @typedef {object} Claim
 * @property {ApprovalRecord} approval
 * @property {string} claim_token
 * @property {string} lease_until
 * @property {string} idempotency_key
 * @property {ToolCall} tool
 * @property {boolean} edited
 * @property {string | null} original_hash
 * @property {unknown} step
 * @property {unknown} resume
 * @property {unknown} preconditions
 */

/**
 * A decision webhook's body.
 * @typedef {object} WebhookEvent
 * @property {string} delivery_id
 * @property {string} event
 * @property {string} occurred_at
 * @property {ApprovalRecord} approval
 * @property {string} [follow_up_id]
 */

/** States in which the call never ran and never will. */
export const CLOSED = Object.freeze(
  /** @type {const} */ (["rejected", "expired", "cancelled", "superseded", "answered"]),
);

export {};
