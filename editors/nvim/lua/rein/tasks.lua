--- Several tasks at once (worktree tasks, docs/protocol.md): the task list the server pushes
--- (`rein/tasks`) or is asked for (`rein.tasks`), naming a task in a `:Rein` command
--- (`task=N`), the statusline's counts, the `:Rein tasks` list buffer and `:Rein open`.
--- The server owns every task; this keeps its last list per client and shows it.
local M = {}

local function rein()
  return require("rein")
end

local list, str = require("rein.ui").list, require("rein.ui").str

--- client id -> the latest `{tasks, decisions, history}` (as `rein.tasks` answers; the
--- `rein/tasks` notification has no history: the last one is kept).
M._lists = {}
--- client id -> "taskId/decisionId" -> true: the queued decisions already told.
M._told = {}

--- Records a task list for a client and tells the decisions new in it (a task here tells its
--- own through its state). Fires `User ReinTasksChanged` with `data = {client_id, tasks}`.
function M.on_tasks(client_id, params)
  if type(params) ~= "table" then
    return
  end
  local had = M._lists[client_id]
  local history = params.history
  if type(history) ~= "table" then
    history = had and had.history or {}
  end
  local new = { tasks = list(params.tasks), decisions = list(params.decisions), history = history }
  M._lists[client_id] = new
  local told = M._told[client_id] or {}
  M._told[client_id] = told
  local open = {}
  for _, d in ipairs(new.decisions) do
    local key = tostring(d.taskId) .. "/" .. tostring(d.decisionId)
    open[key] = true
    if not told[key] then
      told[key] = true
      if rein().config.notify and not M.is_here(client_id, d.taskId) then
        rein().notify(("%s  (:Rein decisions)"):format(tostring(d.question)), vim.log.levels.WARN)
      end
    end
  end
  for key in pairs(told) do
    if not open[key] then
      told[key] = nil
    end
  end
  vim.schedule(function()
    pcall(vim.cmd, "redrawstatus!")
    pcall(vim.api.nvim_exec_autocmds, "User", {
      pattern = "ReinTasksChanged",
      modeline = false,
      data = { client_id = client_id, tasks = new },
    })
  end)
end

--- Forgets a client's tasks (its server stopped).
function M.forget(client_id)
  M._lists[client_id] = nil
  M._told[client_id] = nil
end

--- Asks the server for the task list (`rein.tasks`), records it, then `cb(list)` (nil on error,
--- which is shown).
function M.fetch(client, cb)
  client:request("workspace/executeCommand", {
    command = "rein.tasks",
    arguments = { vim.empty_dict() },
  }, function(err, result)
    if err or type(result) ~= "table" then
      if err and cb then
        rein().notify(err.message or vim.inspect(err), vim.log.levels.ERROR)
      end
      if cb then
        cb(nil)
      end
      return
    end
    M.on_tasks(client.id, result)
    if cb then
      cb(M._lists[client.id])
    end
  end)
end

--- The summary of task `task_id` in the client's last list, or nil.
function M.find(client_id, task_id)
  for _, t in ipairs(list(M._lists[client_id] and M._lists[client_id].tasks)) do
    if t.taskId == task_id then
      return t
    end
  end
end

