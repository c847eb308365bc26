// A refund agent on the Vercel AI SDK whose refund tool is gated by signoff. The model is
// scripted (no network, no LLM): it asks for a refund, then says what the tool answered.
//
//   SIGNOFF_URL=... SIGNOFF_API_KEY=... node examples/ai-sdk-refund.js turn1 RUN_ID [AMOUNT]
//       files the approval and waits up to an hour for the decision, then says what it was and
//       how to resume; kill it whenever you like, the pause is in signoff
//   SIGNOFF_URL=... SIGNOFF_API_KEY=... node examples/ai-sdk-refund.js resume APPROVAL_ID
//       no public URL, no webhook needed: waits (up to an hour, held on the server) for the
//       decision, then runs the approved refund once and prints what happened as JSON
//   SIGNOFF_WEBHOOK_SECRET=whsec_... node examples/ai-sdk-refund.js resume BODY_FILE HEADERS_FILE
//       on the decision webhook (its raw body and headers as received), in a new process:
//       runs the approved refund once and prints what happened as JSON
//
// REFUND_LEDGER names a file the refund appends a line to, so you can count how often it ran.
import { appendFileSync, readFileSync } from "node:fs";

import { generateText, jsonSchema, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";

import { SignoffClient } from "@signoff/client";
import { fileApprovals, resume, resumeFromWebhook, signoffTool } from "@signoff/client/ai";

const tools = {
  refund: signoffTool(tool({
    description: "Refund a charge, in cents",
    inputSchema: jsonSchema({
      type: "object",
      properties: { charge: { type: "string" }, amount: { type: "integer" } },
      required: ["charge", "amount"],
    }),
    // Runs only as a call signoff approved, with the arguments it approved.
    execute: async (args, { idempotencyKey }) => {
      appendFileSync(process.env.REFUND_LEDGER ?? "/dev/null", `${JSON.stringify({ args, idempotencyKey })}\n`);
      return { refunded: args.amount, charge: args.charge };
    },
  })),
};

/** A model that asks for one refund, then reports the tool's result in words. */
function scriptedModel(amount) {
  const usage = { inputTokens: { total: 1 }, outputTokens: { total: 1 } };
  return new MockLanguageModelV3({
    doGenerate: async ({ prompt }) => {
      const results = prompt.flatMap((m) => (m.role === "tool" ? m.content : []))
        .filter((p) => p.type === "tool-result");
      if (!results.length) {
        const input = JSON.stringify({ charge: "ch_3PqK2L", amount });
        return { content: [{ type: "tool-call", toolCallId: "call_refund_1", toolName: "refund", input }],
          finishReason: { unified: "tool-calls", raw: undefined }, usage, warnings: [] };
      }
      const output = results.at(-1).output;
      const text = `The refund tool said: ${JSON.stringify(output.value ?? output.reason ?? output)}`;
      return { content: [{ type: "text", text }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
    },
  });
}

const client = new SignoffClient(); // SIGNOFF_URL, SIGNOFF_API_KEY
const [command, ...args] = process.argv.slice(2);

if (command === "turn1") {
  const [runId, amount = "12000"] = args;
  const messages = [{ role: "user", content: "Order 8812 arrived damaged: refund it." }];
  const result = await generateText({ model: scriptedModel(Number(amount)), tools, messages });
  const filed = await fileApprovals(client, { result, messages, runId, capability: "tools.refund" });
  console.log(JSON.stringify(filed.map((r) => ({ id: r.id, hash: r.hash, state: r.state }))));
  // An agent may wait a little for a quick decision; a human may take days, and nothing
  // here needs to survive: the resume runs in whichever process gets the webhook.
  for (const approval of filed) {
    const record = await client.wait(approval.id, { maxWait: 3600 });
    // Say what happened: the decision, and the command that carries it out (no webhook needed).
    const next = record.state === "pending"
      ? "still pending after an hour; resume later with the same command"
      : `resume with: node examples/ai-sdk-refund.js resume ${record.id}`;
    console.log(`approval ${record.id}: ${record.state}; ${next}`);
  }
} else if (command === "resume" && args.length === 1) {
  // By approval id, waiting for the decision: what an agent with no public URL does.
  const [approvalId] = args;
  const resumed = await resume(client, approvalId, {
    run: (messages) => generateText({ model: scriptedModel(0), tools, messages }),
    wait: 3600,
  });
  console.log(JSON.stringify({ status: resumed.status, detail: resumed.detail, calls: resumed.calls,
    text: resumed.result?.text ?? null }));
} else if (command === "resume" && args.length === 2) {
  const [bodyFile, headersFile] = args;
  const body = readFileSync(bodyFile);
  const headers = JSON.parse(readFileSync(headersFile, "utf8"));
  const resumed = await resumeFromWebhook(client, headers, body, process.env.SIGNOFF_WEBHOOK_SECRET ?? "", {
    run: (messages) => generateText({ model: scriptedModel(0), tools, messages }),
  });
  console.log(JSON.stringify({ status: resumed.status, detail: resumed.detail, calls: resumed.calls,
    text: resumed.result?.text ?? null }));
} else {
  console.error("usage: ai-sdk-refund.js turn1 RUN_ID [AMOUNT] | resume APPROVAL_ID | resume BODY_FILE HEADERS_FILE");
  process.exit(2);
}
