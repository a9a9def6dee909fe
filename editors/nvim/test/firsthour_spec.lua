-- What a new user meets in the first hour (issue 13), against the real server: a missing
-- binary said once, takeover never cancelled by its prompt, rewinding to any step and the
-- buffers reloading, a live state view that leaves the cursor alone, one report window per
-- kind, steer comments confirmed once and removable, aborts and server messages as Rein
-- notifications, a clean lsp.log, the pause reason after a restart, agents per task.
local T = require("runner")
local H = require("helpers")

H.stub_ui()
H.capture_notify()

local function count_messages(needle, from)
  local n = 0
  for i = (from or 0) + 1, #H.messages do
    if H.messages[i].msg:find(needle, 1, true) then
      n = n + 1
    end
  end
  return n
end

local function ex_messages()
  return vim.api.nvim_exec2("messages", { output = true }).output
end

local function windows_showing(name)
  local n = 0
  for _, w in ipairs(vim.api.nvim_list_wins()) do
    if vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(w)) == name then
      n = n + 1
    end
  end
  return n
end

-- A missing binary ------------------------------------------------------------------------

T.scenario("missing server binary", {
  {
    "said once at start-up, with the fix; not again on :bnext; Neovim never tries to spawn it",
    function()
      local root = H.repo({ ["a.txt"] = "a\n", ["b.txt"] = "b\n" })
      vim.cmd("cd " .. vim.fn.fnameescape(root))
      vim.cmd("edit a.txt")
      vim.cmd("badd b.txt")
      local before = #H.messages
      H.setup({ cmd = { "/nonexistent/rein", "lsp" } })
      for _ = 1, 4 do
        vim.cmd("bnext")
      end
      vim.cmd("edit " .. vim.fn.fnameescape(root .. "/c.txt"))
      -- Let scheduled notifications through.
      vim.wait(200, function()
        return false
      end)
      -- One line that fits the command line (no hit-enter prompt), pointing at the fix.
      T.eq(count_messages("not found", before), 1, "one message:\n" .. H.messages_text())
      local said = H.messages[before + 1].msg
      T.contains(said, ":checkhealth rein says how to install it")
      T.truthy(not said:find("\n") and #said <= vim.v.echospace, "fits one line: " .. said)
      T.eq(H.messages[before + 1].level, vim.log.levels.ERROR)
      T.eq(count_messages("Spawning", before), 0)
      T.no_contains(ex_messages(), "Spawning")
      T.eq(#vim.lsp.get_clients({ name = "rein" }), 0, "no client")
      T.eq(H.statusline(), "", "no Rein statusline without a server")
    end,
  },
  {
    "a :Rein command says it again (the user asked), whole, with the fix",
    function()
      local before = #H.messages
      H.cmd("Rein pause")
      vim.wait(200, function()
        return false
      end)
      T.eq(count_messages("was not found", before), 1)
      T.contains(H.messages[before + 1].msg, "cargo install --path server")
      T.contains(H.messages[before + 1].msg, "cmd = {")
      -- :Rein start says so before asking for a goal: nothing typed is lost to it.
      local prompts = #H.prompts
      before = #H.messages
      H.cmd("Rein start")
      vim.wait(200, function()
        return false
      end)
      T.eq(#H.prompts, prompts, "no goal asked: " .. vim.inspect(H.prompts))
      T.eq(count_messages("was not found", before), 1)
      vim.cmd("%bwipeout!")
    end,
  },
})

-- A command that cannot apply is refused before any prompt -----------------------------

T.scenario("refused before asking", {
  {
    ":Rein handback while the agent holds control asks no note and says why; so does :Rein steer on an ended task",
    function()
      local root = H.repo({ ["a.txt"] = "a\n" }, {
        steps = { { read = "a.txt", think_ms = 600000 } },
      })
      vim.cmd("cd " .. vim.fn.fnameescape(root))
      H.setup()
      vim.cmd("edit " .. vim.fn.fnameescape(root .. "/a.txt"))
      H.wait_client()
      H.cmd("Rein start read a.txt")
      H.wait_status("running")
      local prompts = #H.prompts
      local before = #H.messages
      H.cmd("Rein handback")
      T.wait(function()
        return count_messages("nothing to hand back", before) == 1
      end, "the server's refusal")
      T.eq(#H.prompts, prompts, "no note asked: " .. vim.inspect(H.prompts))
      T.eq(H.state().status, "running")
      H.cmd("Rein abort keep")
      H.wait_status("aborted")
      before = #H.messages
      H.cmd("Rein steer")
      T.wait(function()
        return count_messages("the task has ended", before) == 1
      end, "the server's refusal")
      T.eq(#H.prompts, prompts, "no steer asked: " .. vim.inspect(H.prompts))
      vim.cmd("%bwipeout!")
    end,
  },
})

-- Takeover, rewind to any step, reload, live state, reports, abort -----------------------

do
  local root, buf
  T.scenario("takeover, rewind and the views", {
    {
      ":Rein takeover takes control first; Esc at the Why? prompt leaves you in control",
      function()
        root = H.repo({ ["a.txt"] = "base\n" }, {
          steps = {
            { write = { path = "a.txt", content = "one\ntwo\n" }, think_ms = 100 },
            { read = "a.txt", think_ms = 100 },
            { write = { path = "a.txt", content = "one\ntwo\nthree\n" }, think_ms = 100 },
            { read = "a.txt", think_ms = 600000 },
          },
        })
        vim.cmd("cd " .. vim.fn.fnameescape(root))
        H.setup()
        vim.cmd("edit " .. vim.fn.fnameescape(root .. "/a.txt"))
        buf = vim.api.nvim_get_current_buf()
        H.wait_client()
        H.cmd("Rein start write a.txt")
        -- The open, clean buffer follows the agent's writes.
        T.wait(function()
          return H.buf_text(buf) == "one\ntwo\nthree\n"
        end, "the buffer reloaded with the agent's second write")
        local status_at_prompt
        table.insert(H.inputs, function(opts)
          status_at_prompt = H.state() and H.state().status
          T.contains(opts.prompt, "Why?")
          return nil -- Esc
        end)
        H.cmd("Rein takeover")
        local s = H.wait_status("human")
        T.wait(function()
          return status_at_prompt
        end, "the Why? prompt")
        T.eq(status_at_prompt, "human", "asked after the takeover")
        T.eq(s.control.holder, "human")
      end,
    },
    {
      "the rewind picker lists each step once; a read step rewinds and the buffer reloads",
      function()
        local picked
        table.insert(H.selects, function(items, opts)
          picked = vim.tbl_map(opts.format_item, items)
          for i, st in ipairs(items) do
            if st.n == 2 then
              return i
            end
          end
        end)
        local before = #H.messages
        H.cmd("Rein rewind")
        T.wait(function()
          return T.read_file(root .. "/a.txt") == "one\ntwo\n"
        end, "a.txt as step 2 (a read) left it")
        local ns = {}
        for _, label in ipairs(picked) do
          local n = label:match("^step (%d+) ")
          T.truthy(n and not ns[n], "each step once: " .. vim.inspect(picked))
          ns[n] = true
        end
        T.truthy(ns["2"], "the read step is offered: " .. vim.inspect(picked))
        -- No :checktime: rein/filesChanged reloads the clean buffer.
        T.wait(function()
          return H.buf_text(buf) == "one\ntwo\n"
        end, "the buffer to reload after the rewind")
        T.eq(vim.bo[buf].modified, false)
        -- The server's message in the plugin's style, not Neovim's LSP[rein][Info] echo.
        T.wait(function()
          return count_messages("Rein: rewound", before) == 1
        end, "the rewind message")
        T.no_contains(ex_messages(), "LSP[rein]")
        T.eq(vim.fn.getcompletion("Rein rewind step:", "cmdline")[1] ~= nil, true)
      end,
    },
    {
      "hand-back and a second takeover reuse one window for both reports; the late reason reaches the agent",
      function()
        local report_win = vim.fn.bufwinid("rein://handover")
        local wins = #vim.api.nvim_list_wins()
        table.insert(H.inputs, "carry on")
        H.cmd("Rein handback")
        H.wait_status("running")
        T.wait(function()
          return H.named_buf_text("rein://reconcile")
        end, "the reconcile report")
        -- The reconcile report took the handover's window: no split on top of the others.
        T.eq(vim.fn.bufwinid("rein://reconcile"), report_win)
        T.eq(windows_showing("rein://handover"), 0)
        T.eq(#vim.api.nvim_list_wins(), wins, "no new split")
        local asked
        table.insert(H.inputs, function(opts)
          asked = opts.prompt
          return "to rename the file myself"
        end)
        H.cmd("Rein takeover")
        H.wait_status("human")
        T.wait(function()
          return asked
        end, "the Why? prompt")
        T.contains(asked, "Why?")
        table.insert(H.inputs, "renamed")
        H.cmd("Rein handback")
        H.wait_status("running")
        local report = T.wait(function()
          local t = H.named_buf_text("rein://reconcile")
          return t and t:find("renamed", 1, true) and t
        end, "the second reconcile report")
        T.contains(report, "Why I took over: to rename the file myself")
        T.eq(windows_showing("rein://handover"), 0, "the handover gave its window to the reconcile report")
        T.eq(windows_showing("rein://reconcile"), 1, "one report window")
        T.eq(vim.fn.bufwinid("rein://reconcile"), report_win)
        T.eq(#vim.api.nvim_list_wins(), wins, "no new split")
        -- As floats: a new report of a kind replaces its float instead of stacking another.
        require("rein").config.report = "float"
        for round = 1, 2 do
          H.cmd("Rein takeover float " .. round)
          H.wait_status("human")
          T.wait(function()
            local t = H.named_buf_text("rein://handover")
            return t and t:find("float " .. round, 1, true)
          end, "handover float " .. round)
          table.insert(H.inputs, "back " .. round)
          H.cmd("Rein handback")
          H.wait_status("running")
          T.wait(function()
            local t = H.named_buf_text("rein://reconcile")
            return t and t:find("back " .. round, 1, true)
          end, "reconcile float " .. round)
        end
        T.eq(windows_showing("rein://handover"), 0, "the handover float was replaced")
        T.eq(windows_showing("rein://reconcile"), 1, "one report float")
        require("rein").config.report = "split"
        for _, w in ipairs(vim.api.nvim_list_wins()) do
          if vim.api.nvim_win_get_config(w).relative ~= "" then
            vim.api.nvim_win_close(w, true)
          end
        end
      end,
    },
    {
      ":Rein state follows the state live and leaves the cursor where it is; again closes it",
      function()
        vim.cmd("only")
        local win = vim.api.nvim_get_current_win()
        H.cmd("Rein state")
        local text = T.wait(function()
          return H.named_buf_text("rein://state")
        end, "the state view")
        T.contains(text, "Status:  agent running")
        T.eq(vim.api.nvim_get_current_win(), win, "the cursor stayed in the code window")
        local float = vim.fn.bufwinid("rein://state")
        T.truthy(float ~= -1 and vim.api.nvim_win_get_config(float).relative ~= "", "a float")
        H.cmd("Rein pause")
        T.wait(function()
          local t = H.named_buf_text("rein://state")
          return t and t:find("Status:  paused", 1, true)
        end, "the float to follow the pause")
        H.cmd("Rein state")
        T.eq(vim.fn.bufwinid("rein://state"), -1, "closed by :Rein state")
        H.cmd("Rein state split")
        T.wait(function()
          return vim.fn.bufwinid("rein://state") ~= -1
        end, "the state split")
        T.eq(vim.api.nvim_win_get_config(vim.fn.bufwinid("rein://state")).relative, "", "a split")
        T.eq(vim.api.nvim_get_current_win(), win)
        H.cmd("Rein resume")
        T.wait(function()
          local t = H.named_buf_text("rein://state")
          return t and t:find("Status:  agent running", 1, true)
        end, "the split to follow the resume")
        H.cmd("Rein state")
        T.eq(vim.fn.bufwinid("rein://state"), -1)
      end,
    },
    {
      "after the server restarts, the task is still running: the agent does not depend on this editor",
      function()
        H.wait_status("running")
        local old = H.client()
        old:stop(true)
        T.wait(function()
          return old:is_stopped()
        end, "the server to stop")
        H.cmd("Rein state")
        local s = T.wait(function()
          local s = H.state()
          local c = H.client()
          return c and c.id ~= old.id and s and s
        end, "the restarted server's state")
        T.eq(s.status, "running", "the working tree's engine kept the task running")
        T.match(H.statusline(), "^Rein: agent running")
        H.cmd("Rein state") -- close the view again
      end,
    },
    {
      ":Rein abort says what happened",
      function()
        local before = #H.messages
        H.cmd("Rein abort keep")
        H.wait_status("aborted")
        T.wait(function()
          return count_messages("aborted by the user", before) == 1
        end, "the abort notification")
      end,
    },
  })
end

-- Steer comments ---------------------------------------------------------------------------

do
  local root, src
  T.scenario("steer comments", {
    {
      "saving a rein: comment says once that it was sent",
      function()
        root = H.repo({ ["src.py"] = "def greet():\n    return 'hi'\n" }, {
          steps = {
            { read = "src.py", think_ms = 1500 },
            { read = "src.py", think_ms = 300 },
            { read = "src.py", think_ms = 600000 },
          },
        })
        vim.cmd("cd " .. vim.fn.fnameescape(root))
        H.setup()
        vim.cmd("edit " .. vim.fn.fnameescape(root .. "/src.py"))
        src = vim.api.nvim_get_current_buf()
        H.wait_client()
        H.cmd("Rein start read src.py")
        H.wait_status("running")
        local before = #H.messages
        vim.api.nvim_buf_set_lines(src, 0, 0, false, { "# rein: use type hints" })
        H.cmd("write")
        T.wait(function()
          return count_messages("sent from a comment", before) == 1
        end, "the steer notification")
        local sent
        for i = before + 1, #H.messages do
          if H.messages[i].msg:find("sent from a comment", 1, true) then
            sent = H.messages[i].msg
          end
        end
        T.contains(sent, "use type hints")
        H.cmd("write")
        vim.wait(300, function()
          return false
        end)
        T.eq(count_messages("sent from a comment", before), 1, "once per steer")
      end,
    },
    {
      "once delivered, a code action removes the comment line",
      function()
        T.wait(function()
          local s = H.state()
          return s and s.constraints[1] and s.constraints[1].status == "delivered"
        end, "the comment delivered")
        vim.lsp.buf.code_action({
          range = { start = { 1, 0 }, ["end"] = { 1, 0 } },
          filter = function(a)
            return a.title:find("remove this steer comment", 1, true) ~= nil
          end,
          apply = true,
        })
        T.wait(function()
          return H.buf_text(src) == "def greet():\n    return 'hi'\n"
        end, "the comment line removed")
        H.cmd("Rein abort keep")
        H.wait_status("aborted")
      end,
    },
  })
end

-- Agents per task ---------------------------------------------------------------------------

T.scenario(":Rein start chooses the agent", {
  {
    "with several agents configured it asks which, before the goal",
    function()
      local root = H.repo({ ["a.txt"] = "a\n" })
      vim.cmd("cd " .. vim.fn.fnameescape(root))
      local function agent(name)
        return { kind = "script", steps = { { write = { path = name .. ".txt", content = name .. "\n" } }, { finish = name } } }
      end
      H.setup({ agent = vim.NIL, agents = { quick = agent("quick"), careful = agent("careful") } })
      vim.cmd("edit " .. vim.fn.fnameescape(root .. "/a.txt"))
      H.wait_client()
      local first = #H.prompts
      table.insert(H.selects, "quick")
      table.insert(H.inputs, "be quick")
      H.cmd("Rein start")
      local s = H.wait_status("done")
      T.eq(s.summary, "quick")
      T.eq(T.read_file(root .. "/quick.txt"), "quick\n")
      T.eq(H.prompts[first + 1].prompt, "Which agent?")
      T.eq(H.prompts[first + 1].items, { "careful", "quick" })
      T.eq(H.prompts[first + 2].prompt, "Rein goal (quick): ")
      H.cmd("Rein start agent=careful be careful")
      T.wait(function()
        local st = H.state()
        return st and st.task.goal == "be careful" and st.status == "done"
      end, "the second task done")
      T.eq(T.read_file(root .. "/careful.txt"), "careful\n")
      T.eq(#H.prompts, first + 2, "no prompt with agent= and a goal")
    end,
  },
})

-- The log ------------------------------------------------------------------------------------

T.test("the server's warnings reach lsp.log as [WARN] log messages, never as [ERROR] stderr", function()
  local root = H.repo({ ["a.txt"] = "a\n" })
  vim.cmd("cd " .. vim.fn.fnameescape(root))
  H.setup()
  vim.cmd("edit " .. vim.fn.fnameescape(root .. "/a.txt"))
  local client = H.wait_client()
  -- A change to a buffer the server never saw opened: it is ignored with a warning.
  local never = vim.uri_from_fname(root .. "/never-opened.txt")
  client:notify("textDocument/didChange", {
    textDocument = { uri = never, version = 2 },
    contentChanges = { { text = "x" } },
  })
  local path = vim.lsp.get_log_path()
  local log = T.wait(function()
    local text = T.read_file(path) or ""
    return text:find("ignored a didChange", 1, true) and text
  end, "the warning in lsp.log", 30000)
  local warned = false
  for line in log:gmatch("[^\n]+") do
    if line:find("ignored a didChange", 1, true) then
      T.truthy(not line:find("[ERROR]", 1, true), "logged as an error: " .. line)
      warned = warned or line:find("[WARN]", 1, true) ~= nil
    end
  end
  T.truthy(warned, "a [WARN] line names it:\n" .. log)
end)

T.test("the server's info lines never land in lsp.log as [ERROR]", function()
  local log = T.read_file(vim.lsp.get_log_path()) or ""
  for line in log:gmatch("[^\n]+") do
    if line:find("[ERROR]", 1, true) and line:find("stderr", 1, true) then
      T.no_contains(line, " INFO ", "lsp.log")
    end
  end
end)
