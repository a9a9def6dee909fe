-- A task is a conversation (issue 30) against the real server: a scripted task finishes,
-- :Rein continue (the text asked with vim.ui.input) gives its agent the next turn, which runs
-- and finishes in the same task, with the person's change since reported in the transcript;
-- after a newer task, :Rein tasks lists the history, <CR> on the earlier task opens its
-- transcript read-only, and c there continues it (it becomes the task here again).
local T = require("runner")
local H = require("helpers")

H.stub_ui()
H.capture_notify()

vim.env.REIN_ENGINE_GRACE_MS = "0"

local root, first_id, newer_id

-- Each task plays the steps, then one turn per follow-up.
local plan = {
  steps = {
    { write = { path = "one.txt", content = "one\n" }, say = "The first file.", think_ms = 50 },
    { finish = "wrote one.txt" },
  },
  turns = {
    {
      { write = { path = "two.txt", content = "two\n" }, say = "Now the second file, as you asked.", think_ms = 50 },
      { finish = "wrote two.txt" },
    },
    {
      { write = { path = "three.txt", content = "three\n" }, say = "And a third.", think_ms = 50 },
      { finish = "wrote three.txt" },
    },
  },
}

local function transcript_text()
  return H.named_buf_text("rein://transcript") or ""
end

local function tasks_text()
  return H.named_buf_text("rein://tasks") or ""
end

local context = T.context
T.context = function()
  return context()
    .. "\n     transcript:\n       "
    .. transcript_text():gsub("\n", "\n       ")
    .. "\n     tasks:\n       "
    .. tasks_text():gsub("\n", "\n       ")
end

local function wait_transcript(needle)
  return T.wait(function()
    local t = transcript_text()
    return t:find(needle, 1, true) and t
  end, "the transcript to show " .. needle)
end

--- The state once the task here is `status` after `n` follow-ups.
local function wait_turns(status, n, what)
  return T.wait(function()
    local s = H.state()
    return s and s.status == status and #(s.turns or {}) == n and s
  end, what, 90000)
end

--- The line number of the :Rein tasks buffer's history row of `goal`.
local function history_line(goal)
  local buf = vim.fn.bufnr("rein://tasks")
  local seen = false
  for i, l in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    if l:find("^## History") then
      seen = true
    elseif seen and l:find(goal, 1, true) and not l:find("last turn:", 1, true) then
      return i, l
    end
  end
end

