--- `:Rein` subcommands, their completion, and the client-side handlers for `rein.*` commands
--- that server code actions carry.
local M = {}

local function rein()
  return require("rein")
end

local function ui()
  return require("rein.ui")
end

local function tasks()
  return require("rein.tasks")
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
--- The statuses in which a task's agent is at work (or about to be).
local running = { running = true, awaiting_decision = true, starting = true }

--- Whether the state the user sees says `command` cannot apply, so no prompt should be opened
--- for it: the command is then sent bare and the server's refusal (its words, naming what to
--- do) is shown instead. The server still decides; this only spares typing into a prompt
--- whose answer would be thrown away.
local function refused_before_asking(command, task)
  local st = task or current_state()
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

--- The arguments of a command to task `t` (a summary from rein.tasks, or nil: the task the
--- server picks, the one here or the only one): `args` with its `taskId`.
local function for_task(t, args)
  args = args or {}
  if t then
    args.taskId = t.taskId
  end
  return args
end

--- Asks for the whole state of task `t` (nil: the task here) and runs `cb(state, client)`.
local function task_state(t, cb)
  rein().exec("state", for_task(t, {}), function(result, client)
    cb(result and result.state, client)
  end)
end

--- The directory task `t`'s files are in: its worktree, else the repository's.
local function task_root(t)
  if t and type(t.worktree) == "string" then
    return vim.fs.normalize(t.worktree)
  end
  return client_root()
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

