// Both framework adapters, each through its runnable example (examples/*.js) in processes of
// its own, against a real `signoff serve`: turn 1 files the approval and is killed (SIGKILL)
// while the request is pending; a human decides with the CLI; a new process verifies the
// decision webhook as received and resumes. The refund runs exactly once with the approved
// arguments (not again on a redelivered webhook); an approver's edit runs as edited and the
// model is told; an answer reaches the model as the tool's result, and the refund never runs.
// The server runs on config/signoff.example.toml, as the examples tell a user to.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { SignoffClient, approvalHash } from "../src/index.js";
import { PACKAGE, Signoff } from "./support/signoff.js";

let signoff;
let client;
let dir;
before(async () => {
  signoff = await Signoff.start({ example: true });
  client = new SignoffClient({ baseUrl: signoff.url, apiKey: signoff.agentEnv.SIGNOFF_API_KEY });
  dir = mkdtempSync(join(tmpdir(), "signoff-ts-agents-"));
});
after(async () => {
  await signoff?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function env(ledger) {
  return { ...signoff.agentEnv, REFUND_LEDGER: ledger };
}

/** Turn 1 in its own process: read what it filed, then kill it while the request is pending. */
async function turn1AndKill(example, runId, ledger) {
  const child = spawn(process.execPath, [example, "turn1", runId], {
    cwd: PACKAGE, env: env(ledger), stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  child.stderr.on("data", (d) => { err += d; });
  const filed = await new Promise((ok, fail) => {
    child.stdout.on("data", (d) => {
      out += d;
      if (out.includes("\n")) ok(JSON.parse(out.split("\n")[0]));
    });
    child.on("exit", (code) => fail(new Error(`turn 1 exited ${code} before filing:\n${err}`)));
  });
  const gone = new Promise((ok) => child.on("exit", (_code, signal) => ok(signal)));
  child.kill("SIGKILL");
  assert.equal(await gone, "SIGKILL");
  return filed;
}

/** The resume in a new process, from the webhook as the receiver got it. */
async function resume(example, hook, ledger) {
  const body = join(dir, `body-${hook.headers["webhook-id"]}`);
  const headers = join(dir, `headers-${hook.headers["webhook-id"]}.json`);
  writeFileSync(body, hook.body);
  writeFileSync(headers, JSON.stringify(hook.headers));
  const child = spawn(process.execPath, [example, "resume", body, headers], {
    cwd: PACKAGE, env: env(ledger), stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  child.stdout.on("data", (d) => { out += d; });
  child.stderr.on("data", (d) => { err += d; });
  const code = await new Promise((ok) => child.on("exit", ok));
  assert.equal(code, 0, err);
  return JSON.parse(out);
}

const ran = (ledger) => (existsSync(ledger)
  ? readFileSync(ledger, "utf8").trim().split("\n").filter(Boolean).map((l) => JSON.parse(l))
  : []);

for (const [name, file] of [["Vercel AI SDK", "ai-sdk-refund.js"], ["OpenAI Agents SDK", "openai-agents-refund.js"]]) {
  const example = join(PACKAGE, "examples", file);
  describe(name, () => {
    test("approved: the refund runs once, in a new process, and not again on a redelivery", async () => {
      const ledger = join(dir, `${file}-approved.jsonl`);
      const [filed] = await turn1AndKill(example, `${file}-approved`, ledger);
      assert.equal(filed.state, "pending");
      assert.deepEqual(ran(ledger), []); // nothing ran before the decision
      await signoff.approve(filed.id, filed.hash);
      const hook = await signoff.hooks.waitFor(filed.id, "approved");
      const resumed = await resume(example, hook, ledger);
      assert.equal(resumed.status, "resumed", resumed.detail);
      const record = await client.get(filed.id);
      assert.equal(record.state, "executed");
      const [once, ...more] = ran(ledger);
      assert.deepEqual(more, []);
      assert.deepEqual(once.args, { charge: "ch_3PqK2L", amount: 12000 });
      assert.match(once.idempotencyKey, /^[0-9a-f]{64}$/);
      assert.match(resumed.text, /12000/);
      assert.equal(record.outcome.status, "succeeded");

      const again = await resume(example, hook, ledger); // the webhook redelivered
      assert.equal(again.status, "already_resumed");
      assert.equal(ran(ledger).length, 1);
    });

    test("no public URL: resume by approval id waits for the decision and runs it once", async () => {
      const ledger = join(dir, `${file}-by-id.jsonl`);
      const watch = (child) => {
        const seen = { out: "", err: "" };
        child.stdout.on("data", (d) => { seen.out += d; });
        child.stderr.on("data", (d) => { seen.err += d; });
        seen.exited = new Promise((ok) => child.on("exit", ok));
        return seen;
      };
      const turn1 = spawn(process.execPath, [example, "turn1", `${file}-by-id`], {
        cwd: PACKAGE, env: env(ledger), stdio: ["ignore", "pipe", "pipe"],
      });
      const first = watch(turn1);
      const filedLine = new Promise((ok) => turn1.stdout.on("data", () => {
        if (first.out.includes("\n")) ok(first.out.split("\n")[0]);
      }));
      const [filed] = JSON.parse(await filedLine);
      // Both wait, held on the server: turn 1 to say what was decided, the resumer to act on it.
      const resumer = watch(spawn(process.execPath, [example, "resume", filed.id], {
        cwd: PACKAGE, env: env(ledger), stdio: ["ignore", "pipe", "pipe"],
      }));
      await new Promise((ok) => setTimeout(ok, 1000));
      assert.deepEqual(ran(ledger), []); // nothing ran before the decision
      await signoff.approve(filed.id, filed.hash);
      assert.equal(await first.exited, 0, first.err);
      assert.equal(first.out.split("\n")[1],
        `approval ${filed.id}: approved; resume with: node examples/${file} resume ${filed.id}`);
      assert.equal(await resumer.exited, 0, resumer.err);
      const resumed = JSON.parse(resumer.out);
      assert.equal(resumed.status, "resumed", resumed.detail);
      assert.deepEqual(ran(ledger).map((r) => r.args), [{ charge: "ch_3PqK2L", amount: 12000 }]);
      assert.equal((await client.get(filed.id)).state, "executed");
    });

    test("approved as edited: the edited arguments run, and the model is told", async () => {
      const ledger = join(dir, `${file}-edited.jsonl`);
      const [filed] = await turn1AndKill(example, `${file}-edited`, ledger);
      const asked = await client.get(filed.id);
      const revision = { ...asked, tool: { name: "refund", arguments: { ...asked.tool.arguments, amount: 9000 } } };
      await signoff.approve(filed.id, filed.hash, "--set", "amount=9000", "--edited-hash", approvalHash(revision));
      const hook = await signoff.hooks.waitFor(filed.id, "approved");
      assert.equal(hook.event.approval.edited, true);
      const resumed = await resume(example, hook, ledger);
      assert.equal(resumed.status, "resumed", resumed.detail);
      assert.deepEqual(ran(ledger).map((r) => r.args), [{ charge: "ch_3PqK2L", amount: 9000 }]);
      assert.equal(resumed.calls[0].edited, true);
      assert.match(resumed.text, /edited this call/);
      assert.match(resumed.text, /amount: 12000 -> 9000/);
      assert.equal((await client.get(filed.id)).state, "executed");
    });

    test("answered: the answer is the tool's result, saying the tool did not run", async () => {
      const ledger = join(dir, `${file}-answered.jsonl`);
      const [filed] = await turn1AndKill(example, `${file}-answered`, ledger);
      await signoff.answer(filed.id, filed.hash, "Send a replacement instead");
      const hook = await signoff.hooks.waitFor(filed.id, "answered");
      const resumed = await resume(example, hook, ledger);
      assert.equal(resumed.status, "resumed", resumed.detail);
      assert.deepEqual(ran(ledger), []);
      assert.equal(resumed.calls[0].decision, "answered");
      assert.match(resumed.text, /did not run/);
      assert.match(resumed.text, /Send a replacement instead/);
    });

    test("rejected: the model reads the rejection and the refund never runs", async () => {
      const ledger = join(dir, `${file}-rejected.jsonl`);
      const [filed] = await turn1AndKill(example, `${file}-rejected`, ledger);
      await signoff.reject(filed.id, filed.hash, "photos do not show damage");
      const hook = await signoff.hooks.waitFor(filed.id, "rejected");
      const resumed = await resume(example, hook, ledger);
      assert.equal(resumed.status, "resumed", resumed.detail);
      assert.deepEqual(ran(ledger), []);
      assert.match(resumed.text, /rejected it: photos do not show damage/);
    });
  });
}