T.scenario("a task is a conversation", {
  {
    "a finished task is continued with :Rein continue: the text is asked, the next turn runs and finishes",
    function()
      root = H.repo({ ["app.txt"] = "name = demo\n" }, plan)
      vim.cmd("cd " .. vim.fn.fnameescape(root))
      H.setup()
      vim.cmd("edit " .. vim.fn.fnameescape(root .. "/app.txt"))
      H.wait_client()
      H.cmd("Rein start write the files")
      local s = wait_turns("done", 0, "the first turn done")
      first_id = s.task.id
      T.eq(T.read_file(root .. "/one.txt"), "one\n")
      -- The person's change between turns: reported to the agent before its next turn.
      T.write_file(root .. "/app.txt", "name = mine\n")
      local before = #H.prompts
      table.insert(H.inputs, "now write the second file")
      H.cmd("Rein continue")
      local p = T.wait(function()
        return H.prompts[before + 1]
      end, "the follow-up prompt")
      T.eq(p.kind, "input")
      T.match(p.prompt, 'Rein continue "write the files" %(turn 2%)')
      s = wait_turns("done", 1, "the second turn done")
      T.eq(s.task.id, first_id, "the same task")
      T.eq(s.turns[1].text, "now write the second file")
      T.eq(T.read_file(root .. "/two.txt"), "two\n")
      -- The person's edit stays theirs.
      T.eq(T.read_file(root .. "/app.txt"), "name = mine\n")
    end,
  },
  {
    "the transcript shows the follow-up as you speaking again, the report of your change folded under it",
    function()
      H.cmd("Rein transcript")
      local text = wait_transcript("■ done: wrote two.txt")
      T.contains(text, "Goal: write the files")
      -- In order: the first turn's end, your change, the turn's rule, your words, the report
      -- folded under them, then the agent's second turn.
      local at = 0
      for _, piece in ipairs({
        "■ done: wrote one.txt",
        "✎ you: your changes since the agent's last turn: app.txt",
        "── turn 2, from step ",
        "you: now write the second file\n    your changes since its last turn, as the agent was told:\n    │ ## What changed",
        "+name = mine",
        "agent: Now the second file, as you asked.",
      }) do
        local i = text:find(piece, at + 1, true)
        T.truthy(i, ("%q after position %d"):format(piece, at))
        at = i
      end
      -- The report is folded: closed in the window, the turn's words are not.
      local win = vim.fn.bufwinid("rein://transcript")
      local buf = vim.fn.bufnr("rein://transcript")
      for i, l in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
        if l:find("+name = mine", 1, true) then
          T.truthy(vim.api.nvim_win_call(win, function()
            return vim.fn.foldclosed(i)
          end) ~= -1, "the report is folded")
        elseif l:find("you: now write the second file", 1, true) then
          T.eq(vim.api.nvim_win_call(win, function()
            return vim.fn.foldclosed(i)
          end), -1, "your words are not folded")
        end
      end
      vim.cmd("close")
    end,
  },
  {
    "a newer task starts and finishes: the first one is history now",
    function()
      local s0 = H.state()
      H.cmd("Rein start write the files again")
      local s = T.wait(function()
        local s = H.state()
        return s and s.task.id ~= s0.task.id and s.status == "done" and s
      end, "the newer task done", 90000)
      T.eq(#(s.turns or {}), 0)
      newer_id = s.task.id
    end,
  },
  {
    ":Rein tasks lists the history newest first, with turns; <CR> on the earlier task opens its transcript read-only",
    function()
      H.cmd("Rein tasks")
      local text = T.wait(function()
        local t = tasks_text()
        return t:find("## History", 1, true) and history_line("write the files again") and t
      end, "the history in :Rein tasks")
      local newer = history_line("write the files again")
      local lnum, line = history_line("write the files ")
      -- "write the files " matches both: the earlier one is the row after the newer one.
      for i = newer + 1, vim.api.nvim_buf_line_count(0) do
        local l = vim.api.nvim_buf_get_lines(0, i - 1, i, false)[1]
        if l:find("write the files$") then
          lnum, line = i, l
          break
        end
      end
      T.truthy(lnum and lnum > newer, "the earlier task after the newer one:\n" .. text)
      T.match(line, "^  done%s+%S+ ago%s+%d+%s+2%s+write the files$")
      T.contains(text, "last turn: now write the second file")
      T.eq(vim.api.nvim_buf_get_name(0), "rein://tasks")
      vim.api.nvim_win_set_cursor(0, { lnum, 0 })
      vim.api.nvim_feedkeys(vim.keycode("<CR>"), "x", false)
      local tr = wait_transcript("■ done: wrote two.txt")
      T.contains(tr, ("Earlier task %s (done) · read-only"):format(first_id))
      T.contains(tr, ("Continue it: :Rein continue task=%s"):format(first_id))
      T.contains(tr, "Goal: write the files\n")
      T.contains(tr, "you: now write the second file")
      T.no_contains(tr, "write the files again")
      local buf = vim.fn.bufnr("rein://transcript")
      T.eq(vim.bo[buf].modifiable, false, "read-only")
      -- The task here is still the newer one.
      T.truthy(H.state().task.id ~= first_id)
      vim.cmd("close")
    end,
  },
  {
    "c on the earlier task in :Rein tasks continues it: it is the task here again and runs its next turn",
    function()
      H.cmd("Rein tasks")
      local newer = T.wait(function()
        return history_line("write the files again")
      end, "the history rows")
      local lnum
      for i = newer + 1, vim.api.nvim_buf_line_count(0) do
        if vim.api.nvim_buf_get_lines(0, i - 1, i, false)[1]:find("write the files$") then
          lnum = i
          break
        end
      end
      T.truthy(lnum, "the earlier task's row")
      local before = #H.prompts
      table.insert(H.inputs, "and a third file")
      vim.api.nvim_win_set_cursor(0, { lnum, 0 })
      vim.api.nvim_feedkeys("c", "x", false)
      local p = T.wait(function()
        return H.prompts[before + 1]
      end, "the follow-up prompt")
      T.match(p.prompt, 'Rein continue "write the files" %(turn 3%)')
      local s = T.wait(function()
        local s = H.state()
        return s and s.task.id == first_id and s.status == "done" and #(s.turns or {}) == 2 and s
      end, "the earlier task's third turn done", 90000)
      T.eq(s.turns[2].text, "and a third file")
      T.eq(T.read_file(root .. "/three.txt"), "three\n")
      -- The history says so: the earlier task is current again, with three turns.
      local text = T.wait(function()
        local t = tasks_text()
        return t:find("^.*%*%s+done%s+%S+ ago%s+%d+%s+3%s+write the files\n") and t
      end, "the history to mark it current with three turns")
      T.contains(text, "last turn: and a third file")
      vim.cmd("close")
    end,
  },
  {
    ":Rein transcript task=ID opens an earlier task by its id; :Rein continue on a task with no turn left asks nothing, the server says why",
    function()
      H.cmd("Rein transcript task=" .. newer_id)
      local tr = wait_transcript("Goal: write the files again")
      T.contains(tr, ("Earlier task %s (done) · read-only"):format(newer_id))
      T.no_contains(tr, "you: ")
      vim.cmd("close")
      T.eq(H.state().task.id, first_id)
      -- The plan holds no fourth turn: no words are asked, the server says so and what to do.
      H.cmd("Rein tasks")
      T.wait(function()
        local l = require("rein.tasks")._lists[H.client().id]
        for _, p in ipairs(l and l.history or {}) do
          if p.current and p.status == "done" and p.turns == 3 then
            return p.canContinue == false
          end
        end
      end, "the history to say the task takes no further turn")
      vim.cmd("close")
      local before, prompts = #H.messages, #H.prompts
      H.cmd("Rein continue")
      local m = T.wait(function()
        for i = before + 1, #H.messages do
          if H.messages[i].msg:find("further turn", 1, true) then
            return H.messages[i].msg
          end
        end
      end, "the refusal")
      T.contains(m, ":Rein start")
      T.eq(#H.prompts, prompts, "no words asked")
      T.eq(#(H.state().turns or {}), 2)
    end,
  },
})
