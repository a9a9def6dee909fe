#!/usr/bin/env bash
# End-to-end test of the Rein extension in real VS Code (code-server) driven by headless
# Chromium. Builds and packages the extension, installs code-server and Chromium if missing,
# runs test/e2e.mjs, and ends with "vscode-e2e: N passed, M failed".
#   REIN_BIN   the rein binary the test workspace uses (default: <repo>/target/debug/rein,
#              built with cargo if missing)
#   KEEP=1     keep the scratch repository
#   ONLY=setup|main|tasks|conversation   run one scenario: the first hour (no repository, no agent, a subfolder),
#              the task itself, three worktree tasks at once, or a task continued and the history
#              (default: all four)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROOT=$(git -C "$HERE" rev-parse --show-toplevel)
export REIN_BIN=${REIN_BIN:-$ROOT/target/debug/rein}
export ARTIFACTS=${ARTIFACTS:-$ROOT/tests/artifacts/vscode}
export SCREENSHOT=${SCREENSHOT:-$ARTIFACTS/vscode.png}
export TRANSCRIPT_SCREENSHOT=${TRANSCRIPT_SCREENSHOT:-$ARTIFACTS/vscode-transcript.png}
export TASKS_SCREENSHOT=${TASKS_SCREENSHOT:-$ARTIFACTS/vscode-tasks.png}
cd "$HERE"

fail() { echo "vscode-e2e: setup failed: $*" >&2; echo "vscode-e2e: 0 passed, 1 failed"; exit 1; }

if [ ! -d node_modules/vscode-languageclient ] || [ ! -d node_modules/playwright-core ]; then
  echo "== npm ci"
  npm ci --no-fund --no-audit --loglevel=error || fail "npm ci"
fi
if [ ! -x "$REIN_BIN" ]; then
  echo "== cargo build --bin rein"
  (cd "$ROOT" && cargo build --bin rein) || fail "cargo build"
fi
# esbuild does not check types: tsc does, and the unit tests run on its output.
echo "== typecheck and unit tests"
npm run --silent typecheck || fail "typecheck"
npm test --silent >/dev/null || fail "unit tests (npm test)"
echo "== build and package"
npm run --silent build || fail "build"
# Packaged as the README says: `npm run package` copies REIN_BIN into the .vsix's bin/, which
# the windows with no rein.serverPath run (the test checks which binary each window started).
npm run --silent package >/dev/null || fail "package"
VSIX=$(ls -t "$HERE"/rein-*.vsix | head -1)
export VSIX

echo "== code-server"
# The shared tools sit beside the checkout (or beside the worktrees' directory).
INSTALLER="$ROOT/../shared/tools/install-code-server.sh"
[ -f "$INSTALLER" ] || INSTALLER="$ROOT/../../shared/tools/install-code-server.sh"
[ -f "$INSTALLER" ] || fail "missing $ROOT/../shared/tools/install-code-server.sh"
CODE_SERVER=$(bash "$INSTALLER" | tail -1) || fail "code-server install"
[ -x "$CODE_SERVER" ] || fail "code-server not at $CODE_SERVER"
export CODE_SERVER

if [ ! -x /usr/bin/chromium ]; then
  echo "== apt-get install chromium"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null || fail "chromium install"
fi
export CHROMIUM=/usr/bin/chromium

rm -rf "$ARTIFACTS" && mkdir -p "$ARTIFACTS"
echo "== e2e (artifacts: $ARTIFACTS)"
node test/e2e.mjs
