--- :checkhealth rein
local M = {}

local health = vim.health

function M.check()
  health.start("Neovim")
  if vim.fn.has("nvim-0.10") == 1 then
    health.ok("Neovim " .. tostring(vim.version()) .. " (0.10 or newer)")
  else
    health.error("Neovim " .. tostring(vim.version()) .. " is too old", { "Rein needs Neovim 0.10 or newer" })
  end

  local rein = require("rein")
  health.start("rein server")
  if not rein._setup_done then
    health.info('require("rein").setup{} has not been called; checking the defaults')
  end
  local cmd = rein.server_cmd()
  local bin = cmd[1]
  local exe = bin and vim.fn.exepath(bin) or ""
  if exe == "" then
    health.error(("server binary %q not found"):format(tostring(bin)), {
      "build it with `cargo build` (target/debug/rein) or `cargo install --path server`",
      'or point setup{cmd = {"/path/to/rein", "lsp"}} or $REIN_BIN at it',
    })
  else
    health.ok("server binary: " .. exe)
    local ok, res = pcall(function()
      return vim.system({ exe, "--version" }, { text = true }):wait(10000)
    end)
    if not ok then
      health.error("cannot run " .. exe .. ": " .. tostring(res))
    elseif res.code ~= 0 then
      health.warn(("`%s --version` exited with %d: %s"):format(exe, res.code, vim.trim((res.stderr or "") .. (res.stdout or ""))))
    else
      local v = vim.trim(res.stdout or "")
      health.ok("runs: " .. (v ~= "" and v or (exe .. " --version")))
    end
  end
  health.info("server command: " .. table.concat(cmd, " "))

  health.start("workspace")
  if vim.fn.executable("git") == 1 then
    health.ok("git: " .. vim.fn.exepath("git"))
  else
    health.warn("git not found on PATH (Rein itself does not need it; the tests do)")
  end
  local buf = vim.api.nvim_get_current_buf()
  local root = rein.root_of(vim.api.nvim_buf_get_name(buf) ~= "" and buf or (vim.uv or vim.loop).cwd())
  if root then
    health.ok("git work tree: " .. root)
  else
    health.warn("the current buffer / directory is not inside a git work tree; Rein only works in one")
  end
  local clients = rein.clients()
  if #clients == 0 then
    health.info("no Rein client running")
  end
  for _, c in ipairs(clients) do
    local state = rein._states[c.id]
    health.ok(("client %d for %s (%s): %s"):format(
      c.id,
      tostring(c.config.root_dir),
      c.offset_encoding or "?",
      rein.describe(state) or "starting"
    ))
  end
end

return M
