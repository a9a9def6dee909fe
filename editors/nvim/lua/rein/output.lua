--- Live command output: `rein/output` notifications (the plugin declares
--- `experimental.rein.output`) written to the `rein://output` scratch buffer as they come —
--- a header naming the step and command, "paused" / "resumed" when the command is frozen and
--- thawed, its exit at the end — kept to `config.output_lines` lines. The buffer is filled
--- whether or not it is shown; `:Rein output` shows it in a split that follows the end
--- without taking the cursor. A step's stored output tail (`output`) opens with
--- `:Rein output N`.
local M = {}

M.NAME = "rein://output"

--- client id .. ":" .. command id -> {client_id, id, step, command, terminal, state, exit,
--- tail (its last lines, for the transcript's live end)}.
M._cmds = {}
--- The key of the command whose text the buffer ends with.
M._last = nil
--- Whether the buffer holds no output yet (one empty line, or the placeholder line).
M._blank = true
--- Whether the buffer's last line is still open (its command printed no newline yet).
M._open = false

--- How many lines of a running command the transcript shows at its end.
M.tail_lines = 6

local function rein()
  return require("rein")
end

--- `text` as it would look on a terminal, line by line: escape sequences dropped, a carriage
--- return starting its line over (progress bars), CRLF as LF.
function M.clean(text)
  text = tostring(text or "")
  text = text:gsub("\27%][^\7\27]*\7", ""):gsub("\27%][^\7\27]*\27\\", "")
  text = text:gsub("\27%[[%d;?]*[ -/]*[@-~]", ""):gsub("\27[@-Z\\-_]", "")
  text = text:gsub("\r\n", "\n")
  return text
end

--- The buffer, made on first use (hidden, kept when no window shows it).
function M.buf()
  if M._buf and vim.api.nvim_buf_is_valid(M._buf) then
    return M._buf
  end
  local buf
  for _, b in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_get_name(b) == M.NAME then
      buf = b
    end
  end
  if not buf then
    buf = vim.api.nvim_create_buf(false, true)
    pcall(vim.api.nvim_buf_set_name, buf, M.NAME)
  end
  vim.bo[buf].buftype = "nofile"
  vim.bo[buf].bufhidden = "hide"
  vim.bo[buf].swapfile = false
  vim.bo[buf].undolevels = -1
  vim.bo[buf].filetype = "reinoutput"
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, {})
  vim.bo[buf].modifiable = false
  M._buf = buf
  M._open = false
  M._last = nil
  M._blank = true
  return buf
end

local ns = require("rein.view").ns

--- Appends `pieces` (lines) to the buffer: the first continues the open line when `cont`;
--- `hl` colours what it adds. Windows that were at the end follow it (one the user scrolled
--- up in to read stays where it is); the buffer keeps its last `config.output_lines` lines.
local function write(pieces, cont, hl)
  if #pieces == 0 then
    return
  end
  local buf = M.buf()
  local n = vim.api.nvim_buf_line_count(buf)
  local cur = vim.api.nvim_get_current_win()
  local follow = {}
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    if win ~= cur or vim.api.nvim_win_get_cursor(win)[1] >= n then
      table.insert(follow, win)
    end
  end
  for i, p in ipairs(pieces) do
    -- A carriage return starts its line over, as on a terminal (progress bars).
    pieces[i] = p:match("[^\r]*$")
  end
  vim.bo[buf].modifiable = true
  local first_row
  if M._blank then
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, pieces)
    first_row = 0
    M._blank = false
  elseif cont then
    local last = vim.api.nvim_buf_get_lines(buf, n - 1, n, false)[1] or ""
    local joined = vim.list_extend({ (last .. pieces[1]):match("[^\r]*$") }, pieces, 2)
    vim.api.nvim_buf_set_lines(buf, n - 1, n, false, joined)
    first_row = n - 1
  else
    vim.api.nvim_buf_set_lines(buf, n, n, false, pieces)
    first_row = n
  end
  local total = vim.api.nvim_buf_line_count(buf)
  if hl then
    for row = first_row, total - 1 do
      pcall(vim.api.nvim_buf_set_extmark, buf, ns, row, 0, { end_row = row + 1, hl_group = hl })
    end
  end
  local max = math.max(10, tonumber(rein().config.output_lines) or 2000)
  if total > max then
    vim.api.nvim_buf_set_lines(buf, 0, total - max, false, {})
    total = max
  end
  vim.bo[buf].modifiable = false
  for _, win in ipairs(follow) do
    pcall(vim.api.nvim_win_set_cursor, win, { total, 0 })
  end
