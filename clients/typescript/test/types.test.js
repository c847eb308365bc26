// The declarations in types/ (what TypeScript users import) are the ones the JSDoc in src/
// makes, and src/ type-checks under `strict`: tsc writes them afresh into a temporary folder.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";

import { PACKAGE } from "./support/signoff.js";

test("types/ is what tsc makes of src/, and src/ type-checks", async () => {
  const out = mkdtempSync(join(tmpdir(), "signoff-ts-types-"));
  try {
    const tsc = join(PACKAGE, "node_modules/typescript/bin/tsc");
    await promisify(execFile)(process.execPath, [tsc, "-p", "tsconfig.json", "--outDir", out], { cwd: PACKAGE })
      .catch((err) => assert.fail(`tsc: ${err.stdout}${err.stderr}`));
    const made = readdirSync(out).sort();
    assert.deepEqual(readdirSync(join(PACKAGE, "types")).sort(), made);
    for (const file of made) {
      assert.equal(readFileSync(join(PACKAGE, "types", file), "utf8"), readFileSync(join(out, file), "utf8"),
        `types/${file} is stale: run \`npm run types\``);
    }
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});
