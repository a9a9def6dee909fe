--- A step's diff: what one step changed, read from its checkpoints with read-only git
--- (`git diff`; refs, index and tree stay the server's). `:Rein diff N` and the transcript's
--- tool rows open it.
local M = {}

--- git's empty tree, to diff a root checkpoint against.
M.EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

--- The two checkpoints step `n`'s diff spans, from `steps` (each `{n, checkpoint}`): `to` is
--- the step's checkpoint, `from` that of the closest earlier step that has one (nil when none:
--- the caller diffs against the checkpoint's parent, the task's base); `same` when the step
--- ended on the checkpoint before it (it changed nothing). nil when the step has no checkpoint.
function M.step_range(steps, n)
  local sorted = {}
  for _, s in ipairs(type(steps) == "table" and steps or {}) do
    table.insert(sorted, s)
  end
  table.sort(sorted, function(a, b)
    return (a.n or 0) < (b.n or 0)
  end)
  for i, s in ipairs(sorted) do
    if s.n == n then
      local to = type(s.checkpoint) == "string" and s.checkpoint ~= "" and s.checkpoint or nil
      if not to then
        return nil
      end
      for j = i - 1, 1, -1 do
        local c = sorted[j].checkpoint
        if type(c) == "string" and c ~= "" then
          return { from = c, to = to, same = c == to }
        end
      end
      return { from = nil, to = to, same = false }
    end
  end
  return nil
end

local function git(root, args, cb)
  vim.system(vim.list_extend({ "git", "-c", "core.quotepath=off" }, args), { cwd = root, text = true }, function(r)
    vim.schedule(function()
      cb(r.code == 0, r.stdout or "", r.stderr or "")
    end)
  end)
end

--- Opens the diff of step `n` of `state` (the task of the repository at `root`) in the
--- `rein://diff/step:N` window, the cursor in it. Says so instead when the step changed
--- nothing or has no checkpoint.
function M.open(root, state, n)
  local rein = require("rein")
  local steps = type(state) == "table" and state.steps or {}
  local step
  for _, s in ipairs(type(steps) == "table" and steps or {}) do
    if s.n == n then
      step = s
    end
  end
  local range = M.step_range(steps, n)
  if not step or not range then
    rein.notify(("step %s has no checkpoint to show"):format(tostring(n)), vim.log.levels.WARN)
    return
  end
  local title = ("step %d: %s"):format(n, step.action or "")
  if range.same then
    rein.notify(("%s changed no files"):format(title))
    return
  end
  local function show(from)
    git(root, { "diff", "--no-color", "--no-ext-diff", from, range.to, "--" }, function(ok, out, err)
      if not ok then
        rein.notify(("cannot read the diff of step %d: %s"):format(n, vim.trim(err)), vim.log.levels.ERROR)
        return
      end
      if vim.trim(out) == "" then
        rein.notify(("%s changed no files"):format(title))
        return
      end
      local lines = { ("# %s (%s → %s)"):format(title, from:sub(1, 8), range.to:sub(1, 8)) }
      vim.list_extend(lines, vim.split((out:gsub("\n$", "")), "\n", { plain = true }))
      require("rein.ui").show("diff", lines, {
        name = ("rein://diff/step:%d"):format(n),
        ft = "diff",
        how = rein.config.report == false and "split" or rein.config.report,
        title = "Rein " .. title,
        focus = true,
      })
    end)
  end
  if range.from then
    show(range.from)
  else
    git(root, { "rev-parse", "--verify", "--quiet", range.to .. "^" }, function(ok, out)
      show(ok and vim.trim(out) ~= "" and vim.trim(out) or M.EMPTY_TREE)
    end)
  end
end

return M