--- `:Rein start [--worktree [--carry]] [agent=NAME] [goal]`: with `config.agents` set and no
--- `agent=`, asks which agent first (before the goal, so a goal is never typed for nothing).
--- `--worktree` starts it in a worktree of its own (on a branch `rein/<task>`, from HEAD; with
--- `--carry`, your uncommitted changes too), beside any other task.
sub.start = {
  desc = "start a task with a goal (--worktree: in a worktree of its own; agent=NAME: one of config.agents)",
  complete = function(words)
    local out = {}
    for _, flag in ipairs({ "--worktree", "--carry" }) do
      if not vim.tbl_contains(words, flag) and (flag ~= "--carry" or vim.tbl_contains(words, "--worktree")) then
        table.insert(out, flag)
      end
    end
    for _, w in ipairs(words) do
      if not w:match("^%-%-") then
        return {}
      end
    end
    return vim.list_extend(out, vim.tbl_map(function(n)
      return "agent=" .. n
    end, M.agent_names()))
  end,
  run = function(args)
    if not rein().reachable() then
      return
    end
    local agents = rein().config.agents
    local worktree, carry = false, false
    while true do
      local flag, rest = args:match("^(%-%-%S+)%s*(.-)$")
      if flag == "--worktree" then
        worktree = true
      elseif flag == "--carry" then
        carry = true
      else
        break
      end
      args = rest
    end
    if carry and not worktree then
      rein().notify("--carry goes with --worktree (it carries your changes into the new worktree)", vim.log.levels.ERROR)
      return
    end
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
        local a = { goal = goal, agent = agent }
        if worktree then
          a.isolation = "worktree"
          a.carry = carry or nil
        end
        rein().exec("start", a, function(result, client)
          local id = result and result.taskId or "?"
          local with = agent_name and (" with " .. agent_name) or ""
          if not worktree then
            rein().notify(("task %s started%s"):format(id, with))
            return
          end
          -- Named as the list names it ("task 2"), with where it works.
          tasks().fetch(client, function(l)
            local t = tasks().find_in(l, id)
            rein().notify(("%s started%s in a worktree of its own%s (:Rein tasks)"):format(
              t and t.name or ("task " .. id),
              with,
              t and t.branch and (", on " .. t.branch) or ""
            ))
          end)
        end)
      end
      if args ~= "" then
        go(args)
      else
        local parts = {}
        table.insert(parts, agent_name)
        table.insert(parts, worktree and "in a worktree" or nil)
        local label = table.concat(parts, ", ")
        input(label ~= "" and ("Rein goal (" .. label .. "): ") or "Rein goal: ", nil, go)
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

--- Says what `rein.pause {all}` / `rein.resume {all}` did to each task.
local function said_all(verb, result, client)
  local l = tasks()._lists[client.id]
  local done, refused = {}, {}
  for _, r in ipairs(type(result) == "table" and type(result.tasks) == "table" and result.tasks or {}) do
    local t = tasks().find_in(l, r.taskId)
    local name = t and t.name or tostring(r.taskId)
    if type(r.refused) == "string" then
      table.insert(refused, name .. ": " .. r.refused)
    else
      table.insert(done, name)
    end
  end
  if #done == 0 and #refused == 0 then
    rein().notify("no task to " .. verb, vim.log.levels.WARN)
    return
  end
  if #done > 0 then
    rein().notify(("%s: %s"):format(verb == "pause" and "paused" or "resumed", table.concat(done, ", ")))
  end
  if #refused > 0 then
    rein().notify(("not %s: %s"):format(verb == "pause" and "paused" or "resumed", table.concat(refused, "; ")), vim.log.levels.WARN)
  end
end

--- `:Rein pause [task|all]`, `:Rein resume [task|all]`: the task named (`2`, `task=2`), every
--- task at once (`all`), or the task here (else the only one).
local function pause_or_resume(verb)
  return function(args, _, ref)
    if args == "all" then
      rein().exec(verb, { all = true }, function(result, client)
        said_all(verb, result, client)
      end)
      return
    end
    tasks().with_task(ref or (args ~= "" and args or nil), function(t)
      rein().exec(verb, for_task(t))
    end)
  end
end

sub.pause = {
  desc = "pause the agent at once (a task: 2 or task=2; all: every task)",
  task = true,
  complete = function()
    return { "all" }
  end,
  run = pause_or_resume("pause"),
}

sub.resume = {
  desc = "let a paused agent continue (a task: 2 or task=2; all: every task)",
  task = true,
  complete = function()
    return { "all" }
  end,
  run = pause_or_resume("resume"),
}

--- Sends a steer: `:Rein steer [text]`, `:'<,'>Rein steer` anchors it to the lines,
--- `:Rein! steer` makes it urgent (cuts the in-flight step).
sub.steer = {
  desc = "send a correction to the agent",
  task = true,
  run = function(args, cmd, ref)
    if ref then
      return tasks().with_task(ref, function(t)
        M.steer(args, cmd, t)
      end)
    end
    M.steer(args, cmd, nil)
  end,
}

--- Sends a steer to task `t` (nil: the task here); see `:Rein steer`.
function M.steer(args, cmd, t)
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
    rein().exec("steer", for_task(t, vim.tbl_extend("force", extra, { text = text })), function(result)
      rein().notify(("steer %s queued%s"):format(result and result.constraintId or "", t and (" for " .. t.name) or ""))
    end)
  end
  if args ~= "" then
    go(args)
  elseif refused_before_asking("steer", t) then
    rein().exec("steer", for_task(t, { text = "" }))
  elseif rein().reachable() then
    local what = t and (" " .. t.name) or ""
    input(extra.range and ("Rein steer%s (about these lines): "):format(what) or ("Rein steer%s: "):format(what), nil, go)
  end
end

local abort_choices = {
  { key = "discard", label = "discard the agent's changes (yours are kept)" },
  { key = "keep", label = "keep every change in the tree" },
}

sub.abort = {
  desc = "stop the task (keep or discard the agent's changes)",
  task = true,
  complete = function()
    return { "keep", "discard" }
  end,
  run = function(args, _, ref)
    if args ~= "" and args ~= "keep" and args ~= "discard" then
      rein().notify("abort takes keep or discard", vim.log.levels.ERROR)
      return
    end
    tasks().with_task(ref, function(t)
      M.abort(args, t)
    end)
  end,
}

--- Aborts task `t` (nil: the task here), asking whether to keep the agent's changes unless
--- `args` says. A task that has ended is said to have, with what to do, before any prompt (and
--- nothing is sent: a bare abort to a task the view has out of date would ask nothing).
function M.abort(args, t)
  local st = t or current_state()
  if st and ended[st.status] then
    rein().notify(
      ("%sthe task has ended (%s): there is nothing to abort; continue it with :Rein continue, or start a new one with :Rein start"):format(
        t and (t.name .. ": ") or "",
        st.status
      ),
      vim.log.levels.WARN
    )
    return
  end
  local function go(key)
    if key ~= "keep" and key ~= "discard" then
      return
    end
    rein().exec("abort", for_task(t, { keepChanges = key == "keep" }))
  end
  if args ~= "" then
    go(args)
  else
    select(abort_choices, {
      prompt = t and ("Abort %s:"):format(t.name) or "Abort the task:",
      format_item = function(c)
        return c.label
      end,
    }, function(c)
      go(c and c.key)
    end)
  end
end

--- `:Rein takeover [reason]`. Without a reason, control is taken at once and the reason is
--- asked for afterwards (optional: Esc or an empty answer gives none); an answer is told to
--- the agent with the hand-back note. Nothing about the prompt can undo the takeover.
--- A worktree task's takeover opens its worktree in a tab of its own (`:Rein open`), where
--- your edits are yours, unless `config.open_on_takeover` is false.
sub.takeover = {
  desc = "take control from the agent (opens the handover; a worktree task's worktree too)",
  task = true,
  run = function(args, _, ref)
    local reason = trim(args)
    tasks().with_task(ref, function(t)
      rein().exec("takeover", for_task(t, reason ~= "" and { reason = reason } or {}), function(result, client)
        show_report("handover", result)
        if t and t.isolation == "worktree" and rein().config.open_on_takeover ~= false then
          tasks().open_worktree(t, client)
        end
        if reason ~= "" then
          return
        end
        input("You hold control. Why? (optional, told to the agent at hand-back) ", nil, function(why)
          why = trim(why)
          if why ~= "" then
            rein()._takeover_reasons[M.reason_key(client, t)] = why
          end
        end)
      end)
    end)
  end,
}

--- Where the reason for a takeover of task `t` (nil: the task here) is kept until hand-back.
function M.reason_key(client, t)
  return t and (client.id .. "/" .. t.taskId) or client.id
end

--- The hand-back note: the reason given after a takeover, then the note.
local function handback_note(client, note, t)
  local key = M.reason_key(client, t)
  local why = rein()._takeover_reasons[key]
  rein()._takeover_reasons[key] = nil
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
  task = true,
  run = function(args, _, ref)
    tasks().with_task(ref, function(t)
      local function go(note)
        if note == nil then
          return
        end
        note = trim(note)
        rein().with_client(function(client)
          note = handback_note(client, note, t)
          rein().exec("handback", for_task(t, note ~= "" and { note = note } or {}), function(result)
            if type(result) == "table" then
              rein()._remember_reconcile(client.id, result.state, result.reconcile)
            end
            show_report("reconcile", result)
          end)
        end)
      end
      if args ~= "" then
        go(args)
      elseif refused_before_asking("handback", t) then
        rein().exec("handback", for_task(t))
      else
        input("Note for the agent (optional): ", nil, go)
      end
    end)
  end,
}

