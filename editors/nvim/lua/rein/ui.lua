--- Presentation: the state float, the handover / reconcile report, quickfix lists.
--- The builders (`state_lines`, `steps_items`, `changes_items`) are pure, for tests.
local M = {}

local function rein()
  return require("rein")
end

--- A JSON value as a string, nil for null or missing.
function M.str(v)
  if v == nil or v == vim.NIL then
    return nil
  end
  return tostring(v)
end

--- A JSON array as a table ({} for null, missing or any other value).
function M.list(v)
  return type(v) == "table" and v or {}
end

local str, list = M.str, M.list

local function oneline(s)
  return (tostring(s or ""):gsub("\r?\n", " ⏎ "))
end

--- "2025-01-01T12:34:56.789Z" -> "2025-01-01 12:34:56" (UTC, as the server writes it).
function M.time(ts)
  local d, t = tostring(ts):match("^(%d+%-%d+%-%d+)T(%d+:%d+:%d+)")
  if not d then
    return tostring(ts)
  end
  return d .. " " .. t
end

local plan_marks = { pending = "[ ]", active = "[>]", done = "[x]", skipped = "[-]" }
M.plan_marks = plan_marks
local plan_hl = { done = "ReinDone", active = "ReinActive", skipped = "ReinMuted" }

--- Whether the agent calls item `p` done while Rein's record of its step says otherwise.
local function doubtful(p)
  return p.status == "done" and str(p.contradicted) ~= nil
end

--- An item's status mark and its highlight: "[!]" for an item the agent calls done whose
--- step Rein recorded as not done.
function M.plan_mark(p)
  if doubtful(p) then
    return "[!]", "ReinWarn"
  end
  return plan_marks[p.status] or "[ ]", plan_hl[p.status] or "ReinMuted"
end

