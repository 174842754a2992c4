#!/bin/sh
# Sets up the README's local-mode MCP example in a directory (default
# ./mcp-demo): the reference filesystem MCP server installed there (pinned,
# with npm), a data directory with one file, the server's definition
# (servers/fs.yaml, for CAPSTAN_MCP_SERVERS_DIR) and a personality files-agent
# that may use it (personalities/files-agent.yaml, for CAPSTAN_PERSONALITIES_DIR).
# Definitions and personalities need absolute paths, hence a script.
set -eu
dir=$(mkdir -p "${1:-mcp-demo}" && cd "${1:-mcp-demo}" && pwd)
npm install --prefix "$dir" --no-audit --no-fund --silent @modelcontextprotocol/server-filesystem@2026.8.31
mkdir -p "$dir/data" "$dir/servers" "$dir/personalities"
echo "hello from a hosted MCP server" > "$dir/data/hello.txt"
cat > "$dir/servers/fs.yaml" <<YAML
# The filesystem server as a confined stdio child: Landlock lets it read its
# own code and the data directory, nothing else of this machine's files;
# without a network capability no socket leaves its namespace.
name: fs
command: [node, $dir/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js, $dir/data]
capabilities:
  fs_reach: {read: [$dir/node_modules, $dir/data]}
YAML
cat > "$dir/personalities/files-agent.yaml" <<YAML
# May call the tools of the hosted server fs (and no built-in tool); its
# fs_reach covers everything the server reads, as it must (docs/mcp.md).
id: files-agent
toolset: []
mcp_servers: [fs]
fs_reach:
  read: [$dir]
YAML
echo "CAPSTAN_MCP_SERVERS_DIR=$dir/servers CAPSTAN_PERSONALITIES_DIR=$dir/personalities"
