--- Rendered views: lines with highlights, folds and per-line data, built in pure Lua (for
--- tests) and applied to a scratch buffer. The state float and the transcript use it, so both
--- fold the same way (a block folds closed; its fold line says what is inside) and a mapping
--- can ask what a line is about (`M.data`).
local M = {}

M.ns = vim.api.nvim_create_namespace("rein_view")

--- The highlight groups, linked to standard ones unless the user set them.
local groups = {
  ReinTitle = "Title",
  ReinHeading = "Statement",
  ReinMuted = "Comment",
  ReinAgent = "Function",
  ReinYou = "Special",
  ReinThought = "Comment",
  ReinDone = "DiagnosticOk",
  ReinActive = "DiagnosticInfo",
  ReinFailed = "DiagnosticError",
  ReinWarn = "DiagnosticWarn",
  ReinOutput = "Comment",
  ReinControl = "PreProc",
  ReinStep = "Identifier",
  ReinTime = "NonText",
}

function M.define_highlights()
  for name, link in pairs(groups) do
    vim.api.nvim_set_hl(0, name, { link = link, default = true })
  end
end
M.define_highlights()
vim.api.nvim_create_autocmd("ColorScheme", {
  group = vim.api.nvim_create_augroup("rein_view_hl", { clear = true }),
  callback = M.define_highlights,
})

--- A view being built: `lines` (strings), and for each line its highlights, fold level and
--- data (what the line is about, e.g. `{step = 4}`).
---@class rein.View
---@field lines string[]
---@field hls table[] per line: list of {from, to, group} (byte columns, to = -1: the end)
---@field folds string[] per line: "0", ">1" (a fold starts) or "1" (inside it)
---@field data table[] per line: a table or false
---@field right table[] per line: text shown at the right end (virtual), or false
local View = {}
View.__index = View

function M.new()
  return setmetatable({ lines = {}, hls = {}, folds = {}, data = {}, right = {} }, View)
end

--- Adds a line; `hl` is a group for the whole line or a list of {from, to, group}.
--- opts: `fold` ("start" or "in"), `data` (what the line is about), `right` (virtual text).
function View:add(text, hl, opts)
  opts = opts or {}
  text = tostring(text or ""):gsub("\r?\n", " ⏎ ")
  table.insert(self.lines, text)
  local h = {}
  if type(hl) == "string" then
    h = { { 0, -1, hl } }
  elseif type(hl) == "table" then
    h = hl
  end
  table.insert(self.hls, h)
  table.insert(self.folds, opts.fold == "start" and ">1" or opts.fold == "in" and "1" or "0")
  table.insert(self.data, opts.data or false)
  table.insert(self.right, opts.right or false)
  return #self.lines
end

--- Adds `text` split on newlines: the first line with `first` in front, the rest with
--- `indent`; every line gets `hl`. opts as for `add` (a fold goes over all of them: "start"
--- makes the first line start it).
function View:add_block(text, first, indent, hl, opts)
  opts = opts or {}
  local parts = vim.split((tostring(text or ""):gsub("%s+$", "")), "\r?\n")
  for i, l in ipairs(parts) do
    local fold = opts.fold
    if fold == "start" and i > 1 then
      fold = "in"
    end
    self:add((i == 1 and first or indent) .. l, hl, { fold = fold, data = opts.data, right = i == 1 and opts.right or nil })
  end
end

--- Adds every line of `other` (another view).
function View:append(other)
  for i, l in ipairs(other.lines) do
    table.insert(self.lines, l)
    table.insert(self.hls, other.hls[i])
    table.insert(self.folds, other.folds[i])
    table.insert(self.data, other.data[i])
    table.insert(self.right, other.right[i])
  end
end

--- Per buffer: the fold levels and data of its lines (indexed by line number).
M._meta = {}

local function meta(buf)
  M._meta[buf] = M._meta[buf] or { folds = {}, data = {} }
  return M._meta[buf]
end

--- Writes `view` into `buf` from line `first` (1-based; default 1) to the end, replacing what
--- was there; the lines before `first` are left as they are (a live view appends).
function M.apply(buf, view, first)
  first = first or 1
  local m = meta(buf)
  -- The fold levels first: changing the lines makes Neovim evaluate 'foldexpr' at once.
  for i = #m.folds, first, -1 do
    m.folds[i] = nil
    m.data[i] = nil
  end
  for i = 1, #view.lines do
    m.folds[first + i - 1] = view.folds[i]
    m.data[first + i - 1] = view.data[i]
  end
  local was = vim.bo[buf].modifiable
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, first - 1, -1, false, view.lines)
  vim.bo[buf].modifiable = was
  vim.api.nvim_buf_clear_namespace(buf, M.ns, first - 1, -1)
  for i, line in ipairs(view.lines) do
    local lnum = first + i - 1
    for _, h in ipairs(view.hls[i]) do
      local to = h[2] < 0 and #line or math.min(h[2], #line)
      if to > h[1] then
        pcall(vim.api.nvim_buf_set_extmark, buf, M.ns, lnum - 1, h[1], { end_col = to, hl_group = h[3], priority = 150 })
      end
    end
    if view.right[i] then
      pcall(vim.api.nvim_buf_set_extmark, buf, M.ns, lnum - 1, 0, {
        virt_text = { { view.right[i], "ReinTime" } },
        virt_text_pos = "right_align",
      })
    end
  end
end

--- What line `lnum` of `buf` is about (its data), or nil.
function M.data(buf, lnum)
  local m = M._meta[buf]
  return m and m.data[lnum] or nil
end

--- 'foldexpr' of a view's window.
function M.foldexpr()
  local m = M._meta[vim.api.nvim_get_current_buf()]
  return m and m.folds[vim.v.lnum] or "0"
end

--- 'foldtext': the fold's first line marked "▸" (closed), and how many more lines it holds
--- unless that line says so itself (a header ending in ":").
function M.foldtext()
  local first = vim.fn.getline(vim.v.foldstart)
  local indent, rest = first:match("^(%s*)(.-)$")
  local more = vim.v.foldend - vim.v.foldstart
  if rest:sub(-1) == ":" then
    return ("%s▸ %s"):format(indent, rest:sub(1, -2))
  end
  return ("%s▸ %s … (+%d line%s)"):format(indent, rest, more, more == 1 and "" or "s")
end

--- Makes `win` fold its view's blocks (closed until opened).
function M.fold_window(win)
  local wo = vim.wo[win]
  wo.foldmethod = "expr"
  wo.foldexpr = "v:lua.require'rein.view'.foldexpr()"
  wo.foldtext = "v:lua.require'rein.view'.foldtext()"
  wo.foldlevel = 0
  wo.foldenable = true
  -- A closed fold reads as a line of text, not a row of dashes.
  wo.fillchars = "fold: ,eob: "
end

vim.api.nvim_create_autocmd("BufWipeout", {
  group = vim.api.nvim_create_augroup("rein_view_meta", { clear = true }),
  callback = function(ev)
    M._meta[ev.buf] = nil
  end,
})

return M
