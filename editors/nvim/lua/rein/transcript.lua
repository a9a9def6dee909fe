--- `:Rein transcript`: the task as a conversation (`rein.transcript`) in the
--- `rein://transcript` buffer — the goal, the agent's words, each tool call with its status,
--- title and files (<CR> on it opens the step's diff), command output and thinking folded,
--- your steers, control moving back and forth, decisions and answers. While it is open it
--- follows the task: after each state change it asks for the entries since the last it has
--- (`{since = next}`; entries never change once given), and the command running now shows at
--- its end from `rein/output`. It reads the same after the task ended.
local M = {}

M.NAME = "rein://transcript"

local function rein()
  return require("rein")
end

local function view()
  return require("rein.view")
end

local function str(v)
  if v == nil or v == vim.NIL then
    return nil
  end
  return tostring(v)
end

local function list(v)
  return type(v) == "table" and v or {}
end

--- "2025-01-01T12:34:56.789Z" -> "12:34:56".
local function clock(at)
  return str(at) and tostring(at):match("T(%d+:%d+:%d+)") or nil
end

local status_mark = { done = "✓", failed = "✗", skipped = "⊘", rolled_back = "↶" }

local function files_lines(v, files, indent, data)
  for _, f in ipairs(list(files)) do
    local counts = ("+%d -%d"):format(tonumber(f.added) or 0, tonumber(f.removed) or 0)
    local line = ("%s%s %s%s"):format(indent, f.path or "?", counts, f.kind and f.kind ~= "modified" and (" (" .. f.kind .. ")") or "")
    local at = #indent + #(f.path or "?") + 1
    v:add(line, { { #indent, at - 1, "ReinStep" }, { at, at + #counts, "ReinMuted" } }, { data = data })
  end
end

--- A plan's items as lines: status marks when the agent reports progress, else the items.
local function plan_lines(v, items, progress, indent)
  local ui = require("rein.ui")
  for _, p in ipairs(items) do
    local text = ("%s: %s"):format(p.id or "?", ui.plan_item_text(p))
    if progress then
      local mark, hl = ui.plan_mark(p)
      v:add(("%s%s %s"):format(indent, mark, text), { { #indent, #indent + #mark, hl } })
    else
      v:add(indent .. "- " .. text)
    end
  end
end

local function same_ids(a, b)
  if #a ~= #b then
    return false
  end
  for i = 1, #a do
    if a[i].id ~= b[i].id then
      return false
    end
  end
  return true
end

local function item_equal(a, b)
  return a.id == b.id and a.text == b.text and a.status == b.status and a.editedByHuman == b.editedByHuman
end

--- Adds `entries` to view `v`. `ctx` carries what earlier entries left: `plan` (the items
--- shown last, so a plan that only moved shows what moved). Pure, for tests.
function M.render(v, entries, ctx)
  ctx = ctx or {}
  for _, e in ipairs(entries) do
    -- When it happened: at the right end of the blank line before a turn (never over its
    -- text, however narrow the window), or after a one-line event.
    local right = clock(e.at)
    local function when(line, hls)
      if not right then
        return line, hls
      end
      local at = #line + 2
      table.insert(hls, { at, at + #right, "ReinTime" })
      return line .. "  " .. right, hls
    end
    local k = e.kind
    if k == "goal" then
      v:add("Goal: " .. (e.text or ""), "ReinTitle")
    elseif k == "message" then
      v:add("", nil, { right = right })
      if str(e.thought) then
        v:add_block(e.thought, "  thinking: ", "            ", "ReinThought", { fold = "start", data = { step = e.step, thought = true } })
      end
      local parts = vim.split(vim.trim(e.text or ""), "\n", { plain = true })
      for i, l in ipairs(parts) do
        if i == 1 then
          v:add("agent: " .. l, { { 0, 6, "ReinAgent" } }, { data = { step = e.step } })
        else
          v:add("       " .. l, nil, { data = { step = e.step } })
        end
      end
    elseif k == "plan" then
      local items = list(e.items)
      local who = e.by == "human" and "you" or "the agent"
      local shown = ctx.plan or {}
      if not same_ids(shown, items) or e.progress ~= ctx.progress then
        local how = e.progress and "" or " (it reports no progress on it)"
        if e.by == "human" then
          v:add("plan, as you edited it:", "ReinYou")
        else
          v:add(("plan, as %s set it%s:"):format(who, how), "ReinMuted")
        end
        plan_lines(v, items, e.progress ~= false, "    ")
      else
        local moved = {}
        for i, p in ipairs(items) do
          if not item_equal(p, shown[i]) then
            table.insert(moved, p)
          end
        end
        if #moved > 0 then
          -- What moved, on one line: "plan: [x] p1: read · [>] p2: write".
          local line, hls = "plan:", { { 0, 5, "ReinMuted" } }
          for i, p in ipairs(moved) do
            local mark, hl = require("rein.ui").plan_mark(p)
            if e.progress == false then
              mark = "-"
            end
            local sep = i == 1 and " " or " · "
            local at = #line + #sep
            line = ("%s%s%s %s: %s"):format(line, sep, mark, p.id or "?", require("rein.ui").plan_item_text(p))
            table.insert(hls, { at, at + #mark, hl })
          end
          if e.by == "human" then
            line = line .. " (by you)"
          end
          v:add(line, hls)
        end
      end
      ctx.plan = items
      ctx.progress = e.progress
    elseif k == "tool" then
      local data = { step = e.step, diff = true }
      local mark = status_mark[e.status] or "·"
      local head = ("step %d "):format(tonumber(e.step) or 0)
      local hl = require("rein.ui").step_hl[e.status] or "ReinMuted"
      local line = head .. mark .. " " .. (e.title or "")
      if e.status ~= "done" then
        line = line .. " (" .. tostring(e.status):gsub("_", " ") .. ")"
      end
      local item = str(e.planItem)
      if item then
        line = line .. "  · " .. item
      end
      v:add(line, { { 0, #head - 1, "ReinStep" }, { #head, #head + #mark, hl } }, { data = data })
      files_lines(v, e.files, "    ", data)
      if type(e.tool) == "table" then
        local shown = {}
        for _, f in ipairs(list(e.files)) do
          shown[f.path] = true
        end
        for _, d in ipairs(list(e.tool.diffs)) do
          if not shown[d.path] then
            local line = ("    %s +%d -%d (as the agent reported it)"):format(d.path or "?", d.added or 0, d.removed or 0)
            v:add(line, "ReinMuted", { data = data })
          end
        end
        local at = {}
        for _, l in ipairs(list(e.tool.locations)) do
          table.insert(at, str(l.line) and (l.path .. ":" .. l.line) or l.path)
        end
        if #at > 0 and #list(e.files) == 0 then
          v:add("    at " .. table.concat(at, ", "), "ReinMuted", { data = data })
        end
      end
      if str(e.detail) then
        local failed = require("rein.ui").refused({ status = e.status })
        v:add_block(e.detail, "    → ", "      ", failed and hl or "ReinMuted", { data = data })
      end
    elseif k == "output" then
      local lines = vim.split((require("rein.output").clean(e.text or ""):gsub("\n$", "")), "\n", { plain = true })
      local data = { step = e.step, output = true }
      local head = ("    output of `%s`%s (%d line%s%s%s):"):format(
        str(e.command) or "?",
        str(e.terminal) and (" in terminal " .. e.terminal) or "",
        #lines,
        #lines == 1 and "" or "s",
        e.truncated and ", its end" or "",
        type(e.exit) == "table" and (", " .. require("rein.output").exit_text(e.exit)) or ""
      )
      v:add(head, "ReinOutput", { fold = "start", data = data })
      for _, l in ipairs(lines) do
        v:add("    │ " .. l:match("[^\r]*$"), "ReinOutput", { fold = "in", data = data })
      end
    elseif k == "human" then
      local data = { step = e.step, diff = true }
      local head = ("step %d "):format(tonumber(e.step) or 0)
      v:add(head .. "✎ you: " .. (e.title or ""), { { 0, #head - 1, "ReinStep" }, { #head, -1, "ReinYou" } }, { data = data })
      files_lines(v, e.files, "    ", data)
    elseif k == "unattributed" then
      local data = { step = e.step, diff = true }
      local head = ("step %d "):format(tonumber(e.step) or 0)
      v:add(head .. "? someone: " .. (e.title or ""), { { 0, #head - 1, "ReinStep" }, { #head, -1, "ReinMuted" } }, { data = data })
      files_lines(v, e.files, "    ", data)
    elseif k == "steer" then
      v:add("", nil, { right = right })
      local where = type(e.location) == "table"
          and (" (about %s:%d)"):format(e.location.path or "?", (tonumber(e.location.line) or 0) + 1)
        or ""
      local who = ("you (%s %s): "):format(e.urgent and "urgent steer" or "steer", e.id or "?")
      v:add_block((e.text or "") .. where, who, (" "):rep(#who), { { 0, #who, "ReinYou" } })
    elseif k == "delivered" then
      v:add(("  (%s delivered to the agent before step %s)"):format(table.concat(list(e.ids), ", "), tostring(e.step)), "ReinMuted")
    elseif k == "decision" then
      v:add("", nil, { right = right })
      local options = #list(e.options) > 0 and table.concat(e.options, " / ") or "any answer"
      v:add(("? %s: %s (%s)"):format(e.id or "?", e.question or "", options), "ReinWarn")
      if str(e.detail) then
        local n = #vim.split(vim.trim(e.detail), "\n")
        v:add_block(e.detail, "    ", "    ", "ReinMuted", { fold = n > 3 and "start" or nil })
      end
    elseif k == "answer" then
      local who = e.by == "human" and "you" or tostring(e.by or "?")
      v:add(when(("%s answered %s: %s"):format(who, e.id or "?", e.choice or ""), { { 0, #who, "ReinYou" } }))
    elseif k == "control" then
      local line = "── " .. (e.text or e.what or "")
      v:add(when(line, { { 0, #line, "ReinControl" } }))
    elseif k == "turn" then
      -- A follow-up: the conversation goes on with the person's next words; what they changed
      -- since the agent's last turn (the report the agent got first) is folded under them.
      v:add("", nil, { right = right })
      local head = ("── turn %s, from step %s "):format(tostring(e.turn or "?"), tostring(e.step or "?"))
      v:add(head .. ("─"):rep(math.max(3, 40 - vim.fn.strdisplaywidth(head))), "ReinControl")
      local who = "you: "
      v:add_block(e.text or "", who, (" "):rep(#who), { { 0, #who - 2, "ReinYou" } })
      if str(e.report) then
        v:add("    your changes since its last turn, as the agent was told:", "ReinMuted", { fold = "start" })
        v:add_block(e.report, "    │ ", "    │ ", "ReinMuted", { fold = "in" })
      end
    elseif k == "end" then
      v:add("", nil, { right = right })
      local hl = e.status == "done" and "ReinDone" or "ReinFailed"
      v:add(("■ %s: %s"):format(e.status or "?", e.text or ""), hl)
    end
  end
  return v
end

--- The live end: the commands of `client_id` running now, with their last lines.
function M.render_live(v, client_id)
  for _, c in ipairs(require("rein.output").running(client_id)) do
    v:add("")
    local what = c.state == "paused" and "paused" or "running"
    local line = ("▶ %s step %s: %s  (:Rein output follows it)"):format(what, tostring(c.step or "?"), c.command or "?")
    v:add(line, what == "paused" and "ReinWarn" or "ReinActive")
    for _, l in ipairs(c.tail) do
      v:add("    │ " .. l, "ReinOutput")
    end
  end
  return v
end

--- The open transcript: {client_id, buf, task_id, entries, next, lines (the entries' line
--- count), ctx, busy, again, group}, or nil.
M._t = nil

local live_statuses = { running = true, paused = true, awaiting_decision = true, human = true }

--- Whether the task of `state` has not ended (a transcript opened on it follows its end).
local function active(state)
  return type(state) == "table" and live_statuses[state.status] == true
end

--- Redraws the end of the buffer: the new entries `entries` (appended after the lines it
--- has) and the live end. Windows at the end of it follow.
local function draw(t, entries)
  if not vim.api.nvim_buf_is_valid(t.buf) then
    return
  end
  local before = vim.api.nvim_buf_line_count(t.buf)
  local cur = vim.api.nvim_get_current_win()
  local follow = {}
  for _, win in ipairs(vim.fn.win_findbuf(t.buf)) do
    if t.follow_all or win ~= cur or vim.api.nvim_win_get_cursor(win)[1] >= before then
      table.insert(follow, win)
    end
  end
  t.follow_all = nil
  local v = view().new()
  if t.lines == 0 and t.earlier then
    -- An earlier task: read-only, and how to go on with it.
    local p = t.earlier
    v:add(("Earlier task %s (%s) · read-only"):format(tostring(p.taskId), tostring(p.status)), "ReinMuted")
    if p.canContinue then
      v:add(("Continue it: :Rein continue task=%s [text]  (c in :Rein tasks)"):format(tostring(p.taskId)), "ReinMuted")
    end
    v:add("")
  end
  if t.lines == 0 and #entries == 0 and #t.entries == 0 then
    v:add(t.task_id and "(no entries yet)" or "No task in this repository. Start one with :Rein start.", "ReinMuted")
  end
  M.render(v, entries, t.ctx)
  local fresh = #v.lines
  local live = view().new()
  if not t.pinned then
    -- Live output (`rein/output`) is the task here's.
    M.render_live(live, t.client_id)
  end
  v:append(live)
  local first = t.lines + 1
  view().apply(t.buf, v, first)
  if #entries > 0 then
    t.lines = first - 1 + fresh
  end
  local total = vim.api.nvim_buf_line_count(t.buf)
  for _, win in ipairs(follow) do
    if #entries > 0 or #live.lines > 0 then
      pcall(vim.api.nvim_win_set_cursor, win, { total, 0 })
    end
  end
end

--- Asks for the entries since the last one shown; once more after an answer when asked
--- again meanwhile.
function M.fetch()
  local t = M._t
  if not t then
    return
  end
  if t.busy then
    t.again = true
    return
  end
  local client = vim.lsp.get_client_by_id(t.client_id)
  if not client or client:is_stopped() then
    return
  end
  t.busy = true
  local since = t.next
  client:request("workspace/executeCommand", {
    command = "rein.transcript",
    arguments = { { since = since, taskId = t.pinned } },
  }, function(err, result)
    t.busy = false
    if M._t ~= t or not vim.api.nvim_buf_is_valid(t.buf) then
      return
    end
    if err then
      rein().notify("transcript: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
      return
    end
    result = type(result) == "table" and result or {}
    local task = str(result.taskId)
    if task ~= t.task_id or since == 0 and t.lines > 0 then
      -- Another task (a new one started): its transcript from the start.
      t.task_id, t.entries, t.next, t.lines, t.ctx = task, {}, 0, 0, {}
      t.follow_all = t.pinned == nil and active(rein()._states[t.client_id])
      if since ~= 0 then
        return M.fetch()
      end
    end
    local entries = list(result.entries)
    vim.list_extend(t.entries, entries)
    t.next = tonumber(result.next) or (since + #entries)
    draw(t, entries)
    if t.again then
      t.again = false
      M.fetch()
    end
  end)
end

--- The steps a diff can be read from: the state's, and the transcript's tool and human rows.
local function known_steps(t)
  local steps, seen = {}, {}
  local state = t.pinned == nil and rein()._states[t.client_id] or nil
  for _, s in ipairs(type(state) == "table" and list(state.steps) or {}) do
    seen[s.n] = true
    table.insert(steps, s)
  end
  for _, e in ipairs(t.entries) do
    if (e.kind == "tool" or e.kind == "human" or e.kind == "unattributed") and e.step and not seen[e.step] then
      seen[e.step] = true
      table.insert(steps, { n = e.step, action = e.title, checkpoint = str(e.checkpoint) })
    end
  end
  return { steps = steps }
end

--- <CR> in the transcript: on a tool (or your) step, its diff; in a fold, open or close it.
function M.enter()
  local t = M._t
  local buf = vim.api.nvim_get_current_buf()
  local lnum = vim.api.nvim_win_get_cursor(0)[1]
  local data = view().data(buf, lnum)
  if t and t.buf == buf and type(data) == "table" and data.diff then
    local client = vim.lsp.get_client_by_id(t.client_id)
    local root = t.root or (client and client.config.root_dir)
    if root then
      require("rein.diff").open(root, known_steps(t), data.step)
      return
    end
  end
  if vim.fn.foldlevel(lnum) > 0 then
    vim.cmd("normal! za")
  end
end

function M.close()
  local t = M._t
  M._t = nil
  if t then
    pcall(vim.api.nvim_del_augroup_by_id, t.group)
  end
end

--- `:Rein transcript`: opens the transcript of `client_id`'s task where `config.transcript`
--- says (default a vertical split) and puts the cursor in it; when it is open, goes there.
--- `task` (a summary from rein.tasks): that task's instead, followed on every `rein/tasks`.
function M.open(client_id, task)
  local pinned = task and task.taskId or nil
  local t = M._t
  if t and t.client_id == client_id and t.pinned == pinned and vim.api.nvim_buf_is_valid(t.buf) then
    local win = vim.fn.win_findbuf(t.buf)[1]
    if win then
      vim.api.nvim_set_current_win(win)
      M.fetch()
      return t.buf, win
    end
  end
  M.close()
  local how = rein().config.transcript
  local buf, win = require("rein.ui").show("transcript", view().new(), {
    name = M.NAME,
    ft = "reintranscript",
    how = (how == nil or how == false) and "vsplit" or how,
    title = "Rein transcript",
    focus = true,
  })
  view().fold_window(win)
  vim.wo[win].wrap = true
  vim.wo[win].linebreak = true
  vim.wo[win].breakindent = true
  vim.wo[win].number = false
  vim.wo[win].relativenumber = false
  vim.keymap.set("n", "<CR>", M.enter, { buffer = buf, nowait = true, desc = "Rein: the step's diff / open or close the fold" })
  local group = vim.api.nvim_create_augroup("rein_transcript", { clear = true })
  t = {
    client_id = client_id,
    pinned = pinned,
    root = task and type(task.worktree) == "string" and task.worktree or nil,
    -- A task of the history that is not the current one (`:Rein tasks`, `task=ID`).
    earlier = task and task.canContinue ~= nil and task.current ~= true and task or nil,
    buf = buf,
    task_id = nil,
    entries = {},
    next = 0,
    lines = 0,
    ctx = {},
    group = group,
  }
  M._t = t
  t.follow_all = pinned == nil and active(rein()._states[client_id]) or task and live_statuses[task.status] == true
  vim.api.nvim_create_autocmd("User", {
    group = group,
    pattern = pinned and "ReinTasksChanged" or "ReinStateChanged",
    callback = function(ev)
      if M._t == t and ev.data and ev.data.client_id == t.client_id then
        M.fetch()
      end
    end,
  })
  vim.api.nvim_create_autocmd("User", {
    group = group,
    pattern = "ReinOutput",
    callback = function(ev)
      if M._t == t and ev.data and ev.data.client_id == t.client_id and not t.busy then
        draw(t, {})
      end
    end,
  })
  vim.api.nvim_create_autocmd("BufWipeout", {
    group = group,
    buffer = buf,
    callback = function()
      -- Later (not inside the group's own autocommand), and only this transcript: one opened
      -- again meanwhile stays.
      vim.schedule(function()
        if M._t == t then
          M.close()
        end
      end)
    end,
  })
  M.fetch()
  return buf, win
end

return M