end

--- A line of its own (a header or a marker), after the open line if any.
local function mark(text, hl)
  write({ text }, false, hl)
  M._open = false
end

--- Appends a chunk of output (cleaned): it continues the open line, and leaves one open
--- when it does not end with a newline.
local function append(text)
  local pieces = vim.split(text, "\n", { plain = true })
  local ends = text:sub(-1) == "\n"
  if ends then
    table.remove(pieces)
  end
  write(pieces, M._open, nil)
  M._open = not ends
end

local function describe(c)
  local s = ("step %s: %s"):format(tostring(c.step or "?"), c.command or "?")
  if type(c.terminal) == "string" then
    s = s .. " (terminal " .. c.terminal .. ")"
  end
  return s
end

--- How a command ended, in words.
function M.exit_text(exit)
  if type(exit) ~= "table" then
    return "ended"
  end
  if type(exit.code) == "number" then
    return "exit code " .. exit.code
  end
  if exit.signal ~= nil and exit.signal ~= vim.NIL then
    return "killed by signal " .. tostring(exit.signal)
  end
  return "ended"
end

--- Keeps the last `M.tail_lines` lines of a command's output for the transcript.
local function keep_tail(c, text)
  local lines = vim.split(text, "\n", { plain = true })
  if #c.tail > 0 and c.tail_open then
    c.tail[#c.tail] = (c.tail[#c.tail] .. table.remove(lines, 1)):match("[^\r]*$")
  end
  for _, l in ipairs(lines) do
    table.insert(c.tail, l:match("[^\r]*$"))
  end
  c.tail_open = text:sub(-1) ~= "\n"
  if not c.tail_open and c.tail[#c.tail] == "" then
    table.remove(c.tail)
  end
  while #c.tail > M.tail_lines do
    table.remove(c.tail, 1)
  end
end

--- Handles one `rein/output` notification from client `client_id`.
function M.on_output(client_id, p)
  if type(p) ~= "table" or p.id == nil then
    return
  end
  local key = client_id .. ":" .. tostring(p.id)
  local c = M._cmds[key]
  local text = type(p.chunk) == "string" and M.clean(p.chunk) or ""
  local function s(v)
    return v ~= vim.NIL and v or nil
  end
  if not c then
    c = { client_id = client_id, id = p.id, step = s(p.step), command = s(p.command), terminal = s(p.terminal), tail = {} }
    M._cmds[key] = c
    mark("▶ " .. describe(c), "ReinControl")
  elseif M._last ~= key and (text ~= "" or p.state ~= c.state) then
    -- Another command printed in between (an ACP terminal runs on beside the next step).
    mark("… " .. describe(c), "ReinControl")
  end
  M._last = key
  c.step = s(p.step) or c.step
  if (tonumber(p.skipped) or 0) > 0 then
    mark(("… %d bytes not shown"):format(p.skipped), "ReinMuted")
  end
  -- A resume is said before what the command printed since it; a pause after what it
  -- printed before it.
  if p.state ~= "paused" and c.state == "paused" then
    mark("── resumed", "ReinControl")
  end
  if text ~= "" then
    append(text)
    keep_tail(c, text)
  end
  if p.state == "paused" and c.state ~= "paused" then
    mark("── paused (the command is frozen; :Rein resume thaws it)", "ReinWarn")
  elseif p.state == "ended" then
    c.exit = s(p.exit)
    mark("■ " .. M.exit_text(c.exit), (type(c.exit) == "table" and c.exit.code == 0) and "ReinDone" or "ReinFailed")
  end
  c.state = p.state
  pcall(vim.api.nvim_exec_autocmds, "User", {
    pattern = "ReinOutput",
    modeline = false,
    data = { client_id = client_id, id = p.id, step = c.step, state = p.state },
  })
end

--- The commands of `client_id` still running or paused (oldest first), each
--- `{step, command, terminal, state, tail}`.
function M.running(client_id)
  local out = {}
  for _, c in pairs(M._cmds) do
    if c.client_id == client_id and c.state ~= "ended" then
      table.insert(out, c)
    end
  end
  table.sort(out, function(a, b)
    return tostring(a.id) < tostring(b.id)
  end)
  return out
end

--- Forgets the commands of a client (its server exited: none of them runs on).
function M.forget(client_id)
  for key, c in pairs(M._cmds) do
    if c.client_id == client_id then
      M._cmds[key] = nil
    end
  end
end

--- The window showing the live output, or nil.
function M.win()
  if not (M._buf and vim.api.nvim_buf_is_valid(M._buf)) then
    return nil
  end
  return vim.fn.win_findbuf(M._buf)[1]
end

--- `:Rein output`: shows the live output in a split at the bottom that follows the end,
--- leaving the cursor where it is; again closes it.
function M.toggle()
  local win = M.win()
  if win then
    vim.api.nvim_win_close(win, true)
    return
  end
  local buf = M.buf()
  if M._blank then
    vim.bo[buf].modifiable = true
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, { "(no command output yet: it shows here while the agent runs one)" })
    vim.bo[buf].modifiable = false
  end
  local prev = vim.api.nvim_get_current_win()
  vim.cmd("botright 12split")
  win = vim.api.nvim_get_current_win()
  vim.api.nvim_win_set_buf(win, buf)
  vim.wo[win].number = false
  vim.wo[win].relativenumber = false
  vim.wo[win].winfixheight = true
  vim.api.nvim_win_set_cursor(win, { vim.api.nvim_buf_line_count(buf), 0 })
  vim.keymap.set("n", "q", function()
    pcall(vim.api.nvim_win_close, 0, false)
  end, { buffer = buf, nowait = true, desc = "close" })
  if vim.api.nvim_win_is_valid(prev) then
    vim.api.nvim_set_current_win(prev)
  end
  return win
end

--- `:Rein output N`: step N's stored output (the end of it, as the state keeps it) with its
--- exit, in a report window.
function M.show_step(state, n)
  local step
  for _, s in ipairs(type(state) == "table" and type(state.steps) == "table" and state.steps or {}) do
    if s.n == n then
      step = s
    end
  end
  if not step or type(step.output) ~= "string" then
    rein().notify(("step %s has no command output"):format(tostring(n)), vim.log.levels.WARN)
    return
  end
  local v = require("rein.view").new()
  v:add(("# step %d: %s (%s)"):format(n, step.action or "?", step.status or "?"), "ReinTitle")
  if type(step.detail) == "string" then
    v:add_block(step.detail, "→ ", "  ", "ReinMuted")
  end
  v:add("")
  for _, l in ipairs(vim.split((M.clean(step.output):gsub("\n$", "")), "\n", { plain = true })) do
    v:add(l:match("[^\r]*$"))
  end
  return require("rein.ui").show("output", v, {
    name = ("rein://output/step:%d"):format(n),
    ft = "reinoutput",
    how = rein().config.report == false and "split" or rein().config.report,
    title = ("Rein step %d output"):format(n),
    focus = true,
  })
end

return M
