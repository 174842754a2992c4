// Test helpers: the pool the Go harness (node_test.go) started, and
// fixtures shared with the Go tests.

import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { CapstanClient, type ClientOptions } from "../src/index.js";

/** The package's root directory (tests run from build/test). */
export const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

export const natsURL = process.env.CAPSTAN_TEST_NATS_URL ?? "";
export const natsCreds = process.env.CAPSTAN_TEST_NATS_CREDS ?? "";

/** Why the tests that need a real pool skip, or false when one is there. */
export const noPool: string | false = natsURL === ""
  ? "no Capstan pool: run these through `go test ./clients/typescript/` (it starts one and sets CAPSTAN_TEST_NATS_URL)"
  : false;

export function readJSON<T>(...path: string[]): T {
  return JSON.parse(readFileSync(join(root, ...path), "utf8")) as T;
}

/** Connects a client to the harness's pool; close it when done. */
export function connect(opts: Partial<ClientOptions> = {}): Promise<CapstanClient> {
  return CapstanClient.connect({ servers: natsURL, creds: natsCreds, name: "ts-test", ...opts });
}

/** A unique token for batch and call ids. */
export function unique(what: string): string {
  return `${what}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}
