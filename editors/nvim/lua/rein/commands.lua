--- `:Rein` subcommands, their completion, and the client-side handlers for `rein.*` commands
--- that server code actions carry.
local M = {}

local function rein()
  return require("rein")
end

local function ui()
  return require("rein.ui")
end

local function trim(s)
  return (s or ""):gsub("^%s+", ""):gsub("%s+$", "")
end

local function input(prompt, default, cb)
  vim.ui.input({ prompt = prompt, default = default }, function(text)
    vim.schedule(function()
      cb(text)
    end)
  end)
end

local function select(items, opts, cb)
  vim.ui.select(items, opts, function(choice, idx)
    vim.schedule(function()
      cb(choice, idx)
    end)
  end)
end

--- The latest state as a table, or nil.
local function current_state()
  local s = rein().state(0)
  if type(s) == "table" then
    return s
  end
  return nil
end

local function client_root()
  local c = rein().get_client(0)
  return c and c.config.root_dir or rein().root_of(vim.uv.cwd())
end

--- Shows a handover / reconcile report.
local function show_report(kind, result)
  if type(result) == "table" and type(result.markdown) == "string" then
    ui().report(kind, result.markdown)
  end
end

--- The LSP range of lines l1..l2 (1-based, inclusive) of `bufnr`, in the client's encoding.
local function line_range(bufnr, l1, l2, client)
  local last = vim.api.nvim_buf_get_lines(bufnr, l2 - 1, l2, false)[1] or ""
  local enc = client and client.offset_encoding or "utf-16"
  local params = vim.lsp.util.make_given_range_params({ l1, 0 }, { l2, #last }, bufnr, enc)
  return params.range
end

-- Subcommands ------------------------------------------------------------------------

local sub = {}

sub.start = {
  desc = "start a task with a goal",
  run = function(args)
    local function go(goal)
      goal = trim(goal)
      if goal == "" then
        return
      end
      rein().exec("start", { goal = goal }, function(result)
        rein().notify(("task %s started"):format(result and result.taskId or "?"))
      end)
    end
    if args ~= "" then
      go(args)
    else
      input("Rein goal: ", nil, go)
    end
  end,
}

sub.pause = {
  desc = "pause the agent at once",
  run = function()
    rein().exec("pause", {})
  end,
}

sub.resume = {
  desc = "let a paused agent continue",
  run = function()
    rein().exec("resume", {})
  end,
}

--- Sends a steer: `:Rein steer [text]`, `:'<,'>Rein steer` anchors it to the lines,
--- `:Rein! steer` makes it urgent (cuts the in-flight step).
sub.steer = {
  desc = "send a correction to the agent",
  run = function(args, cmd)
    local bufnr = vim.api.nvim_get_current_buf()
    local extra = {}
    if cmd and cmd.range and cmd.range > 0 then
      local client = rein().get_client(bufnr)
      extra.uri = vim.uri_from_bufnr(bufnr)
      extra.range = line_range(bufnr, cmd.line1, cmd.line2, client)
    end
    if cmd and cmd.bang then
      extra.urgent = true
    end
    local function go(text)
      text = trim(text)
      if text == "" then
        return
      end
      rein().exec("steer", vim.tbl_extend("force", extra, { text = text }), function(result)
        rein().notify(("steer %s queued"):format(result and result.constraintId or ""))
      end)
    end
    if args ~= "" then
      go(args)
    else
      input(extra.range and "Rein steer (about these lines): " or "Rein steer: ", nil, go)
    end
  end,
}

local abort_choices = {
  { key = "discard", label = "discard the agent's changes (yours are kept)" },
  { key = "keep", label = "keep every change in the tree" },
}

sub.abort = {
  desc = "stop the task (keep or discard the agent's changes)",
  complete = function()
    return { "keep", "discard" }
  end,
  run = function(args)
    local function go(key)
      if key ~= "keep" and key ~= "discard" then
        return
      end
      rein().exec("abort", { keepChanges = key == "keep" })
    end
    if args ~= "" then
      if args ~= "keep" and args ~= "discard" then
        rein().notify("abort takes keep or discard", vim.log.levels.ERROR)
        return
      end
      go(args)
    else
      select(abort_choices, {
        prompt = "Abort the task:",
        format_item = function(c)
          return c.label
        end,
      }, function(c)
        go(c and c.key)
      end)
    end
  end,
}

sub.takeover = {
  desc = "take control from the agent (opens the handover)",
  run = function(args)
    local function go(reason)
      if reason == nil then
        return
      end
      reason = trim(reason)
      rein().exec("takeover", reason ~= "" and { reason = reason } or {}, function(result)
        show_report("handover", result)
      end)
    end
    if args ~= "" then
      go(args)
    else
      input("Why are you taking over? (optional) ", nil, go)
    end
  end,
}

sub.handback = {
  desc = "give control back to the agent (opens the reconcile report)",
  run = function(args)
    local function go(note)
      if note == nil then
        return
      end
      note = trim(note)
      rein().exec("handback", note ~= "" and { note = note } or {}, function(result, client)
        if type(result) == "table" and type(result.reconcile) == "table" then
          rein()._reconciles[client.id] = result.reconcile
        end
        show_report("reconcile", result)
      end)
    end
    if args ~= "" then
      go(args)
    else
      input("Note for the agent (optional): ", nil, go)
    end
  end,
}

sub.state = {
  desc = "show the task state in a floating window",
  run = function()
    rein().exec("state", {}, function(result)
      ui().state_float(result and result.state)
    end)
  end,
}

--- Checkpoints that can be rewound to, newest first.
function M.checkpoints(state)
  local out = {}
  if type(state) ~= "table" or type(state.steps) ~= "table" then
    return out
  end
  for i = #state.steps, 1, -1 do
    local st = state.steps[i]
    if type(st.checkpoint) == "string" and st.checkpoint ~= "" then
      table.insert(out, st)
    end
  end
  return out
end

sub.rewind = {
  desc = "restore the tree to a checkpoint",
  complete = function()
    local out = {}
    for _, st in ipairs(M.checkpoints(current_state())) do
      table.insert(out, "step:" .. st.n)
    end
    for _, st in ipairs(M.checkpoints(current_state())) do
      table.insert(out, st.checkpoint:sub(1, 8))
    end
    return out
  end,
  run = function(args)
    if args ~= "" then
      rein().exec("rewind", { checkpoint = args })
      return
    end
    local cps = M.checkpoints(current_state())
    if #cps == 0 then
      rein().notify("no checkpoint to rewind to", vim.log.levels.WARN)
      return
    end
    select(cps, {
      prompt = "Rewind to:",
      format_item = function(st)
        return ("step %d  %s  %s  (%s)"):format(st.n, st.author, st.action, st.checkpoint:sub(1, 8))
      end,
    }, function(st)
      if st then
        rein().exec("rewind", { checkpoint = "step:" .. st.n })
      end
    end)
  end,
}

local function decisions()
  local s = current_state()
  return s and type(s.decisions) == "table" and s.decisions or {}
end

local function find_decision(id)
  for _, d in ipairs(decisions()) do
    if d.id == id then
      return d
    end
  end
end

local function answer(d, choice)
  rein().exec("decide", { decisionId = d.id, choice = choice })
end

local function ask_choice(d)
  local options = type(d.options) == "table" and d.options or {}
  if #options == 0 then
    input(d.question .. " ", nil, function(text)
      text = trim(text)
      if text ~= "" then
        answer(d, text)
      end
    end)
    return
  end
  local items = vim.list_extend({}, options)
  if d.kind == "question" then
    table.insert(items, "…answer in your own words")
  end
  select(items, { prompt = d.question }, function(choice, idx)
    if not choice then
      return
    end
    if d.kind == "question" and idx == #items then
      input(d.question .. " ", nil, function(text)
        text = trim(text)
        if text ~= "" then
          answer(d, text)
        end
      end)
    else
      answer(d, choice)
    end
  end)
end

sub.decide = {
  desc = "answer an open decision",
  complete = function(words)
    -- words: the arguments typed before the one being completed
    if #words == 0 then
      return vim.tbl_map(function(d)
        return d.id
      end, decisions())
    end
    local d = find_decision(words[1])
    return d and d.options or {}
  end,
  run = function(args)
    local id, choice = args:match("^(%S+)%s*(.*)$")
    if id then
      local d = find_decision(id)
      if not d then
        -- Let the server say what is wrong (it knows decisions we may not).
        if choice == "" then
          rein().notify("no open decision " .. id, vim.log.levels.ERROR)
          return
        end
        rein().exec("decide", { decisionId = id, choice = choice })
        return
      end
      if choice ~= "" then
        answer(d, choice)
      else
        ask_choice(d)
      end
      return
    end
    local ds = decisions()
    if #ds == 0 then
      rein().notify("no open decision", vim.log.levels.WARN)
    elseif #ds == 1 then
      ask_choice(ds[1])
    else
      select(ds, {
        prompt = "Which decision?",
        format_item = function(d)
          return d.id .. ": " .. d.question
        end,
      }, function(d)
        if d then
          ask_choice(d)
        end
      end)
    end
  end,
}

sub.release = {
  desc = "hand a human-held file back to the agent",
  complete = function()
    local s = current_state()
    return s and type(s.heldFiles) == "table" and s.heldFiles or {}
  end,
  run = function(args)
    local uri
    if args ~= "" then
      local path = args
      if not path:match("^/") then
        path = (client_root() or vim.uv.cwd()) .. "/" .. path
      end
      uri = vim.uri_from_fname(vim.fs.normalize(path))
    else
      uri = vim.uri_from_bufnr(0)
    end
    rein().exec("release", { uri = uri })
  end,
}

sub.steps = {
  desc = "put the task's steps in the quickfix list",
  run = function()
    rein().exec("state", {}, function(result)
      ui().quickfix_steps(result and result.state, client_root())
    end)
  end,
}

sub.changes = {
  desc = "put the human's changes in the quickfix list",
  run = function()
    rein().exec("state", {}, function(result, client)
      ui().quickfix_changes(result and result.state, client_root(), rein()._reconciles[client.id])
    end)
  end,
}

M.subcommands = sub

function M.names()
  local names = vim.tbl_keys(sub)
  table.sort(names)
  return names
end

--- Completion for `:Rein`.
function M.complete(arglead, cmdline, _)
  local before = cmdline:sub(1, #cmdline - #arglead)
  local words = vim.split(before, "%s+", { trimempty = true })
  -- words[1] is "Rein" (or "Rein!"), possibly after a range.
  table.remove(words, 1)
  local candidates
  if #words == 0 then
    candidates = M.names()
  else
    local s = sub[words[1]]
    if not s or not s.complete then
      return {}
    end
    candidates = s.complete(vim.list_slice(words, 2))
  end
  return vim.tbl_filter(function(c)
    return vim.startswith(c, arglead)
  end, candidates)
end

--- Runs `:Rein {args}` (`cmd` is the nvim_create_user_command table).
function M.run(cmd)
  local name, rest = (cmd.args or ""):match("^%s*(%S*)%s*(.-)%s*$")
  if not rein()._setup_done then
    rein().setup({})
  end
  if name == "" then
    sub.state.run("", cmd)
    return
  end
  local s = sub[name]
  if not s then
    rein().notify(
      ("unknown subcommand %q; one of: %s"):format(name, table.concat(M.names(), ", ")),
      vim.log.levels.ERROR
    )
    return
  end
  s.run(rest, cmd)
end

-- Client-side command handlers -----------------------------------------------------------

--- Handlers for `rein.*` commands carried by server code actions (and `Client:exec_cmd`):
--- they ask for what is missing (the steer text), then send the command and show its result
--- the same way `:Rein` does.
function M.client_commands()
  local function send(name, show)
    return function(command, ctx)
      local args = (command.arguments or {})[1]
      if type(args) ~= "table" then
        args = {}
      end
      local client = vim.lsp.get_client_by_id(ctx.client_id)
      if not client then
        return
      end
      rein()._client_call(client, "request", "workspace/executeCommand", {
        command = name,
        arguments = { next(args) == nil and vim.empty_dict() or args },
      }, function(err, result)
        if err then
          rein().notify(err.message or vim.inspect(err), vim.log.levels.ERROR)
          return
        end
        if type(result) == "table" and result.state ~= nil then
          rein()._set_state(client.id, result.state)
        end
        if name == "rein.handback" and type(result) == "table" and result.reconcile then
          rein()._reconciles[client.id] = result.reconcile
        end
        if show then
          show_report(show, result)
        end
      end, ctx.bufnr)
    end
  end

  local steer_send = send("rein.steer")
  local function steer(command, ctx)
    local args = (command.arguments or {})[1]
    if type(args) ~= "table" then
      args = {}
    end
    if type(args.text) == "string" and trim(args.text) ~= "" then
      return steer_send(command, ctx)
    end
    input("Rein steer (about this selection): ", nil, function(text)
      text = trim(text)
      if text == "" then
        return
      end
      local a = vim.tbl_extend("force", args, { text = text })
      steer_send({ command = "rein.steer", arguments = { a } }, ctx)
    end)
  end

  local cmds = {
    ["rein.steer"] = steer,
    ["rein.steerSelection"] = steer,
    ["rein.takeover"] = send("rein.takeover", "handover"),
    ["rein.handback"] = send("rein.handback", "reconcile"),
  }
  for _, name in ipairs({
    "rein.pause",
    "rein.resume",
    "rein.abort",
    "rein.decide",
    "rein.release",
    "rein.rewind",
    "rein.sendSteerComment",
    "rein.dismissSteerComment",
  }) do
    cmds[name] = send(name)
  end
  return cmds
end

return M
