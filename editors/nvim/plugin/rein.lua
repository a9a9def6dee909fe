-- Rein: the :Rein command. Everything else starts with require("rein").setup{}.
if vim.g.loaded_rein then
  return
end
vim.g.loaded_rein = true

if vim.fn.has("nvim-0.10") == 0 then
  vim.api.nvim_echo({ { "Rein needs Neovim 0.10 or newer", "ErrorMsg" } }, true, {})
  return
end

vim.api.nvim_create_user_command("Rein", function(cmd)
  require("rein.commands").run(cmd)
end, {
  nargs = "*",
  bang = true,
  range = true,
  desc = "Rein: steer the coding agent (start, pause, resume, steer, abort, takeover, handback, …)",
  complete = function(arglead, cmdline, pos)
    return require("rein.commands").complete(arglead, cmdline, pos)
  end,
})
