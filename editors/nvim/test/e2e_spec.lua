-- The whole loop through the plugin's own commands against the real server:
-- start, pause, steer, take over, edit and write a buffer, hand back, finish.
local T = require("runner")
local H = require("helpers")

H.stub_ui()
H.capture_notify()

local root, rein, app
local progress = {}
vim.api.nvim_create_autocmd("LspProgress", {
  callback = function(ev)
    local p = ev.data and ev.data.params
    if p and p.value then
      table.insert(progress, { token = p.token, kind = p.value.kind, message = p.value.message })
    end
  end,
})

local plan = {
  steps = {
    { plan = { "look at the app", "add a greeting", "bump the version" }, think_ms = 200 },
    { read = "app.txt", think_ms = 1500 },
    { write = { path = "greeting.txt", content = "hello from the agent\n" }, think_ms = 1500 },
    { edit = { path = "app.txt", old = "version = 1", new = "version = 2" }, think_ms = 800 },
    { finish = "greeting added, version bumped", think_ms = 300 },
  },
}

T.scenario("start, pause, steer, take over, edit, hand back", {
  {
    "setup attaches the buffer and the statusline says there is no task",
    function()
      root = H.repo({ ["app.txt"] = "name = demo\nversion = 1\n", ["README.md"] = "# demo\n" }, plan)
      vim.cmd("cd " .. vim.fn.fnameescape(root))
      rein = H.setup()
      vim.cmd("edit " .. vim.fn.fnameescape(root .. "/app.txt"))
      app = vim.api.nvim_get_current_buf()
      local client = H.wait_client()
      T.eq(vim.fs.normalize(client.config.root_dir), root)
      T.truthy(vim.lsp.buf_is_attached(app, client.id), "app.txt attached")
      T.eq(H.statusline(), "Rein: no task")
    end,
  },
  {
    ":Rein start asks for the goal and the agent runs",
    function()
      table.insert(H.inputs, "add a greeting and bump the version")
      H.cmd("Rein start")
      H.wait_status("running")
      T.eq(H.prompts[#H.prompts].prompt, "Rein goal: ")
      T.eq(H.state().task.goal, "add a greeting and bump the version")
      T.match(H.statusline(), "^Rein: agent running · step %d+$")
      -- Step 0 records the tree as it was; step 1 is the agent's plan.
      local s = H.wait_steps(2)
      if s.status == "running" and #s.steps == 2 then
        T.eq(H.statusline(), "Rein: agent running · step 2")
      end
    end,
  },
  {
    ":Rein pause stops it at once",
    function()
      H.cmd("Rein pause")
      local s = H.wait_status("paused")
      T.eq(s.control.holder, "agent")
      T.eq(H.statusline(), "Rein: paused")
    end,
  },
  {
    ":Rein steer asks for the text and queues a constraint",
    function()
      table.insert(H.inputs, "say hello politely")
      H.cmd("Rein steer")
      local s = T.wait(function()
        local s = H.state()
        return s and #(s.constraints or {}) > 0 and s
      end, "a constraint")
      T.eq(s.constraints[1].text, "say hello politely")
      T.eq(s.constraints[1].source, "command")
      T.eq(s.status, "paused")
    end,
  },
  {
    ":Rein takeover gives you control and opens the handover",
    function()
      table.insert(H.inputs, "I want to set the owner myself")
      local win = vim.api.nvim_get_current_win()
      H.cmd("Rein takeover")
      local s = H.wait_status("human")
      T.eq(s.control.holder, "human")
      T.eq(H.statusline(), "Rein: you hold control")
      local handover = T.wait(function()
        return H.named_buf_text("rein://handover")
      end, "the handover report")
      T.contains(handover, "add a greeting and bump the version")
      T.truthy(vim.fn.bufwinid("rein://handover") ~= -1, "handover shown in a window")
      T.eq(vim.api.nvim_get_current_win(), win, "cursor stays in the code window")
    end,
  },
  {
    "you edit app.txt and write it",
    function()
      T.eq(vim.api.nvim_get_current_buf(), app)
      vim.api.nvim_buf_set_lines(app, -1, -1, false, { "owner = human" })
      H.cmd("write")
      T.eq(T.read_file(root .. "/app.txt"), "name = demo\nversion = 1\nowner = human\n")
      T.wait(function()
        local s = H.state()
        return s and vim.tbl_contains(s.heldFiles or {}, "app.txt")
      end, "app.txt to be held")
    end,
  },
  {
    ":Rein handback shows the reconcile report and the agent finishes",
    function()
      table.insert(H.inputs, "owner is set; carry on")
      H.cmd("Rein handback")
      local report = T.wait(function()
        return H.named_buf_text("rein://reconcile")
      end, "the reconcile report")
      T.contains(report, "app.txt")
      local s = H.wait_status("done")
      T.eq(s.control.holder, "none")
      T.eq(#s.heldFiles, 0)
      T.match(H.statusline(), "^Rein: done · %d+ steps$")
      T.contains(H.messages_text(), "the agent finished")
      -- The steer queued while paused is said delivered (else "queued" stays on the line).
      local c1 = s.constraints[1]
      T.eq(c1.status, "delivered")
      T.contains(H.messages_text(), ("Rein: steer c1 delivered at step %d"):format(c1.deliveredAtStep))
      -- $/progress reached Neovim's native handling: begin … end on the task's token.
      local kinds = {}
      for _, p in ipairs(progress) do
        T.match(tostring(p.token), "^rein/task/")
        kinds[p.kind] = true
      end
      T.truthy(kinds.begin and kinds["end"], "progress begin and end: " .. vim.inspect(progress))
    end,
  },
  {
    "the tree has the agent's work and your edit survived",
    function()
      T.eq(T.read_file(root .. "/greeting.txt"), "hello from the agent\n")
      T.eq(T.read_file(root .. "/app.txt"), "name = demo\nversion = 2\nowner = human\n")
      -- app.txt was open and clean when the agent edited it: the buffer was reloaded.
      T.wait(function()
        return H.buf_text(app) == "name = demo\nversion = 2\nowner = human\n"
      end, "the app.txt buffer to reload")
      T.eq(vim.bo[app].modified, false)
    end,
  },
  {
    ":Rein steps fills the quickfix list with both sides' steps",
    function()
      H.cmd("Rein steps")
      local qf = T.wait(function()
        local info = vim.fn.getqflist({ title = 1 })
        return info.title == "Rein steps" and H.qf_text()
      end, "the steps quickfix list")
      T.contains(qf, "[agent] done: plan (3 items)")
      T.contains(qf, "greeting.txt|1| step")
      T.contains(qf, "[agent] done: write greeting.txt")
      T.contains(qf, "[agent] done: edit app.txt")
      T.contains(qf, "[human]")
      T.truthy(vim.fn.getqflist({ winid = 1 }).winid ~= 0, "quickfix window open")
      vim.cmd("cclose")
    end,
  },
  {
    ":Rein changes lists your change to app.txt",
    function()
      H.cmd("Rein changes")
      local qf = T.wait(function()
        local info = vim.fn.getqflist({ title = 1 })
        return info.title == "Rein changes" and H.qf_text()
      end, "the changes quickfix list")
      T.match(qf, "app%.txt|3| modified %+1 %-0")
      vim.cmd("cclose")
    end,
  },
  {
    ":Rein state shows the state in a float",
    function()
      H.cmd("Rein state")
      local text = T.wait(function()
        return H.named_buf_text("rein://state")
      end, "the state float")
      T.contains(text, "# Rein: add a greeting and bump the version")
      T.contains(text, "Holder:  none since ")
      T.contains(text, "Status:  done · ")
      T.contains(text, "say hello politely")
      -- This plan is plain strings and no step names an item: the agent reports no progress,
      -- so its items are listed without statuses that would say nothing.
      T.contains(text, "## Plan\n(the agent reports no plan progress)\n- look at the app\n- add a greeting")
      T.no_contains(text, "[ ]")
      local win = vim.fn.bufwinid("rein://state")
      T.truthy(vim.api.nvim_win_get_config(win).relative ~= "", "a floating window")
      vim.api.nvim_win_close(win, true)
    end,
  },
  {
    ":checkhealth rein has no ERROR",
    function()
      local text = H.checkhealth()
      T.no_contains(text, "ERROR")
      T.contains(text, "done · ")
      T.contains(text, "sandbox workspace-write (Landlock ABI")
      T.contains(text, "enforced: files: writes only in the working tree")
      T.contains(text, ".git read-only")
    end,
  },
})

-- A second task in the same session: :Rein changes shows that task's own changes, never the
-- hunks kept from the first task's hand-back.
local readme
local function changes_qf()
  -- The first task's "Rein changes" list is still there: start from another, so the wait
  -- below sees this command's list.
  vim.fn.setqflist({}, " ", { title = "before :Rein changes" })
  H.cmd("Rein changes")
  return T.wait(function()
    local info = vim.fn.getqflist({ title = 1, items = 1 })
    return info.title == "Rein changes" and info
  end, "the changes quickfix list")
end

T.scenario(":Rein changes across two tasks", {
  {
    "a second task starts; :Rein changes has none of the first task's changes",
    function()
      T.write_file(root .. "/.rein/plan.json", vim.json.encode({
        steps = {
          { read = "README.md", think_ms = 1500 },
          { write = { path = "notes.txt", content = "notes from the agent\n" }, think_ms = 1500 },
          { finish = "notes written", think_ms = 300 },
        },
      }))
      table.insert(H.inputs, "write some notes")
      H.cmd("Rein start")
      local s = H.wait_status("running")
      T.eq(s.task.goal, "write some notes")
      local before = #H.messages
      local qf = changes_qf()
      T.eq(#qf.items, 0, "the first task's app.txt change is not listed: " .. H.qf_text())
      T.contains(H.messages_text(), "no changes of yours recorded")
      T.truthy(#H.messages > before, "said so")
    end,
  },
  {
    "take over, edit README.md, hand back",
    function()
      table.insert(H.inputs, "")
      H.cmd("Rein takeover")
      H.wait_status("human")
      vim.cmd("edit " .. vim.fn.fnameescape(root .. "/README.md"))
      readme = vim.api.nvim_get_current_buf()
      vim.api.nvim_buf_set_lines(readme, -1, -1, false, { "Second task notes." })
      H.cmd("write")
      T.wait(function()
        local s = H.state()
        return s and vim.tbl_contains(s.heldFiles or {}, "README.md")
      end, "README.md to be held")
      table.insert(H.inputs, "")
      H.cmd("Rein handback")
      T.wait(function()
        local r = H.named_buf_text("rein://reconcile")
        return r and r:find("README.md", 1, true)
      end, "the second task's reconcile report")
      H.wait_status("done")
    end,
  },
  {
    ":Rein changes lists the second task's change, and only it",
    function()
      local qf = changes_qf()
      local text = H.qf_text()
      T.match(text, "README%.md|2| modified %+1 %-0")
      T.no_contains(text, "app.txt")
      for _, item in ipairs(qf.items) do
        T.eq(vim.api.nvim_buf_get_name(item.bufnr), root .. "/README.md")
      end
      vim.cmd("cclose")
    end,
  },
  {
    "`rein restore` from another terminal: the clean buffer follows on :checktime ('autoread')",
    function()
      -- The CLI changes the files behind the editor's back (no rein/filesChanged): Neovim
      -- reloads a clean buffer when it checks timestamps, as the README says.
      T.eq(H.buf_text(readme), "# demo\nSecond task notes.\n")
      T.eq(vim.o.autoread, true)
      local res = vim.system({ H.bin, "restore", "step:0" }, { cwd = root, text = true }):wait()
      T.eq(res.code, 0, res.stderr)
      local before = res.stdout:match("the tree as it was is checkpoint (%x+)")
      T.truthy(before, res.stdout)
      T.eq(T.read_file(root .. "/README.md"), "# demo\n")
      -- :checktime for this buffer (a bare :checktime waits for typed input in a callback).
      vim.cmd("checktime " .. readme)
      T.eq(H.buf_text(readme), "# demo\n")
      T.eq(vim.bo[readme].modified, false)
      -- And back to the tree as it was, which the restore checkpointed first.
      res = vim.system({ H.bin, "restore", before }, { cwd = root, text = true }):wait()
      T.eq(res.code, 0, res.stderr)
      vim.cmd("checktime " .. readme)
      T.eq(H.buf_text(readme), "# demo\nSecond task notes.\n")
    end,
  },
  {
    "no unexpected prompt and no error message",
    function()
      for _, m in ipairs(H.messages) do
        T.truthy(m.level ~= vim.log.levels.ERROR, "error message: " .. m.msg)
      end
    end,
  },
})

-- A long task over state deltas: the server sends each change as what changed since the last
-- one, and what the plugin holds at the end is the state itself.
local sent = { deltas = 0, whole = 0, fetches = 0 }
T.scenario("a task of 300 steps over state deltas", {
  {
    "the task runs, is paused and resumed (its stop reason cleared), and finishes",
    function()
      local steps = {}
      for i = 1, 300 do
        if i % 3 == 0 then
          table.insert(steps, { read = ("f%d.txt"):format(i % 7), think_ms = 10 })
        else
          table.insert(steps, { write = { path = ("f%d.txt"):format(i % 7), content = i .. "\n" }, say = "writing " .. i, think_ms = 10 })
        end
      end
      table.insert(steps, { finish = "wrote them", think_ms = 10 })
      T.write_file(root .. "/.rein/plan.json", vim.json.encode({ steps = steps }))
      local client = H.client()
      local handler = client.handlers["rein/stateChanged"]
      client.handlers["rein/stateChanged"] = function(err, params, ctx)
        if type(params) == "table" then
          local kind = params.base ~= nil and "deltas" or "whole"
          sent[kind] = sent[kind] + 1
        end
        return handler(err, params, ctx)
      end
      local request_state = rein._request_state
      rein._request_state = function(...)
        sent.fetches = sent.fetches + 1
        return request_state(...)
      end
      table.insert(H.inputs, "write three hundred times")
      H.cmd("Rein start")
      H.wait_steps(60)
      H.cmd("Rein pause")
      T.eq(H.wait_status("paused").stopReason, "paused by the user")
      -- Resumed by a request whose reply the plugin does not take: only the notification can
      -- clear the stop reason (a null Neovim decodes as nothing; the delta's `cleared` says it).
      client:request("workspace/executeCommand", { command = "rein.resume", arguments = { vim.empty_dict() } }, function() end)
      T.wait(function()
        local s = H.state()
        return s and s.status == "running" and s.stopReason == nil
      end, "running again, the stop reason cleared")
      local done = H.wait_status("done")
      T.eq(#done.steps, 302)
      rein._request_state = request_state
    end,
  },
  {
    "the state the plugin built from the deltas is the state rein.state answers",
    function()
      local held = vim.deepcopy(H.state())
      local answer
      H.client():request("workspace/executeCommand", { command = "rein.state", arguments = { vim.empty_dict() } }, function(err, result)
        answer = { err = err, result = result }
      end)
      T.wait(function()
        return answer
      end, "the rein.state answer")
      T.eq(answer.err, nil)
      T.eq(held.version, answer.result.state.version)
      T.truthy(vim.deep_equal(held, answer.result.state), "the held state differs from rein.state")
      T.truthy(sent.deltas >= 300, ("most changes came as deltas: %s"):format(vim.inspect(sent)))
      T.out(("     %d deltas, %d whole states, %d fetches"):format(sent.deltas, sent.whole, sent.fetches))
    end,
  },
})
