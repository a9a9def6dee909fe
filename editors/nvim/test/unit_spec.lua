-- Pieces that need no running task: formatting, completion, setup values, help, health.
local T = require("runner")
local H = require("helpers")
local rein = require("rein")
local ui = require("rein.ui")
local commands = require("rein.commands")

local function state(over)
  return vim.tbl_deep_extend("force", {
    version = 3,
    task = { id = "t1", goal = "add a greeting", started = "2025-01-01T00:00:00Z" },
    status = "running",
    control = { holder = "agent", since = "2025-01-01T00:00:00Z", reason = "started" },
    steps = {},
    plan = {},
    constraints = {},
    decisions = {},
    heldFiles = {},
    humanChanges = {},
  }, over or {})
end

T.test("describe: one line per status", function()
  T.eq(rein.describe(nil), nil)
  T.eq(rein.describe(vim.NIL), "no task")
  T.eq(rein.describe(state()), "agent running · step 1")
  T.eq(
    rein.describe(state({ steps = { { n = 1, action = "read a", author = "agent", status = "done" }, { n = 6, action = "x", author = "agent", status = "done" } } })),
    "agent running · step 7"
  )
  T.eq(rein.describe(state({ status = "paused" })), "paused")
  T.eq(
    rein.describe(state({ status = "awaiting_decision", decisions = { { id = "d1", kind = "approve_command", question = "q", options = { "approve", "deny" } } } })),
    "paused (needs approval)"
  )
  T.eq(
    rein.describe(state({ status = "awaiting_decision", decisions = { { id = "d1", kind = "question", question = "q", options = {} } } })),
    "paused (question for you)"
  )
  T.eq(rein.describe(state({ status = "human", control = { holder = "human" } })), "you hold control")
  T.eq(rein.describe(state({ status = "done", steps = { { n = 1, action = "a", author = "agent", status = "done" } } })), "done · 1 step")
  T.eq(rein.describe(state({ status = "aborted" })), "aborted")
  T.eq(rein.describe(state({ status = "failed" })), "failed")
  T.eq(
    rein.describe(state({ queuedStop = { intent = "pause", behind = "git push origin main", since = "" } })),
    "pause queued behind `git push origin main`"
  )
end)

T.test("describe: a pause says why, unless the user paused", function()
  -- The server's own reasons (control/transitions.rs, control/mod.rs).
  T.eq(rein.describe(state({ status = "paused", stopReason = "paused by the user" })), "paused")
  T.eq(
    rein.describe(state({ status = "paused", stopReason = "paused by the user; the running command is frozen and resumes where it stopped" })),
    "paused"
  )
  T.eq(
    rein.describe(state({ status = "paused", stopReason = "interrupted: Rein stopped while the task was running; every step up to 3 is kept. Resume to continue." })),
    "paused (interrupted: :Rein resume continues)"
  )
  T.eq(
    rein.describe(state({ status = "paused", stopReason = "interrupted: the server shut down; resume to continue" })),
    "paused (interrupted: :Rein resume continues)"
  )
  T.eq(
    rein.describe(state({ status = "paused", stopReason = "stopped on an error: cannot start the agent. Fix it and resume." })),
    "paused (stopped on an error)"
  )
end)

