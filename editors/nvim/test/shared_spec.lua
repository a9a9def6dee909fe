-- One task, several clients (issue 26): the terminal's `rein` acts on the task this Neovim
-- started, through the working tree's one engine, and the plugin's view follows.
local T = require("runner")
local H = require("helpers")

H.stub_ui()
H.capture_notify()

--- Runs `rein ARGS…` in the repository as a person would in a terminal beside the editor.
local function rein_cli(root, args)
  local r = vim.system(vim.list_extend({ H.bin }, args), { cwd = root, text = true }):wait(60000)
  return r.code, (r.stdout or "") .. (r.stderr or "")
end

do
  local root
  T.scenario("the terminal acts on the editor's task", {
    {
      "rein pause from a terminal pauses the task :Rein start began, and the statusline follows",
      function()
        root = H.repo({ ["a.txt"] = "a\n" }, {
          steps = {
            { read = "a.txt", think_ms = 100 },
            { read = "a.txt", think_ms = 600000 },
          },
        })
        vim.cmd("cd " .. vim.fn.fnameescape(root))
        H.setup()
        vim.cmd("edit " .. vim.fn.fnameescape(root .. "/a.txt"))
        H.wait_client()
        H.cmd("Rein start read a.txt")
        H.wait_status("running")
        local code, out = rein_cli(root, { "pause" })
        T.eq(code, 0, out)
        H.wait_status("paused")
        T.eq(H.statusline(), "Rein: paused")
      end,
    },
    {
      "rein steer and rein resume from the terminal reach the same task; the view shows the steer",
      function()
        local code, out = rein_cli(root, { "steer", "keep it short" })
        T.eq(code, 0, out)
        local s = T.wait(function()
          local s = H.state()
          return s and #(s.constraints or {}) > 0 and s
        end, "the terminal's steer in the editor's state")
        T.eq(s.constraints[1].text, "keep it short")
        code, out = rein_cli(root, { "resume" })
        T.eq(code, 0, out)
        H.wait_status("running")
      end,
    },
    {
      "rein takeover from the terminal gives the person control; :Rein handback from the editor gives it back",
      function()
        local code, out = rein_cli(root, { "takeover" })
        T.eq(code, 0, out)
        H.wait_status("human")
        T.eq(H.statusline(), "Rein: you hold control")
        table.insert(H.inputs, "")
        H.cmd("Rein handback")
        H.wait_status("running")
        code, out = rein_cli(root, { "abort", "--keep-changes" })
        T.eq(code, 0, out)
        H.wait_status("aborted")
        -- Nothing left to act on: the terminal says so and fails.
        code, out = rein_cli(root, { "pause" })
        T.truthy(code ~= 0, "rein pause on an ended task fails: " .. out)
        T.contains(out, "ended")
        vim.cmd("%bwipeout!")
      end,
    },
  })
end
