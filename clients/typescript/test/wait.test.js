// An agent with no public URL waits for its decision through the client, against a real
// `signoff serve` whose tenant has no webhook: the wait is held on the server and answers on the
// decision's commit, so the waiter returns within about a second of a person deciding at the CLI.
// Every client here polls, if it ever falls back to polling, 30 s after its first look: a waiter
// back in time held a wait the commit woke, and the test fails if it polled instead. Then the
// Vercel AI SDK and OpenAI Agents adapters resume by approval id with `wait`, in process. The
// edges the real server does not reach on demand (a server without waits: polling; 429
// too_many_waits with Retry-After; a wait longer than the client's timeout) run on a stub
// speaking the record JSON.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, describe, test } from "node:test";

import { Agent, Runner, Usage } from "@openai/agents";
import { generateText, jsonSchema, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";

import { SignoffClient } from "../src/index.js";
import { fileApprovals, resume as resumeAi, signoffTool } from "../src/ai.js";
import { fileInterruptions, gatedTool, resume as resumeAgents } from "../src/openai-agents.js";
import { Signoff } from "./support/signoff.js";

const SLOW_POLLING = { pollFirst: 30, pollMost: 30 };
const PROMPT = 1000; // ms from the decision to the waiter's return
const PROMPT_RESUME = 2000; // a resume also claims the call and runs the agent after the wait

/**
 * Start `waiter`, let it wait, `decide`, and check it returned within `within` ms of the
 * decision (the CLI returns after its commit).
 */
async function promptly(waiter, decide, within = PROMPT) {
  let finished;
  const settled = waiter.finally(() => { finished = performance.now(); });
  await new Promise((ok) => setTimeout(ok, 1000));
  assert.equal(finished, undefined, "returned before anyone decided");
  await decide();
  const decided = performance.now();
  const result = await settled;
  assert.ok(finished - decided < within, `returned ${Math.round(finished - decided)} ms after the decision`);
  return result;
}

const refundBody = (run, amount = 12000) => ({
  run_id: run, capability: "tools.refund",
  tool: { name: "refund", arguments: { charge: "ch_1", amount } },
  presentation: { title: `Refund ${amount} cents` },
});

describe("against signoff serve with no webhook", () => {
  let signoff;
  let client;
  before(async () => {
    signoff = await Signoff.start({ webhooks: false });
    client = new SignoffClient({ baseUrl: signoff.url, apiKey: signoff.agentEnv.SIGNOFF_API_KEY, ...SLOW_POLLING });
  });
  after(async () => {
    assert.deepEqual(signoff?.hooks.deliveries, []); // nothing was sent anywhere
    await signoff?.stop();
  });

  test("wait, waitAny and answer return on the decision's commit", async () => {
    const probe = await client.create(refundBody("probe"));
    const raw = await fetch(`${signoff.url}/v1/approvals/${probe.id}?wait=0.2`,
      { headers: { Authorization: `Bearer ${signoff.agentEnv.SIGNOFF_API_KEY}` } });
    assert.equal(raw.headers.get("Signoff-Wait"), "0.2"); // the server offers waits

    const approval = await client.create(refundBody("wait-one"));
    const decided = await promptly(client.wait(approval.id, { maxWait: 30 }),
      () => signoff.approve(approval.id, approval.hash));
    assert.equal(decided.state, "approved");
    assert.equal(decided.decided_by, "alice");

    const asked = [];
    for (const amount of [1, 2, 3]) asked.push(await client.create(refundBody("wait-many", amount)));
    const found = await promptly(client.waitAny(asked.map((a) => a.id), { maxWait: 30 }),
      () => signoff.reject(asked[1].id, asked[1].hash));
    assert.deepEqual(found.map((r) => [r.id, r.state]),
      [[asked[0].id, "pending"], [asked[1].id, "rejected"], [asked[2].id, "pending"]]);

    const question = await client.create({
      run_id: "wait-q", capability: "tools.ask", kind: "question", question: {},
      presentation: { title: "Which warehouse ships the replacement?" },
    });
    const answer = await promptly(client.answer(question.id, { maxWait: 30 }),
      () => signoff.answer(question.id, question.hash, "Leeds"));
    assert.equal(answer, "Leeds");

    const started = performance.now(); // nobody decides: the deadline ends the wait
    assert.equal((await client.wait(asked[0].id, { maxWait: 1.5 })).state, "pending");
    const took = performance.now() - started;
    assert.ok(took >= 1500 && took < 3000, `${took} ms`);
  });

  test("the AI SDK adapter resumes by approval id through the wait", async () => {
    const ran = [];
    const tools = {
      refund: signoffTool(tool({
        description: "Refund a charge, in cents",
        inputSchema: jsonSchema({ type: "object", properties: { charge: { type: "string" }, amount: { type: "integer" } } }),
        execute: async (args) => { ran.push(args); return { refunded: args.amount }; },
      })),
    };
    const usage = { inputTokens: { total: 1 }, outputTokens: { total: 1 } };
    const model = new MockLanguageModelV3({
      doGenerate: async ({ prompt }) => (prompt.some((m) => m.role === "tool")
        ? { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] }
        : { content: [{ type: "tool-call", toolCallId: "call_1", toolName: "refund", input: JSON.stringify({ charge: "ch_1", amount: 12000 }) }],
          finishReason: { unified: "tool-calls", raw: undefined }, usage, warnings: [] }),
    });
    const messages = [{ role: "user", content: "Refund order 8812." }];
    const result = await generateText({ model, tools, messages });
    const [filed] = await fileApprovals(client, { result, messages, runId: "ai-wait", capability: "tools.refund" });
    const resumed = await promptly(
      resumeAi(client, filed.id, { run: (next) => generateText({ model, tools, messages: next }), wait: 30 }),
      () => signoff.approve(filed.id, filed.hash), PROMPT_RESUME);
    assert.equal(resumed.status, "resumed", resumed.detail);
    assert.deepEqual(ran, [{ charge: "ch_1", amount: 12000 }]);
    assert.equal((await client.get(filed.id)).state, "executed");
  });

  test("the OpenAI Agents adapter resumes by approval id once the whole turn is decided", async () => {
    const ran = [];
    const refund = gatedTool({
      name: "refund", description: "Refund a charge, in cents",
      parameters: z.object({ charge: z.string(), amount: z.number().int() }),
      execute: async (args) => { ran.push(args); return `refunded ${args.amount}`; },
    });
    const model = {
      async getResponse(request) {
        const input = Array.isArray(request.input) ? request.input : [];
        if (input.some((i) => i.type === "function_call_result")) {
          return { usage: new Usage(), output: [{ type: "message", role: "assistant", status: "completed",
            content: [{ type: "output_text", text: "done" }] }] };
        }
        return { usage: new Usage(), output: [["c1", "ch_1", 12000], ["c2", "ch_2", 500]].map(([callId, charge, amount]) => (
          { type: "function_call", callId, name: "refund", status: "completed", arguments: JSON.stringify({ charge, amount }) })) };
      },
      // eslint-disable-next-line require-yield
      async *getStreamedResponse() { throw new Error("the scripted model does not stream"); },
    };
    const agent = new Agent({ name: "support", tools: [refund], model });
    const runner = new Runner({ tracingDisabled: true });
    const paused = await runner.run(agent, "Refund both orders.");
    const [first, second] = await fileInterruptions(client, paused, { runId: "oa-wait", capability: "tools.refund" });
    let finished = false;
    const waiting = resumeAgents(client, agent, first.id, { runner, wait: 30 });
    waiting.finally(() => { finished = true; });
    await signoff.approve(first.id, first.hash);
    await new Promise((ok) => setTimeout(ok, 500));
    assert.equal(finished, false); // the other call of the turn is undecided
    const resumed = await promptly(waiting, () => signoff.reject(second.id, second.hash), PROMPT_RESUME);
    assert.equal(resumed.status, "resumed", resumed.detail);
    assert.deepEqual(resumed.calls.map((c) => c.decision), ["approved", "rejected"]);
    assert.deepEqual(ran, [{ charge: "ch_1", amount: 12000 }]);
  });
});

