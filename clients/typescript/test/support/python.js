// The server's Python canonical form, run as a subprocess (test/support/python_canonical.py).
import { execFile, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { promisify } from "node:util";
import { join } from "node:path";

import { PYTHON, REPO } from "./signoff.js";

const SCRIPT = join(REPO, "clients/typescript/test/support/python_canonical.py");
const env = { ...process.env, PYTHONPATH: REPO };

/** The golden vectors of tests/unit/test_canonical.py. */
export async function serverVectors() {
  const { stdout } = await promisify(execFile)(PYTHON, [SCRIPT, "vectors"], {
    env, cwd: REPO, maxBuffer: 64 << 20,
  });
  return JSON.parse(stdout);
}

/** Every double exactly, as {"$f": its IEEE 754 bits}; the rest as JSON. */
export function exactJson(value) {
  const tag = (v) => {
    if (typeof v === "number") {
      const buf = Buffer.alloc(8);
      buf.writeDoubleBE(v);
      return { $f: buf.toString("hex") };
    }
    if (Array.isArray(v)) return v.map(tag);
    if (v && typeof v === "object") {
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, tag(x)]));
    }
    return v;
  };
  return JSON.stringify(tag(value));
}

/** Ask the server's implementation about many values in one process, in order. */
export async function pythonAnswers(requests) {
  const child = spawn(PYTHON, [SCRIPT], { env, cwd: REPO, stdio: ["pipe", "pipe", "inherit"] });
  const lines = createInterface({ input: child.stdout });
  const answers = [];
  const done = (async () => { for await (const line of lines) answers.push(JSON.parse(line)); })();
  for (const request of requests) child.stdin.write(`${request}\n`);
  child.stdin.end();
  await done;
  return answers;
}
