-- Several tasks at once (issue 27) against the real server: three scripted agents in worktrees
-- of their own, started with :Rein start --worktree, listed by :Rein tasks, paused all at
-- once, a decision answered from the queue, one landed, one discarded, one opened in a tab.
local T = require("runner")
local H = require("helpers")

H.stub_ui()
H.capture_notify()

vim.env.REIN_WORKTREES_DIR = (os.getenv("REIN_NVIM_TMP") or vim.fn.tempname()) .. "/worktrees-" .. vim.fn.getpid()
vim.env.REIN_ENGINE_GRACE_MS = "0"

-- The repository's own client (in a worktree's tab, H.client() is the worktree's).
local main_client

local function tasks_list()
  local c = main_client or H.client()
  return c and require("rein.tasks")._lists[c.id]
end

local context = T.context
T.context = function()
  local l = tasks_list()
  local short = l and vim.tbl_map(function(t)
    return ("%s %s %s %s %s"):format(t.name, t.taskId, t.status, t.isolation, t.goal)
  end, l.tasks)
  return context() .. "\n     tasks: " .. vim.inspect(short)
end

--- The summary of the task whose goal is `goal`, once `pred` (default: any) holds for it.
local function wait_task(goal, pred, what)
  return T.wait(function()
    for _, t in ipairs(tasks_list() and tasks_list().tasks or {}) do
      if t.goal == goal and (not pred or pred(t)) then
        return t
      end
    end
  end, what or ("the task " .. goal), 90000)
end

local function status_is(...)
  local want = { ... }
  return function(t)
    return vim.tbl_contains(want, t.status)
  end
end

--- The line of the :Rein tasks buffer naming task `t`.
local function list_line(buf, t)
  for i, l in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    if vim.startswith(l, t.name .. " ") then
      return i, l
    end
  end
end

--- The first prompt made after the first `n`: the commands that ask fetch the task list first,
--- so their prompt comes after a round trip to the server, not when the command returns.
local function prompt_after(n, what)
  return T.wait(function()
    return H.prompts[n + 1]
  end, what or "a prompt")
end

local function git_out(root, args)
  return vim.trim(T.sh(vim.list_extend({ "git" }, args), root))
end

-- A task's whole state, asked for by id (rein.state {taskId}).
local function task_state(t)
  local c = main_client
  local r = c:request_sync("workspace/executeCommand", { command = "rein.state", arguments = { { taskId = t.taskId } } }, 30000)
  return r and r.result and r.result.state
end

-- Plans: A writes a file and thinks for a long time; B asks to run a command the policy does
-- not allow, then thinks; C writes a file and thinks.
local long = 600000
local plans = {
  a = { steps = {
    { plan = { "write the feature", "wait" }, think_ms = 50 },
    { write = { path = "feature-a.txt", content = "from agent a\n" }, item = 1, think_ms = 50 },
    { edit = { path = "app.txt", old = "two\n", new = "two from a\n" }, think_ms = 50 },
    { read = "app.txt", think_ms = long },
    { finish = "a done" },
  } },
  b = { steps = {
    { plan = { "touch a file", "wait" }, think_ms = 50 },
    { run = { cmd = "touch b-approved.txt", timeout_s = 30 }, item = 1, think_ms = 50 },
    { read = "app.txt", think_ms = long },
    { finish = "b done" },
  } },
  c = { steps = {
    { write = { path = "feature-c.txt", content = "from agent c\n" }, think_ms = 50 },
    { read = "app.txt", think_ms = long },
    { finish = "c done" },
  } },
}

local root, app
local A, B, C = "write feature a", "touch a file for b", "write feature c"

