// The client against a real `signoff serve`: create, find again, get, list, claim with an
// Idempotency-Key (and its recovery), renew, release, complete, cancel, errors by code, a
// question and its answer, and the decision webhook verified with either of two secrets.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  ClaimMismatch, InvalidRequest, NotFound, NotPending, SignoffClient, Unauthorized,
  approvalHash, verifyWebhook, BadWebhookSignature, retryAfterSeconds, Overloaded,
} from "../src/index.js";
import { NEW_SECRET, OLD_SECRET, Signoff } from "./support/signoff.js";

let signoff;
let client;
before(async () => {
  signoff = await Signoff.start();
  process.env.SIGNOFF_URL = signoff.url;
  process.env.SIGNOFF_API_KEY = signoff.agentEnv.SIGNOFF_API_KEY;
  client = new SignoffClient(); // the URL and the key from the environment
});
after(() => signoff?.stop());

const body = (run) => ({
  run_id: run, capability: "tools.refund",
  tool: { name: "refund", arguments: { charge: "ch_1", amount: 12000 } },
  presentation: { title: "Refund €120.00", fields: [{ label: "Amount", value: "€120.00" }] },
});

test("the whole life of a call: create, claim, renew, release, claim again, complete", async () => {
  const record = await client.create(body("run-life"));
  assert.equal(record.state, "pending");
  assert.equal(record.hash, approvalHash(record)); // the server's hash, computed here
  assert.equal(record.edited, false);
  assert.equal((await client.create(body("run-life"))).id, record.id); // found again
  assert.equal((await client.get(record.id)).id, record.id);
  const page = await client.list({ run_id: "run-life" });
  assert.deepEqual(page.approvals.map((a) => a.id), [record.id]);
  assert.equal(page.nextCursor, null);

  await signoff.approve(record.id, record.hash);
  const claim = await client.claim(record.id, { idempotencyKey: "attempt-1" });
  assert.equal(claim.approval.state, "executing");
  assert.deepEqual(claim.tool, body("x").tool);
  // A lost answer is recovered with the same key; another caller is refused.
  const again = await client.claim(record.id, { idempotencyKey: "attempt-1" });
  assert.equal(again.claim_token, claim.claim_token);
  await assert.rejects(client.claim(record.id), (err) => err instanceof NotPending && err.state === "executing");

  const renewed = await client.renew(record.id, claim.claim_token, "5m");
  assert.ok(renewed.lease_until >= claim.lease_until);
  await assert.rejects(client.renew(record.id, "not-the-token"), ClaimMismatch);
  assert.equal((await client.release(record.id, claim.claim_token)).state, "approved");

  const second = await client.claim(record.id);
  const done = await client.complete(record.id, second.claim_token, "succeeded", { ref: "re_1" });
  assert.equal(done.state, "executed");
  assert.deepEqual(done.outcome, { status: "succeeded", result: { ref: "re_1" } });
  // Repeating the completion returns the recorded outcome.
  assert.equal((await client.complete(record.id, second.claim_token, "succeeded", { ref: "re_1" })).state, "executed");
});

test("errors carry the server's codes and details", async () => {
  await assert.rejects(client.get("00000000-0000-0000-0000-000000000000"), (err) =>
    err instanceof NotFound && err.code === "not_found" && err.status === 404);
  await assert.rejects(client.create({ ...body("run-bad"), presentation: {} }), (err) =>
    err instanceof InvalidRequest && err.fields.length > 0);
  const stranger = new SignoffClient({ baseUrl: signoff.url, apiKey: "wrong" });
  await assert.rejects(stranger.get("x"), Unauthorized);
  const record = await client.create(body("run-cancel"));
  assert.equal((await client.cancel(record.id, "changed my mind")).state, "cancelled");
  await assert.rejects(client.claim(record.id), (err) => err instanceof NotPending && err.state === "cancelled");
});

test("a question, answered in words", async () => {
  const question = await client.create({
    run_id: "run-q", capability: "tools.ask", kind: "question", question: {},
    presentation: { title: "Which warehouse should ship the replacement?" },
  });
  assert.equal(question.tool, null);
  assert.equal(question.hash, approvalHash(question));
  await signoff.answer(question.id, question.hash, "Leeds");
  const answered = await client.wait(question.id, { maxWait: 10, first: 0.05 });
  assert.equal(answered.state, "answered");
  assert.deepEqual(answered.answer, { text: "Leeds" });
});

test("a decision webhook verifies with either secret while they rotate, and only with them", async () => {
  const record = await client.create(body("run-hook"));
  await signoff.reject(record.id, record.hash);
  const hook = await signoff.hooks.waitFor(record.id, "rejected");
  assert.equal(hook.headers["webhook-signature"].split(" ").length, 2);
  for (const secret of [OLD_SECRET, NEW_SECRET, [NEW_SECRET, OLD_SECRET]]) {
    const { id, event } = verifyWebhook(hook.headers, hook.body, secret);
    assert.equal(id, hook.headers["webhook-id"]);
    assert.equal(event.approval.state, "rejected");
  }
  const other = "whsec_" + Buffer.alloc(32, 1).toString("base64");
  assert.throws(() => verifyWebhook(hook.headers, hook.body, other), BadWebhookSignature);
  assert.throws(() => verifyWebhook(hook.headers, hook.body.replace("rejected", "approved"), NEW_SECRET), BadWebhookSignature);
  assert.throws(() => verifyWebhook(hook.headers, hook.body, "not-a-secret"), BadWebhookSignature);
  const headers = new Headers(hook.headers); // a Fetch API request's headers work too
  assert.equal(verifyWebhook(headers, Buffer.from(hook.body), NEW_SECRET).id, hook.headers["webhook-id"]);
});

test("a 429 is asked again after its Retry-After; the budget spent, Overloaded", async () => {
  // The edge we cannot make the real server reach on demand: a proxy speaking its wire format.
  let calls = 0;
  const fake = async () => {
    calls++;
    if (calls < 3) {
      return new Response(JSON.stringify({ error: { code: "overloaded", message: "busy", retry_after: 0.05 } }),
        { status: 429, headers: { "Retry-After": "0.05" } });
    }
    return fetch(`${signoff.url}/v1/approvals?run_id=none`, { headers: { Authorization: `Bearer ${process.env.SIGNOFF_API_KEY}` } });
  };
  const patient = new SignoffClient({ fetch: fake });
  assert.deepEqual((await patient.list({ run_id: "none" })).approvals, []);
  assert.equal(calls, 3);
  calls = 0;
  const hasty = new SignoffClient({ fetch: fake, overloadAttempts: 2 });
  await assert.rejects(hasty.list(), (err) => err instanceof Overloaded && err.retryAfter === 0.05);
  assert.equal(retryAfterSeconds("3"), 3);
  assert.equal(retryAfterSeconds(new Date(Date.now() - 1000).toUTCString()), 0);
  assert.equal(retryAfterSeconds("soon"), undefined);
});
