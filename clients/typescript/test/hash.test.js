// approvalHash and canonicalJson give exactly the server's bytes: on the server's own golden
// vectors (tests/unit/test_canonical.py, docs/hashing.md), and on generated values compared
// with the server's implementation (bot/canonical.py) run as a subprocess.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import canonicalize from "canonicalize";

import { NotCanonical, approvalHash, canonicalHash, canonicalJson } from "../src/index.js";
import { exactJson, pythonAnswers, serverVectors } from "./support/python.js";
import { REPO } from "./support/signoff.js";

const vectors = await serverVectors();

/** JSON text as Python wrote it, NaN and infinities included. */
function parsePython(text) {
  const marked = text.replace(/-?Infinity|NaN/g, '"\\u0000$&"');
  return JSON.parse(marked, (_k, v) => (typeof v === "string" && v.startsWith("\u0000")
    ? Number(v.slice(1)) : v));
}

test("the server's canonical vectors, byte for byte", () => {
  assert.ok(vectors.canonical.length >= 15);
  for (const v of vectors.canonical) {
    const value = JSON.parse(v.json);
    assert.equal(canonicalJson(value), v.text, v.id);
    assert.equal(canonicalHash(value), v.sha256, v.id);
  }
});

test("the server's approval vectors", () => {
  assert.ok(vectors.approval.length >= 3);
  for (const v of vectors.approval) {
    const doc = JSON.parse(v.json);
    assert.equal(canonicalJson(doc), v.text, v.id);
    assert.equal(approvalHash(doc), v.sha256, v.id);
  }
});

test("what the server refuses is refused", () => {
  // Integers beyond 1e21 written in digits have no JavaScript counterpart: JSON.parse reads
  // them as doubles, which the server takes when written as JavaScript writes them ("1e+30").
  const digitsOnly = new Set(["int_10**30", "int_-(10**30)"]);
  let checked = 0;
  for (const v of vectors.refused) {
    if (digitsOnly.has(v.id)) continue;
    assert.throws(() => canonicalJson(parsePython(v.json)), NotCanonical, v.id);
    checked++;
  }
  assert.ok(checked >= 20);
  for (const value of [undefined, () => 1, 1n, Symbol("s"), new Date(0), [, 1], { a: undefined }]) {
    assert.throws(() => canonicalJson(value), NotCanonical, String(value));
  }
});

test("the worked example of docs/hashing.md", () => {
  const body = JSON.parse(readFileSync(join(REPO, "examples/refund-request.json"), "utf8"));
  assert.equal(approvalHash(body), "b7251afae0c624b26f7ffa39f29987d46301c342c9e05c529e98bb37c2c046ca");
});

test("edge cases: -0, 1e21, 2**53, UTF-16 key order", () => {
  assert.equal(canonicalJson(-0), "0");
  assert.equal(canonicalJson([1e21, 1e-7, 0.000001, 2 ** 53 - 1]), "[1e+21,1e-7,0.000001,9007199254740991]");
  assert.throws(() => canonicalJson(2 ** 53), NotCanonical);
  assert.throws(() => canonicalJson(-(2 ** 53)), NotCanonical);
  // U+1F600 is D83D DE00 in UTF-16: before U+FFFF, though its code point is larger.
  assert.equal(canonicalJson({ "\uffff": 1, "\u{1f600}": 2, a: 3 }), '{"a":3,"\u{1f600}":2,"\uffff":1}');
  assert.equal(canonicalJson("\u2028/\u007f\u001f"), '"\u2028/\u007f\\u001f"');
});

/** A seeded generator (mulberry32), so a failure names a value that can be found again. */
function random(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function generator(seed) {
  const r = random(seed);
  const pick = (xs) => xs[Math.floor(r() * xs.length)];
  const numbers = [
    () => 0, () => -0, () => 2 ** 53 - 1, () => -(2 ** 53 - 1), () => 2 ** 53, () => 1e21,
    () => 1e21 - 65536 * 2, () => 1e-7, () => 1e-6, () => 5e-324, () => Number.MAX_VALUE,
    () => Math.floor(r() * 1e6) - 5e5, () => (r() - 0.5) * 10 ** Math.floor(r() * 40 - 20),
    () => { // any finite double, from random bits
      const buf = Buffer.alloc(8);
      buf.writeUInt32BE(Math.floor(r() * 2 ** 32)); buf.writeUInt32BE(Math.floor(r() * 2 ** 32), 4);
      const x = buf.readDoubleBE(0);
      return Number.isFinite(x) ? x : 1.5;
    },
  ];
  const chars = [
    () => String.fromCharCode(Math.floor(r() * 0x20)), () => '"', () => "\\", () => "/",
    () => "\u2028", () => "\u007f", () => "é", () => "\u{1f600}", () => "\uffff", () => "\ue000",
    () => String.fromCodePoint(Math.floor(r() * 0x10ffff) & ~0x800 | 0), () => "a", () => "Z",
    () => (r() < 0.05 ? "\ud800" : "b"),
  ];
  const string = () => Array.from({ length: Math.floor(r() * 6) }, () => pick(chars)()).join("");
  const value = (depth) => {
    const roll = r();
    if (depth > 4 || roll < 0.45) {
      return pick([() => pick(numbers)(), string, () => null, () => r() < 0.5])();
    }
    if (roll < 0.7) return Array.from({ length: Math.floor(r() * 4) }, () => value(depth + 1));
    return Object.fromEntries(Array.from({ length: Math.floor(r() * 5) }, () => [string(), value(depth + 1)]));
  };
  return value;
}

test("generated values: the same bytes, hashes and refusals as the server's implementation", async () => {
  const value = generator(20261202);
  const values = Array.from({ length: 3000 }, () => value(0));
  const envelopes = Array.from({ length: 300 }, (_, i) => (i % 5 === 0
    ? { kind: "question", capability: "tools.ask", presentation: { title: value(3) },
      question: i % 10 ? { options: ["yes", "no"] } : {} }
    : { kind: "tool_call", capability: "tools.x", presentation: { title: "t", fields: value(2) },
      tool: { name: "x", arguments: { v: value(1) } } }));
  const answers = await pythonAnswers([
    ...values.map((v) => `{"value":${exactJson(v)}}`),
    ...envelopes.map((e) => `{"approval":${exactJson(e)}}`),
  ]);
  let refused = 0;
  values.forEach((v, i) => {
    const server = answers[i];
    let ours;
    try {
      ours = { text: canonicalJson(v), sha256: canonicalHash(v) };
    } catch (err) {
      assert.ok(err instanceof NotCanonical);
      ours = null;
    }
    if (server.refused !== undefined) {
      refused++;
      assert.equal(ours, null, `the server refuses ${exactJson(v)} (${server.refused}); we did not`);
    } else {
      assert.deepEqual(ours, server, `value ${i}: ${exactJson(v)}`);
      // A third implementation agrees where it is defined (it writes NaN as null, so only
      // on what both accept).
      assert.equal(canonicalize(v), server.text);
    }
  });
  assert.ok(refused > 50 && refused < 2500, `${refused} refused: the generator should mix both`);
  envelopes.forEach((e, i) => {
    const server = answers[values.length + i];
    if (server.refused !== undefined) {
      assert.throws(() => approvalHash(e), NotCanonical);
    } else {
      assert.equal(approvalHash(e), server.sha256, `envelope ${i}`);
    }
  });
});
