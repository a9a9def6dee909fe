-- See what the agent is doing (issue 12), against the real server: the plan moves, the
-- agent's words and its refusals show, a long command's output arrives in rein://output in
-- chunks before it ends (paused and resumed said), and :Rein transcript follows the task live
-- — goal, the agent's messages, tool rows, folded output, a steer, a decision, the takeover
-- and the hand-back — and reads the same after it ended; <CR> on a tool row opens its diff.
local T = require("runner")
local H = require("helpers")

H.stub_ui()
H.capture_notify()

local root, app, code_win
local plans = {} -- each distinct plan the editor was told, as "status,status,…"

vim.api.nvim_create_autocmd("User", {
  pattern = "ReinStateChanged",
  callback = function(ev)
    local s = ev.data and ev.data.state
    if type(s) ~= "table" or type(s.plan) ~= "table" or #s.plan == 0 then
      return
    end
    local st = table.concat(vim.tbl_map(function(p)
      return p.status
    end, s.plan), ",")
    if plans[#plans] ~= st then
      table.insert(plans, st)
    end
  end,
})

local plan = {
  steps = {
    { plan = { { text = "read the app", status = "active" }, "write a greeting", "run the check" }, think_ms = 100 },
    { read = "app.txt", item = 1, say = "First I read the app to see what it greets.", think_ms = 200 },
    { write = { path = "greeting.txt", content = "hello\n" }, item = 2, say = "Now the greeting itself.", think_ms = 200 },
    { write = { path = ".GIT/config", content = "[core]\n" }, say = "And git's config, to be sure.", think_ms = 200 },
    { run = "sh slow.sh", item = 3, say = "Running the check; it prints as it goes.", think_ms = 200 },
    { ask = "Shall I add a farewell too?", say = "One question before I finish.", think_ms = 100 },
    { ask = "Anything else before I finish?", think_ms = 100 },
    { finish = "greeting written and checked", think_ms = 100 },
  },
}

-- Prints a line, then waits for the test to create `go` outside the work tree (no clock: the
-- test decides when the command ends), then prints another.
local go = vim.fn.tempname() .. "-go"
local slow = ("echo first\nwhile [ ! -f '%s' ]; do sleep 0.05; done\necho second\n"):format(go)

local function output_text()
  return H.named_buf_text("rein://output") or ""
end

local function transcript_text()
  return H.named_buf_text("rein://transcript") or ""
end

local context = T.context
T.context = function()
  return context() .. "\n     transcript:\n" .. transcript_text():gsub("\n", "\n       ")
end

local function wait_transcript(needle)
  return T.wait(function()
    local t = transcript_text()
    return t:find(needle, 1, true) and t
  end, "the transcript to show " .. needle)
end

local function step_of(s, pattern)
  for _, st in ipairs(s and s.steps or {}) do
    if (st.action or ""):find(pattern) then
      return st
    end
  end
end

local function transcript_line(pattern)
  local buf = vim.fn.bufnr("rein://transcript")
  for i, l in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    if l:find(pattern) then
      return i
    end
  end
end

T.scenario("see what the agent is doing", {
  {
    ":Rein transcript and :Rein output open before the task; the cursor stays in the code",
    function()
      root = H.repo({ ["app.txt"] = "name = demo\n", ["slow.sh"] = slow }, plan)
      vim.cmd("cd " .. vim.fn.fnameescape(root))
      H.setup({ policy = { allow = { "sh slow.sh" } } })
      vim.cmd("edit " .. vim.fn.fnameescape(root .. "/app.txt"))
      app = vim.api.nvim_get_current_buf()
      code_win = vim.api.nvim_get_current_win()
      local client = H.wait_client()
      T.eq(client.config.capabilities.experimental.rein.output, true)
      H.cmd("Rein transcript")
      wait_transcript("No task in this repository")
      T.eq(vim.api.nvim_buf_get_name(0), "rein://transcript", "the cursor is in the transcript")
      vim.api.nvim_set_current_win(code_win)
      H.cmd("Rein output")
      T.truthy(vim.fn.bufwinid("rein://output") ~= -1, "the output split")
      T.eq(vim.api.nvim_get_current_win(), code_win, "the output split did not take the cursor")
      H.cmd("Rein start add a greeting")
      H.wait_status("running")
      -- The transcript followed: the new task from its goal.
      wait_transcript("Goal: add a greeting")
      T.no_contains(transcript_text(), "No task")
    end,
  },
  {
    "a long command's output arrives in chunks before it ends",
    function()
      local text = T.wait(function()
        local t = output_text()
        return t:find("first", 1, true) and t
      end, "the command's first line in rein://output")
      T.match(text, "▶ step %d+: sh slow%.sh\nfirst")
      -- It has not ended: no "second", no exit, no step for it in the state yet.
      T.no_contains(text, "second")
      T.no_contains(text, "■")
      local s = H.state()
      T.eq(s.status, "running")
      T.eq(step_of(s, "^run sh slow%.sh"), nil, "the run step has not ended")
      -- The split follows the end and the cursor stayed in the code.
      local win = vim.fn.bufwinid("rein://output")
      T.eq(vim.api.nvim_win_get_cursor(win)[1], vim.api.nvim_buf_line_count(vim.fn.bufnr("rein://output")))
      T.eq(vim.api.nvim_get_current_win(), code_win)
      -- The transcript shows the running command at its end, live.
      wait_transcript("▶ running step")
      wait_transcript("    │ first")
    end,
  },
  {
    "the plan moved and the agent's words and its refusal show in the state float",
    function()
      -- The run names item 3; the item moves when its step ends, so while it runs the
      -- greeting is still the item in progress.
      local s = H.state()
      T.eq(vim.tbl_map(function(p)
        return p.status
      end, s.plan), { "done", "active", "pending" })
      T.eq(s.planProgress, true)
      local refused = T.truthy(step_of(s, "^write %.GIT/config"), "the refused write: " .. vim.inspect(s.steps))
      T.eq(refused.status, "failed")
      T.truthy(type(refused.detail) == "string" and refused.detail:find(".GIT/config", 1, true), "a detail: " .. vim.inspect(refused))
      H.cmd("Rein state")
      local text = T.wait(function()
        return H.named_buf_text("rein://state")
      end, "the state float")
      T.contains(text, "## Plan · 1 of 3 done, 1 in progress")
      T.contains(text, "- [x] read the app")
      T.contains(text, "- [>] write a greeting")
      T.contains(text, "- [ ] run the check")
      T.contains(text, "“First I read the app to see what it greets.”")
      T.contains(text, "“And git's config, to be sure.”")
      T.contains(text, "→ " .. refused.detail:gsub("\n", " ⏎ "))
      T.eq(vim.api.nvim_get_current_win(), code_win)
      H.cmd("Rein state")
    end,
  },
  {
    "pause and resume are said in the output; a steer reaches the transcript; the command ends",
    function()
      H.cmd("Rein pause")
      H.wait_status("paused")
      T.wait(function()
        return output_text():find("── paused", 1, true)
      end, "the paused marker")
      H.cmd("Rein steer keep the greeting short")
      wait_transcript("you (steer c1): keep the greeting short")
      H.cmd("Rein resume")
      T.wait(function()
        return output_text():find("── resumed", 1, true)
      end, "the resumed marker")
      T.write_file(go, "")
      local text = T.wait(function()
        local t = output_text()
        return t:find("■ exit code 0", 1, true) and t
      end, "the command's end")
      T.match(text, "first\n── paused[^\n]*\n── resumed\nsecond\n■ exit code 0")
      local s = T.wait(function()
        local s = H.state()
        return step_of(s, "^run sh slow%.sh") and s
      end, "the run step in the state")
      local run = step_of(s, "^run sh slow%.sh")
      T.contains(run.output, "first\n")
      T.contains(run.output, "second\n")
      -- Its output tail, viewable after it ended.
      H.cmd("Rein output " .. run.n)
      local shown = T.wait(function()
        return H.named_buf_text("rein://output/step:" .. run.n)
      end, "the step's output")
      T.contains(shown, "first\nsecond")
      vim.cmd("close")
      vim.api.nvim_set_current_win(code_win)
    end,
  },
  {
    "a question answered; at the next, take over: the handover opens with the agent's words and the plan as Done / In progress / Pending",
    function()
      local function question(text)
        return T.wait(function()
          local s = H.state()
          local d = s and s.status == "awaiting_decision" and s.decisions[1]
          return d and d.question == text and d
        end, "the agent's question " .. text, 90000)
      end
      local d = question("Shall I add a farewell too?")
      wait_transcript("? " .. d.id .. ": Shall I add a farewell too? (any answer)")
      H.cmd("Rein decide " .. d.id .. " not now")
      wait_transcript("you answered " .. d.id .. ": not now")
      question("Anything else before I finish?")
      H.cmd("Rein takeover I will write the farewell myself")
      H.wait_status("human")
      local md = T.wait(function()
        return H.named_buf_text("rein://handover")
      end, "the handover")
      T.contains(md, "in its words")
      T.contains(md, "**Done:**")
      T.contains(md, "read the app")
      T.contains(md, "**In progress:**")
      T.contains(md, "run the check")
      T.contains(md, "**Pending:** none")
      -- It opens at the top: the agent's account is what the window shows first.
      local win = vim.fn.bufwinid("rein://handover")
      T.eq(vim.api.nvim_win_get_cursor(win)[1], 1)
      T.eq(vim.fn.getwininfo(win)[1].topline, 1)
      T.match(md, "^# Handover: add a greeting\n\n%*%*What it was doing:%*%*")
      wait_transcript("── taken over by the user: I will write the farewell myself")
      wait_transcript("→ not applied: the human took over before deciding")
    end,
  },
  {
    "your edit and the hand-back show in the transcript; the agent finishes",
    function()
      vim.api.nvim_set_current_win(code_win)
      vim.cmd("edit " .. vim.fn.fnameescape(root .. "/farewell.txt"))
      vim.api.nvim_buf_set_lines(0, 0, -1, false, { "goodbye" })
      H.cmd("write")
      local report_win = vim.fn.bufwinid("rein://handover")
      local wins = #vim.api.nvim_list_wins()
      H.cmd("Rein handback farewell written")
      H.wait_status("done")
      -- The reconcile report takes the handover's window: no new split.
      T.wait(function()
        return vim.fn.bufwinid("rein://reconcile") == report_win
      end, "the reconcile report in the handover's window")
      T.eq(#vim.api.nvim_list_wins(), wins, "no new window")
      wait_transcript("■ done: greeting written and checked")
      local text = transcript_text()
      T.match(text, "step %d+ ✎ you: ")
      T.contains(text, "farewell.txt +1 -0")
      T.match(text, "── [^\n]*hand")
      -- Plan items moved one by one, as the agent reported them.
      for _, want in ipairs({ "active,pending,pending", "done,active,pending", "done,done,active", "done,done,done" }) do
        T.truthy(vim.tbl_contains(plans, want), "the plan went through " .. want .. ": " .. vim.inspect(plans))
      end
      vim.cmd("edit " .. vim.fn.fnameescape(root .. "/app.txt"))
      T.eq(vim.api.nvim_get_current_buf(), app)
    end,
  },
  {
    "after the end the transcript reads whole: goal, messages, tool rows, the refusal, folded output, steer, control",
    function()
      -- Opened again, it is built from the start.
      local buf = vim.fn.bufnr("rein://transcript")
      vim.api.nvim_win_close(vim.fn.bufwinid("rein://transcript"), true)
      T.eq(vim.api.nvim_buf_is_valid(buf), false, "the closed transcript is gone")
      H.cmd("Rein transcript")
      local text = wait_transcript("■ done: greeting written and checked")
      for _, want in ipairs({
        "Goal: add a greeting",
        "plan, as the agent set it:\n    [>] p1: read the app\n    [ ] p2: write a greeting\n    [ ] p3: run the check",
        "agent: First I read the app to see what it greets.",
        "✓ read app.txt  · p1",
        "✓ write greeting.txt  · p2\n    greeting.txt +1 -0 (added)",
        "agent: And git's config, to be sure.",
        "✗ write .GIT/config (failed)  · p2\n    → ",
        "agent: Running the check; it prints as it goes.",
        "output of `sh slow.sh` (2 lines):\n    │ first\n    │ second",
        "you (steer c1): keep the greeting short",
        "? ",
        "Shall I add a farewell too?",
      }) do
        T.contains(text, want)
      end
      local refused = step_of(H.state(), "^write %.GIT/config")
      T.contains(text, "    → " .. vim.split(refused.detail, "\n")[1])
      -- The output is folded; the agent's words are not.
      local win = vim.fn.bufwinid("rein://transcript")
      local out = transcript_line("output of `sh slow%.sh`")
      local said = transcript_line("^agent: First I read")
      vim.api.nvim_win_call(win, function()
        T.truthy(vim.fn.foldclosed(out) == out, "the output starts folded")
        T.eq(vim.fn.foldclosed(said), -1, "the agent's words are not folded")
      end)
    end,
  },
  {
    "<CR> on a tool row opens that step's diff",
    function()
      local win = vim.fn.bufwinid("rein://transcript")
      vim.api.nvim_set_current_win(win)
      local row = transcript_line("✓ write greeting%.txt")
      local n = tonumber(vim.api.nvim_buf_get_lines(0, row - 1, row, false)[1]:match("^step (%d+)"))
      vim.api.nvim_win_set_cursor(win, { row, 0 })
      vim.api.nvim_feedkeys(vim.keycode("<CR>"), "x", false)
      local diff = T.wait(function()
        return H.named_buf_text("rein://diff/step:" .. n)
      end, "the step's diff")
      T.contains(diff, "+++ b/greeting.txt")
      T.contains(diff, "+hello")
      T.eq(vim.api.nvim_buf_get_name(0), "rein://diff/step:" .. n, "the cursor is in the diff")
      T.eq(vim.bo.filetype, "diff")
      vim.cmd("close")
      -- <CR> on the folded output opens it.
      vim.api.nvim_set_current_win(win)
      local out = transcript_line("output of `sh slow%.sh`")
      vim.api.nvim_win_set_cursor(win, { out, 0 })
      vim.api.nvim_feedkeys(vim.keycode("<CR>"), "x", false)
      T.eq(vim.fn.foldclosed(out), -1, "the output fold opened")
    end,
  },
  {
    ":Rein steps has the agent's words and the refusal in the same text the agent got",
    function()
      vim.api.nvim_set_current_win(code_win)
      H.cmd("Rein steps")
      local qf = T.wait(function()
        local info = vim.fn.getqflist({ title = 1 })
        return info.title == "Rein steps" and H.qf_text()
      end, "the steps quickfix list")
      local refused = step_of(H.state(), "^write %.GIT/config")
      T.contains(qf, "|0|   agent: First I read the app to see what it greets.")
      T.match(qf, "\n|0| step %d+ %[agent%] failed: write %.GIT/config  @%x+ → ")
      T.contains(qf, "failed: write .GIT/config  @" .. refused.checkpoint:sub(1, 8) .. " → " .. refused.detail:gsub("\n", " ⏎ "))
      vim.cmd("cclose")
    end,
  },
  {
    "no error message on the way",
    function()
      for _, m in ipairs(H.messages) do
        T.truthy(m.level ~= vim.log.levels.ERROR, "error message: " .. m.msg)
      end
    end,
  },
})