--- `:Rein state`: a float that follows the state live and leaves the cursor where it is;
--- run again to close it. `:Rein state split` shows the same in a split.
sub.state = {
  desc = "show the task state live (a float; `split` for a split); again to close",
  complete = function()
    return { "split" }
  end,
  task = true,
  run = function(args, _, ref)
    if ui().state_close() then
      return
    end
    tasks().with_task(ref, function(t)
      task_state(t, function(state, client)
        ui().state_live(client.id, state, args == "split" and "split" or "float", t and t.taskId)
      end)
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
  task = true,
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
  run = function(args, _, ref)
    tasks().with_task(ref, function(t)
      if args ~= "" then
        rein().exec("rewind", for_task(t, { checkpoint = args }))
        return
      end
      local function pick(state)
        local cps = M.checkpoints(state)
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
            rein().exec("rewind", for_task(t, { checkpoint = "step:" .. st.n }))
          end
        end)
      end
      if t then
        task_state(t, pick)
      else
        pick(current_state())
      end
    end)
  end,
}

--- The open decisions of `state` (default: the task here's).
local function decisions(state)
  local s = state or current_state()
  return s and type(s.decisions) == "table" and s.decisions or {}
end

local function find_decision(id, state)
  for _, d in ipairs(decisions(state)) do
    if d.id == id then
      return d
    end
  end
end

--- Answers decision `d` (of task `d.taskId` when it has one).
local function answer(d, choice)
  rein().exec("decide", { taskId = d.taskId, decisionId = d.id, choice = choice })
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
  desc = "answer an open decision (:Rein decisions: every task's, oldest first)",
  task = true,
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
  run = function(args, _, ref)
    if ref then
      return tasks().with_task(ref, function(t)
        task_state(t, function(state)
          M.decide(args, state, t)
        end)
      end)
    end
    M.decide(args, nil, nil)
  end,
}

