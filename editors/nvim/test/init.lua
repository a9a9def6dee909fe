-- Minimal init for the headless tests: the plugin from this checkout, nothing else.
-- Usage: REIN_NVIM_SPEC=test/xxx_spec.lua nvim --headless --clean -u test/init.lua
local here = vim.fs.normalize(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p"))
local test_dir = vim.fs.dirname(here)
local plugin_dir = vim.fs.dirname(test_dir)

vim.opt.runtimepath:prepend(plugin_dir)
vim.opt.swapfile = false
vim.opt.shadafile = "NONE"
vim.opt.more = false
vim.opt.columns = 120
vim.opt.lines = 40
package.path = test_dir .. "/?.lua;" .. package.path
vim.g.rein_test_dir = test_dir
vim.g.rein_plugin_dir = plugin_dir

-- Never block on a prompt: a test that needs an answer stubs these itself.
vim.ui.input = function(opts, cb)
  io.stdout:write("unexpected vim.ui.input: " .. tostring(opts and opts.prompt) .. "\n")
  cb(nil)
end
vim.ui.select = function(_, opts, cb)
  io.stdout:write("unexpected vim.ui.select: " .. tostring(opts and opts.prompt) .. "\n")
  cb(nil, nil)
end

local spec = os.getenv("REIN_NVIM_SPEC")
if spec and spec ~= "" then
  vim.api.nvim_create_autocmd("VimEnter", {
    once = true,
    callback = function()
      vim.schedule(function()
        local T = require("runner")
        local ok, err = xpcall(dofile, debug.traceback, spec)
        local failed
        if not ok then
          io.stdout:write("FAIL loading " .. spec .. "\n" .. tostring(err) .. "\n")
          local results = os.getenv("REIN_NVIM_RESULTS")
          if results and results ~= "" then
            local f = io.open(results, "a")
            if f then
              f:write("0 1\n")
              f:close()
            end
          end
          failed = 1
        else
          failed = T.run(vim.fn.fnamemodify(spec, ":t"))
        end
        -- Stop the servers politely so they can clean up, then leave.
        for _, c in ipairs(vim.lsp.get_clients()) do
          c:stop()
        end
        vim.wait(5000, function()
          return #vim.lsp.get_clients() == 0
        end, 50)
        if failed > 0 then
          vim.cmd("cquit 1")
        else
          vim.cmd("qall!")
        end
      end)
    end,
  })
end