--- How far the plan is, in words: "2 of 5 done, 1 in progress, 1 skipped"; nil when the
--- agent reports no progress on it (then its statuses say nothing).
function M.plan_summary(state)
  local plan = type(state) == "table" and list(state.plan) or {}
  if #plan == 0 or state.planProgress == false then
    return nil
  end
  local n = { pending = 0, active = 0, done = 0, skipped = 0, doubtful = 0 }
  for _, p in ipairs(plan) do
    local k = doubtful(p) and "doubtful" or p.status
    n[k] = (n[k] or 0) + 1
  end
  local parts = { ("%d of %d done"):format(n.done, #plan - n.skipped) }
  if n.doubtful > 0 then
    table.insert(parts, ("%d marked done, not done"):format(n.doubtful))
  end
  if n.active > 0 then
    table.insert(parts, ("%d in progress"):format(n.active))
  end
  if n.skipped > 0 then
    table.insert(parts, ("%d skipped"):format(n.skipped))
  end
  return table.concat(parts, ", ")
end

--- A plan item's line without its mark: "text (high) (edited by you)".
function M.plan_item_text(p)
  local s = tostring(p.text or "")
  if str(p.priority) then
    s = s .. " (" .. p.priority .. ")"
  end
  if p.editedByHuman == true then
    s = s .. " (edited by you)"
  end
  if doubtful(p) then
    s = s .. " (" .. p.contradicted .. ")"
  end
  return s
end

--- Adds the plan to a view: each item with its status, or, when the agent reports no
--- progress, the items alone under a line that says so (their statuses would be stale).
function M.add_plan(v, state, indent)
  indent = indent or ""
  local plan = list(state.plan)
  if state.planProgress == false then
    v:add(indent .. "(the agent reports no plan progress)", "ReinMuted")
    for _, p in ipairs(plan) do
      v:add(indent .. "- " .. M.plan_item_text(p))
    end
    return
  end
  for _, p in ipairs(plan) do
    local mark, hl = M.plan_mark(p)
    local line = ("%s- %s %s"):format(indent, mark, M.plan_item_text(p))
    local at = #indent + 2
    v:add(line, { { at, at + #mark, hl } })
  end
end

local step_hl = { done = "ReinDone", failed = "ReinFailed", rolled_back = "ReinWarn", skipped = "ReinWarn" }
M.step_hl = step_hl

--- Whether a step did not do what the agent asked (its `detail` is then why, in the words
--- the agent was told).
local function refused(s)
  return s.status == "failed" or s.status == "skipped" or s.status == "rolled_back"
end
M.refused = refused

--- The lines under a step: the agent's words (a long message and its thinking folded), what
--- came of it (`detail`, whole, as the agent was told it) and a command's output (folded).
function M.add_step_words(v, s, indent)
  local data = { step = s.n }
  if str(s.thought) then
    v:add_block(s.thought, indent .. "thinking: ", indent .. "          ", "ReinThought", { fold = "start", data = data })
  end
  if str(s.message) then
    local n = #vim.split(vim.trim(s.message), "\n")
    v:add_block(s.message, indent .. "“", indent .. " ", "ReinAgent", { fold = n > 3 and "start" or nil, data = data })
    v.lines[#v.lines] = v.lines[#v.lines] .. "”"
  end
  if str(s.detail) then
    local hl = refused(s) and (step_hl[s.status] or "ReinWarn") or "ReinMuted"
    v:add_block(s.detail, indent .. "→ ", indent .. "  ", hl, { data = data })
  end
  if str(s.output) then
    local lines = vim.split(vim.trim(s.output), "\n")
    local head = ("%soutput (its last %d line%s):"):format(indent, #lines, #lines == 1 and "" or "s")
    v:add(head, "ReinOutput", { fold = "start", data = data })
    for _, l in ipairs(lines) do
      v:add(indent .. "│ " .. l, "ReinOutput", { fold = "in", data = data })
    end
  end
end

--- The state float shows this many steps, the latest (the rest: :Rein steps, :Rein transcript).
M.state_steps = 12

--- The state as a view: goal, status, holder, plan, steps with the agent's words, …
function M.state_view(state)
  local v = require("rein.view").new()
  if state == nil or state == vim.NIL or type(state) ~= "table" then
    v:add("# Rein", "ReinTitle")
    v:add("")
    v:add("No task in this repository. Start one with `:Rein start`.")
    return v
  end
  local function add(s, hl, opts)
    return v:add(oneline(s), hl, opts)
  end
  local function heading(s)
    v:add("")
    v:add(s, "ReinHeading")
  end
  local task = type(state.task) == "table" and state.task or {}
  local control = type(state.control) == "table" and state.control or {}
  add("# Rein: " .. (str(task.goal) or "?"), "ReinTitle")
  add("")
  add("Status:  " .. (rein().describe(state) or "?"), { { 0, 8, "ReinMuted" } })
  add(("Holder:  %s%s%s"):format(
    str(control.holder) or "?",
    str(control.since) and (" since " .. M.time(control.since)) or "",
    str(control.reason) and (" — " .. control.reason) or ""
  ), { { 0, 8, "ReinMuted" } })
  if str(state.stopReason) then
    add("Stopped: " .. state.stopReason, { { 0, 8, "ReinMuted" } })
  end
  add(("Task:    %s, started %s, version %s"):format(
    str(task.id) or "?",
    str(task.started) and M.time(task.started) or "?",
    str(state.version) or "?"
  ), { { 0, 8, "ReinMuted" } })
  if str(state.summary) then
    add("Summary: " .. state.summary, { { 0, 8, "ReinMuted" } })
  end

  local plan = list(state.plan)
  if #plan > 0 then
    local summary = M.plan_summary(state)
    heading("## Plan" .. (summary and (" · " .. summary) or ""))
    M.add_plan(v, state)
  end

  local steps = list(state.steps)
  heading(("## Steps (%d)"):format(#steps))
  if #steps == 0 then
    add("none yet")
  end
  local from = math.max(1, #steps - M.state_steps + 1)
  if from > 1 then
    add(("  … %d earlier (:Rein steps, :Rein transcript)"):format(from - 1), "ReinMuted")
  end
  for i = from, #steps do
    local s = steps[i]
    local status = str(s.status) or "?"
    local head = ("%3d. %-5s "):format(s.n or 0, str(s.author) or "?")
    add(("%s%-11s %s%s"):format(
      head,
      status,
      s.action or "",
      str(s.checkpoint) and ("  @" .. s.checkpoint:sub(1, 8)) or ""
    ), { { #head, #head + #status, step_hl[s.status] or "ReinMuted" } }, { data = { step = s.n } })
    M.add_step_words(v, s, "       ")
  end

  local constraints = list(state.constraints)
  if #constraints > 0 then
    heading("## Constraints")
    for _, c in ipairs(constraints) do
      local where = ""
      if type(c.location) == "table" then
        where = (" (%s:%d)"):format(c.location.path or "?", (c.location.line or 0) + 1)
      end
      local status = str(c.status) or "queued"
      if status == "delivered" and str(c.deliveredAtStep) then
        status = "delivered at step " .. c.deliveredAtStep
      end
      add(("- %s [%s] %s%s"):format(str(c.id) or "?", status, c.text or "", where))
    end
  end

  local decisions = list(state.decisions)
  if #decisions > 0 then
    heading("## Decisions (answer with :Rein decide)")
    for _, d in ipairs(decisions) do
      add(("- %s (%s) %s"):format(d.id or "?", d.kind or "?", d.question or ""), "ReinWarn")
      if #list(d.options) > 0 then
        add("    options: " .. table.concat(d.options, " / "))
      end
      if str(d.path) then
        add("    file: " .. d.path)
      end
      if str(d.detail) then
        for _, line in ipairs(vim.split(d.detail, "\n", { trimempty = true })) do
          add("    " .. line)
        end
      end
    end
  end

  local held = list(state.heldFiles)
  if #held > 0 then
    heading("## Held files (yours; :Rein release)")
    for _, f in ipairs(held) do
      add("- " .. f)
    end
  end

  local changes = list(state.humanChanges)
  if #changes > 0 then
    heading("## Your changes")
    for _, c in ipairs(changes) do
      add(("- %s %s +%d -%d (step %s)"):format(
        c.kind or "?",
        c.path or "?",
        c.added or 0,
        c.removed or 0,
        str(c.atStep) or "?"
      ))
    end
  end

  local kept = list(state.keptAgentLines)
  if #kept > 0 then
    heading("## The agent's lines the abort kept (you edited their block; a code action removes them)")
    for _, f in ipairs(kept) do
      for _, l in ipairs(list(f.lines)) do
        add(("- %s:%d  %s"):format(f.path or "?", tonumber(l.line) or 0, l.text or ""), "ReinWarn")
      end
    end
  end
  return v
end

--- The state as lines (the float's text).
function M.state_lines(state)
  return M.state_view(state).lines
end

local function close_on_q(buf, win)
  for _, key in ipairs({ "q", "<Esc>" }) do
    vim.keymap.set("n", key, function()
      if vim.api.nvim_win_is_valid(win) then
        vim.api.nvim_win_close(win, true)
      end
    end, { buffer = buf, nowait = true, desc = "close" })
  end
end

--- The buffer named exactly `name` (bufnr() would take it as a pattern), or nil.
local function named(name)
  for _, b in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_valid(b) and vim.api.nvim_buf_get_name(b) == name then
      return b
    end
  end
end

--- The scratch buffer `name` (made if missing) holding `content`: lines, or a view (with its
--- highlights and folds). Its 'filetype' is `ft` (default markdown).
local function scratch(name, content, ft)
  local buf = named(name)
  if not buf then
    buf = vim.api.nvim_create_buf(false, true)
    pcall(vim.api.nvim_buf_set_name, buf, name)
  end
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].buftype = "nofile"
  vim.bo[buf].swapfile = false
  if vim.bo[buf].filetype ~= (ft or "markdown") then
    vim.bo[buf].filetype = ft or "markdown"
  end
  local view = require("rein.view")
  if content.lines then
    view.apply(buf, content)
  else
    vim.bo[buf].modifiable = true
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, content)
  end
  vim.bo[buf].modifiable = false
  return buf
end

--- Where a float of `content` (lines or a view) goes: centred, as wide as its longest line
--- and as tall as its lines (within the screen). A view's folded lines are not counted: they
--- start closed, shown as their fold's first line.
local function float_geometry(content)
  local lines, folds = content.lines or content, content.folds or {}
  local width, height = 20, 0
  for i, l in ipairs(lines) do
    if folds[i] ~= "1" then
      height = height + 1
      local w = vim.fn.strdisplaywidth(l)
      if folds[i] == ">1" and folds[i + 1] == "1" then
        w = w + 12 -- the fold line's "  ▸ N lines"
      end
      width = math.max(width, w)
    end
  end
  width = math.min(width + 2, math.max(20, vim.o.columns - 6))
  height = math.min(math.max(height, 1), math.max(3, vim.o.lines - 6))
  return {
    relative = "editor",
    width = width,
    height = height,
    row = math.max(0, math.floor((vim.o.lines - height) / 2) - 1),
    col = math.max(0, math.floor((vim.o.columns - width) / 2)),
  }
end

--- Opens `content` (lines or a view) in a centred floating window (entered when `enter`);
--- returns buf, win.
function M.float(name, content, title, enter, ft)
  local buf = scratch(name, content, ft)
  local cfg = vim.tbl_extend("force", float_geometry(content), {
    style = "minimal",
    border = "rounded",
    title = title and (" " .. title .. " ") or nil,
    title_pos = title and "center" or nil,
  })
  local win = vim.api.nvim_open_win(buf, enter ~= false, cfg)
  vim.wo[win].wrap = true
  close_on_q(buf, win)
  return buf, win
end

--- The open `:Rein state` view: {win, buf, client_id, group}, or nil.
M._live = nil

--- Closes the `:Rein state` view if it is open; returns whether it was.
function M.state_close()
  local live = M._live
  M._live = nil
  if not live then
    return false
  end
  pcall(vim.api.nvim_del_augroup_by_id, live.group)
  if vim.api.nvim_win_is_valid(live.win) then
    vim.api.nvim_win_close(live.win, true)
    return true
  end
  return false
end

--- `:Rein state`: the state of `client_id`'s task in a float (`how` = "float") or a split
--- ("split") that is redrawn on every `rein/stateChanged` and does not take the cursor. A
--- worktree task's (`task_id`) is fetched again on every `rein/tasks`.
function M.state_live(client_id, state, how, task_id)
  M.state_close()
  local view = M.state_view(state)
  local buf, win
  if how == "split" then
    local prev = vim.api.nvim_get_current_win()
    buf = scratch("rein://state", view, "rein")
    vim.cmd("botright " .. math.min(#view.lines, 15) .. "split")
    win = vim.api.nvim_get_current_win()
    vim.api.nvim_win_set_buf(win, buf)
    close_on_q(buf, win)
    if vim.api.nvim_win_is_valid(prev) then
      vim.api.nvim_set_current_win(prev)
    end
  else
    buf, win = M.float("rein://state", view, "Rein (:Rein state closes)", false, "rein")
  end
  require("rein.view").fold_window(win)
  local group = vim.api.nvim_create_augroup("rein_state_live", { clear = true })
  local live = { win = win, buf = buf, client_id = client_id, group = group }
  M._live = live
  local function redraw(new_state)
    if M._live ~= live then
      return
    end
    if not vim.api.nvim_win_is_valid(live.win) or not vim.api.nvim_buf_is_valid(live.buf) then
      M.state_close()
      return
    end
    local new = M.state_view(new_state)
    require("rein.view").apply(live.buf, new)
    if vim.api.nvim_win_get_config(live.win).relative ~= "" then
      vim.api.nvim_win_set_config(live.win, float_geometry(new))
    end
  end
  vim.api.nvim_create_autocmd("User", {
    group = group,
    pattern = task_id and "ReinTasksChanged" or "ReinStateChanged",
    callback = function(ev)
      if M._live ~= live or not ev.data or ev.data.client_id ~= live.client_id then
        return
      end
      if not task_id then
        return redraw(ev.data.state)
      end
      local client = vim.lsp.get_client_by_id(client_id)
      if client then
        client:request("workspace/executeCommand", {
          command = "rein.state",
          arguments = { { taskId = task_id } },
        }, function(err, result)
          if not err and type(result) == "table" and result.state ~= nil then
            redraw(result.state)
          end
        end)
      end
    end,
  })
  vim.api.nvim_create_autocmd("WinClosed", {
    group = group,
    pattern = tostring(win),
    once = true,
    callback = function()
      vim.schedule(M.state_close)
    end,
  })
  return buf, win
end

--- kind ("report" for the handover and reconcile reports, "state", …) -> the window it was
--- last shown in.
M._report_wins = {}

--- Shows a handover / reconcile report (Markdown) where `config.report` says, reusing the
--- reports' one window while it is open.
function M.report(kind, markdown)
  local how = rein().config.report
  if how == false then
    return
  end
  -- One window for both reports: the reconcile report follows the handover it answers,
  -- so a take over and a hand back leave one window, not two more splits.
  return M.show("report", vim.split(markdown, "\n", { plain = true }), {
    name = "rein://" .. kind,
    how = how,
    title = kind == "handover" and "Rein handover" or "Rein reconcile",
    focus = rein().config.report_focus,
  })
end

--- Shows `content` (lines or a view) in the window of `kind` (one per kind: reused while it
--- is open, else a new split, vsplit, tab or float as `opts.how` says). opts: `name` (the
--- buffer's, default rein://KIND), `ft`, `title` (a float's), `focus` (leave the cursor in it).
function M.show(kind, content, opts)
  local how = opts.how or "split"
  local name = opts.name or ("rein://" .. kind)
  local old = M._report_wins[kind]
  if how == "float" then
    if old and vim.api.nvim_win_is_valid(old) then
      vim.api.nvim_win_close(old, true)
    end
    -- A report float is entered (q closes it), as it covers the code.
    local buf, win = M.float(name, content, opts.title, true, opts.ft)
    M._report_wins[kind] = win
    return buf, win
  end
  local prev = vim.api.nvim_get_current_win()
  local buf = scratch(name, content, opts.ft)
  -- One window per kind: the last one shown (wherever the buffer now is), else a new split.
  local shown = vim.fn.bufwinid(buf)
  local win
  if old and vim.api.nvim_win_is_valid(old) then
    win = old
    vim.api.nvim_win_set_buf(win, buf)
  elseif shown ~= -1 then
    win = shown
  else
    if how == "tab" then
      vim.cmd("tab split")
    elseif how == "vsplit" then
      vim.cmd("botright vsplit")
    else
      vim.cmd("botright split")
    end
    win = vim.api.nvim_get_current_win()
    vim.api.nvim_win_set_buf(win, buf)
  end
  M._report_wins[kind] = win
  close_on_q(buf, win)
  -- A report opens at its top: the agent's own account of what it was doing comes first.
  pcall(vim.api.nvim_win_set_cursor, win, { 1, 0 })
  if opts.focus then
    vim.api.nvim_set_current_win(win)
  elseif how ~= "tab" and vim.api.nvim_win_is_valid(prev) then
    vim.api.nvim_set_current_win(prev)
  end
  return buf, win
end

--- Parses a unified diff into the new-file line of the first change of each hunk.
local function hunk_lines(diff)
  local out = {}
  if type(diff) ~= "string" then
    return out
  end
  local line, pending
  for l in (diff .. "\n"):gmatch("(.-)\r?\n") do
    local c = l:match("^@@ %-%d+,?%d* %+(%d+),?%d* @@")
    if c then
      line, pending = tonumber(c), true
    elseif line and pending then
      local ch = l:sub(1, 1)
      if ch == "+" or ch == "-" then
        table.insert(out, math.max(1, line))
        pending = false
      elseif ch == " " then
        line = line + 1
      end
    end
  end
  return out
end
M._hunk_lines = hunk_lines

local function join(root, path)
  if not root or path:match("^/") then
    return path
  end
  return root .. "/" .. path
end

local step_type = { failed = "E", rolled_back = "W", skipped = "W" }

--- Quickfix items for the steps. A step that reads/writes/edits a file points at it. What
--- the agent said on its way to a step comes first, as a line of its own (not a stop for
--- :cnext); a step's `detail` (why it failed or was refused, as the agent was told) follows
--- its action.
function M.steps_items(state, root)
  local items = {}
  for _, s in ipairs(type(state) == "table" and list(state.steps) or {}) do
    local action = s.action or ""
    local path = action:match("^read (%S+)$") or action:match("^write (%S+)$") or action:match("^edit (%S+)$")
    if str(s.message) then
      table.insert(items, { text = "  agent: " .. oneline(vim.trim(s.message)), valid = 0, user_data = { rein = "message", step = s.n } })
    end
    local item = {
      text = ("step %d [%s] %s: %s%s%s"):format(
        s.n or 0,
        str(s.author) or "?",
        str(s.status) or "?",
        action,
        str(s.checkpoint) and ("  @" .. s.checkpoint:sub(1, 8)) or "",
        str(s.detail) and (" → " .. oneline(vim.trim(s.detail))) or ""
      ),
      type = step_type[s.status] or "I",
      nr = s.n,
      user_data = { rein = "step", step = s },
    }
    -- A refused write names a path that must not be opened (`.GIT/config`): only a step that
    -- did what it said points at its file.
    if path and s.status == "done" then
      item.filename = join(root, path)
      item.lnum = 1
    end
    table.insert(items, item)
  end
  return items
end

--- Quickfix items for the human's changes: one per hunk when the last reconcile has the
--- diff, else one per file.
function M.changes_items(state, root, reconcile)
  local items = {}
  local seen = {}
  local diffs = {}
  if type(reconcile) == "table" then
    for _, c in ipairs(list(reconcile.changes)) do
      diffs[c.path] = c
    end
  end
  local function add(c, at)
    local rc = not seen[c.path] and diffs[c.path] or nil
    local hunks = rc and hunk_lines(rc.diff) or {}
    if #hunks == 0 then
      hunks = { 1 }
    end
    for _, lnum in ipairs(hunks) do
      table.insert(items, {
        filename = join(root, c.path),
        lnum = lnum,
        text = ("%s +%d -%d%s%s"):format(
          c.kind or "?",
          c.added or 0,
          c.removed or 0,
          at and (" (step " .. at .. ")") or "",
          (rc and rc.unsaved) and " [unsaved]" or ""
        ),
        user_data = { rein = "change", change = c },
      })
    end
    seen[c.path] = true
  end
  for _, c in ipairs(type(state) == "table" and list(state.humanChanges) or {}) do
    add(c, str(c.atStep))
  end
  if type(reconcile) == "table" then
    for _, c in ipairs(list(reconcile.changes)) do
      if not seen[c.path] then
        add(c, nil)
      end
    end
    -- Rein names a submodule whose files changed; it does not list them.
    for _, sub in ipairs(list(reconcile.submodules)) do
      if type(sub) == "string" then
        table.insert(items, {
          filename = join(root, sub),
          lnum = 1,
          text = "submodule: files inside changed",
          user_data = { rein = "submodule", path = sub },
        })
      end
    end
  end
  return items
end

local function set_qf(title, items, empty_msg)
  vim.fn.setqflist({}, " ", { title = title, items = items })
  if #items == 0 then
    rein().notify(empty_msg)
    return
  end
  vim.cmd("botright copen")
end

function M.quickfix_steps(state, root)
  set_qf("Rein steps", M.steps_items(state, root), "no steps yet")
end

function M.quickfix_changes(state, root, reconcile)
  set_qf("Rein changes", M.changes_items(state, root, reconcile), "no changes of yours recorded")
end

return M
