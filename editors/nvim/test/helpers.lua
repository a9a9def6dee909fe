-- Shared helpers for the specs: temp git repositories, prompt stubs, waiting on Rein state.
local T = require("runner")
local H = {}

H.bin = os.getenv("REIN_BIN")
if not H.bin or H.bin == "" then
  H.bin = vim.fs.normalize(vim.g.rein_plugin_dir .. "/../../target/debug/rein")
end

local tmp_root = os.getenv("REIN_NVIM_TMP")
if not tmp_root or tmp_root == "" then
  tmp_root = vim.fn.tempname()
end

local counter = 0

--- A fresh git repository with `files` (path -> content) committed, and `plan` (a Lua table)
--- as .rein/plan.json. Returns its absolute path.
function H.repo(files, plan)
  counter = counter + 1
  local root = ("%s/repo%d-%d"):format(tmp_root, vim.fn.getpid(), counter)
  vim.fn.mkdir(root, "p")
  root = vim.fs.normalize(vim.uv.fs_realpath(root))
  T.sh({ "git", "init", "-q", "-b", "main" }, root)
  T.sh({ "git", "config", "user.email", "test@example.com" }, root)
  T.sh({ "git", "config", "user.name", "Rein Test" }, root)
  for path, content in pairs(files or {}) do
    T.write_file(root .. "/" .. path, content)
  end
  if plan then
    T.write_file(root .. "/.rein/plan.json", vim.json.encode(plan))
  end
  T.sh({ "git", "add", "-A" }, root)
  T.sh({ "git", "commit", "-q", "-m", "initial" }, root)
  return root
end

--- Scripted answers for vim.ui.input / vim.ui.select. Each answer is a value or a function
--- receiving (opts, items) and returning the answer. Every prompt is recorded in H.prompts.
H.inputs, H.selects, H.prompts = {}, {}, {}

function H.stub_ui()
  vim.ui.input = function(opts, cb)
    table.insert(H.prompts, { kind = "input", prompt = opts and opts.prompt })
    local a = table.remove(H.inputs, 1)
    if type(a) == "function" then
      a = a(opts)
    end
    if a == nil then
      T.out("     (no scripted answer for input " .. tostring(opts and opts.prompt) .. ")")
    end
    cb(a)
  end
  vim.ui.select = function(items, opts, cb)
    table.insert(H.prompts, { kind = "select", prompt = opts and opts.prompt, items = items, opts = opts })
    local a = table.remove(H.selects, 1)
    if type(a) == "function" then
      a = a(items, opts)
    end
    if a == nil then
      cb(nil, nil)
      return
    end
    -- An answer is an index, or a string matched against the formatted items.
    if type(a) == "number" then
      cb(items[a], a)
      return
    end
    local fmt = opts and opts.format_item or tostring
    for i, item in ipairs(items) do
      local label = type(item) == "table" and item.title or fmt(item)
      if label == a or fmt(item) == a or (type(label) == "string" and label:find(a, 1, true)) then
        cb(item, i)
        return
      end
    end
    T.out("     (scripted select answer " .. vim.inspect(a) .. " matches none of " .. vim.inspect(vim.tbl_map(fmt, items)) .. ")")
    cb(nil, nil)
  end
end

--- Captured vim.notify messages.
H.messages = {}
function H.capture_notify()
  vim.notify = function(msg, level)
    table.insert(H.messages, { msg = msg, level = level })
    T.out(("     notify[%s] %s"):format(tostring(level), msg))
  end
end

function H.messages_text()
  return table.concat(vim.tbl_map(function(m)
    return m.msg
  end, H.messages), "\n")
end

function H.setup(extra)
  local rein = require("rein")
  rein.setup(vim.tbl_deep_extend("force", {
    cmd = { H.bin, "lsp" },
    agent = { kind = "script", plan = ".rein/plan.json" },
    steer = { onSave = true },
  }, extra or {}))
  vim.o.statusline = "%!v:lua.require'rein'.statusline()"
  vim.o.laststatus = 2
  return rein
end

function H.state()
  local s = require("rein").state(0)
  return type(s) == "table" and s or nil
end

--- The rendered statusline of the current window.
function H.statusline()
  return vim.api.nvim_eval_statusline(vim.o.statusline, { winid = vim.api.nvim_get_current_win() }).str
end

function H.client()
  return require("rein").get_client(0)
end

T.context = function()
  local s = H.state()
  local short = s
      and { status = s.status, holder = s.control and s.control.holder, steps = #(s.steps or {}), stopReason = s.stopReason, decisions = s.decisions, heldFiles = s.heldFiles }
    or require("rein").state(0)
  return "\n     state: " .. vim.inspect(short) .. "\n     statusline: " .. H.statusline()
end

function H.wait_client()
  return T.wait(function()
    local c = H.client()
    return c and c.initialized and require("rein")._states[c.id] ~= nil and c
  end, "the Rein client to initialize", 60000)
end

function H.wait_status(status, what)
  return T.wait(function()
    local s = H.state()
    return s and s.status == status and s
  end, what or ("status " .. status), 90000)
end

function H.wait_steps(n)
  return T.wait(function()
    local s = H.state()
    return s and #(s.steps or {}) >= n and s
  end, ("%d steps"):format(n), 90000)
end

--- Runs an Ex command as a user would type it.
function H.cmd(s)
  vim.cmd(s)
end

function H.buf_text(bufnr)
  return table.concat(vim.api.nvim_buf_get_lines(bufnr or 0, 0, -1, false), "\n") .. "\n"
end

--- The lines of the buffer named `name` (e.g. rein://handover), or nil.
function H.named_buf_text(name)
  local b = vim.fn.bufnr(name)
  if b <= 0 then
    return nil
  end
  return table.concat(vim.api.nvim_buf_get_lines(b, 0, -1, false), "\n")
end

function H.qf_text()
  local items = vim.fn.getqflist()
  local lines = {}
  for _, it in ipairs(items) do
    local name = it.bufnr > 0 and vim.fn.bufname(it.bufnr) or ""
    table.insert(lines, ("%s|%d| %s"):format(name, it.lnum, it.text))
  end
  return table.concat(lines, "\n")
end

--- `:checkhealth rein` output as text.
function H.checkhealth()
  vim.cmd("checkhealth rein")
  local text = H.buf_text(0)
  vim.cmd("bwipeout!")
  return text
end

return H
