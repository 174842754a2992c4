// Lets @modelcontextprotocol/conformance run on Node.js 20. Its CLI imports
// fs.globSync (Node.js 22 and later) at load time, but only its tier-check
// command calls it. On a Node.js without fs.globSync this module registers a
// resolve hook that gives the conformance package an "fs" with a globSync
// that throws; the server scenarios never call it. Use it with
// node --import ./node20-fs-shim.mjs.
import fs from 'node:fs';
import { register } from 'node:module';

if (typeof fs.globSync !== 'function') {
  register('./node20-fs-hook.mjs', import.meta.url);
}
