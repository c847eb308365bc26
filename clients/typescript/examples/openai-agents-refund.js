// A refund agent on the OpenAI Agents SDK for JavaScript whose refund tool is gated by
// signoff. The model is scripted (no network, no LLM): it asks for a refund, then says what
// the tool answered.
//
//   SIGNOFF_URL=... SIGNOFF_API_KEY=... node examples/openai-agents-refund.js turn1 RUN_ID [AMOUNT]
//       files the run's interruption and waits up to an hour for the decision, then says what
//       it was and how to resume; kill it whenever you like
//   SIGNOFF_URL=... SIGNOFF_API_KEY=... node examples/openai-agents-refund.js resume APPROVAL_ID
//       no public URL, no webhook needed: waits (up to an hour, held on the server) for the
//       decision, then resumes the run from the stored RunState
//   SIGNOFF_WEBHOOK_SECRET=whsec_... node examples/openai-agents-refund.js resume BODY_FILE HEADERS_FILE
//       on the decision webhook, in a new process: resumes the run from the stored RunState
//
// REFUND_LEDGER names a file the refund appends a line to, so you can count how often it ran.
import { appendFileSync, readFileSync } from "node:fs";

import { Agent, Runner, Usage } from "@openai/agents";
import { z } from "zod";

import { SignoffClient } from "@signoff/client";
import { fileInterruptions, gatedTool, resume, resumeFromWebhook } from "@signoff/client/openai-agents";

const refund = gatedTool({
  name: "refund",
  description: "Refund a charge, in cents",
  parameters: z.object({ charge: z.string(), amount: z.number().int() }),
  // Runs only as a call signoff approved, with the arguments it approved.
  execute: async (args, _context, { idempotencyKey }) => {
    appendFileSync(process.env.REFUND_LEDGER ?? "/dev/null", `${JSON.stringify({ args, idempotencyKey })}\n`);
    return `refunded ${args.amount} on ${args.charge}`;
  },
});

/** A model that asks for one refund, then reports the tool's output in words. */
class ScriptedModel {
  constructor(amount) { this.amount = amount; }
  async getResponse(request) {
    const input = Array.isArray(request.input) ? request.input : [];
    const result = input.filter((i) => i.type === "function_call_result").at(-1);
    if (!result) {
      return { usage: new Usage(), output: [{ type: "function_call", callId: "call_refund_1", name: "refund",
        status: "completed", arguments: JSON.stringify({ charge: "ch_3PqK2L", amount: this.amount }) }] };
    }
    const text = `The refund tool said: ${result.output?.text ?? JSON.stringify(result.output)}`;
    return { usage: new Usage(), output: [{ type: "message", role: "assistant", status: "completed",
      content: [{ type: "output_text", text }] }] };
  }
  // eslint-disable-next-line require-yield
  async *getStreamedResponse() { throw new Error("the scripted model does not stream"); }
}

const agent = (amount) => new Agent({
  name: "support", instructions: "Refund damaged orders.", tools: [refund], model: new ScriptedModel(amount),
});
const runner = new Runner({ tracingDisabled: true });
const client = new SignoffClient(); // SIGNOFF_URL, SIGNOFF_API_KEY
const [command, ...args] = process.argv.slice(2);

if (command === "turn1") {
  const [runId, amount = "12000"] = args;
  const result = await runner.run(agent(Number(amount)), "Order 8812 arrived damaged: refund it.");
  const filed = await fileInterruptions(client, result, { runId, capability: "tools.refund" });
  console.log(JSON.stringify(filed.map((r) => ({ id: r.id, hash: r.hash, state: r.state }))));
  for (const approval of filed) {
    const record = await client.wait(approval.id, { maxWait: 3600 });
    // Say what happened: the decision, and the command that carries it out (no webhook needed).
    const next = record.state === "pending"
      ? "still pending after an hour; resume later with the same command"
      : `resume with: node examples/openai-agents-refund.js resume ${record.id}`;
    console.log(`approval ${record.id}: ${record.state}; ${next}`);
  }
} else if (command === "resume" && args.length === 1) {
  // By approval id, waiting for the decision: what an agent with no public URL does.
  const [approvalId] = args;
  const resumed = await resume(client, agent(0), approvalId, { runner, wait: 3600 });
  console.log(JSON.stringify({ status: resumed.status, detail: resumed.detail, calls: resumed.calls,
    text: resumed.result?.finalOutput ?? null }));
} else if (command === "resume" && args.length === 2) {
  const [bodyFile, headersFile] = args;
  const body = readFileSync(bodyFile);
  const headers = JSON.parse(readFileSync(headersFile, "utf8"));
  const resumed = await resumeFromWebhook(client, agent(0), headers, body,
    process.env.SIGNOFF_WEBHOOK_SECRET ?? "", { runner });
  console.log(JSON.stringify({ status: resumed.status, detail: resumed.detail, calls: resumed.calls,
    text: resumed.result?.finalOutput ?? null }));
} else {
  console.error("usage: openai-agents-refund.js turn1 RUN_ID [AMOUNT] | resume APPROVAL_ID | resume BODY_FILE HEADERS_FILE");
  process.exit(2);
}
