--- Presentation: the state float, the handover / reconcile report, quickfix lists.
--- The builders (`state_lines`, `steps_items`, `changes_items`) are pure, for tests.
local M = {}

local function rein()
  return require("rein")
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

--- The state as Markdown lines.
function M.state_lines(state)
  if state == nil or state == vim.NIL or type(state) ~= "table" then
    return { "# Rein", "", "No task in this repository. Start one with `:Rein start`." }
  end
  local L = {}
  local function add(s)
    table.insert(L, oneline(s))
  end
  local task = type(state.task) == "table" and state.task or {}
  local control = type(state.control) == "table" and state.control or {}
  add("# Rein: " .. (str(task.goal) or "?"))
  add("")
  add("Status:  " .. (rein().describe(state) or "?"))
  add(("Holder:  %s%s%s"):format(
    str(control.holder) or "?",
    str(control.since) and (" since " .. M.time(control.since)) or "",
    str(control.reason) and (" — " .. control.reason) or ""
  ))
  if str(state.stopReason) then
    add("Stopped: " .. state.stopReason)
  end
  add(("Task:    %s, started %s, version %s"):format(
    str(task.id) or "?",
    str(task.started) and M.time(task.started) or "?",
    str(state.version) or "?"
  ))
  if str(state.summary) then
    add("Summary: " .. state.summary)
  end

  local plan = list(state.plan)
  if #plan > 0 then
    add("")
    add("## Plan")
    for _, p in ipairs(plan) do
      add(("- %s %s"):format(plan_marks[p.status] or "[ ]", p.text or ""))
    end
  end

  local steps = list(state.steps)
  add("")
  add(("## Steps (%d)"):format(#steps))
  if #steps == 0 then
    add("none yet")
  end
  for _, s in ipairs(steps) do
    add(("%3d. %-5s %-11s %s%s"):format(
      s.n or 0,
      str(s.author) or "?",
      str(s.status) or "?",
      s.action or "",
      str(s.checkpoint) and ("  @" .. s.checkpoint:sub(1, 8)) or ""
    ))
  end

  local constraints = list(state.constraints)
  if #constraints > 0 then
    add("")
    add("## Constraints")
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
    add("")
    add("## Decisions (answer with :Rein decide)")
    for _, d in ipairs(decisions) do
      add(("- %s (%s) %s"):format(d.id or "?", d.kind or "?", d.question or ""))
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
    add("")
    add("## Held files (yours; :Rein release)")
    for _, f in ipairs(held) do
      add("- " .. f)
    end
  end

  local changes = list(state.humanChanges)
  if #changes > 0 then
    add("")
    add("## Your changes")
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
  return L
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

local function scratch(name, lines, ft)
  local buf = named(name)
  if not buf then
    buf = vim.api.nvim_create_buf(false, true)
    pcall(vim.api.nvim_buf_set_name, buf, name)
  end
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].buftype = "nofile"
  vim.bo[buf].swapfile = false
  vim.bo[buf].filetype = ft or "markdown"
  return buf
end

--- Where a float of `lines` goes: centred, as wide as its longest line (within the screen).
local function float_geometry(lines)
  local width = 20
  for _, l in ipairs(lines) do
    width = math.max(width, vim.fn.strdisplaywidth(l))
  end
  width = math.min(width + 2, math.max(20, vim.o.columns - 6))
  local height = math.min(#lines, math.max(3, vim.o.lines - 6))
  return {
    relative = "editor",
    width = width,
    height = height,
    row = math.max(0, math.floor((vim.o.lines - height) / 2) - 1),
    col = math.max(0, math.floor((vim.o.columns - width) / 2)),
  }
end

--- Opens `lines` in a centred floating window (entered when `enter`); returns buf, win.
function M.float(name, lines, title, enter)
  local buf = scratch(name, lines)
  local cfg = vim.tbl_extend("force", float_geometry(lines), {
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
--- ("split") that is redrawn on every `rein/stateChanged` and does not take the cursor.
function M.state_live(client_id, state, how)
  M.state_close()
  local lines = M.state_lines(state)
  local buf, win
  if how == "split" then
    local prev = vim.api.nvim_get_current_win()
    buf = scratch("rein://state", lines)
    vim.cmd("botright " .. math.min(#lines, 15) .. "split")
    win = vim.api.nvim_get_current_win()
    vim.api.nvim_win_set_buf(win, buf)
    close_on_q(buf, win)
    if vim.api.nvim_win_is_valid(prev) then
      vim.api.nvim_set_current_win(prev)
    end
  else
    buf, win = M.float("rein://state", lines, "Rein (:Rein state closes)", false)
  end
  local group = vim.api.nvim_create_augroup("rein_state_live", { clear = true })
  M._live = { win = win, buf = buf, client_id = client_id, group = group }
  vim.api.nvim_create_autocmd("User", {
    group = group,
    pattern = "ReinStateChanged",
    callback = function(ev)
      local live = M._live
      if not live or not ev.data or ev.data.client_id ~= live.client_id then
        return
      end
      if not vim.api.nvim_win_is_valid(live.win) or not vim.api.nvim_buf_is_valid(live.buf) then
        M.state_close()
        return
      end
      local new = M.state_lines(ev.data.state)
      vim.bo[live.buf].modifiable = true
      vim.api.nvim_buf_set_lines(live.buf, 0, -1, false, new)
      vim.bo[live.buf].modifiable = false
      if vim.api.nvim_win_get_config(live.win).relative ~= "" then
        vim.api.nvim_win_set_config(live.win, float_geometry(new))
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

--- kind ("handover" / "reconcile") -> the window its report was last shown in.
M._report_wins = {}

--- Shows a handover / reconcile report (Markdown) where `config.report` says, reusing the
--- kind's window while it is open.
function M.report(kind, markdown)
  local how = rein().config.report
  if how == false then
    return
  end
  local lines = vim.split(markdown, "\n", { plain = true })
  local name = "rein://" .. kind
  local old = M._report_wins[kind]
  if how == "float" then
    if old and vim.api.nvim_win_is_valid(old) then
      vim.api.nvim_win_close(old, true)
    end
    -- A report float is entered (q closes it), as it covers the code.
    local buf, win = M.float(name, lines, kind == "handover" and "Rein handover" or "Rein reconcile")
    M._report_wins[kind] = win
    return buf, win
  end
  local prev = vim.api.nvim_get_current_win()
  local buf = scratch(name, lines)
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
  if not rein().config.report_focus and how ~= "tab" and vim.api.nvim_win_is_valid(prev) then
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

--- Quickfix items for the steps. A step that reads/writes/edits a file points at it.
function M.steps_items(state, root)
  local items = {}
  for _, s in ipairs(type(state) == "table" and list(state.steps) or {}) do
    local action = s.action or ""
    local path = action:match("^read (%S+)$") or action:match("^write (%S+)$") or action:match("^edit (%S+)$")
    local item = {
      text = ("step %d [%s] %s: %s%s"):format(
        s.n or 0,
        str(s.author) or "?",
        str(s.status) or "?",
        action,
        str(s.checkpoint) and ("  @" .. s.checkpoint:sub(1, 8)) or ""
      ),
      type = step_type[s.status] or "I",
      nr = s.n,
      user_data = { rein = "step", step = s },
    }
    if path then
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