T.scenario("three worktree tasks", {
  {
    ":Rein start --worktree starts three tasks beside each other; the statusline counts them",
    function()
      root = H.repo({
        ["app.txt"] = "one\ntwo\n",
        [".rein/a.json"] = vim.json.encode(plans.a),
        [".rein/b.json"] = vim.json.encode(plans.b),
        [".rein/c.json"] = vim.json.encode(plans.c),
      })
      vim.cmd("cd " .. vim.fn.fnameescape(root))
      H.setup({
        agents = {
          a = { kind = "script", plan = ".rein/a.json" },
          b = { kind = "script", plan = ".rein/b.json" },
          c = { kind = "script", plan = ".rein/c.json" },
        },
      })
      vim.cmd("edit " .. vim.fn.fnameescape(root .. "/app.txt"))
      app = vim.api.nvim_get_current_buf()
      main_client = H.wait_client()

      T.eq(H.statusline(), "Rein: no task")
      H.cmd("Rein start --worktree agent=a " .. A)
      wait_task(A)
      table.insert(H.inputs, B)
      H.cmd("Rein start --worktree agent=b")
      T.eq(H.prompts[#H.prompts].prompt, "Rein goal (b, in a worktree): ")
      wait_task(B)
      H.cmd("Rein start --worktree agent=c " .. C)
      -- Its edit on disk (a count of steps also counts the plan): the landing overlaps it.
      local a = wait_task(A, function(t)
        return t.status == "running" and T.read_file(t.worktree .. "/app.txt") == "one\ntwo from a\n"
      end, "task A past its edit")
      local b = wait_task(B, status_is("awaiting_decision"), "task B asking")
      local c = wait_task(C, function(t)
        return t.status == "running" and t.steps >= 1
      end, "task C past its write")
      for _, t in ipairs({ a, b, c }) do
        T.eq(t.isolation, "worktree")
        T.truthy(vim.uv.fs_stat(t.worktree), "the worktree of " .. t.name)
        T.truthy(vim.startswith(t.worktree, vim.env.REIN_WORKTREES_DIR), "made under REIN_WORKTREES_DIR: " .. t.worktree)
      end
      T.truthy(vim.uv.fs_stat(a.worktree .. "/feature-a.txt"), "A wrote in its own worktree")
      T.truthy(not vim.uv.fs_stat(root .. "/feature-a.txt"), "your tree is untouched")
      T.wait(function()
        return H.statusline() == "Rein: 3 tasks: 2 running, 1 decision waiting"
      end, "the statusline's counts")
      T.contains(H.messages_text(), "wants to", "B's decision is told, naming its task")
    end,
  },
  {
    ":Rein land N on a running task says it still runs, asking nothing (issue 36, 4b)",
    function()
      local a = wait_task(A, status_is("running"), "A running")
      local asked = #H.prompts
      H.cmd("Rein land " .. a.name:match("%d+"))
      T.wait(function()
        return H.messages_text():find(a.name .. " is still running: pause it or let it finish, then land it", 1, true)
      end, "the refusal said")
      T.eq(#H.prompts, asked, "no prompt for a land that cannot apply")
      T.truthy(vim.uv.fs_stat(a.worktree), "nothing landed or removed")
    end,
  },
  {
    ":Rein tasks lists them with status, holder, plan, decisions and goal",
    function()
      H.cmd("Rein tasks")
      local buf = vim.api.nvim_get_current_buf()
      T.eq(vim.api.nvim_buf_get_name(buf), "rein://tasks")
      local b = wait_task(B)
      local text = T.wait(function()
        local text = H.buf_text(buf)
        return text:find(A, 1, true) and text:find(B, 1, true) and text:find(C, 1, true) and text
      end, "the three tasks in the list")
      T.contains(text, "# Rein tasks · 3 tasks: 2 running, 1 decision waiting")
      local _, line = list_line(buf, b)
      T.match(line, "^" .. b.name .. "%s+needs you%s+agent%s+0/2%s+1%s+" .. B .. "$")
      T.contains(text, "Waiting for you, oldest first")
      T.contains(text, b.name .. ": ")
      vim.cmd("wincmd p")
    end,
  },
  {
    ":Rein pause all pauses every task; :Rein resume 3 then :Rein pause task=3 reach that one task",
    function()
      H.cmd("Rein pause all")
      local a = wait_task(A, status_is("paused"), "A paused")
      local c = wait_task(C, status_is("paused"), "C paused")
      local said = T.wait(function()
        return H.messages_text():match("Rein: paused: ([^\n]*)")
      end, "what pause all did")
      T.contains(said, a.name)
      T.contains(said, c.name)
      T.eq(H.statusline(), "Rein: 3 tasks: 0 running, 1 decision waiting")
      -- One task by its number.
      local n = c.name:match("%d+")
      H.cmd("Rein resume " .. n)
      wait_task(C, status_is("running"), "C running again")
      H.cmd("Rein pause task=" .. n)
      wait_task(C, status_is("paused"), "C paused again")
      T.eq(wait_task(A).status, "paused", "A stays paused")
      -- A command's answer from a worktree task leaves no copy of it listed as the task here.
      local fresh
      require("rein.tasks").fetch(main_client, function(l)
        fresh = l
      end)
      T.wait(function()
        return fresh
      end, "rein.tasks")
      T.eq(vim.tbl_map(function(t)
        return t.name
      end, require("rein.tasks").sorted(fresh)), { "task 1", "task 2", "task 3" }, "the tasks listed")
    end,
  },
  {
    ":Rein steer task=N steers that task only",
    function()
      local c = wait_task(C)
      H.cmd("Rein steer task=" .. c.name:match("%d+") .. " keep feature c short")
      local s = T.wait(function()
        local s = task_state(c)
        return s and #(s.constraints or {}) > 0 and s
      end, "C's constraint")
      T.eq(s.constraints[1].text, "keep feature c short")
      T.eq(#(task_state(wait_task(A)).constraints or {}), 0, "A got no steer")
      T.eq(H.state(), nil, "no task here: the worktree tasks' states stay out of it")
    end,
  },
  {
    ":Rein decisions answers the queue oldest first, naming the task",
    function()
      local b = wait_task(B)
      table.insert(H.selects, "approve")
      local asked = #H.prompts
      H.cmd("Rein decisions")
      local p = prompt_after(asked, "the decision asked")
      T.eq(p.kind, "select")
      T.match(p.prompt, "^" .. b.name .. ": ")
      T.contains(p.prompt, "touch b-approved.txt")
      T.eq(p.items, { "approve", "deny" })
      -- Pause all reached B while it waited: answered, it stays paused until resumed.
      wait_task(B, function(t)
        return #t.decisions == 0 and t.status == "paused"
      end, "B answered and held paused")
      T.truthy(not vim.uv.fs_stat(b.worktree .. "/b-approved.txt"), "held: the command waits for the resume")
      H.cmd("Rein resume " .. b.name:match("%d+"))
      T.wait(function()
        return vim.uv.fs_stat(b.worktree .. "/b-approved.txt")
      end, "the approved command ran in B's worktree")
      T.truthy(not vim.uv.fs_stat(root .. "/b-approved.txt"), "not in your tree")
      wait_task(B, function(t)
        return #t.decisions == 0
      end, "B's decision gone")
      T.eq(#tasks_list().decisions, 0)
      T.no_contains(H.statusline(), "decision")
    end,
  },
  {
    "L in the list lands task A as uncommitted changes over your edit: yours kept, the overlap asked; its worktree and branch go",
    function()
      local a = wait_task(A)
      -- Your own edit of the line A changed too, saved in your tree.
      vim.api.nvim_set_current_win(vim.fn.bufwinid(app))
      vim.api.nvim_buf_set_lines(app, 1, 2, false, { "two from you" })
      vim.cmd("write")
      H.cmd("Rein tasks")
      local buf = vim.api.nvim_get_current_buf()
      T.eq(vim.api.nvim_buf_get_name(buf), "rein://tasks")
      local lnum = T.wait(function()
        return list_line(buf, a)
      end, "A's line")
      vim.api.nvim_win_set_cursor(0, { lnum, 0 })
      table.insert(H.selects, "as uncommitted changes in your tree")
      vim.api.nvim_feedkeys("L", "x", false)
      T.wait(function()
        return vim.uv.fs_stat(root .. "/feature-a.txt")
      end, "feature-a.txt landed in your tree")
      T.eq(T.read_file(root .. "/feature-a.txt"), "from agent a\n")
      -- The file is on disk before rein.land's answer, which the message follows.
      T.wait(function()
        return H.messages_text():find(a.name .. " landed as uncommitted changes: 1 applied", 1, true)
      end, "the landing said")
      T.wait(function()
        return H.messages_text():find("overlaps with your lines in app.txt: yours kept", 1, true)
      end, "the overlap said")
      T.eq(T.read_file(root .. "/app.txt"), "one\ntwo from you\n", "your side kept")
      local d = T.wait(function()
        for _, q in ipairs(tasks_list().decisions) do
          if q.taskId == a.taskId then
            return q
          end
        end
      end, "the overlap in the decision queue")
      T.eq(d.options, { "keep mine", "take the agent's" })
      table.insert(H.selects, "keep mine")
      local asked = #H.prompts
      H.cmd("Rein decisions")
      T.contains(prompt_after(asked, "the overlap asked").prompt, "app.txt")
      T.wait(function()
        return #tasks_list().decisions == 0
      end, "the overlap answered")
      T.eq(T.read_file(root .. "/app.txt"), "one\ntwo from you\n", "still yours")
      H.cmd("Rein tasks")
      T.eq(git_out(root, { "status", "--porcelain", "--", "feature-a.txt" }), "?? feature-a.txt", "landed uncommitted")
      T.wait(function()
        return not vim.uv.fs_stat(a.worktree)
      end, "A's worktree removed")
      T.eq(git_out(root, { "branch", "--list", tostring(a.branch) }), "", "A's branch removed")
      T.wait(function()
        for _, t in ipairs(tasks_list().tasks) do
          if t.taskId == a.taskId then
            return false
          end
        end
        return true
      end, "A gone from the worktree tasks")
      -- Its record stays, in the history: landed here.
      H.cmd("Rein tasks")
      T.wait(function()
        return H.buf_text(vim.api.nvim_get_current_buf()):find("landed here from " .. a.name .. "'s worktree", 1, true)
      end, "A in the history, landed here")
    end,
  },
  {
    "D in the list discards task C after asking; o opens task B's worktree in a tab with :tcd",
    function()
      local buf = vim.api.nvim_get_current_buf()
      local c = wait_task(C)
      vim.api.nvim_win_set_cursor(0, { list_line(buf, c), 0 })
      table.insert(H.selects, "no, keep it")
      local asked = #H.prompts
      vim.api.nvim_feedkeys("D", "x", false)
      T.contains(prompt_after(asked, "the discard asked").prompt, "Discard " .. c.name)
      T.truthy(vim.uv.fs_stat(c.worktree), "kept when the answer is no")
      table.insert(H.selects, "yes, discard it")
      vim.api.nvim_feedkeys("D", "x", false)
      T.wait(function()
        return not vim.uv.fs_stat(c.worktree)
      end, "C's worktree removed")
      -- Its branch goes after its worktree, before the answer the message follows.
      T.wait(function()
        return H.messages_text():find(c.name .. " discarded", 1, true)
      end, "the discard said")
      T.eq(git_out(root, { "branch", "--list", tostring(c.branch) }), "", "C's branch removed")
      T.wait(function()
        return not H.buf_text(buf):find(C, 1, true)
      end, "C gone from the list")

      local b = wait_task(B)
      vim.cmd("wincmd p")
      T.eq(vim.api.nvim_get_current_buf(), app)
      local tabs = #vim.api.nvim_list_tabpages()
      H.cmd("Rein open " .. b.name:match("%d+"))
      T.wait(function()
        return #vim.api.nvim_list_tabpages() == tabs + 1
      end, "a new tab")
      T.eq(vim.fn.haslocaldir(-1, 0), 1, "a tab-local directory")
      T.eq(vim.fs.normalize(vim.fn.getcwd(-1, 0)), vim.fs.normalize(b.worktree))
      T.eq(vim.api.nvim_buf_get_name(0), vim.fs.normalize(b.worktree) .. "/app.txt", "the same file, in the worktree")
      -- Its buffers join the worktree's own engine, where the task is the one in place.
      local wc = T.wait(function()
        local c2 = H.client()
        return c2 and c2.initialized and vim.fs.normalize(c2.config.root_dir) == vim.fs.normalize(b.worktree) and c2
      end, "a client for the worktree")
      local s = T.wait(function()
        local st = require("rein")._states[wc.id]
        return type(st) == "table" and st
      end, "the worktree task's state in its tab")
      T.eq(s.task.id, b.taskId)
      -- Again: the same tab, not another.
      vim.cmd("tabfirst")
      H.cmd("Rein open task=" .. b.taskId)
      T.wait(function()
        return vim.fs.normalize(vim.fn.getcwd(-1, 0)) == vim.fs.normalize(b.worktree)
      end, "back in B's tab")
      T.eq(#vim.api.nvim_list_tabpages(), tabs + 1, "no second tab")
      vim.cmd("tabclose")
      T.eq(vim.fs.normalize(vim.fn.getcwd()), root, "the first tab keeps its directory")
    end,
  },
  {
    "i and <CR> in the list show a worktree task's state and transcript, not the task here's",
    function()
      local b = wait_task(B)
      H.cmd("Rein tasks")
      local buf = vim.api.nvim_get_current_buf()
      vim.api.nvim_win_set_cursor(0, { list_line(buf, b), 0 })
      vim.api.nvim_feedkeys("i", "x", false)
      local float = T.wait(function()
        local live = require("rein.ui")._live
        return live and vim.api.nvim_buf_is_valid(live.buf) and H.buf_text(live.buf):find(B, 1, true) and live
      end, "B's state in the float")
      T.contains(H.buf_text(float.buf), "touch b-approved.txt")
      require("rein.ui").state_close()
      vim.api.nvim_feedkeys(vim.keycode("<CR>"), "x", false)
      local tbuf = T.wait(function()
        local t = require("rein.transcript")._t
        return t and t.pinned == b.taskId and H.buf_text(t.buf):find("touch b-approved.txt", 1, true) and t.buf
      end, "B's transcript")
      T.contains(H.buf_text(tbuf), "Goal: " .. B)
      vim.cmd("bwipeout " .. tbuf)
    end,
  },
  {
    "t in the list takes a worktree task over while the others run: its worktree opens in a tab; h hands it back",
    function()
      local b = wait_task(B)
      local buf = vim.fn.bufnr("rein://tasks")
      vim.api.nvim_set_current_win(vim.fn.bufwinid(buf))
      vim.api.nvim_win_set_cursor(0, { list_line(buf, b), 0 })
      local tabs = #vim.api.nvim_list_tabpages()
      table.insert(H.inputs, "")
      vim.api.nvim_feedkeys("t", "x", false)
      wait_task(B, status_is("human"), "B held by you")
      T.wait(function()
        return #vim.api.nvim_list_tabpages() == tabs + 1
      end, "B's worktree in a tab")
      T.eq(vim.fs.normalize(vim.fn.getcwd(-1, 0)), vim.fs.normalize(b.worktree))
      vim.cmd("edit " .. vim.fn.fnameescape(b.worktree .. "/app.txt"))
      vim.api.nvim_buf_set_lines(0, 0, 1, false, { "ONE, by you" })
      vim.cmd("write")
      vim.cmd("tabclose")
      vim.api.nvim_set_current_win(vim.fn.bufwinid(buf))
      vim.api.nvim_win_set_cursor(0, { list_line(buf, b), 0 })
      table.insert(H.inputs, "app.txt is yours now")
      vim.api.nvim_feedkeys("h", "x", false)
      wait_task(B, status_is("running"), "B running again")
      local report = T.wait(function()
        return H.named_buf_text("rein://reconcile")
      end, "the reconcile report")
      T.contains(report, "app.txt")
      T.eq(T.read_file(root .. "/app.txt"), "one\ntwo from you\n", "your own tree untouched")
      vim.cmd("wincmd p")
    end,
  },
  {
    ":Rein abort task=N ends a worktree task; :Rein discard task=N removes it, asking again for your changes there",
    function()
      local b = wait_task(B)
      H.cmd("Rein abort task=" .. b.name:match("%d+") .. " discard")
      wait_task(B, status_is("aborted"), "B aborted")
      -- Aborting it again: it has ended, said before any prompt (issue 36, 4b).
      local before_abort = #H.prompts
      H.cmd("Rein abort task=" .. b.name:match("%d+"))
      T.wait(function()
        return H.messages_text():find(b.name .. ": the task has ended (aborted)", 1, true)
      end, "the ended task said")
      T.eq(#H.prompts, before_abort, "no prompt for an abort that cannot apply")
      -- Your edit of app.txt while you held B is in its worktree: asked of the server before
      -- any prompt, it is named in the one question, which offers to discard it anyway.
      local there_when_asked
      table.insert(H.selects, function()
        there_when_asked = vim.uv.fs_stat(b.worktree) ~= nil
        return "discard anyway (removes your changes: app.txt)"
      end)
      local asked = #H.prompts
      H.cmd("Rein discard task=" .. b.name:match("%d+"))
      local p = prompt_after(asked, "asked about your changes")
      T.contains(p.prompt, b.name .. "'s worktree holds your changes (app.txt)")
      T.truthy(there_when_asked, "B's worktree kept until you say")
      T.wait(function()
        return not vim.uv.fs_stat(b.worktree)
      end, "B's worktree removed")
      T.wait(function()
        return H.statusline() == "Rein: no task"
      end, "the statusline back to one task's words")
      T.eq(git_out(root, { "worktree", "list", "--porcelain" }):find("worktree ", 2, true), nil, "no worktree left")
      T.eq(#H.prompts, asked + 1, "asked once")
      vim.cmd("%bwipeout!")
    end,
  },
})
