-- Installing the plugin as the README says, from the repository's git URL with lazy.nvim.
-- lazy.nvim is on no package registry, so the test does what lazy.nvim does with the spec
-- (lazy/core/loader.lua): clone the URL (here a local clone of this repository), put the
-- clone on 'runtimepath', source its plugin/ files, set 'loadplugins' off so Neovim sources
-- nothing by itself, then call the spec's config(plugin). The spec is the README's own block,
-- so a README edit is tested. The clone has the committed tree (HEAD), as a user would get.
local T = require("runner")

local plugin_dir = vim.g.rein_plugin_dir
local repo = vim.fs.dirname(vim.fs.dirname(plugin_dir))

--- The ```lua block after the README's "**lazy.nvim**" line.
local function readme_spec()
  local text = T.read_file(plugin_dir .. "/README.md")
  local from = T.truthy(text:find("**lazy.nvim**", 1, true), "the README's lazy.nvim section")
  local body = text:match("```lua\n(.-)\n```", from)
  return T.truthy(body, "a lua block in the lazy.nvim section")
end

T.test("the README's lazy.nvim spec installs from the git URL: :Rein, <Plug> mappings, :help rein", function()
  local spec = readme_spec()
  T.contains(spec, "url = ")
  local work = vim.fn.tempname()
  vim.fn.mkdir(work, "p")
  local url = "file://" .. repo
  local dir = work .. "/lazy/rein"
  T.sh({ "git", "clone", "--quiet", url, dir })
  T.truthy(vim.uv.fs_stat(dir .. "/editors/nvim/doc/tags"), "doc/tags is in the repository")
  T.write_file(work .. "/spec.lua", "return " .. spec .. "\n")
  local out = work .. "/result.json"
  T.write_file(
    work .. "/init.lua",
    ([[
vim.go.loadplugins = false -- as lazy.nvim: it sources plugin files itself
local spec = dofile(%q)
local plugin = { name = spec.name, dir = %q, url = spec.url }
vim.opt.runtimepath:append(plugin.dir)
for _, f in ipairs(vim.fn.glob(plugin.dir .. "/plugin/**/*.{lua,vim}", true, true)) do
  vim.cmd.source(f)
end
spec.config(plugin, {})
vim.api.nvim_create_autocmd("VimEnter", { callback = function()
  local r = { command = vim.fn.exists(":Rein"), plug = vim.fn.maparg("<Plug>(rein-pause)", "n") }
  r.help = pcall(vim.cmd, "help rein") and vim.fn.expand("%%:p") or false
  r.setup = require("rein")._setup_done
  r.agent = require("rein").config.agent
  r.complete = vim.fn.getcompletion("Rein tak", "cmdline")
  vim.fn.writefile({ vim.json.encode(r) }, %q)
  vim.cmd("qall!")
end })
]]):format(work .. "/spec.lua", dir, out)
  )
  local r = vim.system({ vim.v.progpath, "--headless", "--clean", "-u", work .. "/init.lua" }, { cwd = work, text = true }):wait()
  T.eq(r.code, 0, "nvim exit: " .. (r.stderr or ""))
  local got = vim.json.decode(T.read_file(out) or "null")
  T.eq(got.command, 2, ":Rein exists")
  T.eq(got.plug, "<Cmd>Rein pause<CR>")
  T.eq(got.help, dir .. "/editors/nvim/doc/rein.txt", ":help rein from the clone's shipped tags")
  T.eq(got.setup, true)
  T.eq(got.agent, { kind = "script", plan = ".rein/plan.json" }, "the spec's setup options")
  T.eq(got.complete, { "takeover" })
  T.eq(vim.fn.isdirectory(dir .. "/plugin"), 0, "nothing at the repository root for lazy to source")
end)
