// testdata/cases.json through the TypeScript client: the Go harness runs the
// same file through the Go client against the same kind of pool.

import { test } from "node:test";
import assert from "node:assert/strict";
import type { Call } from "../src/index.js";
import { connect, noPool, readJSON } from "./helpers.js";

test("shared cases give the results the Go client gives", { skip: noPool }, async () => {
  const { cases } = readJSON<{ cases: Array<{ name: string; call: Call; want: Record<string, unknown> }> }>("testdata", "cases.json");
  const c = await connect();
  try {
    const results = await c.executeParallel(cases.map((tc) => tc.call), { waitMs: 60_000 });
    cases.forEach((tc, i) => {
      const got = results[i] as unknown as Record<string, unknown>;
      for (const [k, want] of Object.entries(tc.want)) {
        assert.deepEqual(got[k], want, `${tc.name}: field ${k} of ${JSON.stringify(got)}`);
      }
    });
  } finally {
    await c.close();
  }
});
