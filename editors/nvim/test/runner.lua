-- A tiny test runner for headless Neovim. A spec file returns nothing; it calls
-- `T.test(name, fn)` or `T.scenario(name, {{name, fn}, ...})` and the runner reports
-- PASS/FAIL lines on stdout, appends "passed failed" to $REIN_NVIM_RESULTS, and quits
-- with a non-zero code when anything failed.
local T = {}

local queue = {}
local passed, failed = 0, 0

local function out(s)
  io.stdout:write(s .. "\n")
  io.stdout:flush()
end
T.out = out

function T.test(name, fn)
  table.insert(queue, { name = name, fn = fn })
end

--- Dependent steps: after the first failure the rest are reported failed, not run.
function T.scenario(name, steps)
  local broken = false
  for _, s in ipairs(steps) do
    table.insert(queue, {
      name = name .. ": " .. s[1],
      fn = function()
        if broken then
          error({ skipped = true }, 0)
        end
        broken = true
        s[2]()
        broken = false
      end,
    })
  end
end

local function fmt(v)
  if type(v) == "string" then
    return string.format("%q", v)
  end
  return vim.inspect(v)
end

function T.eq(actual, expected, what)
  if not vim.deep_equal(actual, expected) then
    error(("%sexpected %s, got %s"):format(what and (what .. ": ") or "", fmt(expected), fmt(actual)), 2)
  end
end

function T.truthy(v, what)
  if not v then
    error((what or "expected a true value") .. ", got " .. fmt(v), 2)
  end
  return v
end

function T.match(s, pattern, what)
  if type(s) ~= "string" or not s:find(pattern) then
    error(("%sexpected %s to match %q"):format(what and (what .. ": ") or "", fmt(s), pattern), 2)
  end
end

function T.contains(s, needle, what)
  if type(s) ~= "string" or not s:find(needle, 1, true) then
    error(("%sexpected %s to contain %q"):format(what and (what .. ": ") or "", fmt(s), needle), 2)
  end
end

function T.no_contains(s, needle, what)
  if type(s) == "string" and s:find(needle, 1, true) then
    error(("%sexpected %s not to contain %q"):format(what and (what .. ": ") or "", fmt(s), needle), 2)
  end
end

--- Extra context printed when a wait times out (set by specs).
T.context = function()
  return ""
end

--- Waits (processing events) until cond() is truthy; fails with `what` after `timeout` ms.
function T.wait(cond, what, timeout)
  local value
  local ok = vim.wait(timeout or 60000, function()
    local good, v = pcall(cond)
    value = good and v or nil
    return value and true or false
  end, 20)
  if not ok then
    error(("timed out waiting for %s%s"):format(what or "a condition", T.context()), 2)
  end
  return value
end

function T.read_file(path)
  local f = io.open(path, "rb")
  if not f then
    return nil
  end
  local s = f:read("*a")
  f:close()
  return s
end

function T.write_file(path, text)
  vim.fn.mkdir(vim.fs.dirname(path), "p")
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

--- Runs a shell command (list), erroring on failure; returns stdout.
function T.sh(cmd, cwd)
  local r = vim.system(cmd, { cwd = cwd, text = true }):wait()
  if r.code ~= 0 then
    error(("command failed (%d): %s\n%s%s"):format(r.code, table.concat(cmd, " "), r.stdout or "", r.stderr or ""), 2)
  end
  return r.stdout
end

function T.run(label)
  out(("== %s"):format(label))
  for _, t in ipairs(queue) do
    local ok, err = xpcall(t.fn, function(e)
      if type(e) == "table" and e.skipped then
        return "not run: an earlier step of this scenario failed"
      end
      return debug.traceback(tostring(e), 2)
    end)
    if ok then
      passed = passed + 1
      out("PASS " .. t.name)
    else
      failed = failed + 1
      out("FAIL " .. t.name)
      for line in tostring(err):gmatch("[^\n]+") do
        out("     " .. line)
      end
    end
  end
  out(("-- %s: %d passed, %d failed"):format(label, passed, failed))
  local results = os.getenv("REIN_NVIM_RESULTS")
  if results and results ~= "" then
    local f = io.open(results, "a")
    if f then
      f:write(("%d %d\n"):format(passed, failed))
      f:close()
    end
  end
  return failed
end

return T
