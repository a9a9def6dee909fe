-- :checkhealth rein on an older kernel (forced with REIN_LANDLOCK=abi:3, which the server
-- inherits): what the sandbox cannot enforce is a WARNING naming it.
local T = require("runner")
local H = require("helpers")

H.stub_ui()
H.capture_notify()

T.test(":checkhealth rein says what the sandbox cannot enforce on an older kernel", function()
  local root = H.repo({ ["a.txt"] = "a\n" })
  vim.cmd("cd " .. vim.fn.fnameescape(root))
  vim.env.REIN_LANDLOCK = "abi:3"
  H.setup()
  vim.cmd("edit " .. vim.fn.fnameescape(root .. "/a.txt"))
  H.wait_client()
  local text = H.checkhealth()
  T.no_contains(text, "ERROR", "checkhealth")
  T.contains(text, "Landlock ABI 3 available; no task yet")
  T.contains(text, "WARNING")
  T.contains(text, "only partly in force here. NOT enforced: network: TCP connect and bind")
  T.contains(text, "signals and abstract sockets")
end)