/** A stub of the API's reads: `states(n)` is each id's state at the n-th request. */
async function stub({ states, waits = false, hold = 0, refuse = 0 }) {
  const seen = [];
  const record = (id, state) => ({
    id, tenant: "acme", run_id: "run-1", state, execution: "not_started", hash: "0".repeat(64),
    kind: "tool_call", capability: "tools.refund", tool: { name: "refund", arguments: {} },
    presentation: { title: "Refund" }, assignee: "alice", decided_by: null, decided_at: null,
    expires_at: null, origin_id: null, answer: null, question: null, votes: [], edited: false,
  });
  const server = createServer(async (req, res) => {
    const url = new URL(req.url, "http://stub");
    seen.push({ at: performance.now(), path: url.pathname, query: Object.fromEntries(url.searchParams) });
    const now = states(seen.length - 1);
    const send = (status, body, headers = {}) => {
      res.writeHead(status, { "Content-Type": "application/json", ...headers }).end(JSON.stringify(body));
    };
    if (url.pathname === "/v1/approvals") {
      if (!waits) {
        const fields = ["ids", "wait"].map((field) => ({ field, message: "Extra inputs are not permitted" }));
        return send(422, { error: { code: "invalid_request", message: "invalid request", fields } });
      }
    }
    const id = url.pathname.split("/").at(-1);
    if (!(id in now)) return send(404, { error: { code: "not_found", message: "no such approval" } });
    const body = record(id, now[id]);
    if (!waits || !url.searchParams.has("wait")) return send(200, body);
    if (refuse > 0) {
      refuse--;
      return send(429, { error: { code: "too_many_waits", message: "too many waits" } }, { "Retry-After": "0.3" });
    }
    if (body.state === "pending") await new Promise((ok) => setTimeout(ok, hold));
    return send(200, body, { "Signoff-Wait": url.searchParams.get("wait") });
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  const baseUrl = `http://127.0.0.1:${server.address().port}`;
  const gaps = () => seen.slice(1).map((s, i) => s.at - seen[i].at);
  return { baseUrl, seen, gaps, close: () => new Promise((ok) => server.close(ok)) };
}

const ID = "a1b2c3d4-0000-4000-8000-000000000001";
const OTHER = "a1b2c3d4-0000-4000-8000-000000000002";

describe("against a stub", () => {
  test("a server without waits is polled with backoff; a batch is read one id at a time", async () => {
    const s = await stub({ states: (n) => ({ [ID]: n < 4 ? "pending" : "approved", [OTHER]: "pending" }) });
    try {
      const c = new SignoffClient({ baseUrl: s.baseUrl, apiKey: "k", pollFirst: 0.1, pollMost: 0.25 });
      assert.equal((await c.wait(ID, { maxWait: 10 })).state, "approved");
      assert.deepEqual(s.seen.map((x) => x.query.wait), ["10.000", undefined, undefined, undefined, undefined]);
      assert.deepEqual(s.gaps().map((g, i) => g >= [100, 200, 250, 250][i] - 5), [true, true, true, true]);

      s.seen.length = 0;
      const found = await c.waitAny([OTHER, "a1b2c3d4-0000-4000-8000-00000000dead", ID], { maxWait: 10 });
      assert.deepEqual(found.map((r) => r.state), ["pending", "approved"]); // the unknown id left out
      assert.equal(s.seen[0].path, "/v1/approvals"); // refused: then one id at a time
      assert.ok(s.seen.slice(1).every((x) => x.path.startsWith("/v1/approvals/")));
    } finally {
      await s.close();
    }
  });

  test("429 too_many_waits is asked again after Retry-After; a wait outlasts the client's timeout", async () => {
    const s = await stub({ states: (n) => ({ [ID]: n < 4 ? "pending" : "answered" }), waits: true, hold: 1200, refuse: 2 });
    try {
      const c = new SignoffClient({ baseUrl: s.baseUrl, apiKey: "k", timeoutMs: 500, ...SLOW_POLLING });
      const record = await c.wait(ID, { maxWait: 30 });
      assert.equal(record.state, "answered");
      assert.ok(s.seen.every((x) => x.query.wait && x.query.seen === "pending"));
      const gaps = s.gaps();
      assert.ok(gaps[0] >= 295 && gaps[1] >= 295, `${gaps}`); // refused twice: Retry-After 0.3 s
      assert.ok(gaps[2] >= 1195 && gaps[3] >= 1195, `${gaps}`); // held 1.2 s each, not cut off at 0.5 s
      assert.equal(Number(s.seen[0].query.wait), 30);
    } finally {
      await s.close();
    }
  });
});
