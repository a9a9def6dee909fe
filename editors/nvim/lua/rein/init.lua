--- Rein for Neovim: a thin client over `rein lsp`.
---
--- All task logic lives in the server. This module starts the client (one per git root),
--- keeps the latest task state pushed by `rein/stateChanged`, sends `rein.*` commands with
--- `workspace/executeCommand` and shows their results.
local M = {}

local uv = vim.uv

M.name = "rein"

---@class rein.Config
local defaults = {
  --- The server command. Default: `{ $REIN_BIN or "rein", "lsp" }`.
  cmd = nil,
  --- `initializationOptions` keys (see docs/protocol.md); nil ones are left out so that
  --- `workspace/configuration` and `rein.toml` apply.
  agent = nil,
  --- Named agents for `:Rein start` to choose from per task (name -> agent object, as `agent`).
  agents = nil,
  steer = nil,
  policy = nil,
  --- "workspace-write" (the server's default), "read-only" or "off": what the agent's
  --- commands and its own process may touch (Landlock). nil: rein.toml, else the default.
  sandbox = nil,
  killGraceMs = nil,
  --- Extra `initializationOptions`, merged over the keys above.
  init_options = nil,
  --- Answer for `workspace/configuration` (section `rein`).
  settings = nil,
  --- Attach every file buffer inside a git work tree (starting the server for its root).
  autostart = true,
  --- Where the handover / reconcile report opens: "split", "vsplit", "tab", "float" or false.
  report = "split",
  --- Put the cursor in the report window (otherwise it stays where it was).
  report_focus = false,
  --- Where `:Rein transcript` opens: "vsplit", "split" or "tab".
  transcript = "vsplit",
  --- How many lines of live command output `rein://output` keeps (the oldest go first).
  output_lines = 2000,
  --- vim.notify when a task ends or needs a decision.
  notify = true,
  --- Taking over a worktree task opens its worktree in a tab of its own (`:Rein open`).
  open_on_takeover = true,
  --- Deep-merged over the client capabilities Rein sends.
  capabilities = nil,
  --- Called as on_attach(client, bufnr).
  on_attach = nil,
  --- Statusline prefix.
  prefix = "Rein: ",
}

M.config = vim.deepcopy(defaults)
M._setup_done = false
--- client id -> latest state (table), or vim.NIL when the repository has no task.
M._states = {}
--- client id -> task id -> last reconcile object (from rein.handback) of that task.
M._reconciles = {}
--- client id -> why the user took over (asked after the takeover), told at handback.
M._takeover_reasons = {}
--- The server command that was found missing (so it is said once, not per buffer).
M._missing = nil
--- client id -> callbacks waiting for the client to be initialized.
M._pending = {}
--- client id -> the deltas that came while the whole state was being fetched.
M._fetching = {}

local function notify(msg, level)
  vim.notify("Rein: " .. msg, level or vim.log.levels.INFO, { title = "Rein" })
end
M.notify = notify

local function server_cmd()
  if M.config.cmd then
    return M.config.cmd
  end
  local bin = vim.env.REIN_BIN
  if not bin or bin == "" then
    bin = "rein"
  end
  return { bin, "lsp" }
end
M.server_cmd = server_cmd

--- The `initializationOptions` sent to the server.
function M.init_options()
  local o = {}
  for _, k in ipairs({ "agent", "steer", "policy", "sandbox", "killGraceMs" }) do
    if M.config[k] ~= nil then
      o[k] = M.config[k]
    end
  end
  o = vim.tbl_deep_extend("force", o, M.config.init_options or {})
  if next(o) == nil then
    return vim.empty_dict()
  end
  return o
end

--- The client capabilities.
function M.capabilities()
  local caps = vim.lsp.protocol.make_client_capabilities()
  caps.general = caps.general or {}
  caps.general.positionEncodings = { "utf-8", "utf-16" }
  caps.window = caps.window or {}
  caps.window.workDoneProgress = true
  caps.window.showMessage = caps.window.showMessage
    or { messageActionItem = { additionalPropertiesSupport = false } }
  caps.window.showDocument = caps.window.showDocument or { support = true }
  caps.workspace = caps.workspace or {}
  caps.workspace.configuration = true
  caps.workspace.workspaceFolders = true
  -- Neovim applies `documentChanges` and refuses one whose version is older than the buffer
  -- (vim.lsp.util.apply_text_document_edit) but does not say so: said here, Rein gives a
  -- buffer the file's text after writing the person's unsaved change into the file.
  caps.workspace.workspaceEdit = caps.workspace.workspaceEdit or {}
  caps.workspace.workspaceEdit.documentChanges = true
  -- The plugin runs rein.steerSelection itself (it asks for the text), so the server offers it;
  -- it shows live command output (rein/output) in rein://output; it applies state deltas.
  caps.experimental = vim.tbl_deep_extend(
    "force",
    caps.experimental or {},
    { rein = { steerSelection = true, output = true, stateDeltas = true } }
  )
  return vim.tbl_deep_extend("force", caps, M.config.capabilities or {})
end

--- The git work tree containing `source` (a buffer number or a path), or nil.
function M.root_of(source)
  local ok, root = pcall(vim.fs.root, source, ".git")
  if ok and root then
    return vim.fs.normalize(root)
  end
  return nil
end

local function is_file_buffer(bufnr)
  if not vim.api.nvim_buf_is_valid(bufnr) then
    return false
  end
  if vim.bo[bufnr].buftype ~= "" then
    return false
  end
  local name = vim.api.nvim_buf_get_name(bufnr)
  return name ~= "" and not name:match("^%a[%w+.-]*://")
end

-- State -------------------------------------------------------------------------------

local function is_newer(prev, new)
  if prev == nil or prev == vim.NIL or new == vim.NIL then
    return true
  end
  if type(prev.task) ~= "table" or type(new.task) ~= "table" or prev.task.id ~= new.task.id then
    return true
  end
  return (new.version or 0) >= (prev.version or 0)
end

--- Records a state for a client (if it is not older than the one we have) and refreshes
--- the statusline. Fires `User ReinStateChanged` with `data = {client_id, state}`.
function M._set_state(client_id, state)
  if state == nil then
    return
  end
  local prev = M._states[client_id]
  if not is_newer(prev, state) then
    return
  end
  M._states[client_id] = state
  vim.schedule(function()
    pcall(vim.cmd, "redrawstatus!")
    pcall(vim.api.nvim_exec_autocmds, "User", {
      pattern = "ReinStateChanged",
      modeline = false,
      data = { client_id = client_id, state = state },
    })
  end)
  if M.config.notify then
    local old = (prev ~= nil and prev ~= vim.NIL) and prev or {}
    local same_task = type(old.task) == "table" and type(state) == "table" and old.task.id == state.task.id
    if state ~= vim.NIL and (not same_task or old.status ~= state.status) then
      local s = state.status
      if s == "done" then
        notify("the agent finished" .. (type(state.summary) == "string" and (": " .. state.summary) or ""))
      elseif s == "failed" then
        notify("the run failed: " .. tostring(state.stopReason or "?"), vim.log.levels.ERROR)
      elseif s == "aborted" then
        notify(type(state.stopReason) == "string" and state.stopReason or "the task was aborted")
      elseif s == "awaiting_decision" then
        local d = type(state.decisions) == "table" and state.decisions[1] or nil
        if d then
          notify(("decision %s: %s  (:Rein decide)"):format(d.id, d.question), vim.log.levels.WARN)
        end
      end
    end
    if same_task then
      M._notify_steers(old, state)
    end
  end
end

--- Asks the server for the whole state (`rein.state`); `cb(err, result)`.
function M._request_state(client_id, cb)
  local client = vim.lsp.get_client_by_id(client_id)
  if not client then
    return cb({ message = "the client is gone" }, nil)
  end
  client:request("workspace/executeCommand", {
    command = "rein.state",
    arguments = { vim.empty_dict() },
  }, cb)
end

--- Fetches the whole state; the deltas that come meanwhile (and `delta`, the one that could
--- not be applied, if any) are applied to it once it is in.
function M._fetch_state(client_id, delta)
  if M._fetching[client_id] then
    table.insert(M._fetching[client_id], delta)
    return
  end
  M._fetching[client_id] = { delta }
  M._request_state(client_id, function(err, result)
    local waiting = M._fetching[client_id] or {}
    M._fetching[client_id] = nil
    if err or type(result) ~= "table" then
      return
    end
    M._set_state(client_id, result.state == nil and vim.NIL or result.state)
    for _, d in ipairs(waiting) do
      M._apply_delta(client_id, d, true)
    end
  end)
end

--- Applies a `rein/stateChanged` delta `{taskId, base, version, changed, cleared, steps}`
--- (docs/protocol.md, "State deltas") to the state held for the client when that is its
--- base; a delta from another base or task means something was missed, so the whole state
--- is fetched instead (unless `no_fetch`: then it is dropped). A delta no newer than the
--- state held is dropped: a command's reply can carry a newer state than the notifications.
---
--- The steps list is extended in place, so a step costs what it adds, not the task's length:
--- the previous state shares it, and only its top-level fields stay as they were.
function M._apply_delta(client_id, d, no_fetch)
  if type(d) ~= "table" then
    return
  end
  if M._fetching[client_id] then
    table.insert(M._fetching[client_id], d)
    return
  end
  local held = M._states[client_id]
  local same = type(held) == "table" and type(held.task) == "table" and held.task.id == d.taskId
  if same and (tonumber(d.version) or 0) <= (tonumber(held.version) or 0) then
    return
  end
  local steps = same and type(held.steps) == "table" and held.steps or {}
  local change = type(d.steps) == "table" and d.steps or {}
  local from = tonumber(change.from) or #steps
  if not same or held.version ~= d.base or from > #steps then
    if not no_fetch then
      M._fetch_state(client_id, d)
    end
    return
  end
  local new = {}
  for k, v in pairs(held) do
    new[k] = v
  end
  for k, v in pairs(type(d.changed) == "table" and d.changed or {}) do
    new[k] = v
  end
  for _, k in ipairs(type(d.cleared) == "table" and d.cleared or {}) do
    new[k] = nil
  end
  for i = #steps, from + 1, -1 do
    steps[i] = nil
  end
  vim.list_extend(steps, type(change.items) == "table" and change.items or {})
  new.steps = steps
  new.version = d.version
  M._set_state(client_id, new)
end

--- Says once for each `rein:` comment the server sent (on save): a new constraint whose
--- source is a comment (steers sent with `:Rein steer` are confirmed by the command itself);
--- and once for each steer the agent got.
function M._notify_steers(old, new)
  local known = {}
  for _, c in ipairs(type(old.constraints) == "table" and old.constraints or {}) do
    known[c.id] = c.status or "queued"
  end
  for _, c in ipairs(type(new.constraints) == "table" and new.constraints or {}) do
    -- "steer c1 queued" would stay on the command line after the agent got it: say it did.
    if known[c.id] == "queued" and c.status == "delivered" then
      local at = tonumber(c.deliveredAtStep)
      notify(("steer %s delivered%s"):format(tostring(c.id), at and (" at step " .. at) or ""))
    end
    if c.source == "comment" and not known[c.id] then
      local where = type(c.location) == "table"
          and (" (%s:%d)"):format(tostring(c.location.path), (tonumber(c.location.line) or 0) + 1)
        or ""
      notify(("steer %s sent from a comment%s: %s"):format(tostring(c.id), where, tostring(c.text)))
    end
  end
end

-- Clients -----------------------------------------------------------------------------

--- Every running Rein client.
function M.clients(filter)
  filter = vim.tbl_extend("force", { name = M.name }, filter or {})
  local out = {}
  for _, c in ipairs(vim.lsp.get_clients(filter)) do
    if not c:is_stopped() then
      table.insert(out, c)
    end
  end
  return out
end

local function contains(root, path)
  if not root or not path then
    return false
  end
  return path == root or path:sub(1, #root + 1) == root .. "/"
end

--- The Rein client for `bufnr` (default: current buffer): the one attached to it, else the
--- one whose root contains the buffer's file or the working directory.
function M.get_client(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local attached = M.clients({ bufnr = bufnr })
  if attached[1] then
    return attached[1]
  end
  local name = vim.api.nvim_buf_is_valid(bufnr) and vim.api.nvim_buf_get_name(bufnr) or ""
  local path = name ~= "" and vim.fs.normalize(name) or nil
  local cwd = vim.fs.normalize(uv.cwd())
  local best
  for _, c in ipairs(M.clients()) do
    local root = c.config.root_dir and vim.fs.normalize(c.config.root_dir)
    if contains(root, path) or contains(root, cwd) then
      if not best or #root > #vim.fs.normalize(best.config.root_dir) then
        best = c
      end
    end
  end
  return best
end

local function flush_pending(client)
  local queue = M._pending[client.id] or {}
  M._pending[client.id] = nil
  for _, cb in ipairs(queue) do
    local ok, err = pcall(cb, client)
    if not ok then
      notify(tostring(err), vim.log.levels.ERROR)
    end
  end
end

--- The client configuration for a root.
function M.client_config(root)
  local commands = require("rein.commands").client_commands()
  return {
    name = M.name,
    cmd = server_cmd(),
    root_dir = root,
    workspace_folders = { { uri = vim.uri_from_fname(root), name = root } },
    init_options = M.init_options(),
    settings = M.config.settings or { rein = vim.empty_dict() },
    capabilities = M.capabilities(),
    commands = commands,
    handlers = {
      ["rein/tasks"] = function(_, params, ctx)
        require("rein.tasks").on_tasks(ctx.client_id, params)
      end,
      ["rein/stateChanged"] = function(_, params, ctx)
        if type(params) ~= "table" then
          return
        end
        if params.base ~= nil then
          M._apply_delta(ctx.client_id, params)
        else
          -- `null` (no task) arrives as nil: Neovim decodes JSON null in objects to nil.
          M._set_state(ctx.client_id, params.state == nil and vim.NIL or params.state)
        end
      end,
      -- The server's messages in the plugin's own style ("Rein: …" through vim.notify), not
      -- Neovim's default "LSP[rein][Info] …" echo, which ends in a hit-enter prompt.
      ["window/showMessage"] = function(_, params)
        if type(params) == "table" and type(params.message) == "string" then
          local levels = vim.log.levels
          local level = ({ levels.ERROR, levels.WARN, levels.INFO, levels.DEBUG })[params.type] or levels.INFO
          vim.schedule(function()
            notify(params.message, level)
          end)
        end
        return vim.NIL
      end,
      -- Neovim runs notification handlers on the main loop (scheduled), so the buffer can be
      -- written here.
      ["rein/output"] = function(_, params, ctx)
        require("rein.output").on_output(ctx.client_id, params)
      end,
      ["rein/filesChanged"] = function(_, params)
        if type(params) == "table" and type(params.uris) == "table" then
          vim.schedule(function()
            M.reload(params.uris)
          end)
        end
      end,
    },
    on_init = function(client)
      M._states[client.id] = M._states[client.id] or vim.NIL
      M._fetch_state(client.id)
      require("rein.tasks").fetch(client)
      vim.schedule(function()
        flush_pending(client)
      end)
    end,
    on_exit = function(code, _, client_id)
      vim.schedule(function()
        M._states[client_id] = nil
        M._pending[client_id] = nil
        M._fetching[client_id] = nil
        require("rein.output").forget(client_id)
        require("rein.tasks").forget(client_id)
        pcall(vim.cmd, "redrawstatus!")
        if code ~= 0 then
          notify(("the server exited with code %d (see :LspLog)"):format(code), vim.log.levels.WARN)
        end
      end)
    end,
    on_attach = function(client, bufnr)
      if M.config.on_attach then
        M.config.on_attach(client, bufnr)
      end
    end,
  }
end

--- Why the server command cannot be run (not found, not executable), with the fix; nil
--- when it can (or when `cmd` is a function, which Neovim runs as given).
function M.missing_server()
  local cmd = server_cmd()
  if type(cmd) ~= "table" or type(cmd[1]) ~= "string" then
    return nil
  end
  if vim.fn.executable(cmd[1]) == 1 then
    return nil
  end
  return ("the server %q was not found or is not executable. Build it (`cargo install --path server` "
    .. "in the Rein repository puts `rein` on your PATH), or point the plugin at it: "
    .. "require(\"rein\").setup({ cmd = { \"/path/to/rein\", \"lsp\" } }) or $REIN_BIN. "
    .. "See :checkhealth rein"):format(cmd[1])
end

--- The missing-server message in one line that fits the command line (`room` columns after
--- "Rein: "), so saying it at start-up never brings a hit-enter prompt; it names
--- :checkhealth rein, which says how to install the server. `why` itself when it fits.
function M.missing_server_line(why, room)
  if #why <= room then
    return why
  end
  local cmd = server_cmd()
  local bin = type(cmd) == "table" and tostring(cmd[1]) or "rein"
  for _, line in ipairs({
    ("server %q not found: :checkhealth rein says how to install it"):format(bin),
    ("%q not found: :checkhealth rein says how to install it"):format(vim.fn.fnamemodify(bin, ":t")),
  }) do
    if #line <= room then
      return line
    end
  end
  return "server not found: see :checkhealth rein"
end

--- Whether the server can be started. A missing binary is said once (`quiet` callers, like
--- the autocommand attaching every buffer, say nothing after that), in one line that fits the
--- screen; a :Rein command (not quiet) says it whole, with the fix. Neovim is never asked to
--- spawn it, so its own "Spawning language server … failed" never appears.
local function can_start(quiet)
  local why = M.missing_server()
  if not why then
    M._missing = nil
    return true
  end
  if M._missing ~= why or not quiet then
    M._missing = why
    vim.schedule(function()
      notify(quiet and M.missing_server_line(why, vim.v.echospace - #"Rein: ") or why, vim.log.levels.ERROR)
    end)
  end
  return false
end

--- Whether a :Rein command can reach a server: one runs for this buffer, or the binary is
--- there to start (else says why, with the fix). Checked before a prompt, so nothing typed
--- into it is lost to a missing server.
function M.reachable()
  return M.get_client(0) ~= nil or can_start(false)
end

--- Starts (or reuses) the client for `root`; attaches `bufnr` when given. `quiet`: a missing
--- server binary already said is not said again. Returns the client id or nil.
function M.start(root, bufnr, quiet)
  for _, c in ipairs(M.clients()) do
    if c.config.root_dir and vim.fs.normalize(c.config.root_dir) == root then
      if bufnr then
        vim.lsp.buf_attach_client(bufnr, c.id)
      end
      return c.id
    end
  end
  if not can_start(quiet) then
    return nil
  end
  local config = M.client_config(root)
  if bufnr then
    return vim.lsp.start(config, { bufnr = bufnr })
  end
  return vim.lsp.start(config, { attach = false })
end

--- Attaches a file buffer inside a git work tree to Rein (`quiet` as for `M.start`).
function M.attach(bufnr, quiet)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  if not is_file_buffer(bufnr) then
    return nil
  end
  local root = M.root_of(bufnr)
  if not root then
    return nil
  end
  return M.start(root, bufnr, quiet)
end

--- Runs `cb(client)` once the client for the current buffer (started if needed) is ready.
function M.with_client(cb)
  local client = M.get_client(0)
  if not client then
    -- Asked for by the user: a missing server is said (again) here.
    if not can_start(false) then
      return
    end
    local id = M.attach(0)
    if not id then
      local root = M.root_of(uv.cwd())
      if not root then
        notify("not inside a git work tree (Rein needs one)", vim.log.levels.ERROR)
        return
      end
      id = M.start(root)
    end
    client = id and vim.lsp.get_client_by_id(id)
    if not client then
      notify("could not start the server " .. table.concat(server_cmd(), " "), vim.log.levels.ERROR)
      return
    end
  end
  if client.initialized then
    cb(client)
  else
    M._pending[client.id] = M._pending[client.id] or {}
    table.insert(M._pending[client.id], cb)
  end
end

--- Sends `rein.<name>` with one argument object. `on_result(result, client)` runs on success;
--- errors are shown with vim.notify (and passed to `on_error(err)` when given).
function M.exec(command, args, on_result, on_error)
  if not command:match("^rein%.") then
    command = "rein." .. command
  end
  if args == nil or (type(args) == "table" and next(args) == nil) then
    args = vim.empty_dict()
  end
  M.with_client(function(client)
    client:request("workspace/executeCommand", {
      command = command,
      arguments = { args },
    }, function(err, result)
      if err then
        notify(err.message or vim.inspect(err), vim.log.levels.ERROR)
        if on_error then
          on_error(err)
        end
        return
      end
      if type(result) == "table" and M._is_here(client.id, args, result.state) then
        if result.state ~= nil then
          M._set_state(client.id, result.state)
        elseif command == "rein.state" then
          M._set_state(client.id, vim.NIL)
        end
      end
      if on_result then
        on_result(result, client)
      end
    end, vim.api.nvim_get_current_buf())
  end)
end

--- Whether a command's reply (`state`, sent with `args`) is about the task here, the one the
--- statusline and the views hold: a worktree task's state is never mixed into it (it is
--- summed up in `rein/tasks`; `rein.state {taskId}` fetches it whole).
function M._is_here(client_id, args, state)
  local tasks = require("rein.tasks")
  local id = type(state) == "table" and type(state.task) == "table" and state.task.id or nil
  if id and tasks.is_worktree(client_id, id) then
    return false
  end
  local named = type(args) == "table" and args.taskId or nil
  if named == nil then
    return true
  end
  local held = M._states[client_id]
  return tasks.is_here(client_id, named)
    or (type(held) == "table" and type(held.task) == "table" and held.task.id == named)
end

--- The buffer's text as the file would hold it if written (its lines, its line ending, a
--- final one when 'eol' is set): the same text Neovim sends the server.
local function buffer_text(bufnr)
  local nl = ({ dos = "\r\n", mac = "\r" })[vim.bo[bufnr].fileformat] or "\n"
  local text = table.concat(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false), nl)
  if vim.bo[bufnr].eol then
    text = text .. nl
  end
  return text
end

--- The file's bytes, or nil when it cannot be read.
local function file_text(fname)
  local f = io.open(fname, "rb")
  if not f then
    return nil
  end
  local text = f:read("*a")
  f:close()
  return text
end

--- Reloads buffers of `uris` that are loaded and unmodified. A modified buffer is left alone,
--- unless its text is the file's already: Rein wrote the person's unsaved text into the file,
--- merged with the agent's, and gave the buffer the result (`workspace/applyEdit`). Reloading
--- that buffer loses nothing and marks it saved, so a later :w can neither warn that the file
--- changed nor write an older text over it.
function M.reload(uris)
  for _, uri in ipairs(uris) do
    local ok, fname = pcall(vim.uri_to_fname, uri)
    local bufnr = ok and vim.fn.bufnr(fname) or -1
    local loaded = bufnr > 0 and vim.api.nvim_buf_is_loaded(bufnr)
    if loaded and vim.bo[bufnr].modified then
      if buffer_text(bufnr) == file_text(fname) then
        -- :edit! reloads whatever Neovim noticed of the file before; one window shows it.
        vim.api.nvim_buf_call(bufnr, function()
          pcall(vim.cmd, "silent edit!")
        end)
      end
    elseif loaded then
      -- Reload without the "file changed" prompt, for this buffer only.
      local au = vim.api.nvim_create_autocmd("FileChangedShell", {
        buffer = bufnr,
        once = true,
        callback = function()
          if vim.v.fcs_reason ~= "deleted" then
            vim.v.fcs_choice = "reload"
          end
        end,
      })
      pcall(vim.cmd, "checktime " .. bufnr)
      pcall(vim.api.nvim_del_autocmd, au)
    end
  end
end

--- Keeps the reconcile of a hand-back for its task (`state` is the state it came with).
function M._remember_reconcile(client_id, state, reconcile)
  local task = type(state) == "table" and type(state.task) == "table" and state.task.id or nil
  if not task or type(reconcile) ~= "table" then
    return
  end
  M._reconciles[client_id] = M._reconciles[client_id] or {}
  M._reconciles[client_id][task] = reconcile
end

--- The last reconcile of the task `state` is about, or nil (another task's is never used).
function M.last_reconcile(client_id, state)
  local task = type(state) == "table" and type(state.task) == "table" and state.task.id or nil
  local by_task = M._reconciles[client_id]
  return task and by_task and by_task[task] or nil
end

-- Public state helpers -----------------------------------------------------------------

--- The latest task state for the current buffer's repository: a table, vim.NIL when the
--- repository has no task, or nil when Rein is not running there.
function M.state(bufnr)
  local client = M.get_client(bufnr)
  if not client then
    return nil
  end
  return M._states[client.id]
end

local decision_words = {
  approve_command = "needs approval",
  protected_lines = "needs approval",
  merge_conflict = "merge conflict",
  held_file = "file held",
  question = "question for you",
  sandbox_denied = "sandbox denied a command",
  agent_place = "agent needs a place to write",
  rerun_command = "run a stopped command again?",
}

--- Why a task is paused, short, for the statusline: "" for the user's own pause, else the
--- server's reason up to its first clause (" (interrupted: resume to continue)", after a
--- restart; " (stopped on an error)").
function M.pause_reason(reason)
  if type(reason) ~= "string" or reason == "" or vim.startswith(reason, "paused by the user") then
    return ""
  end
  if vim.startswith(reason, "interrupted") then
    return " (interrupted: :Rein resume continues)"
  end
  local head = reason:match("^([^:;.]+)") or reason
  return " (" .. vim.trim(head) .. ")"
end

--- One-line description of a state (without prefix).
function M.describe(state)
  if state == nil then
    return nil
  end
  if state == vim.NIL or type(state) ~= "table" then
    return "no task"
  end
  local steps = type(state.steps) == "table" and #state.steps or 0
  local last = steps > 0 and state.steps[steps].n or 0
  local s = state.status
  local function needs()
    local d = type(state.decisions) == "table" and state.decisions[1]
    if d then
      return " (" .. (decision_words[d.kind] or "needs decision") .. ")"
    end
    return ""
  end
  if s == "running" then
    local q = type(state.queuedStop) == "table" and state.queuedStop
    if q and type(q.intent) == "string" and type(q.behind) == "string" then
      -- Said at once: the stop lands when the approved command ends, never in its middle.
      local cmd = q.behind:match("^[^\n]*")
      if #cmd > 40 then
        cmd = cmd:sub(1, 40) .. "…"
      end
      return ("%s queued behind `%s`"):format(q.intent, cmd)
    end
    return ("agent running · step %d"):format(last + 1)
  elseif s == "paused" then
    local n = needs()
    if n == "" then
      n = M.pause_reason(state.stopReason)
    end
    return "paused" .. n
  elseif s == "awaiting_decision" then
    local n = needs()
    return "paused" .. (n ~= "" and n or " (needs decision)")
  elseif s == "human" then
    return "you hold control"
  elseif s == "done" then
    return ("done · %d step%s"):format(last, last == 1 and "" or "s")
  elseif s == "aborted" then
    return "aborted"
  elseif s == "failed" then
    return "failed"
  end
  return tostring(s)
end

--- Statusline component: "Rein: agent running · step 7", "Rein: you hold control", …
--- Empty when Rein is not running for the current buffer.
---
--- With worktree tasks it counts them too: "Rein: agent running · step 7 · 3 tasks: 2
--- running, 1 decision waiting" ("Rein: 3 tasks: …" when no task runs here).
function M.statusline(opts)
  local ok, text = pcall(function()
    local state = M.state(0)
    local d = M.describe(state)
    if not d then
      return ""
    end
    local prefix = (opts and opts.prefix) or M.config.prefix
    local client = M.get_client(0)
    local counts = client and require("rein.tasks").summary(require("rein.tasks")._lists[client.id])
    if counts then
      return prefix .. (type(state) == "table" and (d .. " · " .. counts) or counts)
    end
    return prefix .. d
  end)
  return ok and text or ""
end

-- Setup --------------------------------------------------------------------------------

--- Configures Rein and starts the client for file buffers in git work trees.
function M.setup(opts)
  M.config = vim.tbl_deep_extend("force", vim.deepcopy(defaults), opts or {})
  M._setup_done = true
  if not vim.g.loaded_rein then
    -- Put on 'runtimepath' after start-up (lazy.nvim's `config` for the subdirectory): the
    -- :Rein command and the <Plug> mappings were never loaded.
    vim.cmd.runtime("plugin/rein.lua")
  end
  local group = vim.api.nvim_create_augroup("rein", { clear = true })
  if M.config.autostart then
    vim.api.nvim_create_autocmd({ "BufReadPost", "BufNewFile", "BufEnter" }, {
      group = group,
      callback = function(ev)
        if #M.clients({ bufnr = ev.buf }) == 0 then
          M.attach(ev.buf, true)
        end
      end,
    })
    for _, b in ipairs(vim.api.nvim_list_bufs()) do
      if vim.api.nvim_buf_is_loaded(b) then
        M.attach(b, true)
      end
    end
  end
  vim.api.nvim_create_autocmd("LspProgress", {
    group = group,
    callback = function()
      pcall(vim.cmd, "redrawstatus")
    end,
  })
  return M
end

return M