T.test("the start-up line for a missing server fits the room it has", function()
  local real = rein.config.cmd
  rein.config.cmd = { "/opt/nowhere/rein", "lsp" }
  local why = rein.missing_server()
  T.contains(why, "cargo install --path server")
  T.eq(rein.missing_server_line(why, #why), why, "the whole message when it fits")
  T.eq(rein.missing_server_line(why, 100), 'server "/opt/nowhere/rein" not found: :checkhealth rein says how to install it')
  T.eq(rein.missing_server_line(why, 62), '"rein" not found: :checkhealth rein says how to install it')
  T.eq(rein.missing_server_line(why, 40), "server not found: see :checkhealth rein")
  rein.config.cmd = real
end)

T.test(":Rein changes uses the last reconcile of this task only", function()
  local rc1 = { changes = { { path = "old.txt", kind = "modified", added = 1, removed = 0, diff = "@@ -1 +1 @@\n-a\n+b\n" } } }
  rein._remember_reconcile(99, state({ task = { id = "t1" } }), rc1)
  T.eq(rein.last_reconcile(99, state({ task = { id = "t1" } })), rc1)
  T.eq(rein.last_reconcile(99, state({ task = { id = "t2" } })), nil, "another task's reconcile")
  T.eq(ui.changes_items(state({ task = { id = "t2" } }), "/r", rein.last_reconcile(99, state({ task = { id = "t2" } }))), {})
  rein._reconciles[99] = nil
end)

T.test("<Plug>(rein-…) mappings exist and no key is mapped by default", function()
  for _, name in ipairs({ "start", "continue", "pause", "resume", "steer", "steer-urgent", "abort", "takeover", "handback", "state", "decide", "rewind", "release", "steps", "changes", "tasks", "decisions", "open", "land", "pause-all", "resume-all" }) do
    local m = vim.fn.maparg("<Plug>(rein-" .. name .. ")", "n", false, true)
    T.truthy(m.rhs and m.rhs:find("Rein", 1, true), "<Plug>(rein-" .. name .. ") in Normal mode: " .. vim.inspect(m))
  end
  T.eq(vim.fn.maparg("<Plug>(rein-steer)", "x"), ":Rein steer<CR>")
  T.eq(vim.fn.maparg("<Plug>(rein-pause)", "n"), "<Cmd>Rein pause<CR>")
  for _, mode in ipairs({ "n", "x", "i", "o" }) do
    for _, m in ipairs(vim.api.nvim_get_keymap(mode)) do
      T.truthy(not (m.rhs or ""):find("Rein", 1, true) or m.lhs:find("^<Plug>"), "a default key for Rein: " .. vim.inspect(m))
    end
  end
end)

T.test("a <Plug> mapping runs its :Rein command", function()
  local seen
  local real = commands.subcommands.steps.run
  commands.subcommands.steps.run = function(args)
    seen = args
  end
  vim.keymap.set("n", "<F7>", "<Plug>(rein-steps)")
  vim.api.nvim_feedkeys(vim.keycode("<F7>"), "x", false)
  commands.subcommands.steps.run = real
  vim.keymap.del("n", "<F7>")
  T.eq(seen, "")
end)

T.test("<Plug>(rein-steer) in Visual mode steers about the selected lines", function()
  vim.cmd("enew!")
  vim.api.nvim_buf_set_lines(0, 0, -1, false, { "one", "two", "three", "four" })
  local seen
  local real = commands.subcommands.steer.run
  commands.subcommands.steer.run = function(args, cmd)
    seen = { args = args, line1 = cmd.line1, line2 = cmd.line2, range = cmd.range, bang = cmd.bang }
  end
  vim.keymap.set("x", "<F8>", "<Plug>(rein-steer-urgent)")
  vim.api.nvim_win_set_cursor(0, { 2, 0 })
  vim.api.nvim_feedkeys(vim.keycode("Vj<F8>"), "x", false)
  commands.subcommands.steer.run = real
  vim.keymap.del("x", "<F8>")
  vim.cmd("bwipeout!")
  T.eq(seen, { args = "", line1 = 2, line2 = 3, range = 2, bang = true })
end)

T.test("statusline is empty where Rein is not running", function()
  T.eq(rein.statusline(), "")
end)

T.test("state float lines show goal, status, holder, plan, steps, constraints, decisions, held files", function()
  local lines = table.concat(
    ui.state_lines(state({
      status = "awaiting_decision",
      stopReason = "waiting for your decision",
      plan = { { id = "p1", text = "read it", status = "done" }, { id = "p2", text = "write it", status = "active" } },
      steps = { { n = 1, action = "read app.txt", author = "agent", status = "done", checkpoint = "0123456789abcdef" } },
      constraints = { { id = "c1", text = "keep it short", status = "delivered", deliveredAtStep = 2, source = "command", location = { path = "app.txt", line = 4 } } },
      decisions = { { id = "d1", kind = "approve_command", question = "Run make?", options = { "approve", "deny" }, detail = "make" } },
      heldFiles = { "app.txt" },
      humanChanges = { { path = "app.txt", kind = "modified", atStep = 1, added = 2, removed = 1 } },
    })),
    "\n"
  )
  for _, want in ipairs({
    "# Rein: add a greeting",
    "Status:  paused (needs approval)",
    "Holder:  agent since 2025-01-01 00:00:00 — started",
    "Task:    t1, started 2025-01-01 00:00:00, version 3",
    "- [x] read it",
    "- [>] write it",
    "1. agent done        read app.txt  @01234567",
    "c1 [delivered at step 2] keep it short (app.txt:5)",
    "d1 (approve_command) Run make?",
    "options: approve / deny",
    "## Held files",
    "- app.txt",
    "modified app.txt +2 -1 (step 1)",
  }) do
    T.contains(lines, want)
  end
  T.contains(table.concat(ui.state_lines(vim.NIL), "\n"), "No task")
end)

T.test("steps quickfix items point at the files the steps touched", function()
  local items = ui.steps_items(state({
    steps = {
      { n = 1, action = "plan (2 items)", author = "agent", status = "done" },
      { n = 2, action = "write src/a.rs", author = "agent", status = "done", checkpoint = "abcdef0123" },
      { n = 3, action = "run make", author = "agent", status = "failed" },
    },
  }), "/r")
  T.eq(#items, 3)
  T.eq(items[1].filename, nil)
  T.eq(items[2].filename, "/r/src/a.rs")
  T.eq(items[2].text, "step 2 [agent] done: write src/a.rs  @abcdef01")
  T.eq(items[3].type, "E")
end)

T.test("the plan: real statuses and true counts; no progress said instead of stale items; your edits marked", function()
  local plan = {
    { id = "p1", text = "read it", status = "done" },
    { id = "p2", text = "write it", status = "active", priority = "high" },
    { id = "p3", text = "test it", status = "pending", editedByHuman = true },
    { id = "p4", text = "ship it", status = "skipped" },
  }
  local text = table.concat(ui.state_lines(state({ plan = plan, planProgress = true })), "\n")
  T.contains(text, "## Plan · 1 of 3 done, 1 in progress, 1 skipped")
  T.contains(text, "- [x] read it")
  T.contains(text, "- [>] write it (high)")
  T.contains(text, "- [ ] test it (edited by you)")
  T.contains(text, "- [-] ship it")
  T.eq(ui.plan_summary(state({ plan = plan, planProgress = true })), "1 of 3 done, 1 in progress, 1 skipped")
  -- The agent never reported progress: its statuses are not shown as if they were.
  local stale = vim.tbl_map(function(p)
    return vim.tbl_extend("force", p, { status = "pending" })
  end, plan)
  text = table.concat(ui.state_lines(state({ plan = stale, planProgress = false })), "\n")
  T.contains(text, "## Plan\n(the agent reports no plan progress)\n- read it\n- write it (high)\n- test it (edited by you)")
  T.no_contains(text, "[ ]")
  T.eq(ui.plan_summary(state({ plan = stale, planProgress = false })), nil)
  -- An item the agent calls done whose step Rein recorded as not done is not shown as done.
  local why = "marked done by the agent; its step 5 was not done on your word"
  local claimed = {
    { id = "p1", text = "read it", status = "done" },
    { id = "p2", text = "push it", status = "done", contradicted = why },
  }
  text = table.concat(ui.state_lines(state({ plan = claimed, planProgress = true })), "\n")
  T.contains(text, "## Plan · 1 of 2 done, 1 marked done, not done")
  T.contains(text, "- [!] push it (" .. why .. ")")
end)

T.test("state float steps: the agent's words, its thinking folded, every refusal in the agent's text, output folded", function()
  local refusal = 'path ".GIT/config" refused: it is inside the repository\'s .git directory, which the agent never writes'
  local v = ui.state_view(state({
    steps = {
      { n = 1, action = "read app.txt", author = "agent", status = "done", message = "First I read the app.", thought = "The user wants a greeting.\nStart with the app." },
      { n = 2, action = "write .GIT/config", author = "agent", status = "failed", message = "Poking at git.", detail = refusal },
      { n = 3, action = "run make", author = "agent", status = "done", detail = "exit code 0", output = "cc -o app app.c\nok\n", checkpoint = "0123456789" },
    },
  }))
  local text = table.concat(v.lines, "\n")
  T.contains(text, "  1. agent done        read app.txt\n")
  T.contains(text, "       “First I read the app.”")
  T.contains(text, "       → " .. refusal)
  T.contains(text, "       output (its last 2 lines):\n       │ cc -o app app.c\n       │ ok")
  -- The thinking and the output are folds (closed when shown); the words are not.
  for i, l in ipairs(v.lines) do
    if l:find("thinking: The user wants", 1, true) then
      T.eq(v.folds[i], ">1")
      T.eq(v.folds[i + 1], "1")
      T.eq(v.lines[i + 1], "                 Start with the app.")
    elseif l:find("First I read", 1, true) or l:find("refused", 1, true) then
      T.eq(v.folds[i], "0", l)
    elseif l:find("output (its last", 1, true) then
      T.eq(v.folds[i], ">1")
    end
  end
  -- The latest steps only, saying where the rest are.
  local many = {}
  for n = 0, 20 do
    table.insert(many, { n = n, action = "read a" .. n, author = "agent", status = "done" })
  end
  text = table.concat(ui.state_lines(state({ steps = many })), "\n")
  T.contains(text, "… 9 earlier (:Rein steps, :Rein transcript)")
  T.no_contains(text, "read a8\n")
  T.contains(text, "read a9")
  -- After an abort: the agent's lines it kept, where they are.
  text = table.concat(ui.state_lines(state({ status = "aborted", keptAgentLines = { { path = "a.txt", lines = { { line = 3, text = "AGENT one" } } } } })), "\n")
  T.contains(text, "- a.txt:3  AGENT one")
end)

T.test("steps quickfix: the agent's words before each step, the refusal text after it", function()
  local items = ui.steps_items(state({
    steps = {
      { n = 1, action = "write .GIT/config", author = "agent", status = "failed", message = "Let me\nfix git.", detail = 'path ".GIT/config" refused: no' },
    },
  }), "/r")
  T.eq(#items, 2)
  T.eq(items[1].text, "  agent: Let me ⏎ fix git.")
  T.eq(items[1].valid, 0)
  T.eq(items[2].text, 'step 1 [agent] failed: write .GIT/config → path ".GIT/config" refused: no')
  T.eq(items[2].type, "E")
end)

T.test("transcript entries read as a conversation, with folds and what each line is about", function()
  local tr = require("rein.transcript")
  local view = require("rein.view")
  local v = tr.render(view.new(), {
    { kind = "goal", at = "2025-01-01T10:00:00Z", text = "add a greeting" },
    { kind = "plan", at = vim.NIL, items = { { id = "p1", text = "read", status = "active" }, { id = "p2", text = "write", status = "pending" } }, progress = true, by = "agent" },
    { kind = "message", at = "2025-01-01T10:01:00Z", step = 2, text = "First I read the app.", thought = "Hmm.\nRead first." },
    { kind = "tool", step = 2, title = "read app.txt", status = "done", planItem = "p1", files = {} },
    { kind = "plan", items = { { id = "p1", text = "read", status = "done" }, { id = "p2", text = "write", status = "active" } }, progress = true, by = "agent" },
    { kind = "tool", step = 3, title = "write greeting.txt", status = "done", checkpoint = "abc", files = { { path = "greeting.txt", kind = "added", added = 1, removed = 0 } } },
    { kind = "tool", step = 4, title = "write .GIT/config", status = "failed", detail = 'path ".GIT/config" refused', files = {} },
    { kind = "output", step = 5, command = "make", text = "a\nb\n", truncated = false, exit = { code = 2 } },
    { kind = "steer", id = "c1", text = "keep it short", urgent = false, location = { path = "a.txt", line = 0 } },
    { kind = "delivered", step = 6, ids = { "c1" } },
    { kind = "decision", id = "d1", decisionKind = "question", question = "Farewell too?", options = {} },
    { kind = "answer", id = "d1", choice = "take over", by = "human" },
    { kind = "control", at = "2025-01-01T10:02:00Z", what = "taken_over", text = "you took over: to fix it myself" },
    { kind = "human", step = 7, title = "your changes", checkpoint = "def", files = { { path = "a.txt", kind = "modified", added = 1, removed = 1 } } },
    { kind = "control", what = "handed_back", text = "handed back to the agent" },
    { kind = "end", status = "done", text = "greeting added" },
  }, {})
  local text = table.concat(v.lines, "\n")
  for _, want in ipairs({
    "Goal: add a greeting",
    "plan, as the agent set it:\n    [>] p1: read\n    [ ] p2: write",
    "  thinking: Hmm.\n            Read first.\nagent: First I read the app.",
    "step 2 ✓ read app.txt  · p1",
    "plan: [x] p1: read · [>] p2: write",
    "step 3 ✓ write greeting.txt\n    greeting.txt +1 -0 (added)",
    'step 4 ✗ write .GIT/config (failed)\n    → path ".GIT/config" refused',
    "    output of `make` (2 lines, exit code 2):\n    │ a\n    │ b",
    "you (steer c1): keep it short (about a.txt:1)",
    "  (c1 delivered to the agent before step 6)",
    "? d1: Farewell too? (any answer)",
    "you answered d1: take over",
    "── you took over: to fix it myself",
    "step 7 ✎ you: your changes\n    a.txt +1 -1",
    "── handed back to the agent",
    "■ done: greeting added",
  }) do
    T.contains(text, want)
  end
  for i, l in ipairs(v.lines) do
    if l:find("^step 3 ") or l:find("^    greeting.txt") then
      T.eq(v.data[i], { step = 3, diff = true }, l)
    elseif l:find("^step 7 ") then
      T.eq(v.data[i].step, 7)
    elseif l:find("output of `make`", 1, true) then
      T.eq(v.folds[i], ">1")
      T.eq(v.folds[i + 1], "1")
    elseif l:find("thinking: Hmm", 1, true) then
      T.eq(v.folds[i], ">1")
    elseif l:find("^agent: ") then
      T.eq(v.folds[i], "0")
    end
  end
  -- Times: on the blank line before a turn, after a one-line event; never over the text.
  T.eq(v.right[1], false)
  for i, l in ipairs(v.lines) do
    if l:find("^agent: First I read") then
      T.eq(v.right[i - 3], "10:01:00", "the blank line before the thinking")
    end
  end
  T.contains(text, "── you took over: to fix it myself  10:02:00")
  -- An agent that reports no progress: its plan without stale statuses.
  text = table.concat(tr.render(view.new(), { { kind = "plan", items = { { id = "p1", text = "read", status = "pending" } }, progress = false, by = "agent" } }, {}).lines, "\n")
  T.eq(text, "plan, as the agent set it (it reports no progress on it):\n    - p1: read")
end)

T.test("live output: a header, chunks joined across lines, paused/resumed, the exit; bounded", function()
  local out = require("rein.output")
  rein.config.output_lines = 12
  local function send(p)
    out.on_output(990, vim.tbl_extend("force", { taskId = "t", id = "4-1", step = 4, command = "make", terminal = vim.NIL, skipped = 0, state = "running" }, p))
  end
  send({ seq = 1, chunk = "" })
  send({ seq = 2, chunk = "compiling a" })
  send({ seq = 3, chunk = "... ok\n\27[32mgreen\27[0m\nprogress 10%\rprogress 100%\n" })
  send({ seq = 4, chunk = "", state = "paused" })
  send({ seq = 5, chunk = "", state = "running" })
  send({ seq = 6, chunk = "done\n", state = "ended", exit = { code = 0, signal = vim.NIL } })
  local lines = vim.api.nvim_buf_get_lines(out.buf(), 0, -1, false)
  T.eq(lines, {
    "▶ step 4: make",
    "compiling a... ok",
    "green",
    "progress 100%",
    "── paused (the command is frozen; :Rein resume thaws it)",
    "── resumed",
    "done",
    "■ exit code 0",
  })
  T.eq(#out.running(990), 0, "ended")
  -- Two commands printing in turn are told apart; the buffer keeps its last lines.
  out.on_output(990, { id = "5-1", step = 5, command = "sleep 9", terminal = "t1", seq = 1, chunk = "x\n", skipped = 0, state = "running" })
  out.on_output(990, { id = "6-1", step = 6, command = "ls", terminal = vim.NIL, seq = 1, chunk = "y\n", skipped = 3, state = "running" })
  out.on_output(990, { id = "5-1", step = 5, command = "sleep 9", terminal = "t1", seq = 2, chunk = "z\n", skipped = 0, state = "running" })
  lines = vim.api.nvim_buf_get_lines(out.buf(), 0, -1, false)
  T.eq(vim.list_slice(lines, #lines - 6), {
    "▶ step 5: sleep 9 (terminal t1)",
    "x",
    "▶ step 6: ls",
    "… 3 bytes not shown",
    "y",
    "… step 5: sleep 9 (terminal t1)",
    "z",
  })
  T.eq(#out.running(990), 2)
  T.eq(out.running(990)[1].tail, { "x", "z" })
  for i = 1, 20 do
    out.on_output(990, { id = "6-1", step = 6, command = "ls", seq = 1 + i, chunk = "line " .. i .. "\n", skipped = 0, state = "running" })
  end
  lines = vim.api.nvim_buf_get_lines(out.buf(), 0, -1, false)
  T.eq(#lines, 12)
  T.eq(lines[12], "line 20")
  out.forget(990)
  rein.config.output_lines = 2000
end)

T.test("live output: the first chunk after a resume comes after the resumed marker", function()
  local out = require("rein.output")
  local function send(p)
    out.on_output(991, vim.tbl_extend("force", { taskId = "t", id = "7-1", step = 7, command = "sh slow.sh", terminal = vim.NIL, skipped = 0, state = "running" }, p))
  end
  send({ seq = 1, chunk = "first\n" })
  send({ seq = 2, chunk = "", state = "paused" })
  -- The server sends what the thawed command printed with the state that says it runs again.
  send({ seq = 3, chunk = "second\n", state = "running" })
  local lines = vim.api.nvim_buf_get_lines(out.buf(), 0, -1, false)
  T.eq(vim.list_slice(lines, #lines - 3), {
    "first",
    "── paused (the command is frozen; :Rein resume thaws it)",
    "── resumed",
    "second",
  })
  send({ seq = 4, chunk = "", state = "ended", exit = { code = 0, signal = vim.NIL } })
end)

T.test("a step's diff spans its checkpoint and the one before it", function()
  local diff = require("rein.diff")
  local steps = {
    { n = 0, checkpoint = "aaa" },
    { n = 1, checkpoint = vim.NIL },
    { n = 2, checkpoint = "aaa" },
    { n = 3, checkpoint = "bbb" },
  }
  T.eq(diff.step_range(steps, 3), { from = "aaa", to = "bbb", same = false })
  T.eq(diff.step_range(steps, 2), { from = "aaa", to = "aaa", same = true })
  T.eq(diff.step_range(steps, 0), { from = nil, to = "aaa", same = false })
  T.eq(diff.step_range(steps, 1), nil)
  T.eq(diff.step_range(steps, 9), nil)
end)

T.test("changes quickfix items use reconcile hunks when known", function()
  local s = state({ humanChanges = { { path = "a.txt", kind = "modified", atStep = 2, added = 1, removed = 0 } } })
  local items = ui.changes_items(s, "/r", nil)
  T.eq(#items, 1)
  T.eq(items[1].filename, "/r/a.txt")
  T.eq(items[1].lnum, 1)
  T.eq(items[1].text, "modified +1 -0 (step 2)")
  local rc = {
    changes = {
      { path = "a.txt", kind = "modified", added = 1, removed = 0, diff = "--- a/a.txt\n+++ b/a.txt\n@@ -3,0 +4 @@\n+x\n@@ -9,2 +10,3 @@\n ctx\n ctx\n-old\n+new\n", unsaved = false },
      { path = "b.txt", kind = "added", added = 2, removed = 0, diff = "@@ -0,0 +1,2 @@\n+a\n+b\n", unsaved = true },
    },
  }
  items = ui.changes_items(s, "/r", rc)
  T.eq(vim.tbl_map(function(i)
    return { i.filename, i.lnum }
  end, items), { { "/r/a.txt", 4 }, { "/r/a.txt", 12 }, { "/r/b.txt", 1 } })
  T.contains(items[3].text, "[unsaved]")
  -- A submodule whose inside changed is named, as the handback report names it.
  items = ui.changes_items(state({}), "/r", { changes = {}, submodules = { "sub" } })
  T.eq(#items, 1)
  T.eq(items[1].filename, "/r/sub")
  T.contains(items[1].text, "submodule")
end)

T.test(":Rein completes subcommands, abort choices, checkpoints, decisions and options", function()
  local names = vim.fn.getcompletion("Rein ", "cmdline")
  for _, n in ipairs({ "start", "pause", "resume", "steer", "abort", "takeover", "handback", "state", "rewind", "decide", "release", "steps", "changes", "output", "transcript", "diff" }) do
    T.truthy(vim.tbl_contains(names, n), "subcommand " .. n .. " in " .. vim.inspect(names))
  end
  T.eq(vim.fn.getcompletion("Rein de", "cmdline"), { "decide", "decisions" })
  T.eq(vim.fn.getcompletion("Rein abort ", "cmdline"), { "keep", "discard" })
  local real = rein.state
  rein.state = function()
    return state({
      steps = {
        { n = 0, action = "tree at start", author = "human", status = "done", checkpoint = "aaaa1111bbbb" },
        { n = 1, action = "read a", author = "agent", status = "done", checkpoint = "aaaa1111bbbb" },
        { n = 2, action = "write b", author = "human", status = "done", checkpoint = "cccc2222dddd" },
        { n = 3, action = "finish", author = "agent", status = "done", checkpoint = "cccc2222dddd" },
      },
      decisions = { { id = "d1", kind = "held_file", question = "?", options = { "release", "skip", "take over" } } },
      heldFiles = { "b.txt" },
    })
  end
  local ok, err = pcall(function()
    -- Every step once (a read or the finish ended on the checkpoint before it), each id once.
    T.eq(vim.fn.getcompletion("Rein rewind ", "cmdline"), { "step:3", "step:2", "step:1", "step:0", "cccc2222", "aaaa1111" })
    T.eq(vim.fn.getcompletion("Rein rewind st", "cmdline"), { "step:3", "step:2", "step:1", "step:0" })
    T.eq(vim.fn.getcompletion("Rein decide ", "cmdline"), { "d1" })
    T.eq(vim.fn.getcompletion("Rein decide d1 ", "cmdline"), { "release", "skip", "take over" })
    T.eq(vim.fn.getcompletion("Rein release ", "cmdline"), { "b.txt" })
    T.eq(vim.fn.getcompletion("Rein state ", "cmdline"), { "split" })
    rein.config.agents = { quick = { kind = "script", steps = {} }, careful = { kind = "script", steps = {} } }
    T.eq(vim.fn.getcompletion("Rein start ", "cmdline"), { "--worktree", "agent=careful", "agent=quick" })
    T.eq(vim.fn.getcompletion("Rein start --worktree ", "cmdline"), { "--carry", "agent=careful", "agent=quick" })
    T.eq(vim.fn.getcompletion("Rein start agent=careful ", "cmdline"), {})
    rein.config.agents = nil
  end)
  rein.state = real
  assert(ok, err)
end)

T.test("setup: init_options and capabilities", function()
  rein.setup({ cmd = { H.bin, "lsp" }, autostart = false })
  T.eq(vim.json.encode(rein.init_options()), "{}")
  rein.setup({
    cmd = { H.bin, "lsp" },
    autostart = false,
    agent = { kind = "script", plan = ".rein/plan.json" },
    steer = { onSave = false },
    init_options = { killGraceMs = 500 },
  })
  T.eq(rein.init_options(), { agent = { kind = "script", plan = ".rein/plan.json" }, steer = { onSave = false }, killGraceMs = 500 })
  local caps = rein.capabilities()
  T.eq(caps.general.positionEncodings, { "utf-8", "utf-16" })
  T.eq(caps.window.workDoneProgress, true)
  T.truthy(caps.window.showMessage, "window.showMessage")
  T.eq(caps.experimental.rein.steerSelection, true)
  T.eq(caps.experimental.rein.output, true)
  T.eq(caps.experimental.rein.stateDeltas, true)
  local cfg = rein.client_config("/tmp/x")
  T.eq(cfg.cmd, { H.bin, "lsp" })
  T.eq(cfg.root_dir, "/tmp/x")
  T.truthy(cfg.handlers["rein/stateChanged"] and cfg.handlers["rein/filesChanged"] and cfg.handlers["rein/output"], "handlers")
  T.truthy(cfg.commands["rein.steerSelection"] and cfg.commands["rein.steer"], "client commands")
end)

T.test("state deltas: applied on their base; a gap or another task fetches the whole state", function()
  local id = 9001
  local notify_was = rein.config.notify
  rein.config.notify = false
  local fetches = {}
  local request_was = rein._request_state
  rein._request_state = function(client_id, cb)
    table.insert(fetches, { client_id = client_id, cb = cb })
  end
  local function step(n, action)
    return { n = n, action = action or ("step " .. n), author = "agent", status = "done" }
  end
  local function delta(base, version, over)
    return vim.tbl_extend("force", {
      taskId = "t1",
      base = base,
      version = version,
      changed = {},
      cleared = {},
      steps = { from = 0, items = {} },
    }, over or {})
  end
  local ok, err = pcall(function()
    local first = state({ steps = { step(0, "working tree at start"), step(1) }, queuedStop = { intent = "pause", behind = "x", since = "y" } })
    rein._set_state(id, first)
    -- A new step and a field emptied (Neovim drops the null from `changed`; `cleared` says it).
    local handler = rein.client_config("/tmp/x").handlers["rein/stateChanged"]
    handler(nil, delta(3, 4, { changed = { status = "paused" }, cleared = { "queuedStop" }, steps = { from = 2, items = { step(2) } } }), { client_id = id })
    local s = rein._states[id]
    T.eq({ s.version, s.status, s.queuedStop, #s.steps, s.steps[3].n }, { 4, "paused", nil, 3, 2 })
    T.eq({ first.version, first.status, first.queuedStop ~= nil }, { 3, "running", true }, "the state before keeps its fields")
    T.eq(s.task.goal, "add a greeting", "unchanged fields carried over")
    -- An earlier step changed (a terminal's output landing on it): replaced from that index.
    rein._apply_delta(id, delta(4, 5, { steps = { from = 1, items = { step(1, "run it (output)"), step(2), step(3) } } }))
    s = rein._states[id]
    T.eq(vim.tbl_map(function(x)
      return x.action
    end, s.steps), { "working tree at start", "run it (output)", "step 2", "step 3" })
    -- A delta no newer than the state held (a reply's state came first) is dropped.
    rein._set_state(id, vim.tbl_extend("force", s, { version = 7, status = "running" }))
    rein._apply_delta(id, delta(5, 6, { changed = { status = "paused" } }))
    T.eq({ rein._states[id].version, rein._states[id].status, #fetches }, { 7, "running", 0 })
    -- A gap: the whole state is fetched once; deltas meanwhile wait and apply to it.
    rein._apply_delta(id, delta(8, 9, { changed = { status = "paused" } }))
    rein._apply_delta(id, delta(9, 10, { steps = { from = 4, items = { step(4) } } }))
    rein._apply_delta(id, delta(12, 13))
    T.eq(#fetches, 1, "one fetch for the gap")
    T.eq(rein._states[id].version, 7, "nothing applied while fetching")
    fetches[1].cb(nil, { state = state({ version = 9, status = "paused", steps = { step(0), step(1), step(2), step(3) } }) })
    s = rein._states[id]
    T.eq({ s.version, #s.steps, s.steps[5].n }, { 10, 5, 4 }, "fetched 9, then 9→10 applied")
    T.eq(#fetches, 1, "a delta that still does not follow is dropped, not fetched for again")
    -- The next live delta after that gap fetches again; a failed fetch drops what waited.
    rein._apply_delta(id, delta(13, 14))
    T.eq(#fetches, 2)
    fetches[2].cb({ message = "gone" }, nil)
    T.eq(rein._states[id].version, 10)
    T.eq(rein._fetching[id], nil)
    -- Another task: fetched whole, never applied to this one's state.
    rein._apply_delta(id, delta(1, 2, { taskId = "t2", steps = { from = 0, items = { step(0) } } }))
    T.eq({ #fetches, rein._states[id].task.id }, { 3, "t1" })
    fetches[3].cb(nil, { state = state({ version = 2, task = { id = "t2", goal = "second" }, steps = { step(0) } }) })
    T.eq({ rein._states[id].task.id, rein._states[id].version }, { "t2", 2 })
    -- A whole state (or none: `null` arrives as nothing) still replaces it.
    handler(nil, {}, { client_id = id })
    T.eq(rein._states[id], vim.NIL)
  end)
  rein._request_state = request_was
  rein.config.notify = notify_was
  rein._states[id] = nil
  rein._fetching[id] = nil
  if not ok then
    error(err, 0)
  end
end)

T.test("doc/rein.txt is valid for :helptags and has a tag for every subcommand", function()
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir .. "/doc", "p")
  vim.fn.writefile(vim.fn.readfile(vim.g.rein_plugin_dir .. "/doc/rein.txt"), dir .. "/doc/rein.txt")
  vim.cmd("helptags " .. vim.fn.fnameescape(dir .. "/doc"))
  local tags = table.concat(vim.fn.readfile(dir .. "/doc/tags"), "\n")
  for _, t in ipairs({ "rein.txt", "rein-setup", "rein-commands", "rein-statusline", "rein-health", ":Rein" }) do
    T.contains(tags, t .. "\t", "tag " .. t)
  end
  for _, n in ipairs(commands.names()) do
    T.contains(tags, ":Rein-" .. n .. "\t", "tag :Rein-" .. n)
  end
  -- The shipped doc/tags is what :helptags makes of doc/rein.txt today (regenerate it with
  -- `nvim --headless -c "helptags editors/nvim/doc" -c q` after editing the help).
  T.eq(vim.fn.readfile(vim.g.rein_plugin_dir .. "/doc/tags"), vim.fn.readfile(dir .. "/doc/tags"), "doc/tags up to date")
end)

T.test(":help rein works from the shipped doc/tags, without running :helptags", function()
  -- Only the plugin directory as a user installs it: its doc/tags is what Neovim reads.
  T.truthy(vim.tbl_contains(vim.opt.runtimepath:get(), vim.g.rein_plugin_dir), "plugin on 'runtimepath'")
  local ok, err = pcall(vim.cmd, "help rein")
  T.truthy(ok, "help rein: " .. tostring(err))
  T.eq(vim.bo.filetype, "help")
  T.eq(vim.fn.expand("%:t"), "rein.txt")
  vim.cmd("helpclose")
  vim.cmd("help :Rein-takeover")
  T.eq(vim.fn.expand("%:t"), "rein.txt")
  vim.cmd("helpclose")
end)

T.test(":checkhealth rein reports a missing binary as an ERROR", function()
  rein.setup({ cmd = { "/nonexistent/rein", "lsp" }, autostart = false })
  local text = H.checkhealth()
  T.contains(text, "ERROR")
  T.contains(text, "not found")
end)

T.test(":checkhealth rein is clean with the real binary in a git repo", function()
  local root = H.repo({ ["a.txt"] = "a\n" })
  vim.cmd("cd " .. vim.fn.fnameescape(root))
  rein.setup({ cmd = { H.bin, "lsp" }, autostart = false })
  local text = H.checkhealth()
  T.no_contains(text, "ERROR", "checkhealth")
  T.contains(text, "git work tree: " .. root)
  T.contains(text, "server binary: ")
end)

-- Several tasks at once (issue 27) ------------------------------------------------------

local tasks = require("rein.tasks")

local function summary(over)
  return vim.tbl_extend("force", {
    taskId = "20261206-aaaa",
    name = "task 1",
    goal = "fix the parser",
    status = "running",
    holder = "agent",
    isolation = "worktree",
    branch = "rein/20261206-aaaa",
    worktree = "/wt/20261206-aaaa",
    plan = { 1, 3 },
    steps = 4,
    decisions = {},
  }, over or {})
end

local three = {
  tasks = {
    summary(),
    summary({ taskId = "20261206-bbbb", name = "task 2", goal = "add a flag", status = "awaiting_decision", decisions = { "d1" }, plan = { 0, 2 } }),
    summary({ taskId = "20261206-cccc", name = "task 3", goal = "write docs", status = "paused", plan = { 0, 0 } }),
  },
  decisions = {
    { taskId = "20261206-bbbb", task = "task 2", decisionId = "d1", question = "task 2: The agent wants to run `git push`", options = { "approve", "deny" }, since = "2026-12-06T19:00:00Z" },
  },
}

T.test("tasks: a task is named by its number, name, id or the start of its id", function()
  T.eq(tasks.resolve(three, "2").taskId, "20261206-bbbb")
  T.eq(tasks.resolve(three, "task 3").taskId, "20261206-cccc")
  T.eq(tasks.resolve(three, "20261206-aaaa").name, "task 1")
  T.eq(tasks.resolve(three, "20261206-c").name, "task 3")
  local none, why = tasks.resolve(three, "20261206")
  T.eq(none, nil, "an ambiguous start names none")
  T.contains(why, "task 1 (20261206-aaaa), task 2 (20261206-bbbb), task 3 (20261206-cccc)")
  T.eq(tasks.resolve(three, "7"), nil)
  -- One id listed twice (in place and in a worktree): the worktree task is meant.
  local twice = { tasks = { summary({ name = "here", isolation = "none" }), summary() } }
  T.eq(tasks.resolve(twice, "20261206-aaaa").isolation, "worktree")
  T.eq({ tasks.split_ref("task=2 keep it short") }, { "2", "keep it short" })
  T.eq({ tasks.split_ref("keep task=2") }, { nil, "keep task=2" })
end)

T.test("tasks: the statusline counts running tasks and waiting decisions when there are worktree tasks", function()
  T.eq(tasks.summary(three), "3 tasks: 1 running, 1 decision waiting")
  T.eq(tasks.summary({ tasks = { summary() }, decisions = {} }), "1 task: 1 running")
  T.eq(tasks.summary({ tasks = { summary({ name = "here", isolation = "none" }) }, decisions = {} }), nil, "one task in place: its own words")
  local real_state, real_client = rein.state, rein.get_client
  rein.get_client = function()
    return { id = 4242 }
  end
  local ok, err = pcall(function()
    tasks._lists[4242] = three
    rein.state = function()
      return vim.NIL
    end
    T.eq(rein.statusline(), "Rein: 3 tasks: 1 running, 1 decision waiting")
    rein.state = function()
      return state()
    end
    T.eq(rein.statusline(), "Rein: agent running · step 1 · 3 tasks: 1 running, 1 decision waiting")
    tasks._lists[4242] = { tasks = {}, decisions = {} }
    T.eq(rein.statusline(), "Rein: agent running · step 1")
  end)
  tasks._lists[4242] = nil
  rein.state, rein.get_client = real_state, real_client
  assert(ok, err)
end)

T.test("tasks: the list shows name, status, holder, plan x/y, decisions and goal; the queue oldest first", function()
  local v = tasks.view(three)
  local text = table.concat(v.lines, "\n")
  T.eq(v.lines[1], "# Rein tasks · 3 tasks: 1 running, 1 decision waiting")
  T.eq(v.lines[3], "task    status     holder  plan  asks goal")
  T.eq(v.lines[4], "task 1  running    agent   1/3        fix the parser")
  T.eq(v.lines[5], "task 2  needs you  agent   0/2   1    add a flag")
  T.eq(v.lines[6], "task 3  paused     agent   -          write docs")
  T.eq(v.data[5].task.taskId, "20261206-bbbb", "a line knows its task")
  T.eq(v.right[4], "rein/20261206-aaaa")
  T.contains(text, "- task 2: The agent wants to run `git push`  [approve / deny]")
  T.contains(text, "p pause · r resume · s steer")
  T.eq(tasks.view({ tasks = {}, decisions = {} }).lines[3], "No task. Start one with :Rein start (--worktree: in a worktree of its own).")
end)

T.test("tasks: the history, newest first, with status, when, steps, turns and goal; <CR> and c act on its rows", function()
  local now = os.time({ year = 2026, month = 12, day = 6, hour = 12, min = 0, sec = 0 })
  local offset = os.time(os.date("*t", now)) - os.time(os.date("!*t", now))
  now = now + offset -- 2026-12-06T12:00:00Z
  T.eq(tasks.ago("2026-12-06T11:59:30.5Z", now), "30s ago")
  T.eq(tasks.ago("2026-12-06T11:55:00Z", now), "5m ago")
  T.eq(tasks.ago("2026-12-04T12:00:00Z", now), "2d ago")
  T.eq(tasks.ago("soon", now), "")
  local l = {
    tasks = {},
    decisions = {},
    history = {
      { taskId = "20261206-dddd", goal = "write docs", status = "done", started = "2026-12-06T11:50:00Z", steps = 4, turns = 1, canContinue = true, current = true },
      { taskId = "20261206-aaaa", goal = "fix the parser", status = "aborted", started = "2026-12-06T10:00:00Z", updated = "2026-12-06T11:00:00Z", steps = 9, turns = 3, lastTurn = "now add tests", canContinue = true, current = false },
      { taskId = "20261205-bbbb", goal = "old", status = "failed", started = "2026-12-05T10:00:00Z", steps = 1, turns = 1, canContinue = false, current = false },
    },
  }
  local v = tasks.view(l)
  local text = table.concat(v.lines, "\n")
  local at
  for i, line in ipairs(v.lines) do
    if line:find("^## History") then
      at = i
    end
  end
  T.truthy(at, text)
  T.eq(v.lines[at], "## History, newest first (<CR> its transcript · c continue it)")
  T.eq(v.lines[at + 1], "  status     when       steps  turns goal")
  T.match(v.lines[at + 2], "^%* done%s+%S+ ago%s+4%s+1%s+write docs$")
  T.match(v.lines[at + 3], "^  aborted%s+%S+ ago%s+9%s+3%s+fix the parser$")
  T.eq(v.lines[at + 4], "    last turn: now add tests")
  T.match(v.lines[at + 5], "^  failed%s+%S+ ago%s+1%s+1%s+old$")
  T.eq(v.right[at + 2], "current")
  T.eq(v.right[at + 3], "c: continue")
  T.eq(v.right[at + 5], false, "no further turn: nothing offered")
  T.eq(v.data[at + 4].task.taskId, "20261206-aaaa", "the follow-up line is its task's")
  T.contains(text, "c continue (an ended task: your next words)")
  -- An earlier task is named by its id (or the start of it) like any other.
  T.eq(tasks.resolve(l, "20261206-aaaa").goal, "fix the parser")
  T.eq(tasks.resolve(l, "20261205").goal, "old")
  -- A rein/tasks notification (no history) keeps the one held; rein.tasks replaces it.
  tasks.on_tasks(4343, l)
  tasks.on_tasks(4343, { tasks = {}, decisions = {} })
  T.eq(#tasks._lists[4343].history, 3)
  tasks.on_tasks(4343, { tasks = {}, decisions = {}, history = {} })
  T.eq(#tasks._lists[4343].history, 0)
  tasks.forget(4343)
end)

T.test("transcript: a follow-up turn reads as you speaking again, the report of your changes folded", function()
  local tr = require("rein.transcript")
  local view = require("rein.view")
  local v = tr.render(view.new(), {
    { kind = "end", status = "done", text = "wrote a" },
    { kind = "turn", at = "2025-01-01T10:05:00Z", turn = 2, step = 7, text = "now add tests\nand a README line", report = "## What changed\n- a.txt" },
    { kind = "turn", turn = 3, step = 9, text = "more" },
  }, {})
  local text = table.concat(v.lines, "\n")
  T.contains(text, "■ done: wrote a\n\n── turn 2, from step 7 ─")
  T.contains(text, "you: now add tests\n     and a README line\n    your changes since its last turn, as the agent was told:\n    │ ## What changed\n    │ - a.txt")
  T.contains(text, "── turn 3, from step 9 ─")
  T.contains(text, "you: more")
  for i, line in ipairs(v.lines) do
    if line:find("your changes since", 1, true) then
      T.eq(v.folds[i], ">1", "the report starts a fold")
      T.eq(v.folds[i + 1], "1")
    elseif line:find("^you: ") then
      T.eq(v.folds[i], "0", "your words are not folded")
    end
  end
  T.eq(v.right[3], "10:05:00", "when, on the blank line before the turn")
end)

T.test("tasks: a worktree task's reply never becomes the state of the task here", function()
  tasks._lists[4243] = three
  local ok, err = pcall(function()
    local theirs = state({ task = { id = "20261206-bbbb" } })
    T.eq(rein._is_here(4243, { taskId = "20261206-bbbb" }, theirs), false)
    T.eq(rein._is_here(4243, {}, theirs), false, "the only task, picked by the server, is still a worktree task")
    T.eq(rein._is_here(4243, {}, state()), true, "the task here's")
  end)
  tasks._lists[4243] = nil
  assert(ok, err)
end)

T.test(":Rein completes task=N, all, and land's words", function()
  local real = rein.get_client
  rein.get_client = function()
    return { id = 4244 }
  end
  tasks._lists[4244] = { tasks = { summary({ name = "here", isolation = "none" }), three.tasks[2] }, decisions = {} }
  local ok, err = pcall(function()
    T.eq(vim.fn.getcompletion("Rein pause ", "cmdline"), { "all", "task=here", "task=2" })
    T.eq(vim.fn.getcompletion("Rein steer ", "cmdline"), { "task=here", "task=2" })
    T.eq(vim.fn.getcompletion("Rein abort task=2 ", "cmdline"), { "keep", "discard" })
    T.eq(vim.fn.getcompletion("Rein land ", "cmdline"), { "changes", "commit", "keep", "task=here", "task=2" })
    T.eq(vim.fn.getcompletion("Rein tasks ", "cmdline"), {})
  end)
  tasks._lists[4244] = nil
  rein.get_client = real
  assert(ok, err)
end)

T.test(":Rein start --worktree says so in the goal prompt, with or without an agent", function()
  local real = vim.ui.input
  local prompts = {}
  vim.ui.input = function(opts, cb)
    table.insert(prompts, opts.prompt)
    cb(nil)
  end
  local ok, err = pcall(function()
    rein.config.cmd = { H.bin, "lsp" }
    commands.run({ args = "start --worktree", bang = false, range = 0 })
    rein.config.agents = { quick = { kind = "script", steps = {} } }
    commands.run({ args = "start --worktree --carry agent=quick", bang = false, range = 0 })
    commands.run({ args = "start", bang = false, range = 0 })
  end)
  vim.ui.input, rein.config.agents, rein.config.cmd = real, nil, nil
  assert(ok, err)
  T.eq(prompts, { "Rein goal (in a worktree): ", "Rein goal (quick, in a worktree): ", "Rein goal (quick): " })
end)
