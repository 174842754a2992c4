// The catalog as a personality's LLM sees it: a port of the gates behind the
// Go client's ToolsFor (internal/capability: ToolsetGate, PermissionGate and
// ValidateTool). The personality document is read leniently: only the keys
// these gates use (toolset, mcp_servers, plugins, permissions, fs_reach,
// safety.network); a document a worker would refuse as invalid is not
// reported here (the Go client's ToolsFor reports it).

import { isIP, BlockList } from "node:net";
import { homedir } from "node:os";
import { posix } from "node:path";
import { domainToASCII } from "node:url";
import { parse as parseYAML } from "yaml";
import type { CatalogEntry } from "./protocol.js";

/** The parts of a personality document the tool gates read. */
export interface PersonalityGates {
  id: string;
  /** undefined = key absent (every built-in tool); [] = none. */
  toolset?: string[];
  mcpServers: string[];
  plugins: string[];
  permissions: string[];
  fsRead: string[];
  fsWrite: string[];
  networkAllow: string[];
  networkDeny: string[];
}

/** Parses a personality document (YAML or JSON) for the gates. Throws on a document that is not YAML. */
export function parsePersonality(doc: string, home: string = homedir()): PersonalityGates {
  const root = parseYAML(doc) as Record<string, unknown> | null;
  if (root === null || typeof root !== "object" || Array.isArray(root)) {
    throw new TypeError("personality document must be a mapping");
  }
  const list = (v: unknown): string[] | undefined =>
    Array.isArray(v) ? v.filter((s): s is string => typeof s === "string") : undefined;
  const obj = (v: unknown): Record<string, unknown> =>
    v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  const id = typeof root.id === "string" ? root.id : "";
  const fs = obj(root.fs_reach);
  const vars: Record<string, string> = { HOME: home, PERSONALITY: /^[A-Za-z0-9_-]{1,128}$/.test(id) ? id : "" };
  const path = (s: string): string | undefined => {
    const out = s.replace(/\$\{([A-Z]+)\}/g, (_, name: string) => vars[name] ?? "");
    return out.startsWith("/") ? posix.normalize(out).replace(/(.)\/$/, "$1") : undefined;
  };
  vars.WORKDIR = typeof fs.workdir === "string" ? (path(fs.workdir) ?? "") : "";
  const paths = (v: unknown) => (list(v) ?? []).map(path).filter((p): p is string => p !== undefined);
  const network = obj(obj(root.safety).network);
  return {
    id,
    toolset: root.toolset === null || root.toolset === undefined ? undefined : (list(root.toolset) ?? []),
    mcpServers: list(root.mcp_servers) ?? [],
    plugins: list(root.plugins) ?? [],
    permissions: list(root.permissions) ?? [],
    fsRead: paths(fs.read),
    fsWrite: paths(fs.write),
    networkAllow: list(network.allow) ?? [],
    networkDeny: list(network.deny) ?? [],
  };
}