--- Whether task `task_id` runs in a worktree of its own (as the client's last list says).
function M.is_worktree(client_id, task_id)
  for _, t in ipairs(list(M._lists[client_id] and M._lists[client_id].tasks)) do
    if t.taskId == task_id and t.isolation == "worktree" then
      return true
    end
  end
  return false
end

--- Whether task `task_id` is the one in place (and not a worktree task).
function M.is_here(client_id, task_id)
  local t = M.find(client_id, task_id)
  return t ~= nil and t.isolation ~= "worktree" and not M.is_worktree(client_id, task_id)
end

--- The worktree tasks of a list.
function M.worktree_tasks(l)
  return vim.tbl_filter(function(t)
    return t.isolation == "worktree"
  end, list(l and l.tasks))
end

--- The statusline's counts, "3 tasks: 2 running, 1 decision waiting"; nil unless the list
--- has a worktree task (one task in place says everything in its own words).
function M.summary(l)
  if #M.worktree_tasks(l) == 0 then
    return nil
  end
  local running = 0
  for _, t in ipairs(l.tasks) do
    if t.status == "running" or t.status == "starting" then
      running = running + 1
    end
  end
  local n, waiting = #l.tasks, #list(l.decisions)
  local s = ("%d task%s: %d running"):format(n, n == 1 and "" or "s", running)
  if waiting > 0 then
    s = s .. (", %d decision%s waiting"):format(waiting, waiting == 1 and "" or "s")
  end
  return s
end

--- The task a reference names in `l`: its id (or the start of it), its number ("2" for
--- "task 2"), its name ("task 2", "here"). Returns the summary, or nil and why.
function M.resolve(l, ref)
  local tasks = list(l and l.tasks)
  ref = vim.trim(tostring(ref or ""))
  local function names()
    local out = {}
    for _, t in ipairs(tasks) do
      table.insert(out, ("%s (%s)"):format(t.name, t.taskId))
    end
    return #out > 0 and table.concat(out, ", ") or "none"
  end
  local named
  for _, t in ipairs(tasks) do
    if t.taskId == ref or t.name == ref or (ref:match("^%d+$") and t.name == "task " .. ref) then
      -- One id listed twice (here and in a worktree): the worktree task is the one named.
      if t.isolation == "worktree" then
        return t
      end
      named = named or t
    end
  end
  if named then
    return named
  end
  local found = {}
  for _, t in ipairs(tasks) do
    if ref ~= "" and vim.startswith(t.taskId, ref) then
      table.insert(found, t)
    end
  end
  if #found == 1 then
    return found[1]
  end
  -- An earlier task of the working tree, by its id or the start of it (the history).
  local past = {}
  for _, p in ipairs(list(l and l.history)) do
    if p.taskId == ref then
      return p
    end
    if #found == 0 and ref ~= "" and vim.startswith(tostring(p.taskId), ref) then
      table.insert(past, p)
    end
  end
  if #past == 1 then
    return past[1]
  end
  return nil, ("no task %q; the tasks: %s (:Rein tasks lists them, earlier ones too)"):format(ref, names())
end

--- Splits a leading `task=REF` off a :Rein command's arguments: ref (or nil), the rest.
function M.split_ref(args)
  local ref, rest = (args or ""):match("^task=(%S+)%s*(.-)$")
  if ref then
    return ref, rest
  end
  return nil, args or ""
end

--- Runs `cb(task, client)` with the task `ref` names, from a fresh list (so a task started a
--- moment ago is known). Without `ref`: the only task when it is a worktree task (the one the
--- server picks), else nil (the task here). An unknown task is said, not sent.
function M.with_task(ref, cb)
  rein().with_client(function(client)
    if ref == nil and #M.worktree_tasks(M._lists[client.id]) == 0 then
      return cb(nil, client)
    end
    M.fetch(client, function(l)
      if not l then
        return
      end
      if ref == nil then
        local only = #l.tasks == 1 and l.tasks[1].isolation == "worktree" and l.tasks[1] or nil
        return cb(only, client)
      end
      local t, why = M.resolve(l, ref)
      if not t then
        rein().notify(why, vim.log.levels.ERROR)
        return
      end
      cb(t, client)
    end)
  end)
end

--- Runs `cb(task, client)` with a worktree task: the one `ref` names, else the only one, else
--- the one picked from a list (`prompt`). `pred` (optional) narrows the choice.
function M.with_worktree_task(ref, prompt, cb, pred)
  rein().with_client(function(client)
    M.fetch(client, function(l)
      if not l then
        return
      end
      if ref then
        local t, why = M.resolve(l, ref)
        if not t then
          rein().notify(why, vim.log.levels.ERROR)
        elseif t.isolation ~= "worktree" then
          rein().notify(("%s runs here, not in a worktree of its own"):format(t.name), vim.log.levels.ERROR)
        else
          cb(t, client)
        end
        return
      end
      local wts = vim.tbl_filter(pred or function()
        return true
      end, M.worktree_tasks(l))
      if #wts == 0 then
        rein().notify("no worktree task (start one with :Rein start --worktree)", vim.log.levels.WARN)
      elseif #wts == 1 then
        cb(wts[1], client)
      else
        vim.ui.select(wts, { prompt = prompt, format_item = M.label }, function(t)
          if t then
            vim.schedule(function()
              cb(t, client)
            end)
          end
        end)
      end
    end)
  end)
end

--- "task 2 · paused · fix the parser": a task in one line, for pickers.
function M.label(t)
  return ("%s · %s · %s"):format(tostring(t.name), tostring(t.status), tostring(t.goal))
end

-- The list buffer ------------------------------------------------------------------------

M.NAME = "rein://tasks"

local status_hl = {
  running = "ReinActive",
  starting = "ReinActive",
  paused = "ReinWarn",
  awaiting_decision = "ReinWarn",
  human = "ReinYou",
  done = "ReinDone",
  failed = "ReinFailed",
  aborted = "ReinMuted",
}

local status_words = { awaiting_decision = "needs you", human = "you hold" }

--- The keys of the list buffer: key, what it does (the function is set by `open`).
M.keys = {
  { "p", "pause" },
  { "r", "resume" },
  { "s", "steer" },
  { "x", "abort" },
  { "t", "take over" },
  { "h", "hand back" },
  { "d", "answer its decision" },
  { "<CR>", "transcript" },
  { "c", "continue (an ended task: your next words)" },
  { "i", "state" },
  { "o", "open its worktree in a tab" },
  { "L", "land (changes or a commit)" },
  { "D", "discard (asks first)" },
  { "P", "pause all" },
  { "R", "resume all" },
  { "gr", "refresh" },
  { "q", "close" },
}

--- A list's tasks in the order people count them: the one here, then task 1, task 2, …
function M.sorted(l)
  local tasks = vim.list_extend({}, list(l and l.tasks))
  local function rank(t)
    return tonumber(tostring(t.name):match("^task (%d+)$")) or 0
  end
  table.sort(tasks, function(a, b)
    if rank(a) ~= rank(b) then
      return rank(a) < rank(b)
    end
    return tostring(a.taskId) < tostring(b.taskId)
  end)
  return tasks
end

--- The list as a view: one line per task (its data: `{task = summary}`), then the decisions
--- waiting, oldest first, then the keys.
function M.view(l)
  local v = require("rein.view").new()
  local tasks = M.sorted(l)
  local decisions = list(l and l.decisions)
  local head = M.summary(l) or ("%d task%s"):format(#tasks, #tasks == 1 and "" or "s")
  v:add("# Rein tasks · " .. head, "ReinTitle")
  v:add("")
  if #tasks == 0 then
    v:add("No task. Start one with :Rein start (--worktree: in a worktree of its own).", "ReinMuted")
  else
    local hdr = ("%-7s %-10s %-7s %-5s %-4s %s"):format("task", "status", "holder", "plan", "asks", "goal")
    v:add(hdr, "ReinMuted")
    for _, t in ipairs(tasks) do
      local plan = list(t.plan)
      local status = status_words[t.status] or tostring(t.status)
      local asks = #list(t.decisions) > 0 and tostring(#list(t.decisions)) or ""
      local name = tostring(t.name)
      -- Columns padded to their header's width; the positions kept for the highlights.
      local line, hls = "", {}
      local function col(text, width, hl)
        if hl and text ~= "" then
          table.insert(hls, { #line, #line + #text, hl })
        end
        line = line .. text .. string.rep(" ", math.max(1, width + 1 - vim.fn.strdisplaywidth(text)))
      end
      col(name, 7)
      col(status, 10, status_hl[t.status] or "ReinMuted")
      col(tostring(t.holder), 7)
      col(plan[2] and plan[2] > 0 and ("%d/%d"):format(plan[1] or 0, plan[2]) or "-", 5)
      col(asks, 4, "ReinWarn")
      line = line .. (tostring(t.goal):gsub("\r?\n", " "))
      local where = t.isolation == "worktree" and str(t.branch) or "in place"
      v:add(line, hls, { data = { task = t }, right = where })
      -- A decision is asked below, in the queue: its task's line says what it did last.
      local why = t.status ~= "awaiting_decision" and str(t.stopReason) or str(t.lastStep)
      if why then
        v:add("        " .. why, "ReinMuted", { data = { task = t } })
      end
    end
  end
  if #decisions > 0 then
    v:add("")
    v:add("## Waiting for you, oldest first (d on its task, or :Rein decisions)", "ReinHeading")
    for _, d in ipairs(decisions) do
      local t = M.find_in(l, d.taskId)
      v:add(("- %s  [%s]"):format(tostring(d.question), table.concat(list(d.options), " / ")), "ReinWarn", {
        data = { task = t, decision = d },
        right = require("rein.ui").time(d.since),
      })
    end
  end
  local history = list(l and l.history)
  if #history > 0 then
    v:add("")
    v:add("## History, newest first (<CR> its transcript · c continue it)", "ReinHeading")
    v:add(("  %-10s %-10s %-6s %-5s %s"):format("status", "when", "steps", "turns", "goal"), "ReinMuted")
    local now = os.time()
    for _, p in ipairs(history) do
      local line, hls = p.current and "* " or "  ", {}
      local function col(text, width, hl)
        if hl and text ~= "" then
          table.insert(hls, { #line, #line + #text, hl })
        end
        line = line .. text .. string.rep(" ", math.max(1, width + 1 - vim.fn.strdisplaywidth(text)))
      end
      col(status_words[p.status] or tostring(p.status), 10, status_hl[p.status] or "ReinMuted")
      col(M.ago(str(p.updated) or str(p.started), now), 10)
      col(tostring(p.steps or 0), 6)
      col(tostring(p.turns or 1), 5)
      line = line .. (tostring(p.goal):gsub("\r?\n", " "))
      local right = p.current and "current" or (p.canContinue and "c: continue" or nil)
      v:add(line, hls, { data = { task = p, past = true }, right = right })
      if str(p.ended) then
        -- A worktree task landed or discarded: how it ended, its record kept here.
        v:add("    " .. tostring(p.ended), "ReinMuted", { data = { task = p, past = true } })
      end
      if str(p.lastTurn) then
        v:add("    last turn: " .. (tostring(p.lastTurn):gsub("\r?\n", " ")), "ReinMuted", { data = { task = p, past = true } })
      end
    end
  end
  v:add("")
  -- The keys, in lines that fit a narrow window.
  local line = ""
  for _, k in ipairs(M.keys) do
    local item = k[1] .. " " .. k[2]
    if line ~= "" and #line + #item + 3 > 100 then
      v:add(line, "ReinMuted")
      line = ""
    end
    line = line == "" and item or (line .. " · " .. item)
  end
  v:add(line, "ReinMuted")
  return v
end

--- "12s ago", "5m ago", "3h ago", "2d ago" from an RFC 3339 UTC time; "" when unreadable.
function M.ago(at, now)
  local y, mo, d, h, mi, se = tostring(at or ""):match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)")
  if not y then
    return ""
  end
  -- os.time reads a table as local time: the UTC offset of that moment is taken back out.
  local t = os.time({ year = tonumber(y), month = tonumber(mo), day = tonumber(d), hour = tonumber(h), min = tonumber(mi), sec = tonumber(se) })
  local offset = os.time(os.date("*t", t)) - os.time(os.date("!*t", t))
  local s = math.max(0, (now or os.time()) - (t + offset))
  if s < 60 then
    return ("%ds ago"):format(s)
  elseif s < 3600 then
    return ("%dm ago"):format(math.floor(s / 60))
  elseif s < 86400 then
    return ("%dh ago"):format(math.floor(s / 3600))
  end
  return ("%dd ago"):format(math.floor(s / 86400))
end

--- The summary of `task_id` in list `l`.
function M.find_in(l, task_id)
  for _, t in ipairs(list(l and l.tasks)) do
    if t.taskId == task_id then
      return t
    end
  end
end

--- The open list: {buf, client_id, group}, or nil.
M._open = nil

--- The list's window fits its lines, up to half the screen.
local function fit(win, n)
  if win ~= -1 and vim.api.nvim_win_is_valid(win) and #vim.api.nvim_tabpage_list_wins(0) > 1 then
    pcall(vim.api.nvim_win_set_height, win, math.max(3, math.min(n, math.floor(vim.o.lines / 2))))
  end
end

local function draw(o)
  if not o or not vim.api.nvim_buf_is_valid(o.buf) then
    return
  end
  local v = M.view(M._lists[o.client_id])
  require("rein.view").apply(o.buf, v)
  fit(vim.fn.bufwinid(o.buf), #v.lines)
end

--- The task (and decision) under the cursor of the list, or nil (said).
function M.at_cursor()
  local o = M._open
  local buf = vim.api.nvim_get_current_buf()
  if not o or o.buf ~= buf then
    return nil
  end
  local data = require("rein.view").data(buf, vim.api.nvim_win_get_cursor(0)[1])
  if type(data) ~= "table" or not data.task then
    rein().notify("no task on this line", vim.log.levels.WARN)
    return nil
  end
  return data.task, data.decision
end

--- A key of the list: `:Rein SUB task=ID` for the task under the cursor.
local function for_task(sub_name)
  return function()
    local t = M.at_cursor()
    if t then
      require("rein.commands").run({ args = sub_name .. " task=" .. t.taskId, bang = false, range = 0 })
    end
  end
end

--- `:Rein tasks`: the list in a split, kept up to date; the keys act on the task under the
--- cursor. Again while it is open: goes there.
function M.open()
  rein().with_client(function(client)
    local o = M._open
    if o and o.client_id == client.id and vim.api.nvim_buf_is_valid(o.buf) then
      local win = vim.fn.bufwinid(o.buf)
      if win ~= -1 then
        vim.api.nvim_set_current_win(win)
        M.fetch(client)
        return
      end
    end
    M.close()
    local v = M.view(M._lists[client.id])
    local buf = require("rein.ui").show("tasks", v, { name = M.NAME, ft = "reintasks", how = "split", focus = true })
    local win = vim.fn.bufwinid(buf)
    if win ~= -1 then
      fit(win, #v.lines)
      vim.wo[win].wrap = false
      vim.wo[win].number = false
      vim.wo[win].relativenumber = false
      vim.wo[win].cursorline = true
      pcall(vim.api.nvim_win_set_cursor, win, { math.min(4, #v.lines), 0 })
    end
    local group = vim.api.nvim_create_augroup("rein_tasks_list", { clear = true })
    o = { buf = buf, client_id = client.id, group = group }
    M._open = o
    local map = function(lhs, fn, desc)
      vim.keymap.set("n", lhs, fn, { buffer = buf, nowait = true, desc = "Rein: " .. desc })
    end
    local cmds = {
      p = for_task("pause"),
      r = for_task("resume"),
      s = for_task("steer"),
      x = for_task("abort"),
      t = for_task("takeover"),
      h = for_task("handback"),
      ["<CR>"] = for_task("transcript"),
      c = for_task("continue"),
      i = for_task("state"),
      o = for_task("open"),
      L = for_task("land"),
      D = function()
        local t = M.at_cursor()
        if t then
          M.discard(t.taskId)
        end
      end,
      d = function()
        local t, d = M.at_cursor()
        if t then
          require("rein.commands").answer_queue(client, t.taskId, d)
        end
      end,
      P = function()
        require("rein.commands").run({ args = "pause all", bang = false, range = 0 })
      end,
      R = function()
        require("rein.commands").run({ args = "resume all", bang = false, range = 0 })
      end,
      gr = function()
        M.fetch(client)
      end,
    }
    for _, k in ipairs(M.keys) do
      if cmds[k[1]] then
        map(k[1], cmds[k[1]], k[2])
      end
    end
    vim.api.nvim_create_autocmd("User", {
      group = group,
      pattern = "ReinTasksChanged",
      callback = function(ev)
        if M._open == o and ev.data and ev.data.client_id == o.client_id then
          draw(o)
        end
      end,
    })
    -- The task here changes without a `rein/tasks` while no worktree task runs.
    vim.api.nvim_create_autocmd("User", {
      group = group,
      pattern = "ReinStateChanged",
      callback = function(ev)
        local c = vim.lsp.get_client_by_id(o.client_id)
        if M._open == o and c and ev.data and ev.data.client_id == o.client_id then
          M.fetch(c)
        end
      end,
    })
    vim.api.nvim_create_autocmd("BufWipeout", {
      group = group,
      buffer = buf,
      callback = function()
        vim.schedule(function()
          if M._open == o then
            M.close()
          end
        end)
      end,
    })
    M.fetch(client)
  end)
end

function M.close()
  local o = M._open
  M._open = nil
  if o then
    pcall(vim.api.nvim_del_augroup_by_id, o.group)
  end
end

--- Discards a worktree task. What the discard would remove of the person's (their changes in
--- the worktree, an editor's unsaved text for it) is asked of the server first: then the one
--- prompt offers to discard anyway, naming those files; otherwise it asks to discard at all.
--- (A running task's discard aborts it first, which may still find changes of yours: the
--- server refuses then, and that is offered once more.)
function M.discard(ref)
  M.with_worktree_task(ref, "Discard which task?", function(t)
    local function send(force)
      rein().exec("discard", { taskId = t.taskId, force = force or nil }, function()
        rein().notify(("%s discarded (its worktree and branch %s removed)"):format(t.name, tostring(t.branch)))
      end, function(err)
        local msg = type(err) == "table" and tostring(err.message) or ""
        if force or not msg:find("force", 1, true) then
          return
        end
        vim.ui.select({ "keep them (do not discard)", "discard them too" }, {
          prompt = ("%s's worktree holds your changes:"):format(t.name),
        }, function(_, idx)
          if idx == 2 then
            vim.schedule(function()
              send(true)
            end)
          end
        end)
      end)
    end
    rein().exec("discard", { taskId = t.taskId, check = true }, function(r)
      local holds = type(r) == "table" and list(r.holds) or {}
      if #holds > 0 then
        vim.ui.select({ "keep them (do not discard)", ("discard anyway (removes your changes: %s)"):format(table.concat(holds, ", ")) }, {
          prompt = ("%s's worktree holds your changes (%s); land them first, or:"):format(t.name, table.concat(holds, ", ")),
        }, function(_, idx)
          if idx == 2 then
            vim.schedule(function()
              send(true)
            end)
          end
        end)
        return
      end
      vim.ui.select({ "no, keep it", "yes, discard it" }, {
        prompt = ("Discard %s (%s)? Its worktree and branch %s are removed."):format(t.name, t.goal, tostring(t.branch)),
      }, function(_, idx)
        if idx == 2 then
          vim.schedule(function()
            send(false)
          end)
        end
      end)
    end)
  end)
end

-- :Rein open -----------------------------------------------------------------------------

--- The tab page whose tab-local directory is `dir`, or nil.
local function tab_of(dir)
  for _, tab in ipairs(vim.api.nvim_list_tabpages()) do
    local nr = vim.api.nvim_tabpage_get_number(tab)
    if vim.fn.haslocaldir(-1, nr) == 1 and vim.fs.normalize(vim.fn.getcwd(-1, nr)) == dir then
      return tab
    end
  end
end

--- Opens worktree task `t` in a tab of its own whose directory (`:tcd`) is its worktree: the
--- file of the current buffer there when it has it. A tab already on it is gone to instead.
--- Buffers there attach to the worktree's own Rein client, so edits in them are the
--- person's, held like any editor's.
function M.open_worktree(t, client)
  local dir = str(t.worktree)
  if not dir or vim.fn.isdirectory(dir) == 0 then
    rein().notify(("%s has no worktree on disk%s"):format(t.name, dir and (" (" .. dir .. ")") or ""), vim.log.levels.ERROR)
    return
  end
  dir = vim.fs.normalize(dir)
  local tab = tab_of(dir)
  if tab then
    vim.api.nvim_set_current_tabpage(tab)
    return tab
  end
  local root = client and client.config.root_dir and vim.fs.normalize(client.config.root_dir)
  local name = vim.api.nvim_buf_get_name(0)
  local rel
  if root and name ~= "" then
    name = vim.fs.normalize(name)
    if vim.startswith(name, root .. "/") then
      rel = name:sub(#root + 2)
    end
  end
  vim.cmd("tabnew")
  vim.cmd("tcd " .. vim.fn.fnameescape(dir))
  vim.t.rein_task = t.taskId
  if rel and vim.uv.fs_stat(dir .. "/" .. rel) then
    vim.cmd("edit " .. vim.fn.fnameescape(dir .. "/" .. rel))
  end
  rein().notify(("%s's worktree (branch %s) in this tab: %s"):format(t.name, tostring(t.branch), dir))
  return vim.api.nvim_get_current_tabpage()
end

return M
