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

local ended = { done = true, aborted = true, failed = true }

--- Whether the state the user sees says `command` cannot apply, so no prompt should be opened
--- for it: the command is then sent bare and the server's refusal (its words, naming what to
--- do) is shown instead. The server still decides; this only spares typing into a prompt
--- whose answer would be thrown away.
local function refused_before_asking(command)
  local st = current_state()
  if not st then
    return false
  end
  if ended[st.status] then
    return true
  end
  if command == "handback" then
    return st.status ~= "human"
  end
  return false
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

--- The names of the agents in `config.agents`, sorted.
function M.agent_names()
  local agents = rein().config.agents
  local names = type(agents) == "table" and vim.tbl_keys(agents) or {}
  table.sort(names)
  return names
end

--- `:Rein start [agent=NAME] [goal]`: with `config.agents` set and no `agent=`, asks which
--- agent first (before the goal, so a goal is never typed for nothing).
sub.start = {
  desc = "start a task with a goal (agent=NAME picks one of config.agents)",
  complete = function(words)
    if #words > 0 then
      return {}
    end
    return vim.tbl_map(function(n)
      return "agent=" .. n
    end, M.agent_names())
  end,
  run = function(args)
    if not rein().reachable() then
      return
    end
    local agents = rein().config.agents
    local name, rest = args:match("^agent=(%S+)%s*(.-)$")
    if name then
      args = rest
    end
    local function with_goal(agent_name)
      local agent
      if agent_name then
        agent = type(agents) == "table" and agents[agent_name] or nil
        if agent == nil then
          rein().notify(
            ("no agent %q in setup({ agents = … }); known: %s"):format(agent_name, table.concat(M.agent_names(), ", ")),
            vim.log.levels.ERROR
          )
          return
        end
      end
      local function go(goal)
        goal = trim(goal)
        if goal == "" then
          return
        end
        rein().exec("start", { goal = goal, agent = agent }, function(result)
          rein().notify(
            ("task %s started%s"):format(result and result.taskId or "?", agent_name and (" with " .. agent_name) or "")
          )
        end)
      end
      if args ~= "" then
        go(args)
      else
        input(agent_name and ("Rein goal (" .. agent_name .. "): ") or "Rein goal: ", nil, go)
      end
    end
    local names = M.agent_names()
    if name or #names == 0 then
      with_goal(name)
    elseif #names == 1 then
      with_goal(names[1])
    else
      select(names, { prompt = "Which agent?" }, function(choice)
        if choice then
          with_goal(choice)
        end
      end)
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
    elseif refused_before_asking("steer") then
      rein().exec("steer", { text = "" })
    elseif rein().reachable() then
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

--- `:Rein takeover [reason]`. Without a reason, control is taken at once and the reason is
--- asked for afterwards (optional: Esc or an empty answer gives none); an answer is told to
--- the agent with the hand-back note. Nothing about the prompt can undo the takeover.
sub.takeover = {
  desc = "take control from the agent (opens the handover)",
  run = function(args)
    local reason = trim(args)
    rein().exec("takeover", reason ~= "" and { reason = reason } or {}, function(result, client)
      show_report("handover", result)
      if reason ~= "" then
        return
      end
      input("You hold control. Why? (optional, told to the agent at hand-back) ", nil, function(why)
        why = trim(why)
        if why ~= "" then
          rein()._takeover_reasons[client.id] = why
        end
      end)
    end)
  end,
}

--- The hand-back note: the reason given after a takeover, then the note.
local function handback_note(client, note)
  local why = rein()._takeover_reasons[client.id]
  rein()._takeover_reasons[client.id] = nil
  local parts = {}
  if why then
    table.insert(parts, "Why I took over: " .. why)
  end
  if note ~= "" then
    table.insert(parts, note)
  end
  return table.concat(parts, "\n")
end

sub.handback = {
  desc = "give control back to the agent (opens the reconcile report)",
  run = function(args)
    local function go(note)
      if note == nil then
        return
      end
      note = trim(note)
      rein().with_client(function(client)
        note = handback_note(client, note)
        rein().exec("handback", note ~= "" and { note = note } or {}, function(result)
          if type(result) == "table" then
            rein()._remember_reconcile(client.id, result.state, result.reconcile)
          end
          show_report("reconcile", result)
        end)
      end)
    end
    if args ~= "" then
      go(args)
    elseif refused_before_asking("handback") then
      rein().exec("handback", {})
    else
      input("Note for the agent (optional): ", nil, go)
    end
  end,
}

--- `:Rein state`: a float that follows the state live and leaves the cursor where it is;
--- run again to close it. `:Rein state split` shows the same in a split.
sub.state = {
  desc = "show the task state live (a float; `split` for a split); again to close",
  complete = function()
    return { "split" }
  end,
  run = function(args)
    if ui().state_close() then
      return
    end
    rein().exec("state", {}, function(result, client)
      ui().state_live(client.id, result and result.state, args == "split" and "split" or "float")
    end)
  end,
}

--- The steps that can be rewound to (each once, newest first): every step that ended on a
--- checkpoint (`step:N` names the one it ended on; several steps can share one).
function M.checkpoints(state)
  local out, seen = {}, {}
  if type(state) ~= "table" or type(state.steps) ~= "table" then
    return out
  end
  for i = #state.steps, 1, -1 do
    local st = state.steps[i]
    if type(st.checkpoint) == "string" and st.checkpoint ~= "" and not seen[st.n] then
      seen[st.n] = true
      table.insert(out, st)
    end
  end
  return out
end

sub.rewind = {
  desc = "restore the tree to a checkpoint",
  complete = function()
    local out, ids = {}, {}
    local cps = M.checkpoints(current_state())
    for _, st in ipairs(cps) do
      table.insert(out, "step:" .. st.n)
    end
    for _, st in ipairs(cps) do
      local id = st.checkpoint:sub(1, 8)
      if not ids[id] then
        ids[id] = true
        table.insert(out, id)
      end
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

sub.discard = {
  desc = "discard a change made while the agent ran that Rein cannot attribute",
  complete = function()
    local s = current_state()
    local out = {}
    for _, u in ipairs(s and type(s.unattributedChanges) == "table" and s.unattributedChanges or {}) do
      table.insert(out, u.path)
    end
    return out
  end,
  run = function(args)
    if args ~= "" then
      rein().exec("discardChange", { path = args })
      return
    end
    local s = current_state()
    local changes = s and type(s.unattributedChanges) == "table" and s.unattributedChanges or {}
    if #changes == 0 then
      vim.notify("Rein: no change made while the agent ran is waiting to be discarded", vim.log.levels.INFO)
      return
    end
    select(changes, {
      prompt = "Rein cannot tell who made these; discard which?",
      format_item = function(u)
        return ("%s (%s, step %s)"):format(u.path, u.kind or "?", tostring(u.atStep))
      end,
    }, function(u)
      if u then
        rein().exec("discardChange", { path = u.path })
      end
    end)
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
      local state = result and result.state
      ui().quickfix_changes(state, client_root(), rein().last_reconcile(client.id, state))
    end)
  end,
}

--- The steps of the current state that `pred` accepts, as completion words (newest first).
local function step_words(pred)
  local s = current_state()
  local out = {}
  for i = #(s and type(s.steps) == "table" and s.steps or {}), 1, -1 do
    local st = s.steps[i]
    if pred(st) then
      table.insert(out, tostring(st.n))
    end
  end
  return out
end

--- "4", "step:4" -> 4.
local function step_number(args)
  return tonumber(args:match("^step:(%d+)$") or args:match("^(%d+)$"))
end

--- `:Rein output` shows the live command output (again: hides it); `:Rein output N` the end
--- of step N's output as the state keeps it.
sub.output = {
  desc = "follow the running command's output (N: step N's output)",
  complete = function()
    return step_words(function(st)
      return type(st.output) == "string"
    end)
  end,
  run = function(args)
    if args == "" then
      require("rein.output").toggle()
      return
    end
    local n = step_number(args)
    if not n then
      rein().notify("output takes a step number", vim.log.levels.ERROR)
      return
    end
    rein().exec("state", {}, function(result)
      require("rein.output").show_step(result and result.state, n)
    end)
  end,
}

--- `:Rein transcript`: the task as a conversation, live.
sub.transcript = {
  desc = "the task as a conversation (live; <CR> on a step opens its diff)",
  run = function()
    rein().with_client(function(client)
      require("rein.transcript").open(client.id)
    end)
  end,
}

--- `:Rein diff [N]`: what step N changed (default: the latest step that changed files).
sub.diff = {
  desc = "what a step changed (default: the latest that changed files)",
  complete = function()
    return step_words(function(st)
      return type(st.checkpoint) == "string"
    end)
  end,
  run = function(args)
    rein().exec("state", {}, function(result, client)
      local state = result and result.state
      local n = step_number(args)
      if args ~= "" and not n then
        rein().notify("diff takes a step number", vim.log.levels.ERROR)
        return
      end
      if not n then
        local diff = require("rein.diff")
        local steps = type(state) == "table" and type(state.steps) == "table" and state.steps or {}
        for i = #steps, 1, -1 do
          local r = diff.step_range(steps, steps[i].n)
          if r and not r.same and steps[i].n > 0 then
            n = steps[i].n
            break
          end
        end
        if not n then
          rein().notify("no step changed files yet", vim.log.levels.WARN)
          return
        end
      end
      require("rein.diff").open(client.config.root_dir, state, n)
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
      if name == "rein.handback" then
        local note = handback_note(client, trim(type(args.note) == "string" and args.note or ""))
        args = vim.tbl_extend("force", args, { note = note ~= "" and note or nil })
      end
      client:request("workspace/executeCommand", {
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
        if name == "rein.handback" and type(result) == "table" then
          rein()._remember_reconcile(client.id, result.state, result.reconcile)
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
    "rein.discardChange",
    "rein.sendSteerComment",
    "rein.dismissSteerComment",
  }) do
    cmds[name] = send(name)
  end
  return cmds
end

return M
