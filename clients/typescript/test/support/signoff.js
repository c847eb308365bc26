// A real `signoff serve` for the tests: started by the test on a SQLite file in a temporary
// folder, with a webhook receiver on loopback and the humans deciding through the `signoff`
// CLI, as tests/support/agent_deployment.py does for the Python adapters. The server and CLI
// come from the repository's virtualenv (the README's test command makes it), or SIGNOFF_BIN.
import { spawn, execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";

const run = promisify(execFile);
export const REPO = resolve(fileURLToPath(import.meta.url), "../../../../..");
export const PACKAGE = resolve(REPO, "clients/typescript");
export const SIGNOFF = process.env.SIGNOFF_BIN ?? join(REPO, ".venv/bin/signoff");
export const PYTHON = process.env.SIGNOFF_PYTHON ?? join(REPO, ".venv/bin/python");
export const API_KEY = "ts-test-key-0123456789";
// Two secrets, as while rotating: every webhook carries a signature by each.
export const OLD_SECRET = "whsec_" + Buffer.alloc(32, 7).toString("base64");
export const NEW_SECRET = "whsec_" + Buffer.alloc(32, 9).toString("base64");

/** Webhooks received, and a way to wait for one. */
class Receiver {
  constructor() {
    this.deliveries = [];
    this.waiters = [];
    this.server = createServer((req, res) => {
      const chunks = [];
      req.on("data", (c) => chunks.push(c));
      req.on("end", () => {
        const body = Buffer.concat(chunks).toString("utf8");
        this.deliveries.push({ headers: { ...req.headers }, body, event: JSON.parse(body) });
        res.writeHead(204).end();
        for (const w of this.waiters.splice(0)) w();
      });
    });
  }

  async listen() {
    await new Promise((ok) => this.server.listen(0, "127.0.0.1", ok));
    return this.server.address().port;
  }

  /** The first webhook for `approvalId` with `event`, waiting up to 20 s. */
  async waitFor(approvalId, event) {
    const deadline = Date.now() + 20_000;
    for (;;) {
      const found = this.deliveries.find(
        (d) => d.event.approval.id === approvalId && d.event.event === event);
      if (found) return found;
      if (Date.now() > deadline) throw new Error(`no ${event} webhook for ${approvalId}`);
      await new Promise((ok) => { this.waiters.push(ok); setTimeout(ok, 200); });
    }
  }
}

// The repository's example configuration, which the examples must run against as written.
export const EXAMPLE_CONFIG = join(REPO, "config/signoff.example.toml");
const EXAMPLE_WEBHOOK = '# webhook_url = "https://agents.acme.example/hooks/signoff"';

/** The example configuration as the README has a user change it: its tenant's webhook URL
 * uncommented and pointed at the agent (here the receiver); nothing else differs. */
function exampleConfig(hookPort, webhooks) {
  const text = readFileSync(EXAMPLE_CONFIG, "utf8");
  if (!text.includes(EXAMPLE_WEBHOOK)) throw new Error(`${EXAMPLE_CONFIG} has no line ${EXAMPLE_WEBHOOK}`);
  if (!webhooks) return text;  // as shipped: no webhook, the agent has no public URL
  return text.replace(EXAMPLE_WEBHOOK, `webhook_url = "http://127.0.0.1:${hookPort}/hooks"`);
}

export class Signoff {
  /** With `example`, on config/signoff.example.toml (its variables given values); else on
   * this package's own test configuration. `webhooks: false`: the tenant has no webhook URL
   * (an agent with no public URL); the receiver then must receive nothing. */
  static async start({ example = false, webhooks = true } = {}) {
    const self = new Signoff();
    await self.#start(example, webhooks);
    return self;
  }

  async #start(example, webhooks) {
    this.dir = mkdtempSync(join(tmpdir(), "signoff-ts-"));
    this.hooks = new Receiver();
    const hookPort = await this.hooks.listen();
    this.config = join(this.dir, "signoff.toml");
    if (example) {
      // Its SQLite database sits beside the copy; its port is replaced by --listen below.
      writeFileSync(this.config, exampleConfig(hookPort, webhooks));
    } else writeFileSync(this.config, `
[server]
listen = "127.0.0.1:0"
claim_lease = "2m"
[database]
url = "sqlite+aiosqlite:///${join(this.dir, "signoff.db")}"
[outbox]
poll_interval = 0.1
backoff_base = "1s"
[sweeper]
interval = 0.5
[[tenants]]
name = "acme"
api_key_env = "SIGNOFF_TS_API_KEY"
${webhooks ? `webhook_url = "http://127.0.0.1:${hookPort}/hooks"
webhook_secret_env = ["SIGNOFF_TS_OLD_SECRET", "SIGNOFF_TS_NEW_SECRET"]` : ""}
[principals.alice]
name = "Alice Ng"
[principals.bob]
name = "Bob Stone"
[[routes]]
tenant = "acme"
capability = "tools.*"
approvers = ["alice", "bob"]
edits = "any"
[[routes]]
tenant = "acme"
capability = "fixed.*"
approvers = ["alice"]
`);
    this.env = {
      ...process.env,
      SIGNOFF_CONFIG: this.config,
      SIGNOFF_TS_API_KEY: API_KEY,
      SIGNOFF_TS_OLD_SECRET: OLD_SECRET,
      SIGNOFF_TS_NEW_SECRET: NEW_SECRET,
      SIGNOFF_ACME_API_KEY: API_KEY,
      SIGNOFF_ACME_WEBHOOK_SECRET: NEW_SECRET,
    };
    this.proc = spawn(SIGNOFF, ["serve", "--workers", "1", "--listen", "127.0.0.1:0"], {
      env: this.env, cwd: this.dir, stdio: ["ignore", "ignore", "pipe"],
    });
    this.log = "";
    this.url = await new Promise((ok, fail) => {
      const timer = setTimeout(() => fail(new Error(`signoff serve did not start:\n${this.log}`)), 30_000);
      this.proc.stderr.setEncoding("utf8");
      this.proc.stderr.on("data", (text) => {
        this.log += text;
        const match = /signoff listening on (http:\/\/[\d.]+:\d+)/.exec(this.log);
        if (match) { clearTimeout(timer); ok(match[1]); }
      });
      this.proc.on("exit", (code) => fail(new Error(`signoff serve exited ${code}:\n${this.log}`)));
    });
    this.agentEnv = { ...process.env, SIGNOFF_URL: this.url, SIGNOFF_API_KEY: API_KEY,
      SIGNOFF_WEBHOOK_SECRET: NEW_SECRET };
  }

  /** A `signoff` command, as a human at the terminal (or a card's button) would decide. */
  async cli(...args) {
    const { stdout } = await run(SIGNOFF, [...args], { env: this.env, cwd: this.dir });
    return stdout;
  }

  approve(id, hash, ...more) {
    return this.cli("approvals", "approve", id, "--hash", hash, "--as", "alice", ...more);
  }

  reject(id, hash, note = "not this one") {
    return this.cli("approvals", "reject", id, "--hash", hash, "--as", "alice", "--note", note);
  }

  answer(id, hash, text) {
    return this.cli("approvals", "answer", id, "--hash", hash, "--as", "alice", "--text", text);
  }

  async stop() {
    if (this.proc.exitCode === null) {
      const exited = new Promise((ok) => this.proc.on("exit", ok));
      this.proc.kill("SIGTERM");
      await exited;
    }
    await new Promise((ok) => this.hooks.server.close(ok));
    rmSync(this.dir, { recursive: true, force: true });
  }
}
