-- Rein: the :Rein command and the <Plug>(rein-…) mappings (no key is mapped by default).
-- Everything else starts with require("rein").setup{}, which also sources this file when a
-- plugin manager put the plugin on 'runtimepath' too late for Neovim to load it.
if vim.g.loaded_rein then
  return
end
vim.g.loaded_rein = true

if vim.fn.has("nvim-0.11") == 0 then
  vim.api.nvim_echo({ { "Rein needs Neovim 0.11 or newer", "ErrorMsg" } }, true, {})
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

-- <Plug>(rein-NAME) runs `:Rein NAME` (asking for what it needs). Map keys to them, e.g.
--   vim.keymap.set("n", "<leader>rp", "<Plug>(rein-pause)")
local plugs = {
  start = "start",
  continue = "continue",
  pause = "pause",
  resume = "resume",
  steer = "steer",
  ["steer-urgent"] = "! steer",
  abort = "abort",
  takeover = "takeover",
  handback = "handback",
  state = "state",
  decide = "decide",
  rewind = "rewind",
  release = "release",
  steps = "steps",
  changes = "changes",
  output = "output",
  transcript = "transcript",
  diff = "diff",
  tasks = "tasks",
  decisions = "decisions",
  open = "open",
  land = "land",
  ["pause-all"] = "pause all",
  ["resume-all"] = "resume all",
}
for name, sub in pairs(plugs) do
  local ex = sub:sub(1, 1) == "!" and ("Rein" .. sub) or ("Rein " .. sub)
  vim.keymap.set("n", "<Plug>(rein-" .. name .. ")", "<Cmd>" .. ex .. "<CR>", { desc = "Rein: " .. sub })
end
-- In Visual mode a steer is about the selected lines (`:'<,'>Rein steer`).
vim.keymap.set("x", "<Plug>(rein-steer)", ":Rein steer<CR>", { silent = true, desc = "Rein: steer about these lines" })
vim.keymap.set("x", "<Plug>(rein-steer-urgent)", ":Rein! steer<CR>", {
  silent = true,
  desc = "Rein: urgent steer about these lines",
})
