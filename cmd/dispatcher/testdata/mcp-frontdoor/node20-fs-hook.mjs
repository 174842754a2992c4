// Resolve hook of node20-fs-shim.mjs: "fs" imported by the conformance
// package resolves to node20-fs.mjs; every other import is unchanged.
const shim = new URL('./node20-fs.mjs', import.meta.url).href;

export async function resolve(specifier, context, nextResolve) {
  if ((specifier === 'fs' || specifier === 'node:fs') &&
      context.parentURL?.includes('/node_modules/@modelcontextprotocol/conformance/')) {
    return { url: shim, shortCircuit: true };
  }
  return nextResolve(specifier, context);
}