--- Answers a decision of `state` (nil: the task here's), of task `t` (nil: the task here).
function M.decide(args, state, t)
  local function with_task(d)
    return t and vim.tbl_extend("force", d, { taskId = t.taskId }) or d
  end
  local id, choice = args:match("^(%S+)%s*(.*)$")
  if id then
    local d = find_decision(id, state)
    if not d then
      -- Let the server say what is wrong (it knows decisions we may not).
      if choice == "" then
        rein().notify("no open decision " .. id, vim.log.levels.ERROR)
        return
      end
      rein().exec("decide", for_task(t, { decisionId = id, choice = choice }))
      return
    end
    if choice ~= "" then
      answer(with_task(d), choice)
    else
      ask_choice(with_task(d))
    end
    return
  end
  local ds = vim.tbl_map(with_task, decisions(state))
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
end

--- Answers the decisions of every task, oldest first, one prompt each (its question names
--- its task); Esc stops, "skip" goes to the next. `only` (a task id) keeps that task's;
--- `first` (a queued decision) is asked first.
function M.answer_queue(client, only, first)
  tasks().fetch(client, function(l)
    if not l then
      return
    end
    local queue = {}
    if first then
      table.insert(queue, first)
    end
    for _, d in ipairs(l.decisions) do
      local same = first and d.taskId == first.taskId and d.decisionId == first.decisionId
      if not same and (only == nil or d.taskId == only) then
        table.insert(queue, d)
      end
    end
    if #queue == 0 then
      rein().notify(only and "this task has no decision waiting" or "no decision waiting", vim.log.levels.WARN)
      return
    end
    local i = 0
    local function next_one()
      i = i + 1
      local d = queue[i]
      if not d then
        return
      end
      local function send(choice)
        rein().exec("decide", { taskId = d.taskId, decisionId = d.decisionId, choice = choice }, function()
          next_one()
        end)
      end
      local options = type(d.options) == "table" and d.options or {}
      local prompt = ("%s (since %s)"):format(tostring(d.question), ui().time(d.since))
      if #options == 0 then
        input(prompt .. " ", nil, function(text)
          text = trim(text)
          if text ~= "" then
            send(text)
          end
        end)
        return
      end
      local items = vim.list_extend({}, options)
      if i < #queue then
        table.insert(items, "skip (the next one)")
      end
      select(items, { prompt = prompt }, function(choice, idx)
        if not choice then
          return
        end
        if idx > #options then
          next_one()
        else
          send(choice)
        end
      end)
    end
    next_one()
  end)
end

sub.decisions = {
  desc = "answer every task's decisions, oldest first (task=N: that task's)",
  task = true,
  run = function(_, _, ref)
    tasks().with_task(ref, function(t, client)
      M.answer_queue(client, t and t.taskId)
    end)
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

--- `:Rein discard [path]`: a change Rein cannot attribute; `:Rein discard task=N`: a worktree
--- task, its worktree and its branch (asked first).
sub.discard = {
  desc = "discard a change made while the agent ran that Rein cannot attribute (task=N: a worktree task)",
  task = true,
  complete = function()
    local s = current_state()
    local out = {}
    for _, u in ipairs(s and type(s.unattributedChanges) == "table" and s.unattributedChanges or {}) do
      table.insert(out, u.path)
    end
    return out
  end,
  run = function(args, _, ref)
    if ref then
      tasks().discard(ref)
      return
    end
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
  task = true,
  run = function(_, _, ref)
    tasks().with_task(ref, function(t)
      task_state(t, function(state)
        ui().quickfix_steps(state, task_root(t))
      end)
    end)
  end,
}

sub.changes = {
  desc = "put the human's changes in the quickfix list",
  task = true,
  run = function(_, _, ref)
    tasks().with_task(ref, function(t)
      task_state(t, function(state, client)
        ui().quickfix_changes(state, task_root(t), rein().last_reconcile(client.id, state))
      end)
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
  task = true,
  complete = function()
    return step_words(function(st)
      return type(st.output) == "string"
    end)
  end,
  run = function(args, _, ref)
    if args == "" then
      require("rein.output").toggle()
      return
    end
    local n = step_number(args)
    if not n then
      rein().notify("output takes a step number", vim.log.levels.ERROR)
      return
    end
    tasks().with_task(ref, function(t)
      task_state(t, function(state)
        require("rein.output").show_step(state, n)
      end)
    end)
  end,
}

--- `:Rein transcript`: the task as a conversation, live.
sub.transcript = {
  desc = "the task as a conversation (live; <CR> on a step opens its diff)",
  task = true,
  run = function(_, _, ref)
    tasks().with_task(ref, function(t, client)
      require("rein.transcript").open(client.id, t)
    end)
  end,
}

--- `:Rein diff [N]`: what step N changed (default: the latest step that changed files).
sub.diff = {
  desc = "what a step changed (default: the latest that changed files)",
  task = true,
  complete = function()
    return step_words(function(st)
      return type(st.checkpoint) == "string"
    end)
  end,
  run = function(args, _, ref)
    tasks().with_task(ref, function(t)
      M.diff(args, t)
    end)
  end,
}

--- Opens what step `args` (default: the latest that changed files) of task `t` changed.
function M.diff(args, t)
  task_state(t, function(state)
    do
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
      require("rein.diff").open(task_root(t), state, n)
    end
  end)
end

--- `:Rein continue [task=ID] [text]`: an ended task's conversation goes on: `text` (asked
--- when not given) is the agent's next turn, in the same session, checkpoints and transcript;
--- the agent is told what you changed since its last turn first. `task=ID` names an earlier
--- task of the working tree (from `:Rein tasks`), which becomes the task here again.
sub.continue = {
  desc = "give an ended task's agent your next words: the next turn of the same conversation (task=ID: an earlier task)",
  task = true,
  run = function(args, _, ref)
    local function go(t, client)
      local here = current_state()
      -- The task here, however it was named: its state knows its turns.
      local earlier = t and not (here and type(here.task) == "table" and here.task.id == t.taskId)
      local st = earlier and t or here
      -- How the history lists it (whether its agent takes another turn).
      local past = t and t.canContinue ~= nil and t or nil
      if not past and client then
        for _, p in ipairs(tasks()._lists[client.id] and tasks()._lists[client.id].history or {}) do
          if p.current then
            past = p
          end
        end
      end
      if earlier and past and past.canContinue == false then
        -- Asking the server would make it the task here first: said as the history says it.
        rein().notify(("%q cannot be continued: its agent takes no further turn; start a new task with :Rein start"):format(tostring(t.goal)), vim.log.levels.WARN)
        return
      end
      -- (A history listed while the task ran says no turn: only one listed after its end counts.)
      local out_of_turns = past and past.canContinue == false and ended[past.status]
      if not st or not ended[st.status] or (not earlier and out_of_turns) then
        -- Still under way, out of turns, or no task: sent bare, the server says what to do
        -- instead (steer it, resume it, or start a new one).
        rein().exec("continue", for_task(t, { text = args }))
        return
      end
      local goal = tostring(st.goal or (type(st.task) == "table" and st.task.goal) or "")
      local turn = (tonumber(st.turns) or (type(st.turns) == "table" and #st.turns + 1) or 1) + 1
      local function send(text)
        text = trim(text)
        if text == "" then
          return
        end
        rein().exec("continue", for_task(t, { text = text }), function(result, c)
          local s = type(result) == "table" and result.state or nil
          if type(s) == "table" and type(s.task) == "table" and not tasks().is_worktree(c.id, s.task.id) then
            -- An earlier task is the task here again: shown as such at once.
            rein()._set_state(c.id, s)
          end
          -- The server says the turn began; the history (turns, current) follows.
          tasks().fetch(client or c)
        end)
      end
      if args ~= "" then
        send(args)
      else
        input(("Rein continue %q (turn %d): "):format(goal, turn), nil, send)
      end
    end
    if ref then
      return tasks().with_task(ref, go)
    end
    rein().with_client(function(client)
      go(nil, client)
    end)
  end,
}

sub.tasks = {
  desc = "the tasks (each with its status, holder, plan, decisions) and the earlier ones: keys act on the one under the cursor",
  run = function()
    tasks().open()
  end,
}

--- `:Rein open [task]`: a worktree task's worktree in a tab of its own (`:tcd` to it).
sub.open = {
  desc = "open a worktree task's worktree in a new tab (tab-local directory)",
  task = true,
  run = function(args, _, ref)
    tasks().with_worktree_task(ref or (args ~= "" and args or nil), "Open which task's worktree?", function(t, client)
      tasks().open_worktree(t, client)
    end)
  end,
}

--- What `rein.land` did, in one line (and a warning for what needs you).
local function said_land(t, r)
  local function n(k)
    return type(r[k]) == "table" and #r[k] or 0
  end
  local parts = {}
  for _, k in ipairs({ "applied", "merged", "already" }) do
    if n(k) > 0 then
      table.insert(parts, ("%d %s"):format(n(k), k))
    end
  end
  local head = ("%s landed%s%s"):format(
    t.name,
    type(r.commit) == "string" and (" as commit " .. r.commit:sub(1, 8)) or " as uncommitted changes",
    #parts > 0 and (": " .. table.concat(parts, ", ")) or ""
  )
  if r.removed == true then
    head = head .. "; its worktree and branch removed"
  end
  rein().notify(head)
  local warn = {}
  if n("overlaps") > 0 then
    local paths = vim.tbl_map(function(o)
      return tostring(o.path)
    end, r.overlaps)
    table.insert(warn, ("overlaps with your lines in %s: yours kept, answer with :Rein decisions"):format(table.concat(paths, ", ")))
  end
  if n("unsaved") > 0 then
    table.insert(warn, "not landed over your unsaved buffers: " .. table.concat(r.unsaved, ", "))
  end
  for _, f in ipairs(type(r.failed) == "table" and r.failed or {}) do
    table.insert(warn, ("%s: %s"):format(tostring(f[1]), tostring(f[2])))
  end
  if #warn > 0 then
    rein().notify(table.concat(warn, "; "), vim.log.levels.WARN)
  end
end

--- `:Rein land [task] [changes|commit] [keep]`: brings a worktree task's work into your
--- tree (a three-way merge: your lines are never overwritten; overlaps become decisions);
--- asks how when not said.
sub.land = {
  desc = "bring a worktree task's work into your tree (changes or commit; keep: keep its worktree)",
  task = true,
  complete = function(words)
    return vim.tbl_filter(function(w)
      return not vim.tbl_contains(words, w)
    end, { "changes", "commit", "keep" })
  end,
  run = function(args, _, ref)
    local as, keep = nil, false
    for _, w in ipairs(vim.split(args, "%s+", { trimempty = true })) do
      if w == "changes" or w == "commit" then
        as = w
      elseif w == "keep" then
        keep = true
      elseif not ref then
        ref = w
      else
        rein().notify(("land takes a task, changes or commit, and keep; not %q"):format(w), vim.log.levels.ERROR)
        return
      end
    end
    tasks().with_worktree_task(ref, "Land which task?", function(t, client)
      -- The server refuses to land a task at work; said before asking how to land it.
      if running[t.status] then
        rein().notify(
          ("%s is still %s: pause it or let it finish, then land it"):format(t.name, t.status),
          vim.log.levels.WARN
        )
        return
      end
      local function go(how)
        rein().exec("land", { taskId = t.taskId, as = how, keep = keep or nil }, function(result)
          if type(result) ~= "table" then
            return
          end
          said_land(t, result)
          local root = client.config.root_dir
          local uris = {}
          for _, k in ipairs({ "applied", "merged" }) do
            for _, path in ipairs(type(result[k]) == "table" and result[k] or {}) do
              table.insert(uris, vim.uri_from_fname(root .. "/" .. path))
            end
          end
          rein().reload(uris)
        end)
      end
      if as then
        return go(as)
      end
      select({
        { key = "changes", label = "as uncommitted changes in your tree" },
        { key = "commit", label = "as a commit on your current branch" },
      }, {
        prompt = ("Land %s (%s):"):format(t.name, t.goal),
        format_item = function(c)
          return c.label
        end,
      }, function(c)
        if c then
          go(c.key)
        end
      end)
    end)
  end,
}

M.subcommands = sub

function M.names()
  local names = vim.tbl_keys(sub)
  table.sort(names)
  return names
end

--- `task=N` for every task of the current repository's last list (`task=here` for the one
--- in place).
function M.task_words()
  local client = rein().get_client(0)
  local l = client and tasks()._lists[client.id]
  local out = {}
  for _, t in ipairs(l and l.tasks or {}) do
    local n = tostring(t.name):match("^task (%d+)$")
    table.insert(out, "task=" .. (n or t.name))
  end
  return out
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
    if not s then
      return {}
    end
    local rest = vim.list_slice(words, 2)
    local named = s.task and rest[1] and rest[1]:match("^task=") and table.remove(rest, 1)
    candidates = s.complete and s.complete(rest) or {}
    if s.task and not named and #rest == 0 then
      candidates = vim.list_extend(vim.list_extend({}, candidates), M.task_words())
    end
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
  local ref
  if s.task then
    ref, rest = tasks().split_ref(rest)
  end
  s.run(rest, cmd, ref)
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
        local t = type(args.taskId) == "string" and { taskId = args.taskId } or nil
        local note = handback_note(client, trim(type(args.note) == "string" and args.note or ""), t)
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
        if type(result) == "table" and result.state ~= nil and rein()._is_here(client.id, args, result.state) then
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