const MCP_RE = /^mcp__([A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*)__([A-Za-z0-9_-]+)$/;

/** Reports whether the personality's LLM may see the tool: the toolset, permission and declaration gates. */
export function mayCall(e: CatalogEntry, p: PersonalityGates): boolean {
  return inToolset(e, p) && permitted(e, p) && declarationFits(e, p);
}

function inToolset(e: CatalogEntry, p: PersonalityGates): boolean {
  const mcp = MCP_RE.exec(e.name);
  const plugin = e.plugin ?? "";
  if (mcp || plugin !== "") {
    if (mcp && !p.mcpServers.includes(mcp[1]!)) return false;
    if (plugin !== "" && !p.plugins.includes(plugin)) return false;
    return true;
  }
  if (e.always_include) return true;
  return p.toolset === undefined || p.toolset.includes(e.name) || (e.toolset !== "" && p.toolset.includes(e.toolset));
}

/** "ns:*" grants every "ns:..." permission, "*" grants all. */
export function permissionMatch(grant: string, perm: string): boolean {
  if (perm === "" || grant === "") return false;
  if (grant === "*" || grant === perm) return true;
  if (grant.endsWith(":*")) {
    const ns = grant.slice(0, -1);
    return perm.startsWith(ns) && perm.length > ns.length;
  }
  return false;
}

function permitted(e: CatalogEntry, p: PersonalityGates): boolean {
  return (e.permissions ?? []).every((perm) => p.permissions.some((g) => permissionMatch(g, perm)));
}

function declarationFits(e: CatalogEntry, p: PersonalityGates): boolean {
  const caps = (e.capabilities ?? {}) as Record<string, any>;
  const hosts: unknown = caps.network?.allowed_hosts;
  if (Array.isArray(hosts)) {
    const allow = p.networkAllow.map(parseHostPattern).filter((x): x is HostPattern => x !== undefined);
    const deny = p.networkDeny.map(parseHostPattern).filter((x): x is HostPattern => x !== undefined);
    for (const h of hosts) {
      if (h === "*") continue;
      const q = typeof h === "string" ? parseHostPattern(h) : undefined;
      if (!q) return false;
      if (!allow.some((a) => covers(a, q, false))) return false;
      if (deny.some((d) => covers(d, q, true))) return false;
    }
  }
  const fitsPaths = (decl: unknown, reach: string[]) => {
    if (!Array.isArray(decl)) return true; // absent or "from-personality"
    return decl.every((d) => typeof d === "string" && d.startsWith("/") &&
      reach.some((r) => coversPath(r, posix.normalize(d).replace(/(.)\/$/, "$1"))));
  };
  return fitsPaths(caps.fs_reach?.read, p.fsRead) && fitsPaths(caps.fs_reach?.write, p.fsWrite);
}

function coversPath(prefix: string, path: string): boolean {
  return path === prefix || prefix === "/" || path.startsWith(prefix + "/");
}

// Host patterns (internal/capability/hostpattern.go): "*", "name",
// "*.name", IP literals and CIDR prefixes, each with an optional ":port" or ":*".
interface HostPattern {
  kind: "any" | "name" | "suffix" | "prefix";
  name: string;
  family: 4 | 6;
  addr: string;
  bits: number;
  port: number;
  anyPort: boolean;
}

function parseHostPattern(s: string): HostPattern | undefined {
  let host = s;
  let port = "";
  let hasPort = false;
  if (s.startsWith("[")) {
    const end = s.indexOf("]");
    if (end < 0) return undefined;
    host = s.slice(1, end);
    const rest = s.slice(end + 1);
    if (rest !== "") {
      if (!rest.startsWith(":")) return undefined;
      port = rest.slice(1);
      hasPort = true;
    }
  } else if (s.split(":").length === 2) {
    [host, port] = s.split(":") as [string, string];
    hasPort = true;
  }
  const p: HostPattern = { kind: "any", name: "", family: 4, addr: "", bits: 0, port: 0, anyPort: false };
  if (hasPort) {
    if (port === "*") p.anyPort = true;
    else if (/^\d{1,5}$/.test(port) && Number(port) >= 1 && Number(port) <= 65535) p.port = Number(port);
    else return undefined;
  }
  if (host === "*") return p;
  const [addr, bitsText] = host.split("/") as [string, string | undefined];
  const family = isIP(addr);
  if (family !== 0) {
    const max = family === 4 ? 32 : 128;
    const bits = bitsText === undefined ? max : Number(bitsText);
    if (!Number.isInteger(bits) || bits < 0 || bits > max) return undefined;
    return { ...p, kind: "prefix", family: family as 4 | 6, addr, bits };
  }
  if (bitsText !== undefined || host.includes(":")) return undefined;
  const suffix = host.startsWith("*.");
  const name = domainToASCII((suffix ? host.slice(2) : host).toLowerCase().replace(/\.$/, ""));
  if (name === "" || name.includes("*")) return undefined;
  return { ...p, kind: suffix ? "suffix" : "name", name };
}

function covers(p: HostPattern, q: HostPattern, deny: boolean): boolean {
  return coversHost(p, q) && coversPort(p, q, deny);
}

function coversHost(p: HostPattern, q: HostPattern): boolean {
  if (p.kind === "any") return true;
  if (q.kind === "any") return false;
  switch (p.kind) {
    case "name": return q.kind === "name" && q.name === p.name;
    case "suffix":
      return (q.kind === "name" && q.name.endsWith("." + p.name)) ||
        (q.kind === "suffix" && (q.name === p.name || q.name.endsWith("." + p.name)));
    case "prefix": {
      if (q.kind !== "prefix" || q.family !== p.family || q.bits < p.bits) return false;
      const bl = new BlockList();
      const type = p.family === 4 ? "ipv4" : "ipv6";
      bl.addSubnet(p.addr, p.bits, type);
      return bl.check(q.addr, type);
    }
  }
  return false;
}

function coversPort(p: HostPattern, q: HostPattern, deny: boolean): boolean {
  if (p.anyPort) return true;
  if (p.port !== 0) return q.port === p.port;
  if (deny) return true;
  return q.port === 0 && !q.anyPort;
}
