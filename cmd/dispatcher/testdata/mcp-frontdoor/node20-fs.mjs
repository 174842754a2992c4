// node:fs plus a globSync that throws (see node20-fs-shim.mjs).
import fs from 'node:fs';

export * from 'node:fs';
export default fs;

export function globSync() {
  throw new Error('fs.globSync needs Node.js 22 or later');
}
