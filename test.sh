#!/usr/bin/env bash
# The one test command: everything CI runs (.ci/run calls this script).
#
#   ./test.sh
#
# Static checks (gofmt, go mod tidy, go vet, lean imports, capstan-vet,
# staticcheck), the TypeScript client, every Go test under -race (the
# live TypeScript, MCP front door and browser tests included), the
# deployment files, the vault backend against a real Vault, the fuzz
# targets for a bounded time each, and govulncheck. It installs what it
# needs: Go modules and the toolchain from the module proxy, npm packages
# with npm ci from the committed lock files, Chromium with apt-get when
# missing (as root). What it cannot run here it skips, and says so at the
# end; a failing step stops it with a non-zero exit.
set -euo pipefail
cd "$(dirname "$0")"

skipped=()
skip() { echo "SKIPPED: $1"; skipped+=("$1"); }
summary() {
  status=$?
  echo "--- summary"
  if [ ${#skipped[@]} -eq 0 ]; then
    echo "nothing skipped by test.sh (tests that skip for a missing kernel feature say so with go test -v)"
  else
    printf 'skipped: %s\n' "${skipped[@]}"
  fi
  [ $status -eq 0 ] && echo "test.sh: all steps passed" || echo "test.sh: failed (exit $status)"
}
trap summary EXIT


# go.mod's toolchain line (a patched Go 1.26) wins over an older local Go;
# the toolchain comes from the module proxy.
export GOTOOLCHAIN=auto
go version
go mod download

echo "--- gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

echo "--- go mod tidy -diff (root and integration/vault)"
go mod tidy -diff
(cd integration/vault && go mod tidy -diff)

echo "--- go vet"
go vet ./...

echo "--- lean imports (client, tool and wire reach no nats-server, OTel SDK, gRPC or Prometheus)"
.ci/lean-imports

echo "--- capstan-vet (tool packages stay on their scoped accessors)"
go run ./cmd/capstan-vet ./...

echo "--- staticcheck"
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

echo "--- clients/typescript (npm ci from the lock file, build, typecheck, unit tests; its live tests run under go test below)"
if command -v npm >/dev/null 2>&1; then
  (cd clients/typescript && npm ci --no-audit --no-fund && npm run build && npm run typecheck && npm test)
else
  skip "clients/typescript: npm not found (not built; go test skips its live tests)"
fi

echo "--- npm packages of the MCP front door tests (cmd/dispatcher/testdata/mcp-frontdoor: TypeScript SDK client, conformance suite)"
if command -v npm >/dev/null 2>&1; then
  (cd cmd/dispatcher/testdata/mcp-frontdoor && npm ci --no-audit --no-fund)
else
  skip "MCP front door tests against the TypeScript SDK and the conformance suite: npm not found"
fi

echo "--- npm package of the front door's approval-question tests (internal/frontdoor/testdata/ts-client: TypeScript SDK client)"
if command -v npm >/dev/null 2>&1; then
  (cd internal/frontdoor/testdata/ts-client && npm ci --no-audit --no-fund)
else
  skip "front door approval-question tests against the TypeScript SDK: npm not found"
fi

echo "--- real MCP servers for the mcphost tests (npm ci of the pinned packages)"
if command -v npm >/dev/null; then
  (cd internal/mcphost/testdata/npm && npm ci --no-audit --no-fund)
else
  skip "mcphost tests against real MCP servers: npm not found"
fi

echo "--- Chromium for the console's browser test (cmd/dispatcher: TestConsoleInABrowser, chromedp)"
if ! command -v chromium >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    apt-get update && apt-get install -y chromium
  else
    skip "the console's browser test: no chromium and no apt-get"
  fi
fi

echo "--- tests (the console's browser test writes its screenshots to .ci/artifacts/console)"
export CAPSTAN_CONSOLE_SCREENSHOTS="${CAPSTAN_CONSOLE_SCREENSHOTS:-$PWD/.ci/artifacts/console}"
go test -race ./...

echo "--- deployment files (separate module: compose-go, k8s.io/api)"
(cd deploy/validate && go vet ./... && go test ./...)

echo "--- vault backend against a real in-process Vault (separate module: hashicorp/vault)"
(cd integration/vault && go mod download && go test -race ./...)

echo "--- fuzz targets, a bounded budget each"
.ci/fuzz

echo "--- govulncheck (the live database, else one built offline from golang.org/x/vulndb, else skipped)"
.ci/vulncheck
