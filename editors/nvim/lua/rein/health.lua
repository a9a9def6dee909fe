--- :checkhealth rein
local M = {}

local health = vim.health

function M.check()
  health.start("Neovim")
  if vim.fn.has("nvim-0.11") == 1 then
    health.ok("Neovim " .. tostring(vim.version()) .. " (0.11 or newer)")
  else
    health.error("Neovim " .. tostring(vim.version()) .. " is too old", { "Rein needs Neovim 0.11 or newer" })
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

  -- What the agent's commands and process may touch: the task's sandbox, else what the
  -- server said at initialize this kernel can confine.
  health.start("sandbox")
  if #clients == 0 then
    health.info("no Rein client running: open a file in a git work tree to see the sandbox")
  end
  for _, c in ipairs(clients) do
    -- No task yet: the state is vim.NIL, which cannot be indexed.
    local st = rein._states[c.id]
    local sb = type(st) == "table" and st.sandbox or nil
    local here = vim.tbl_get(c.server_capabilities or {}, "experimental", "rein", "landlock") or {}
    local advice = { 'set sandbox = "workspace-write" in rein.toml or setup{ sandbox = "workspace-write" }' }
    if type(sb) == "table" and sb.mode == "off" then
      health.warn(("client %d: sandbox off: commands and the agent run with your full rights"):format(c.id), advice)
    elseif type(sb) == "table" and not sb.inForce then
      health.warn(
        ("client %d: the sandbox cannot be had here (%s): commands and the agent run unconfined, gated only by the policy"):format(
          c.id,
          tostring(sb.unavailable or "no Landlock")
        ),
        { "Landlock needs Linux 5.13 or newer with landlock in the lsm= boot list" }
      )
    elseif type(sb) == "table" then
      local net = (sb.network and #sb.network > 0) and ("; network for: " .. table.concat(sb.network, ", ")) or ""
      health.ok(("client %d: sandbox %s (Landlock ABI %s)%s"):format(c.id, sb.mode, tostring(sb.landlockAbi), net))
      M._coverage(health, c.id, sb.enforced, sb.notEnforced)
    elseif type(here.unavailable) == "string" then
      health.warn(("client %d: the sandbox cannot be had here: %s"):format(c.id, here.unavailable), {
        "Landlock needs Linux 5.13 or newer with landlock in the lsm= boot list",
      })
    elseif here.abi ~= nil and here.abi ~= vim.NIL then
      health.ok(("client %d: Landlock ABI %s available; no task yet"):format(c.id, tostring(here.abi)))
      M._coverage(health, c.id, here.enforced, here.notEnforced)
    end
  end
end

--- What the sandbox enforces here, and a warning for each thing this machine cannot.
function M._coverage(health, id, enforced, missing)
  if type(enforced) == "table" and #enforced > 0 then
    health.info(("client %d: enforced: %s"):format(id, table.concat(enforced, "; ")))
  end
  if type(missing) == "table" and #missing > 0 then
    health.warn(
      ("client %d: the sandbox is only partly in force here. NOT enforced: %s"):format(id, table.concat(missing, "; ")),
      { "a newer kernel (Landlock ABI 6: Linux 6.12 or newer) enforces all of it" }
    )
  end
end

return M
