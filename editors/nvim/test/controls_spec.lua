-- The other controls against the real server: decisions (pop-up and :Rein decide), code
-- actions, anchored and urgent steers, steer comments, held files, rewind, abort, errors.
local T = require("runner")
local H = require("helpers")

H.stub_ui()
H.capture_notify()

local function last_constraint()
  local s = H.state()
  return s and s.constraints and s.constraints[#s.constraints]
end

local function wait_constraints(n)
  return T.wait(function()
    local s = H.state()
    return s and #(s.constraints or {}) >= n and s
  end, n .. " constraints")
end

local function wait_decision(kind)
  return T.wait(function()
    local s = H.state()
    return s and s.status == "awaiting_decision" and s.decisions[1] and s.decisions[1].kind == kind and s.decisions[1]
  end, "a " .. kind .. " decision", 90000)
end

-- Decisions -------------------------------------------------------------------------

do
  local root
  local popups = {}
  T.scenario("decisions", {
    {
      "a command the policy does not allow waits for approval",
      function()
        root = H.repo({ ["app.txt"] = "one\n" }, {
          steps = {
            { plan = { "touch a file", "ask", "write" }, think_ms = 100 },
            { run = { cmd = "touch approved.txt", timeout_s = 30 }, think_ms = 100 },
            { ask = "Which greeting should I use?", think_ms = 100 },
            { write = { path = "greeting.txt", content = "hello\n" }, think_ms = 100 },
            { finish = "asked and wrote", think_ms = 100 },
          },
        })
        vim.cmd("cd " .. vim.fn.fnameescape(root))
        H.setup()
        vim.cmd("edit " .. vim.fn.fnameescape(root .. "/app.txt"))
        H.wait_client()
        -- The server asks with window/showMessageRequest; dismiss the pop-up this time.
        table.insert(H.selects, function(items, opts)
          table.insert(popups, { items = items, opts = opts })
          return nil
        end)
        H.cmd("Rein start touch a file, then greet")
        local d = wait_decision("approve_command")
        T.eq(d.options, { "approve", "deny" })
        T.eq(H.statusline(), "Rein: paused (needs approval)")
        T.wait(function()
          return #popups > 0
        end, "the decision pop-up")
        T.eq(popups[1].opts.kind, "lsp_message")
        T.contains(popups[1].opts.prompt, "touch approved.txt")
        T.eq(vim.tbl_map(function(a)
          return a.title
        end, popups[1].items), { "approve", "deny" })
      end,
    },
    {
      ":Rein decide asks which option and approves",
      function()
        table.insert(H.selects, "approve")
        H.cmd("Rein decide")
        T.eq(H.prompts[#H.prompts].items, { "approve", "deny" })
        T.wait(function()
          return vim.uv.fs_stat(root .. "/approved.txt")
        end, "approved.txt from the approved command")
      end,
    },
    {
      "a question is answered in your own words",
      function()
        local d = wait_decision("question")
        T.eq(H.statusline(), "Rein: paused (question for you)")
        T.eq(vim.fn.getcompletion("Rein decide ", "cmdline"), { d.id })
        table.insert(H.inputs, "say hello")
        H.cmd("Rein decide " .. d.id)
        local s = H.wait_status("done")
        T.eq(#s.decisions, 0)
        T.eq(T.read_file(root .. "/greeting.txt"), "hello\n")
        T.eq(H.prompts[#H.prompts].prompt, "Which greeting should I use? ")
      end,
    },
  })
end

-- A held file answered from the pop-up ---------------------------------------------

do
  local root, notes
  T.scenario("held file", {
    {
      "editing an open buffer holds the file; the agent's write to it waits",
      function()
        root = H.repo({ ["notes.txt"] = "a\nb\n" }, {
          steps = {
            { read = "notes.txt", think_ms = 1500 },
            { write = { path = "notes.txt", content = "agent\n" }, think_ms = 500 },
            { finish = "tried notes", think_ms = 100 },
          },
        })
        vim.cmd("cd " .. vim.fn.fnameescape(root))
        H.setup()
        vim.cmd("edit " .. vim.fn.fnameescape(root .. "/notes.txt"))
        notes = vim.api.nvim_get_current_buf()
        H.wait_client()
        H.cmd("Rein start edit the notes")
        H.wait_status("running")
        -- The pop-up for the held file: choose "skip".
        table.insert(H.selects, "skip")
        vim.api.nvim_buf_set_lines(notes, 0, 1, false, { "mine" })
        T.wait(function()
          local s = H.state()
          return s and vim.tbl_contains(s.heldFiles or {}, "notes.txt")
        end, "notes.txt held")
        T.wait(function()
          for _, d in ipairs(vim.diagnostic.get(notes)) do
            if d.source == "rein" and d.code == "held" then
              return true
            end
          end
        end, "the held-file diagnostic")
        local s = H.wait_status("done")
        T.eq(s.summary, "tried notes")
        T.eq(T.read_file(root .. "/notes.txt"), "a\nb\n", "the agent did not write the held file")
        T.eq(H.buf_text(notes), "mine\nb\n", "the unsaved buffer is untouched")
        local skipped = false
        for _, st in ipairs(s.steps) do
          skipped = skipped or st.status == "skipped"
        end
        T.truthy(skipped, "a skipped step: " .. vim.inspect(s.steps))
        vim.cmd("edit!")
      end,
    },
  })
end

-- Steers, code actions, release, rewind, abort ---------------------------------------

do
  local root, src
  local steps = {}
  for i = 1, 30 do
    table.insert(steps, { write = { path = ("gen%d.txt"):format(i), content = ("file %d\n"):format(i) }, think_ms = 1000 })
  end
  table.insert(steps, { finish = "generated", think_ms = 100 })

  local function code_action(pattern, range)
    local chosen
    vim.lsp.buf.code_action({
      range = range,
      filter = function(a)
        return a.title:find(pattern) ~= nil
      end,
      apply = true,
    })
    return chosen
  end

  T.scenario("steer, code actions, release, rewind, abort", {
    {
      "code action: steer about this selection asks for the text",
      function()
        root = H.repo({ ["src.py"] = "def greet():\n    return 'hi'\n\nprint(greet())\n" }, { steps = steps })
        vim.cmd("cd " .. vim.fn.fnameescape(root))
        H.setup()
        vim.cmd("edit " .. vim.fn.fnameescape(root .. "/src.py"))
        src = vim.api.nvim_get_current_buf()
        H.wait_client()
        H.cmd("Rein start generate files")
        H.wait_status("running")
        table.insert(H.inputs, "keep greet's name")
        code_action("steer about this selection", { start = { 1, 0 }, ["end"] = { 2, 4 } })
        wait_constraints(1)
        local c = last_constraint()
        T.eq(c.text, "keep greet's name")
        T.eq(c.location.path, "src.py")
        T.eq(c.location.line, 0)
        T.eq(c.location.endLine, 1)
        T.eq(H.prompts[#H.prompts].prompt, "Rein steer (about this selection): ")
      end,
    },
    {
      ":[range]Rein steer anchors the steer to the lines; :Rein! steer is urgent",
      function()
        H.cmd("3,4Rein steer print less")
        wait_constraints(2)
        local c = last_constraint()
        T.eq(c.text, "print less")
        T.eq(c.location.line, 2)
        T.eq(c.location.endLine, 3)
        H.cmd("Rein! steer stop generating after gen3")
        wait_constraints(3)
        T.eq(last_constraint().text, "stop generating after gen3")
        T.eq(H.state().status, "running")
      end,
    },
    {
      "a rein: comment is a diagnostic and is sent on save",
      function()
        vim.api.nvim_buf_set_lines(src, 0, 0, false, { "# rein: use type hints" })
        T.wait(function()
          for _, d in ipairs(vim.diagnostic.get(src)) do
            if d.source == "rein" and d.code == "steer" and d.lnum == 0 then
              return true
            end
          end
        end, "the steer comment diagnostic")
        H.cmd("write")
        local s = wait_constraints(4)
        local c = s.constraints[4]
        T.eq(c.text, "use type hints")
        T.eq(c.source, "comment")
        T.eq(c.location.line, 0)
      end,
    },
    {
      ":Rein release hands the edited file back",
      function()
        -- A steer comment holds no file (it is a message); a real edit does.
        vim.api.nvim_buf_set_lines(src, -1, -1, false, { "x = 1" })
        T.wait(function()
          local s = H.state()
          return s and vim.tbl_contains(s.heldFiles or {}, "src.py")
        end, "src.py held")
        T.eq(vim.fn.getcompletion("Rein release ", "cmdline"), { "src.py" })
        H.cmd("Rein release")
        T.wait(function()
          local s = H.state()
          return s and #s.heldFiles == 0
        end, "no held file")
      end,
    },
    {
      "code action: take over opens the handover; :Rein handback resumes",
      function()
        code_action("take over", nil)
        H.wait_status("human")
        T.wait(function()
          return H.named_buf_text("rein://handover")
        end, "the handover report")
        H.cmd("Rein handback ok")
        H.wait_status("running")
        T.wait(function()
          return H.named_buf_text("rein://reconcile")
        end, "the reconcile report")
      end,
    },
    {
      "a command that is not legal now shows the server's reason",
      function()
        local before = #H.messages
        H.cmd("Rein resume")
        local msg = T.wait(function()
          for i = before + 1, #H.messages do
            if H.messages[i].level == vim.log.levels.ERROR then
              return H.messages[i].msg
            end
          end
        end, "an error message")
        T.match(msg, "^Rein: ")
        T.eq(H.state().status, "running")
      end,
    },
    {
      ":Rein rewind picks a checkpoint",
      function()
        T.wait(function()
          return vim.uv.fs_stat(root .. "/gen3.txt")
        end, "gen3.txt from the agent")
        H.cmd("Rein pause")
        H.wait_status("paused")
        local s = H.state()
        local target
        for _, st in ipairs(s.steps) do
          if st.author == "agent" and st.checkpoint and (st.action or ""):find("gen1.txt", 1, true) then
            target = st
          end
        end
        T.truthy(target, "a checkpoint after gen1.txt: " .. vim.inspect(s.steps))
        local want = "step:" .. target.n
        T.truthy(vim.tbl_contains(vim.fn.getcompletion("Rein rewind ", "cmdline"), want), "completion has " .. want)
        table.insert(H.selects, ("step %d "):format(target.n))
        H.cmd("Rein rewind")
        T.wait(function()
          return not vim.uv.fs_stat(root .. "/gen2.txt") and not vim.uv.fs_stat(root .. "/gen3.txt")
        end, "gen2.txt and gen3.txt gone after the rewind")
        T.truthy(vim.uv.fs_stat(root .. "/gen1.txt"), "gen1.txt is still there")
      end,
    },
    {
      ":Rein abort discards the agent's changes and keeps yours",
      function()
        table.insert(H.selects, "discard")
        H.cmd("Rein abort")
        H.wait_status("aborted")
        T.eq(H.statusline(), "Rein: aborted")
        T.truthy(not vim.uv.fs_stat(root .. "/gen1.txt"), "gen1.txt removed")
        T.match(T.read_file(root .. "/src.py"), "^# rein: use type hints\n")
        T.eq(H.prompts[#H.prompts].kind, "select")
      end,
    },
  })
end

-- A release of a buffer typed over the text from before the agent's write ---------------

do
  local root, tags
  local TAGS = "import collections\n\n\ndef tags(items):\n    return sorted({t for i in items for t in i.tags})\n\n\n"
    .. "def count(items):\n    return len(items)\n"
  local TOP = "def top_tags(items, n=3):\n    counts = collections.Counter(t for i in items for t in i.tags)\n"
    .. "    return [t for t, _ in counts.most_common(n)]\n\n\n"
  local DOC = '    """Every tag once, sorted."""\n'
  T.scenario("release of a buffer older than the agent's write", {
    {
      "the agent's lines stay, the typed line is merged in, and the buffer is the file, saved",
      function()
        root = H.repo({ ["tags.py"] = TAGS }, {
          steps = {
            { edit = { path = "tags.py", old = "def count(items):\n", new = TOP .. "def count(items):\n" }, think_ms = 1500 },
            { edit = { path = "tags.py", old = "def tags(items):\n", new = "def tags(items):\n" .. DOC }, think_ms = 1500 },
            { finish = "top_tags added", think_ms = 100 },
          },
        })
        vim.cmd("cd " .. vim.fn.fnameescape(root))
        local rein = H.setup()
        vim.cmd("edit " .. vim.fn.fnameescape(root .. "/tags.py"))
        tags = vim.api.nvim_get_current_buf()
        H.wait_client()
        -- The buffer is not reloaded after the agent's first edit: the person was typing.
        local reload = rein.reload
        rein.reload = function() end
        H.cmd("Rein start add top_tags")
        T.wait(function()
          return T.read_file(root .. "/tags.py"):find("def top_tags", 1, true)
        end, "the agent's first edit")
        table.insert(H.selects, "release")
        vim.cmd("normal! Go# TODO")
        rein.reload = reload
        local s = H.wait_status("done")
        local want = "import collections\n\n\ndef tags(items):\n"
          .. DOC
          .. "    return sorted({t for i in items for t in i.tags})\n\n\n"
          .. TOP
          .. "def count(items):\n    return len(items)\n# TODO\n"
        T.eq(T.read_file(root .. "/tags.py"), want, "the agent's lines and the person's")
        for _, h in ipairs(s.humanChanges or {}) do
          T.eq(h.removed, 0, "booked as the person's deletion: " .. vim.inspect(h))
        end
        T.wait(function()
          return not vim.bo[tags].modified and H.buf_text(tags) == want
        end, "the buffer holds the file and is saved")
        -- A :w now writes what the file holds.
        vim.cmd("write")
        T.eq(T.read_file(root .. "/tags.py"), want)
      end,
    },
  })
end
