// End-to-end test of the Rein extension in a real VS Code (code-server 4.100.3) driven by
// headless Chromium: start a scripted task from the palette, steer it while it runs, pause,
// take over, edit a file, hand back, approve a gated command in the Rein view, and check the
// status bar, the view and the files on disk at each point. Run through test/e2e.sh.
//
// Env: CODE_SERVER (binary), VSIX, REIN_BIN, ARTIFACTS (screenshot dir), SCREENSHOT (where to
// copy one mid-run screenshot, optional), TRANSCRIPT_SCREENSHOT (where to copy the screenshot of
// what a person back after ten minutes looks at, optional), KEEP=1 to keep the scratch repo.

import { existsSync, mkdirSync, readFileSync, readdirSync, statSync, copyFileSync, writeFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { execFileSync } from 'node:child_process';
import { makeRepo, startCodeServer, launchBrowser, waitFor, sleep, git, cleanup } from './harness.mjs';

const env = (k, d) => process.env[k] ?? d;
const CODE_SERVER = env('CODE_SERVER', join(process.env.HOME ?? '/root', '.cache/code-server-4.100.3/node_modules/.bin/code-server'));
const VSIX = env('VSIX');
const REIN_BIN = env('REIN_BIN', '/work/main/target/debug/rein');
const ART = env('ARTIFACTS', join(process.cwd(), 'e2e-artifacts'));
const SHOT = env('SCREENSHOT', '');
const TRANSCRIPT_SHOT = env('TRANSCRIPT_SCREENSHOT', '');
const ONLY = env('ONLY', '');
const TASKS_SHOT = env('TASKS_SCREENSHOT', '');
mkdirSync(ART, { recursive: true });

const GOAL = 'Add a farewell next to the greeting';
const STEER = 'keep greet() returning a plain string';
const HUMAN_LINE = 'def shout(name):';
const COMMENT = '# rein: say which check ran';
const COMMENT2 = '# rein: keep it POSIX sh';
const COMMENT3 = '# rein: print the name of the check';
// The agent's words, as a scripted agent says them (`say`), and the plan items it works on
// (`item`): the plan moves step by step and the agent's text reaches the view and transcript.
const SAY_READ = 'First I read how greet() is written.';
const SAY_FAREWELL = 'Now the farewell, next to the greeting.';
const SAY_TESTS = 'Running the tests; they take a few seconds.';
const PLAN_ITEMS = ['Read the greeter', 'Adjust the greeting', 'Write notes', 'Add a farewell', 'Document it', 'Run the tests and the check'];
const steps = [
  { plan: [{ text: PLAN_ITEMS[0], status: 'active' }, ...PLAN_ITEMS.slice(1)], think_ms: 1200, say: 'I will read the greeter, then add a farewell beside it.' },
  { read: 'src/greet.py', item: 1, say: SAY_READ, think_ms: 2000 },
  // Refused by Rein (the repository's own .git): the person sees what the agent was told.
  { write: { path: '.GIT/config', content: '[core]\n' }, item: 2, say: 'Setting up the repository config first.', think_ms: 1500 },
  { edit: { path: 'src/greet.py', old: 'return "hi " + name', new: 'return "hello " + name' }, item: 2, say: 'The greeting should say hello rather than hi.', think_ms: 2500 },
  { write: { path: 'NOTES.md', content: '# Notes\n\nThe greeter says hello.\n' }, item: 3, say: 'Notes first, so the change is written down.', think_ms: 4000 },
  { write: { path: 'src/farewell.py', content: 'def farewell(name):\n    return "bye " + name\n' }, item: 4, say: SAY_FAREWELL, think_ms: 4000 },
  { edit: { path: 'README.md', old: 'Says hello.', new: 'Says hello and goodbye.' }, item: 5, say: 'The README should mention the farewell.', think_ms: 5000 },
  // A long command, allowed by the policy: its output streams while it runs.
  { run: './test.sh', item: 6, say: SAY_TESTS, think_ms: 3000 },
  { run: { cmd: 'git tag v1', timeout_s: 30 }, say: 'Tagging this as v1.', think_ms: 1000 },
  { run: { cmd: './check.sh', timeout_s: 30 }, item: 6, think_ms: 2000 },
  { finish: 'Added farewell() and documented it.', think_ms: 1000 },
];
const plan = { steps };
// A second task, from an agent that reports no plan progress (plain items, none named): it
// adds a block to NOTES.md, then thinks long enough for you to edit inside it and abort.
const plainPlan = {
  steps: [
    { plan: PLAN_ITEMS, think_ms: 1200, say: 'Same plan as before.' },
    { read: 'src/greet.py', think_ms: 2000 },
    { edit: { path: 'NOTES.md', old: 'The greeter says hello.\n', new: 'The greeter says hello.\nAGENT one\nAGENT two\nAGENT three\n' }, think_ms: 2000, say: 'Three more notes.' },
    { read: 'README.md', think_ms: 120000 },
    { finish: 'never reached: the task is aborted' },
  ],
};
// It prints once the test watches its output (GO exists; at most two minutes later), so a
// loaded machine cannot make the test look after the command ended.
const GO = join(tmpdir(), `rein-vscode-e2e-go-${process.pid}`);
const TEST_SH = `#!/bin/sh\ni=0\nwhile [ ! -e '${GO}' ] && [ $i -lt 600 ]; do sleep 0.2; i=$((i+1)); done\nfor i in 1 2 3 4 5 6 7 8 9 10; do echo "test $i ... ok"; sleep 1; done\necho "10 passed"\n`;

let passed = 0;
let failed = 0;
const results = [];
function check(name, ok, detail = '') {
  if (ok) passed++;
  else failed++;
  results.push(`${ok ? 'PASS' : 'FAIL'} ${name}${detail ? ` — ${detail}` : ''}`);
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${name}${!ok && detail ? ` — ${detail}` : ''}`);
}

const { dir, repo } = makeRepo(REIN_BIN, plan, { files: { 'test.sh': TEST_SH }, settings: { 'rein.policy': { allow: ['./test.sh'] } } });
const headBefore = git(repo, 'rev-parse', 'HEAD').trim();
// Worktree tasks are made here, not in the user's data dir (the server reads it at start).
process.env.REIN_WORKTREES_DIR = join(dir, 'worktrees');
let cs;
let browser;
let page;
let shotN = 0;
async function shot(name) {
  const file = join(ART, `${String(++shotN).padStart(2, '0')}-${name}.png`);
  try {
    await page.screenshot({ path: file });
  } catch (e) {
    console.log(`screenshot ${name} failed: ${e.message}`);
  }
  return file;
}

/** The newest task's state.json, straight from disk. */
function diskState() {
  const tasks = join(repo, '.git', 'rein', 'tasks');
  if (!existsSync(tasks)) return null;
  const ids = readdirSync(tasks).filter((d) => existsSync(join(tasks, d, 'state.json')));
  if (!ids.length) return null;
  ids.sort((a, b) => statSync(join(tasks, b, 'state.json')).mtimeMs - statSync(join(tasks, a, 'state.json')).mtimeMs);
  try {
    return JSON.parse(readFileSync(join(tasks, ids[0], 'state.json'), 'utf8'));
  } catch {
    return null; // caught mid-write; the poll tries again
  }
}

// ---- UI helpers ------------------------------------------------------------------------

const statusLocator = () => page.locator('#workbench\\.parts\\.statusbar a[aria-label^="Rein"]').first();
async function statusBar() {
  return (await statusLocator().getAttribute('aria-label', { timeout: 2000 })) ?? '';
}
async function waitStatus(re, timeout = 60_000) {
  return waitFor(`status bar ~ ${re}`, async () => {
    const t = await statusBar();
    return re.test(t) ? t : false;
  }, timeout);
}
async function treeRows() {
  return page.locator('#workbench\\.parts\\.sidebar .monaco-list-row').allInnerTexts();
}
async function waitTree(what, pred, timeout = 60_000) {
  return waitFor(`Rein view: ${what}`, async () => {
    const rows = await treeRows();
    return pred(rows.map((r) => r.replace(/\s+/g, ' ').trim())) ? rows : false;
  }, timeout);
}
const quickInput = () => page.locator('.quick-input-widget');
/** Closes a leftover quick input without touching the editor (Escape there drops the selection). */
async function closeQuickInput() {
  if (await quickInput().isVisible()) await page.keyboard.press('Escape');
  // A focused webview (the Markdown preview) swallows keys: hand focus back to the workbench.
  await page.evaluate(() => {
    const a = document.activeElement;
    if (a && a.tagName === 'IFRAME') a.blur();
  });
}
async function palette(title) {
  // Right after a window loads, the palette may not list the extension's commands yet (seen
  // once in code-server): like a user, look again, at most three times.
  for (let attempt = 1; ; attempt++) {
    await closeQuickInput();
    await page.keyboard.press('F1');
    const input = quickInput().locator('input[type="text"]').first();
    await input.waitFor({ state: 'visible', timeout: 15_000 });
    await input.fill(`>${title}`);
    const listed = await quickInput().locator('.monaco-list-row', { hasText: title }).first().waitFor({ timeout: 10_000 }).then(() => true, (e) => (attempt >= 3 ? Promise.reject(e) : false));
    if (listed) break;
  }
  await sleep(150);
  await page.keyboard.press('Enter');
}
/** Answers the quick input titled `title` with `text` (empty: accept as is). */
async function answer(title, text) {
  await quickInput().locator('.quick-input-title', { hasText: title }).first().waitFor({ state: 'visible', timeout: 15_000 });
  const input = quickInput().locator('input[type="text"]').first();
  await input.fill(text);
  await sleep(100);
  await page.keyboard.press('Enter');
  await quickInput().waitFor({ state: 'hidden', timeout: 15_000 });
}
// Start Task's second question: where the task runs (each choice told by words of its detail).
const WHERE = { here: 'edits the files you have open', worktree: 'your working tree is untouched', carry: 'the changes you have not committed' };
/** Start Task from the palette: the goal, then where it runs. */
async function startTask(goal, where = 'here') {
  await palette('Rein: Start Task');
  await quickInput().locator('.quick-input-title', { hasText: 'Rein: Start Task' }).first().waitFor({ state: 'visible', timeout: 15_000 });
  // The task here has ended: Start Task offers to continue it first; this starts a new one.
  if (await quickInput().locator('.quick-input-title', { hasText: 'the task here has ended' }).count()) {
    await quickInput().locator('.monaco-list-row', { hasText: 'New task' }).first().click();
    await quickInput().locator('.quick-input-title', { hasText: /^Rein: Start Task$/ }).first().waitFor({ state: 'visible', timeout: 15_000 });
  }
  await quickInput().locator('input[type="text"]').first().fill(goal);
  await sleep(100);
  await page.keyboard.press('Enter');
  await quickInput().locator('.quick-input-title', { hasText: 'where should it run' }).first().waitFor({ state: 'visible', timeout: 15_000 });
  await quickInput().locator('.monaco-list-row').filter({ hasText: WHERE[where] }).first().click();
  await quickInput().waitFor({ state: 'hidden', timeout: 15_000 });
}
async function showReinView() {
  const active = await page.locator('.activitybar .action-item.checked a[aria-label^="Rein"]').count();
  if (!active) await page.locator('.activitybar .action-item a[aria-label^="Rein"]').first().click();
}
/** Clears every notification, so the next one read is new. */
async function closeToasts() {
  await palette('Notifications: Clear All Notifications');
  await closeQuickInput();
}
/** The texts of the notification toasts on screen. */
async function toasts() {
  return (await page.locator('.notification-toast').allInnerTexts()).map((t) => t.replace(/\s+/g, ' ').trim());
}
/** Hovers the Rein view row with `text` and returns the hover's text once one shows. */
async function hoverRow(text) {
  // The view redraws as the state moves; a hover that came up over another row (the rows
  // moved under the pointer) does not count: move away and hover again.
  const row = page.locator('#workbench\\.parts\\.sidebar .monaco-list-row', { hasText: text }).first();
  let last = '';
  for (let attempt = 0; attempt < 4; attempt++) {
    await page.mouse.move(0, 0);
    await sleep(300);
    await row.hover();
    last = await waitFor(`a hover on the row "${text}"`, async () => {
      const h = (await page.locator('.monaco-hover, .workbench-hover').allInnerTexts()).join('\n');
      return h.trim() ? h : false;
    }, 10_000).catch((e) => e.message);
    if (last.includes(text)) return last;
  }
  return last;
}
let defaultSidebarWidth = 0;
/** Drags the side bar's edge until it is `w` pixels wide. */
async function sidebarWidth(w) {
  const sb = await page.locator('#workbench\\.parts\\.sidebar').boundingBox();
  if (!sb || !w) return;
  await page.mouse.move(sb.x + sb.width + 1, sb.y + 300);
  await page.mouse.down();
  await page.mouse.move(sb.x + w + 1, sb.y + 300, { steps: 5 });
  await page.mouse.up();
  await page.mouse.move(0, 0);
}
/** A screenshot of the view at the side bar's default width (then wide again); `during`
 *  runs while it is that narrow. */
async function shotAtDefaultWidth(name, during = async () => {}) {
  const wide = (await page.locator('#workbench\\.parts\\.sidebar').boundingBox())?.width ?? 0;
  await sidebarWidth(defaultSidebarWidth);
  await sleep(300);
  await shot(name);
  await during();
  await sidebarWidth(wide);
}
/** Whether the label (not the description) of the view row with `text` shows whole. */
async function labelWhole(text) {
  const row = page.locator('#workbench\\.parts\\.sidebar .monaco-list-row', { hasText: text }).first();
  const name = await row.locator('.label-name').first().boundingBox();
  const box = await row.locator('.monaco-icon-label-container').first().boundingBox();
  return !!name && !!box && name.x + name.width <= box.x + box.width + 0.5;
}
/** The codicon class of the view row with `text`. */
async function rowIcon(text) {
  const row = page.locator('#workbench\\.parts\\.sidebar .monaco-list-row', { hasText: text }).first();
  const cls = (await row.locator('.custom-view-tree-node-item-icon').first().getAttribute('class')) ?? '';
  return (cls.match(/codicon-([a-z-]+)/) ?? [])[1] ?? cls;
}
async function tabTitles() {
  return page.locator('.tabs-container .tab').allInnerTexts();
}
async function openFile(rel) {
  const name = rel.split('/').pop();
  // Active in the active group: with the transcript beside, another group may show it too.
  const active = async () => (await page.locator('.editor-group-container.active .tabs-container .tab.active').allInnerTexts()).some((t) => t.includes(name));
  // Quick Open can swallow the first Enter while a webview (the handover preview) still holds
  // focus, and it closes when focus moves (a preview or the output terminal opening just then);
  // a user would simply try again, and so does the test, at most three times.
  for (let attempt = 1; ; attempt++) {
    const opened = await (async () => {
      await closeQuickInput();
      await page.keyboard.press('Control+P');
      const input = quickInput().locator('input[type="text"]').first();
      await input.waitFor({ state: 'visible', timeout: 15_000 });
      await input.fill(rel, { timeout: 5_000 });
      await quickInput().locator('.monaco-list-row', { hasText: name }).first().waitFor({ timeout: 15_000 });
      await sleep(200);
      await page.keyboard.press('Enter');
      await waitFor(`${rel} active in an editor`, active, 5_000);
    })().then(() => true, (e) => (attempt >= 3 ? Promise.reject(e) : false));
    if (opened) break;
  }
  await page.locator('.editor-group-container.active .monaco-editor .view-lines').first().waitFor({ state: 'visible', timeout: 15_000 });
}
async function editorText() {
  // Monaco renders spaces as U+00A0.
  return (await page.locator('.editor-group-container.active .monaco-editor .view-lines').first().innerText()).replace(/\u00a0/g, ' ');
}

/** The rows of the terminal on screen in the panel (Rein: Agent Output once it is shown). */
async function outputText() {
  const rows = page.locator('#workbench\\.parts\\.panel .xterm-rows').first();
  return ((await rows.innerText({ timeout: 2000 }).catch(() => '')) ?? '').replace(/\u00a0/g, ' ');
}
/** The frame of a webview whose document has `selector` (the transcript, a Markdown preview). */
async function webviewFrame(what, selector, timeout = 20_000) {
  return waitFor(what, async () => {
    for (const f of page.frames()) {
      if (f === page.mainFrame()) continue;
      if (await f.locator(selector).count().catch(() => 0)) return f;
    }
    return false;
  }, timeout);
}
/** The open transcript's frame. */
const transcriptFrame = (timeout) => webviewFrame('the transcript webview', '#entries', timeout);
/** The transcript's entries as text, one per entry. */
async function transcriptEntries(f) {
  return (await f.locator('#entries > li.entry').allInnerTexts()).map((t) => t.replace(/\s+/g, ' ').trim());
}

// ---- the scenario ----------------------------------------------------------------------

async function boot() {
  cs = await startCodeServer({
    bin: CODE_SERVER,
    vsix: VSIX,
    folder: repo,
    dataDir: join(dir, 'code-server'),
    logFile: join(ART, 'code-server.log'),
    extensionLog: join(ART, 'rein-extension.log'),
    // A User setting for the folders without the repository's .vscode/settings.json (the
    // first hour). A rein.serverPath set there must reach code-server's (remote) windows.
    settings: { 'rein.serverPath': REIN_BIN },
  });
  browser = await launchBrowser();
  page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
}

const EXT_LOG = join(ART, 'rein-extension.log');
let extLogMark = 0;
async function openWorkbench(url) {
  extLogMark = existsSync(EXT_LOG) ? statSync(EXT_LOG).size : 0;
  await page.goto(url);
  await page.waitForSelector('.monaco-workbench', { timeout: 90_000 });
}
/** The extension's "server: <path> (<from>)" lines logged since the window opened. */
function serverLines() {
  if (!existsSync(EXT_LOG)) return [];
  return readFileSync(EXT_LOG, 'utf8').slice(extLogMark).split('\n').filter((l) => /\] server: /.test(l)).map((l) => l.replace(/^.*?\] server: /, ''));
}

/** Waits for a toast whose text matches `re`; returns every toast text then. */
async function waitToast(re, timeout = 30_000) {
  return waitFor(`a notification ~ ${re}`, async () => {
    const t = await toasts();
    return t.some((x) => re.test(x)) ? t : false;
  }, timeout);
}
/** Clicks a toast's button, or its link (a prompt that closes by itself has links). */
async function clickToastButton(re, label) {
  const toast = page.locator('.notification-toast').filter({ hasText: re }).first();
  await toast.locator('.monaco-button, a', { hasText: label }).first().click();
}
/** Waits until no toast matches `re`; true when none does. */
async function toastGone(re, timeout = 20_000) {
  return waitFor(`no notification ~ ${re}`, async () => !(await toasts()).some((t) => re.test(t)), timeout).then(() => true, () => false);
}

// ---- the first hour: a folder outside git, no agent, a subfolder of a repository ---------

async function firstHour() {
  const plain = join(dir, 'plain');
  mkdirSync(plain, { recursive: true });
  writeFileSync(join(plain, 'notes.txt'), 'not a repository yet\n');
  await openWorkbench(cs.urlFor(plain));
  await sleep(5000); // the extension activates on start-up finished; give it time to speak
  check('outside a git working tree: no Rein status item and no message at start-up', (await page.locator('#workbench\\.parts\\.statusbar a[aria-label^="Rein"]').count()) === 0 && !(await toasts()).some((t) => /Rein/.test(t)), JSON.stringify(await toasts()));

  // Start Task outside git: one message, worded for "inside", with a git init action; no goal.
  await palette('Rein: Start Task');
  const outside = await waitToast(/not inside a git working tree/).catch((e) => [e.message]);
  await sleep(1500); // a second toast would show by now
  const all = (await toasts()).filter((t) => /git working tree/.test(t));
  check('Start Task outside git: exactly one message about it', all.length === 1, JSON.stringify(await toasts()));
  check('the message says "inside", never "top of … open a folder inside one"', all.length === 1 && /is not inside a git working tree/.test(all[0]) && !/top of/.test(all[0]), JSON.stringify(outside));
  check('no goal is asked outside git', !(await quickInput().isVisible()));
  await shot('first-hour-no-repository');
  await clickToastButton(/not inside a git working tree/, 'git init');
  const inited = await waitFor('git init run by the action', () => existsSync(join(plain, '.git')), 15_000).then(() => true, () => false);
  check('the "git init" action makes the folder a repository', inited);

  // Then (the same Start Task carries on): no agent is configured, so no goal is asked either.
  const noAgent = await waitToast(/no agent is configured/).catch((e) => [e.message]);
  check('then: "no agent is configured" with "Configure Agent…", before any goal', noAgent.some((t) => /no agent is configured/.test(t) && /Configure Agent/.test(t)) && !(await quickInput().locator('.quick-input-title', { hasText: 'Rein: Start Task' }).isVisible()), JSON.stringify(noAgent));
  const status = await waitStatus(/no task/, 30_000).catch((e) => e.message);
  check('after git init the extension serves the folder (status bar: no task once the server runs)', /no task/.test(status), status);
  check('a rein.serverPath in the User settings reaches the window (code-server windows are remote)', serverLines().includes(`${REIN_BIN} (setting)`), JSON.stringify(serverLines()));
  await shot('first-hour-no-agent');

  // Configure Agent… → "Open the rein.agent setting": the Settings editor, on that setting.
  await clickToastButton(/no agent is configured/, 'Configure Agent');
  const settingPick = quickInput().locator('.monaco-list-row', { hasText: 'Open the rein.agent setting' }).first();
  await settingPick.waitFor({ timeout: 15_000 });
  await settingPick.click();
  const settingsEditor = await waitFor('the Settings editor showing rein.agent', async () => {
    const tabs = await tabTitles();
    const search = await page.locator('.settings-editor .suggest-input-container .view-lines').first().innerText().catch(() => '');
    const items = await page.locator('.settings-editor .setting-item-contents').allInnerTexts().catch(() => []);
    const agent = items.find((t) => /Rein\s*›?\s*:?\s*Agent/i.test(t.replace(/\s+/g, ' ')) || /^Agent\b/.test(t));
    return tabs.some((t) => /Settings/.test(t)) && /@id:rein\.agent/.test(search.replace(/\u00a0/g, ' ')) && items.length === 1 && agent ? { tabs, search, agent } : false;
  }, 20_000).catch((e) => e.message);
  check('Configure Agent… → "Open the rein.agent setting" opens the Settings editor on rein.agent', typeof settingsEditor === 'object', typeof settingsEditor === 'object' ? '' : String(settingsEditor));
  await shot('first-hour-agent-setting');

  // Start Task again: still no agent, so the offer comes again; this time the template.
  await palette('Rein: Start Task');
  await waitToast(/no agent is configured/).catch(() => {});
  await clickToastButton(/no agent is configured/, 'Configure Agent');
  await quickInput().locator('.monaco-list-row', { hasText: 'Write a rein.toml template' }).first().waitFor({ timeout: 15_000 });
  await quickInput().locator('.monaco-list-row', { hasText: 'Write a rein.toml template' }).first().click();
  const toml = await waitFor('rein.toml written', () => existsSync(join(plain, 'rein.toml')) && readFileSync(join(plain, 'rein.toml'), 'utf8'), 15_000).catch(() => '');
  check('"Write a rein.toml template" writes one with an [agent]', /\[agent\]\s*\n[^\n]*\n?kind = "acp"/.test(toml) || (/\[agent\]/.test(toml) && /kind = "acp"/.test(toml)), toml);
  const tomlTab = await waitFor('rein.toml open', async () => (await tabTitles()).find((t) => /rein\.toml/.test(t)), 15_000).catch((e) => e.message);
  check('the rein.toml template opens in an editor', /rein\.toml/.test(String(tomlTab)), String(tomlTab));

  // An agent that cannot start: the typed goal is kept for the next Start Task.
  writeFileSync(join(plain, 'rein.toml'), '[agent]\nkind = "script"\nplan = "missing-plan.json"\n');
  await startTask('a goal worth keeping');
  const failed = await waitToast(/missing-plan\.json/).catch((e) => [e.message]);
  check('a start that fails says why', failed.some((t) => /missing-plan\.json/.test(t)), JSON.stringify(failed));
  await palette('Rein: Start Task');
  await quickInput().locator('.quick-input-title', { hasText: 'Rein: Start Task' }).first().waitFor({ state: 'visible', timeout: 15_000 });
  const kept = await quickInput().locator('input[type="text"]').first().inputValue();
  check('the goal typed for the failed start is kept', kept === 'a goal worth keeping', kept);
  await page.keyboard.press('Escape');

  await missingBinary();

  // A subfolder of a repository, with no rein.serverPath anywhere: the extension activates
  // without any command and runs the rein bundled in the .vsix (as `npm run package` makes it).
  cs.setUserSettings({});
  await openWorkbench(cs.urlFor(join(repo, 'src')));
  const sub = await waitStatus(/no task/, 90_000).catch((e) => e.message);
  check('a subfolder of a repository activates the extension at start-up (status bar: no task once the server runs)', /no task/.test(sub), sub);
  const bundled = serverLines();
  check('with no rein.serverPath the window runs the bundled bin/rein', bundled.length === 1 && /\/bin\/rein \(bundled\)$/.test(bundled[0]), JSON.stringify(bundled));
  await sleep(1500); // a start-up message would show by now
  const subToasts = (await toasts()).filter((t) => /Rein/.test(t));
  check('opening a subfolder shows no Rein message', subToasts.length === 0, JSON.stringify(subToasts));
  await shot('first-hour-subfolder');
}

/** A repository whose rein.serverPath names no binary: one clear message, nothing waits on it. */
async function missingBinary() {
  const nobin = join(dir, 'nobin');
  mkdirSync(join(nobin, '.vscode'), { recursive: true });
  writeFileSync(join(nobin, 'a.txt'), 'a\n');
  writeFileSync(join(nobin, '.vscode', 'settings.json'), JSON.stringify({ 'rein.serverPath': 'bin/rein' }, null, 2) + '\n');
  git(nobin, 'init', '-q', '-b', 'main');
  git(nobin, '-c', 'user.email=e2e@example.invalid', '-c', 'user.name=e2e', 'commit', '-q', '--allow-empty', '-m', 'initial');
  await openWorkbench(cs.urlFor(nobin));
  const st = await waitStatus(/rein not found/, 90_000).catch((e) => e.message);
  check('a rein.serverPath naming no binary: the status bar says "rein not found" (not "no task")', /rein not found/.test(st), st);
  const said = await waitToast(/no executable rein/).catch((e) => [e.message]);
  const msg = said.find((t) => /no executable rein/.test(t)) ?? '';
  check('the message names the setting, the path it looked at and how to install', /rein\.serverPath is "bin\/rein"/.test(msg) && msg.includes(join(nobin, 'bin', 'rein')) && /cargo install --path server/.test(msg) && /Open Settings/.test(msg), JSON.stringify(said));
  await sleep(1500);
  const raw = (await toasts()).filter((t) => /ENOENT|spawn|couldn't create connection|could not start/.test(t));
  check('no raw spawn error (ENOENT, "couldn\'t create connection") is shown', raw.length === 0, JSON.stringify(await toasts()));
  await shot('first-hour-missing-binary');
  // With the message still on screen, the controls answer at once (nothing waits on the toast).
  await statusLocator().click();
  const menu = await waitFor('the controls menu', async () => {
    const items = await quickInput().locator('.monaco-list-row').allInnerTexts();
    return items.some((x) => x.includes('Restart the Rein server')) ? items : false;
  }, 15_000).catch(() => []);
  check('with the message undismissed, the status bar menu opens and offers a restart', menu.length > 0, JSON.stringify(menu));
  await closeQuickInput();
  // Start Task asks no goal for a server that cannot start; it says why again.
  await palette('Rein: Start Task');
  const again = await waitToast(/no executable rein/).catch((e) => [e.message]);
  await sleep(1000);
  check('Start Task with no binary asks no goal and says why again', again.some((t) => /no executable rein/.test(t)) && !(await quickInput().locator('.quick-input-title', { hasText: 'Rein: Start Task' }).isVisible()), JSON.stringify(again));
  // Its "Open Settings" goes straight to rein.serverPath.
  await clickToastButton(/no executable rein/, 'Open Settings');
  const pathSetting = await waitFor('the Settings editor on rein.serverPath', async () => {
    const search = (await page.locator('.settings-editor .suggest-input-container .view-lines').first().innerText().catch(() => '')).replace(/\u00a0/g, ' ');
    const items = await page.locator('.settings-editor .setting-item-contents').allInnerTexts().catch(() => []);
    return /@id:rein\.serverPath/.test(search) && items.length === 1 && /Server Path/.test(items[0]) ? items[0] : false;
  }, 20_000).catch((e) => e.message);
  check('"Open Settings" on that message opens the Settings editor on rein.serverPath alone', /Server Path/.test(String(pathSetting)), String(pathSetting));
  // Pointing the setting at the binary starts the server without a restart command.
  writeFileSync(join(nobin, '.vscode', 'settings.json'), JSON.stringify({ 'rein.serverPath': REIN_BIN }, null, 2) + '\n');
  const fixed = await waitStatus(/no task/, 60_000).catch((e) => e.message);
  check('correcting rein.serverPath starts the server by itself (status bar: no task)', /no task/.test(fixed), fixed);
  check('once the server runs, the "no executable rein" message is gone by itself', await toastGone(/no executable rein/), JSON.stringify(await toasts()));
}

async function scenario() {
  await openWorkbench(cs.url);

  // 1. The extension activates, starts `rein lsp` and shows that there is no task.
  const idle = await waitStatus(/no task/, 90_000).catch((e) => e.message);
  check('status bar shows "no task" once the server is up', /no task/.test(idle), idle);
  await shot('idle');
  // The empty Rein view reads as text: a setting named by a link, no raw Markdown backticks.
  await showReinView();
  const welcome = await waitFor('the empty Rein view', async () => {
    const t = (await page.locator('#workbench\\.parts\\.sidebar .welcome-view-content').allInnerTexts()).join(' ');
    return t.includes('No Rein task') ? t : false;
  }, 15_000).catch((e) => e.message);
  check('the empty Rein view names the agent setting without raw backticks', welcome.includes('Rein: Agent') && !welcome.includes('`'), welcome);
  await shot('empty-view');

  // 2. Start task from the palette (goal asked; agent from the rein.agent setting).
  await startTask(GOAL);
  const running = await waitStatus(/Agent running · step \d+/).catch((e) => e.message);
  check('Start Task from the palette: status bar says the agent is running', /Agent running · step \d+/.test(running), running);

  // 3. The Rein view shows the goal, control, the plan and the steps as they come.
  await showReinView();
  const rows = await waitTree('goal, plan and steps', (r) =>
    r.some((x) => x.includes(GOAL)) && r.some((x) => x.startsWith('Plan')) && r.some((x) => x.includes('Read the greeter')) && r.some((x) => /^1\. /.test(x)),
  ).catch((e) => e.message);
  check('Rein view shows goal, plan items and steps', Array.isArray(rows), Array.isArray(rows) ? '' : rows);

  // 4. Steer while the agent runs: it does not stop.
  await waitFor('step 2 reached', () => (diskState()?.steps ?? []).length >= 2, 60_000);
  await palette('Rein: Steer the Agent');
  await answer('Rein: Steer the Agent', STEER);
  const steerRow = await waitTree('the steer under Steers', (r) => r.some((x) => x.includes(STEER))).catch((e) => e.message);
  check('steer from the palette appears in the Rein view', Array.isArray(steerRow), Array.isArray(steerRow) ? '' : steerRow);
  const st4 = diskState();
  check('steer recorded as a constraint in the task state', (st4?.constraints ?? []).some((c) => c.text === STEER), JSON.stringify(st4?.constraints));
  const nAtSteer = (st4?.steps ?? []).length;
  const moved = await waitFor('the agent to take another step after the steer', () => {
    const s = diskState();
    return (s?.steps ?? []).length > nAtSteer && s.status !== 'paused' ? s : false;
  }, 60_000).catch((e) => e.message);
  check('the agent keeps running after a steer (no stop)', typeof moved === 'object', typeof moved === 'object' ? '' : moved);
  const delivered = await waitTree('the steer delivered', (r) => r.some((x) => x.includes(STEER) && /✓ step \d+/.test(x))).catch((e) => e.message);
  check('the steer shows as delivered in the Rein view', Array.isArray(delivered), Array.isArray(delivered) ? '' : delivered);
  // 4b. The plan moves as the agent names its items; its words and a refusal show.
  const moving = await waitTree('plan items done and in progress', (r) =>
    r.some((x) => /^Plan\s*\d\/6 done/.test(x) && !/^Plan\s*0\//.test(x)) && r.some((x) => new RegExp(`^${PLAN_ITEMS[0]}\\s*done$`).test(x)) && r.some((x) => /in progress$/.test(x)),
  ).catch((e) => e.message);
  check('plan items move: the first is done, one is in progress, "Plan N/6 done" counts them', Array.isArray(moving), Array.isArray(moving) ? '' : moving);
  const stMoving = diskState();
  const doneNow = (stMoving?.plan ?? []).filter((p) => p.status === 'done').length;
  check('the state agrees: planProgress is reported and items are done', stMoving?.planProgress === true && doneNow >= 1, JSON.stringify(stMoving?.plan));
  const said = await waitTree('the agent\'s latest words', (r) => r.some((x) => /the agent, before step \d+$/.test(x))).catch((e) => e.message);
  check('the agent\'s latest words show at the top of the Rein view', Array.isArray(said), Array.isArray(said) ? '' : said);
  const refused = (diskState()?.steps ?? []).find((st) => st.action.includes('.GIT/config'));
  const toldLine = (refused?.detail ?? '').split('\n')[0];
  check('the refused write is a failed step with the text the agent was told', refused?.status === 'failed' && /refused/.test(toldLine), JSON.stringify(refused));
  const refusedRows = await waitTree('the refusal in the view', (r) => r.some((x) => /^\d+\. write \.GIT\/config\s*failed: /.test(x)) && r.some((x) => x.startsWith(toldLine.slice(0, 60)) && /what the agent was told$/.test(x))).catch((e) => e.message);
  check('the Rein view shows the refusal with the same text the agent got (row and its detail)', !!toldLine && Array.isArray(refusedRows), Array.isArray(refusedRows) ? '' : refusedRows);
  const notices = (await page.locator('#workbench\\.parts\\.statusbar').innerText()).replace(/\s+/g, ' ');
  check('the status bar no longer says the steer is queued once it is delivered', !/queued for the next step/.test(notices), notices);
  // At the default side bar width a long row is cut: its hover says it all.
  await shot('default-width');
  const steerHover = await hoverRow(STEER);
  check('hovering a steer row at the default width shows its whole text and status', steerHover.includes(STEER) && /Delivered to the agent before step \d+/.test(steerHover), steerHover);
  const stepHover = await hoverRow('read src/greet.py');
  check('hovering a step row shows the whole step and what the agent said', /Step \d+ by agent: read src\/greet\.py/.test(stepHover) && stepHover.includes(SAY_READ), stepHover);
  const planHover = await hoverRow('Adjust the greeting');
  check('hovering a plan row shows the whole item', planHover.includes('Adjust the greeting'), planHover);
  await page.mouse.move(0, 0);
  // Widen the side bar so the view's rows read whole in the screenshots that follow.
  defaultSidebarWidth = (await page.locator('#workbench\\.parts\\.sidebar').boundingBox())?.width ?? 0;
  await sidebarWidth(defaultSidebarWidth + 160);
  await shot('running-steered');

  // 5. Pause from the palette.
  await palette('Rein: Pause the Agent');
  const paused = await waitStatus(/Paused/).catch((e) => e.message);
  check('Pause from the palette: status bar says paused', /Paused · step \d+/.test(paused), paused);
  const stPaused = diskState();
  check('task state on disk is paused', stPaused?.status === 'paused', stPaused?.status);
  const stepsPaused = (stPaused?.steps ?? []).length;
  await sleep(4000);
  check('no step is taken while paused', (diskState()?.steps ?? []).length === stepsPaused && diskState()?.status === 'paused');
  await shot('paused');

  // 5b. Steer about a selection: the editor context menu, then the server's code action.
  await openFile('src/greet.py');
  const firstLine = page.locator('.editor-group-container.active .monaco-editor .view-line').first();
  await firstLine.click();
  await page.keyboard.press('Home');
  await page.keyboard.press('Shift+End');
  await firstLine.click({ button: 'right', position: { x: 30, y: 8 } });
  const menuItem = page.locator('.monaco-menu .action-item', { hasText: 'Steer About This Selection' }).first();
  const inMenu = await menuItem.waitFor({ state: 'visible', timeout: 10_000 }).then(() => true, () => false);
  check('editor context menu offers "Steer About This Selection…"', inMenu);
  if (inMenu) {
    // Menus ignore clicks while they fade in; hovering focuses the item and Enter runs it.
    await sleep(300);
    await menuItem.hover();
    await sleep(200);
    await page.keyboard.press('Enter');
    await quickInput().locator('.quick-input-title', { hasText: 'Steer about greet.py:1' }).first().waitFor({ state: 'visible', timeout: 15_000 });
    const prompt = (await quickInput().innerText()).replace(/\s+/g, ' ');
    check('the steer prompt while paused says the agent stays paused (not "it keeps running")', !/keeps running/.test(prompt) && /stays paused until you resume/.test(prompt), prompt);
    await answer('Steer about greet.py:1', 'name the parameter clearly');
  } else {
    await page.keyboard.press('Escape');
  }
  const anchored = await waitFor('the selection steer in the state', () =>
    (diskState()?.constraints ?? []).find((c) => c.text === 'name the parameter clearly'), 15_000).catch(() => null);
  check('selection steer carries uri and range (constraint.location = src/greet.py line 0)', anchored?.location?.path === 'src/greet.py' && anchored?.location?.line === 0, JSON.stringify(anchored));
  const queuedNote = await waitFor('the queued-steer notice', async () => {
    const t = (await page.locator('#workbench\\.parts\\.statusbar').innerText()).replace(/\s+/g, ' ');
    return /steer c\d+ queued/.test(t) ? t : false;
  }, 10_000).catch((e) => e.message);
  check('the status bar says the steer is queued while it is', /steer c\d+ queued/.test(queuedNote), queuedNote);
  await firstLine.click();
  await page.keyboard.press('Home');
  await page.keyboard.press('Shift+End');
  await palette('Quick Fix');
  const action = page.locator('.action-widget .monaco-list-row', { hasText: 'steer about this selection' }).first();
  const offered = await action.waitFor({ state: 'visible', timeout: 15_000 }).then(() => true, () => false);
  if (!offered) await shot('no-quick-fix-action');
  check('the server offers "steer about this selection…" as a code action', offered);
  if (offered) {
    // A pointer block covers the action widget while it animates in; the list takes clicks.
    await sleep(300);
    await action.dispatchEvent('click');
    await answer('Steer about greet.py:1', 'code action steer');
  } else {
    await page.keyboard.press('Escape');
  }
  const viaAction = await waitFor('the code-action steer in the state', () =>
    (diskState()?.constraints ?? []).find((c) => c.text === 'code action steer'), 15_000).catch(() => null);
  check('code action asks for the text client-side and sends rein.steer with the range', viaAction?.location?.path === 'src/greet.py', JSON.stringify(viaAction));
  check('selecting text does not hold the file', !(diskState()?.heldFiles ?? []).includes('src/greet.py'));

  // 5b'. A `rein:` comment typed while paused is a message, not an edit: its file is not held.
  await openFile('check.sh');
  await page.locator('.editor-group-container.active .monaco-editor .view-lines').first().click();
  await page.keyboard.press('Control+End');
  await page.keyboard.type(COMMENT, { delay: 10 });
  await page.keyboard.press('Enter');
  await page.keyboard.type(COMMENT2, { delay: 10 });
  await sleep(1500); // a hold would reach the state at once
  const heldNow = diskState()?.heldFiles ?? [];
  check('typing a rein: comment while paused does not hold its file', !heldNow.includes('check.sh'), JSON.stringify(heldNow));
  await page.keyboard.press('Control+S');
  const viaComment = await waitFor('the comment steer in the state', () => (diskState()?.constraints ?? []).find((c) => c.source === 'comment'), 15_000).catch(() => null);
  check('saving sends the rein: comment as a steer anchored at its line', viaComment?.location?.path === 'check.sh' && viaComment?.location?.line === 2, JSON.stringify(viaComment));
  const second = await waitFor('the second comment steer in the state', () => (diskState()?.constraints ?? []).find((c) => c.source === 'comment' && c.text.includes('POSIX')), 15_000).catch(() => null);
  check('the second rein: comment is sent too, at its own line', second?.location?.line === 3, JSON.stringify(second));
  check('saving it does not hold the file either', !(diskState()?.heldFiles ?? []).includes('check.sh'), JSON.stringify(diskState()?.heldFiles));

  // 5c. Resume from the palette, then pause again.
  await palette('Rein: Resume the Agent');
  const resumed = await waitStatus(/Agent running/).catch((e) => e.message);
  check('Resume from the palette: status bar says running again', /Agent running/.test(resumed), resumed);
  // 5d. The terminal is a client of the same engine: `rein pause` there pauses the task this
  // window started, and the status bar follows; `rein resume` there resumes it.
  let cliOut = '';
  try {
    cliOut = execFileSync(REIN_BIN, ['pause'], { cwd: repo, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    cliOut = `failed: ${e.stderr ?? e.message}`;
  }
  const cliPaused = await waitStatus(/Paused/).catch((e) => e.message);
  check('rein pause in a terminal pauses the task this window started; the status bar follows', /Paused/.test(cliPaused) && !cliOut.startsWith('failed'), `${cliPaused} / ${cliOut}`);
  try {
    cliOut = execFileSync(REIN_BIN, ['resume'], { cwd: repo, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    cliOut = `failed: ${e.stderr ?? e.message}`;
  }
  const cliResumed = await waitStatus(/Agent running/).catch((e) => e.message);
  check('rein resume in a terminal resumes it; the status bar follows', /Agent running/.test(cliResumed) && !cliOut.startsWith('failed'), `${cliResumed} / ${cliOut}`);
  await palette('Rein: Pause the Agent');
  const paused2 = await waitStatus(/Paused · step/).catch((e) => e.message);
  check('Pause again', /Paused · step/.test(paused2), paused2);

  // 6. Take over (reason asked): the handover opens as a Markdown preview.
  await palette('Rein: Take Over');
  await answer('Rein: Take Over', 'I want to add a helper myself');
  const human = await waitStatus(/You hold control/).catch((e) => e.message);
  check('Take Over from the palette: status bar says you hold control', /You hold control/.test(human), human);
  const handoverTab = await waitFor('the handover preview tab', async () => (await tabTitles()).find((t) => /Rein handover/.test(t)), 20_000).catch((e) => e.message);
  check('the handover opens as a Markdown preview', /Preview/.test(String(handoverTab)) || /handover/.test(String(handoverTab)), String(handoverTab));
  const previewText = await page.locator('iframe.webview').first().isVisible().catch(() => false);
  check('the handover preview is rendered (webview)', previewText === true);
  // It opens with the agent's own words, then the plan as Done / In progress / Pending.
  const handover = await waitFor('the handover text', async () => {
    for (const f of page.frames()) {
      const t = await f.evaluate(() => document.body?.innerText ?? '').catch(() => '');
      if (/Handover:/.test(t) && /Why the agent stopped/.test(t)) return t;
    }
    return false;
  }, 20_000).catch((e) => e.message);
  const hv = String(handover);
  const stTaken = diskState();
  const lastWords = [...(stTaken?.steps ?? [])].reverse().find((st) => st.author === 'agent' && st.message)?.message ?? '(none)';
  check('the handover opens with what the agent was doing, in its words', /What it was doing:/.test(hv) && hv.indexOf('What it was doing') < hv.indexOf('Why the agent stopped') && hv.includes(lastWords), hv.slice(0, 600));
  // Each item of the state's plan is listed under its status, in that order of sections.
  const planPart = hv.slice(hv.indexOf('Done:'), hv.indexOf('Steps taken') > 0 ? hv.indexOf('Steps taken') : undefined);
  const sections = { done: planPart.split('In progress:')[0], active: planPart.split('In progress:')[1]?.split('Pending:')[0] ?? '', pending: planPart.split('Pending:')[1] ?? '' };
  const misplaced = (stTaken?.plan ?? []).filter((p) => p.status !== 'skipped' && !(sections[p.status] ?? '').includes(p.text));
  const doneItems = (stTaken?.plan ?? []).filter((p) => p.status === 'done');
  check('the handover lists the plan as Done / In progress / Pending, truly', doneItems.length > 0 && /In progress:/.test(hv) && /Pending:/.test(hv) && misplaced.length === 0, `misplaced ${JSON.stringify(misplaced)}; ${planPart.slice(0, 400)}`);
  await waitTree('control row says you hold it', (r) => r.some((x) => x.startsWith('You hold control'))).then(
    () => check('Rein view shows that you hold control', true),
    (e) => check('Rein view shows that you hold control', false, e.message),
  );
  const takenRows = (await treeRows()).filter((x) => x.includes('taken over by the user'));
  check('"taken over by the user: …" appears once in the Rein view', takenRows.length === 1, JSON.stringify(takenRows));
  await shot('taken-over');

  // 7. Edit a file in the editor (unsaved): the file becomes human-held.
  await openFile('src/greet.py');
  await page.locator('.editor-group-container.active .monaco-editor .view-lines').first().click();
  await page.keyboard.press('Control+End');
  await page.keyboard.type(`\n\n${HUMAN_LINE}\n`, { delay: 10 });
  await page.keyboard.type('return name.upper()', { delay: 10 });
  const held = await waitTree('src/greet.py under files you hold', (r) => r.some((x) => x.startsWith('Files you hold')) && r.some((x) => x.startsWith('src/greet.py'))).catch((e) => e.message);
  check('editing a buffer makes the file human-held (Rein view)', Array.isArray(held), Array.isArray(held) ? '' : held);
  check('the unsaved edit is not on disk yet', !readFileSync(join(repo, 'src/greet.py'), 'utf8').includes(HUMAN_LINE));
  await shot('human-editing');

  // 8. Hand back from the palette: asked to save first, then a note; the report opens.
  await palette('Rein: Hand Back');
  const save = page.locator('.monaco-dialog-box .monaco-button', { hasText: 'Save and Hand Back' });
  const asked = await save.waitFor({ state: 'visible', timeout: 15_000 }).then(() => true, () => false);
  check('hand back asks to save the dirty file first', asked);
  if (asked) await save.click();
  await answer('Rein: Hand Back', 'added shout(); carry on');
  const onDisk = await waitFor('the human edit saved to disk', () => readFileSync(join(repo, 'src/greet.py'), 'utf8').includes(HUMAN_LINE), 15_000).catch(() => false);
  check('the human edit is saved on disk on hand back', !!onDisk);
  const back = await waitStatus(/Agent running|Paused: needs approval|Agent done/).catch((e) => e.message);
  check('after hand back the agent holds control again', /Agent running|needs approval|Agent done/.test(back), back);
  const reportTab = await waitFor('the reconcile report preview tab', async () => (await tabTitles()).find((t) => /Rein reconcile report/.test(t)), 20_000).catch((e) => e.message);
  check('the reconcile report opens as a Markdown preview', /reconcile report/.test(String(reportTab)), String(reportTab));
  const stBack = diskState();
  check('the reconcile recorded the human change to src/greet.py', (stBack?.humanChanges ?? []).some((c) => c.path === 'src/greet.py'), JSON.stringify(stBack?.humanChanges));
  check('held files are cleared on hand back', (stBack?.heldFiles ?? []).length === 0, JSON.stringify(stBack?.heldFiles));

  // 9. A clean open buffer follows the agent's writes (rein/filesChanged), and is not held.
  await openFile('README.md');
  const midShot = await shot('running-after-handback');
  const reloaded = await waitFor('README.md reloaded with the agent edit', async () => (await editorText()).includes('Says hello and goodbye.'), 90_000).catch((e) => e.message);
  check('an open clean buffer shows the agent\'s write (reloaded from disk)', reloaded === true, String(reloaded));
  check('the reloaded README.md is not human-held', !(diskState()?.heldFiles ?? []).includes('README.md'), JSON.stringify(diskState()?.heldFiles));

  // 9b. The transcript, opened while the agent runs, follows it live.
  await palette('Rein: Show Transcript');
  const tf = await transcriptFrame().catch(() => null);
  check('Rein: Show Transcript opens the transcript (a webview)', !!tf);
  const early = tf ? await transcriptEntries(tf) : [];
  check('the transcript starts with the goal and has the agent\'s words and tool calls so far', early[0]?.includes(GOAL) && early.some((x) => x.includes(SAY_READ)) && early.some((x) => /Step \d+ read src\/greet\.py/.test(x)), JSON.stringify(early.slice(0, 6)));

  // 9c. The long command's output arrives in chunks in the output terminal before it ends.
  writeFileSync(GO, '');
  const ranYet = () => (diskState()?.steps ?? []).some((st) => st.action === 'run ./test.sh');
  const partial = new Set();
  let firstSeen = '';
  await waitFor('./test.sh output in the output terminal', async () => {
    const t = await outputText();
    const n = (t.match(/test \d+ \.\.\. ok/g) ?? []).length;
    if (n > 0 && !ranYet() && !/10 passed/.test(t)) {
      partial.add(n);
      if (!firstSeen) firstSeen = t;
    }
    return partial.size >= 2 && n >= 2;
  }, 90_000, 150).catch(() => {});
  check('a long command\'s output arrives in the output terminal in chunks before it ends', partial.size >= 2 && !ranYet(), `seen line counts ${JSON.stringify([...partial])}; ${firstSeen.slice(0, 300)}`);
  check('the output terminal names the step and the command', /── step \d+ · \.\/test\.sh ──/.test(firstSeen), firstSeen.slice(0, 300));
  const runRow = await waitTree('the running command in the view', (r) => r.some((x) => /^Running \.\/test\.sh\s*step \d+/.test(x)), 10_000).catch((e) => e.message);
  check('the Rein view shows "Running ./test.sh" while it runs', Array.isArray(runRow) || ranYet(), Array.isArray(runRow) ? '' : runRow);
  const liveBox = tf ? await waitFor('the live output in the transcript', async () => {
    const t = await tf.locator('#live').innerText().catch(() => '');
    return /test 1 \.\.\. ok/.test(t) ? t : false;
  }, 10_000).catch((e) => e.message) : 'no transcript';
  check('the transcript shows the running command\'s output live', /Running \.\/test\.sh/.test(String(liveBox)) || ranYet(), String(liveBox).slice(0, 300));
  await shot('output-live');
  // Paused, the command is frozen and the output says so; resumed, it goes on to its end.
  await palette('Rein: Pause the Agent');
  const pausedOut = await waitFor('"paused" in the output', async () => {
    const t = await outputText();
    return t.includes('── paused: the command is frozen') ? t : false;
  }, 20_000).catch((e) => e.message);
  check('pausing mid-command says "paused" in the output terminal, before the command ended', /── paused: the command is frozen/.test(pausedOut) && !ranYet() && !/10 passed/.test(pausedOut), String(pausedOut).slice(-300));
  // One step number for the frozen command: the status bar's and the view's "Running" row's.
  const pausedAt = await waitStatus(/Paused · step \d+/).catch((e) => e.message);
  const isPausedRow = (x) => /^Running \.\/test\.sh\s*step \d+ · paused/.test(x);
  const pausedRows = await waitTree('the paused command in the view', (r) => r.some(isPausedRow), 10_000).catch((e) => e.message);
  const pausedRow = Array.isArray(pausedRows) ? pausedRows.map((r) => r.replace(/\s+/g, ' ').trim()).find(isPausedRow) : pausedRows;
  const barStep = /step (\d+)/.exec(String(pausedAt))?.[1];
  const rowStep = /step (\d+)/.exec(String(pausedRow))?.[1];
  check('paused mid-command, the status bar and the view name the same step', barStep !== undefined && barStep === rowStep, `${pausedAt} / ${pausedRow}`);
  await palette('Rein: Resume the Agent');
  // The terminal shows its last rows: remember what scrolled past.
  const seen = { resumed: false, passed: false, exit: false };
  const resumedOut = await waitFor('the command to end after the resume', async () => {
    const t = await outputText();
    seen.resumed ||= /── resumed ──/.test(t);
    seen.passed ||= /10 passed/.test(t);
    seen.exit ||= /── exit 0 \(step \d+\) ──/.test(t);
    return seen.exit ? t : false;
  }, 60_000, 150).catch((e) => e.message);
  check('resumed, the output says so and ends with the exit', seen.resumed && seen.passed && seen.exit, `${JSON.stringify(seen)} ${String(resumedOut).slice(-400)}`);
  const testStep = await waitFor('the test step in the state', () => (diskState()?.steps ?? []).find((st) => st.action === 'run ./test.sh'), 30_000).catch(() => null);
  check('the step keeps the output\'s end and the exit', /test 10 \.\.\. ok/.test(testStep?.output ?? '') && /exit code 0/.test(testStep?.detail ?? ''), JSON.stringify(testStep));
  const liveEntries = tf ? await waitFor('the command\'s step in the open transcript', async () => {
    const e = await transcriptEntries(tf);
    return e.some((x) => /Step \d+ run \.\/test\.sh/.test(x)) && e.some((x) => /^Output of \.\/test\.sh/.test(x)) ? e : false;
  }, 30_000).catch((e) => e.message) : 'no transcript';
  check('the open transcript grew by itself: the command\'s tool row and its output (collapsed)', Array.isArray(liveEntries) && (await tf.locator('li.output details[open]').count()) === 0, Array.isArray(liveEntries) ? '' : String(liveEntries));

  // 10. The gated commands stop for approval: deny the first, approve the second, inline.
  const gate = await waitStatus(/Paused: needs approval/, 90_000).catch((e) => e.message);
  check('a gated command shows "Paused: needs approval"', /needs approval/.test(gate), gate);
  const prompted = await waitToast(/needs your decision.*git tag v1/).then(() => true, () => false);
  check('the approval is asked in a pop-up too, naming the command, with its choices', prompted && (await toasts()).some((t) => /needs your decision.*git tag v1/.test(t) && /approve/.test(t) && /deny/.test(t)), JSON.stringify(await toasts()));
  await showReinView();
  await waitTree('the open decision', (r) => r.some((x) => x.startsWith('Decisions')));
  await shot('needs-approval');
  // What a person back after ten minutes looks at: the view (plan progress, the agent's words,
  // each step), the transcript (the story so far, ending on the decision waiting for them) and
  // the output of the last command. The README shows this screenshot.
  const tfGate = await transcriptFrame().catch(() => null);
  const gateEntries = tfGate ? await waitFor('the decision in the open transcript', async () => {
    const e = await transcriptEntries(tfGate);
    return e.some((x) => /Rein stopped for you/.test(x) && x.includes('git tag v1')) ? e : false;
  }, 20_000).catch((e) => e.message) : 'no transcript';
  check('the open transcript shows the decision waiting for you, live', Array.isArray(gateEntries), Array.isArray(gateEntries) ? '' : String(gateEntries));
  check('its head says what waits for you', tfGate ? /Waiting for you:/.test(await tfGate.locator('#head').innerText().catch(() => '')) : false);
  const atEnd = tfGate ? await waitFor('the transcript scrolled to its end', () => tfGate.evaluate(() => {
    const r = document.scrollingElement;
    return r.scrollTop + window.innerHeight >= r.scrollHeight - 40 && r.scrollHeight > window.innerHeight;
  }), 10_000).catch(() => false) : false;
  check('the open transcript follows its end (the newest entry in view)', atEnd === true);
  // The transcript's group takes the editor area for the screenshot, then gives it back.
  const maximized = await palette('View: Toggle Maximize Editor Group').then(() => true, () => false);
  await closeQuickInput();
  await page.mouse.move(0, 0);
  await sleep(800);
  const awayShot = await shot('away-ten-minutes');
  if (TRANSCRIPT_SHOT) copyFileSync(awayShot, TRANSCRIPT_SHOT);
  if (maximized) await palette('View: Toggle Maximize Editor Group').catch(() => {});
  // The comment steer was delivered when the agent ran on: its quick fix takes it out.
  const commentSteers = (diskState()?.constraints ?? []).filter((c) => c.source === 'comment');
  check('both rein: comment steers were delivered', commentSteers.length === 2 && commentSteers.every((c) => c.status === 'delivered'), JSON.stringify(commentSteers));
  check('the file of the delivered comment was never held', !(diskState()?.heldFiles ?? []).includes('check.sh'), JSON.stringify(diskState()?.heldFiles));
  await openFile('check.sh');
  await page.locator('.editor-group-container.active .monaco-editor .view-line', { hasText: 'say which check' }).first().click();
  await palette('Quick Fix');
  const removeAction = page.locator('.action-widget .monaco-list-row', { hasText: 'remove this steer comment' }).first();
  const removable = await removeAction.waitFor({ state: 'visible', timeout: 15_000 }).then(() => true, () => false);
  check('a delivered rein: comment offers "remove this steer comment" (quick fix)', removable);
  if (removable) {
    await sleep(300);
    await removeAction.dispatchEvent('click');
    await waitFor('the comment removed from the buffer', async () => !(await editorText()).includes(COMMENT), 10_000).catch(() => {});
    await page.keyboard.press('Control+S');
  } else {
    await page.keyboard.press('Escape');
  }
  const gone = await waitFor('the comment gone from disk', () => !readFileSync(join(repo, 'check.sh'), 'utf8').includes(COMMENT), 10_000).then(() => true, () => false);
  const afterFix = readFileSync(join(repo, 'check.sh'), 'utf8');
  check('the quick fix removes that comment line only (saved: gone from disk, the other comment and the script intact)', gone && afterFix.includes('echo checked') && afterFix.includes(COMMENT2), afterFix);
  await showReinView();
  const tagRow = page.locator('#workbench\\.parts\\.sidebar .monaco-list-row', { hasText: 'git tag v1' })
    .filter({ has: page.locator('.action-label[aria-label="Deny"]') }).first();
  await tagRow.hover();
  await tagRow.locator('.action-label[aria-label="Deny"]').click();
  const deniedRow = await waitTree('the denial stays visible', (r) => r.some((x) => x.includes('you denied `git tag v1`'))).catch((e) => e.message);
  check('a denied approval leaves a trace in the Rein view: "you denied `git tag v1`"', Array.isArray(deniedRow), Array.isArray(deniedRow) ? '' : deniedRow);
  check('answered in the view, its pop-up is gone by itself', await toastGone(/needs your decision.*git tag v1/), JSON.stringify(await toasts()));
  const stDenied = await waitFor('the denial in the state', () => (diskState()?.answered ?? []).find((a) => a.choice === 'deny'), 15_000).catch(() => null);
  check('the state records who denied what (answered: deny by human)', stDenied?.by === 'human' && stDenied?.detail === 'git tag v1', JSON.stringify(stDenied));
  const deniedStep = await waitTree('the denied step says so', (r) => r.some((x) => /^\d+\. run git tag v1\s*not done: the human chose deny/.test(x))).catch((e) => e.message);
  check('the denied step says what was not done and why', Array.isArray(deniedStep), Array.isArray(deniedStep) ? '' : deniedStep);
  await shot('denied');
  await shotAtDefaultWidth('denied-default-width', async () => {
    // What a row means must survive the cut at the default width: the command not run, the
    // files a human step changed, and whether a steer was delivered.
    check('at the default width the denied step reads whole ("N. run git tag v1")', await labelWhole('run git tag v1'));
    check('at the default width a human step names its files whole ("N. src/greet.py")', await labelWhole('your changes while holding control'));
    const longSteer = await rowIcon(STEER);
    check('a long delivered steer cut before its description still shows it was delivered (icon)', longSteer === 'pass', longSteer);
  });
  await waitStatus(/Paused: needs approval/, 90_000).catch(() => {});
  await waitTree('the second decision', (r) => r.some((x) => x.includes('check.sh') && x.includes('approve')));
  // The decision row (not the stop-reason row that quotes it) carries the inline actions.
  const row = page.locator('#workbench\\.parts\\.sidebar .monaco-list-row', { hasText: 'check.sh' })
    .filter({ has: page.locator('.action-label[aria-label="Approve"]') }).first();
  await row.hover();
  check('the decision row has inline Approve and Deny actions', (await row.locator('.action-label[aria-label="Deny"]').count()) === 1);
  await row.locator('.action-label[aria-label="Approve"]').click();
  const done = await waitStatus(/Agent done/, 90_000).catch((e) => e.message);
  check('approve in the view lets the agent finish: status bar says done', /Agent done/.test(done), done);
  check('approved in the view, its pop-up is gone by itself', await toastGone(/needs your decision/), JSON.stringify(await toasts()));
  await waitTree('the decision answered', (r) => r.some((x) => x.includes('you approved `./check.sh`')) && r.some((x) => /^Decisions.*2 answered/.test(x)) && !r.some((x) => /open/.test(x) && x.startsWith('Decisions'))).then(
    () => check('an answered decision stays in the Rein view as answered ("you approved `./check.sh`"), none open', true),
    (e) => check('an answered decision stays in the Rein view as answered ("you approved `./check.sh`"), none open', false, e.message),
  );

  // 10b. On the finished task, Steer, Take Over and Hand Back open no prompt: the server's
  // refusal says why (nothing typed is lost), in the words the view uses.
  for (const [title, want] of [['Rein: Steer the Agent', /task has ended/], ['Rein: Take Over', /task has ended/], ['Rein: Hand Back', /task has ended/]]) {
    await closeToasts();
    await palette(title);
    const said = await waitFor(`the refusal of ${title}`, async () => ((await toasts()).find((t) => want.test(t)) ?? false), 15_000).catch((e) => e.message);
    const prompted = await quickInput().locator('.quick-input-title', { hasText: title }).isVisible();
    check(`${title} on the finished task: refused before any prompt`, want.test(String(said)) && !prompted, String(said));
    await closeQuickInput();
  }

  // 11. The files on disk: agent and human work both there; the user's branch untouched.
  const greet = readFileSync(join(repo, 'src/greet.py'), 'utf8');
  check('src/greet.py has the agent edit and the human edit', greet.includes('"hello " + name') && greet.includes(HUMAN_LINE), greet);
  check('src/farewell.py and NOTES.md written by the agent', existsSync(join(repo, 'src/farewell.py')) && existsSync(join(repo, 'NOTES.md')));
  const finalState = diskState();
  check('task state: done with the human hand-back in its steps', finalState?.status === 'done' && (finalState?.steps ?? []).some((s) => s.author === 'human'), finalState?.status);
  check('HEAD and the branch are untouched (checkpoints live under refs/rein/)', git(repo, 'rev-parse', 'HEAD').trim() === headBefore && git(repo, 'for-each-ref', 'refs/rein').includes('checkpoints'));

  // 12. Clicking a step opens the diff of that step.
  const stepRow = page.locator('#workbench\\.parts\\.sidebar .monaco-list-row', { hasText: 'farewell.py' }).first();
  // A click that lands while the view redraws for a state change selects without opening: retry.
  let diffTab = '';
  for (let i = 0; i < 4 && !/farewell\.py \(Step \d+/.test(diffTab); i++) {
    await stepRow.click();
    diffTab = await waitFor('the step diff tab', async () => (await tabTitles()).find((t) => /farewell\.py \(Step \d+/.test(t)), 8_000).catch((e) => e.message);
  }
  check('clicking a step opens its diff', /farewell\.py \(Step \d+/.test(String(diffTab)), String(diffTab));
  const diffEditor = await page.locator('.monaco-diff-editor').first().isVisible().catch(() => false);
  check('the step diff is a diff editor', diffEditor === true);
  await shot('step-diff');
  await showReinView();
  // A command step opens its output (the end the step keeps, or the transcript's).
  const testRow = page.locator('#workbench\\.parts\\.sidebar .monaco-list-row', { hasText: 'run ./test.sh' }).first();
  let outTab = '';
  for (let i = 0; i < 4 && !/Step \d+ output\.log/.test(outTab); i++) {
    await testRow.click();
    outTab = await waitFor('the step output tab', async () => (await tabTitles()).find((t) => /Step \d+ output\.log/.test(t)), 8_000).catch((e) => e.message);
  }
  const outDoc = /output\.log/.test(outTab) ? await editorText() : '';
  check('clicking a command step opens its output after it ended (with the step and the exit)', /# Step \d+: run \.\/test\.sh/.test(outDoc) && /exit code 0/.test(outDoc) && /test 10 \.\.\. ok/.test(outDoc), `${outTab} ${outDoc.slice(0, 300)}`);
  await shotAtDefaultWidth('done-default-width');
  const planDone = await waitTree('the whole plan done', (r) => r.some((x) => /^Plan\s*6\/6 done$/.test(x))).catch((e) => e.message);
  check('at the end the plan reads "Plan 6/6 done"', Array.isArray(planDone), Array.isArray(planDone) ? '' : planDone);

  // 12b. The transcript after the task ended: the whole story, readable, each file a link.
  await palette('Rein: Show Transcript');
  const tfEnd = await transcriptFrame().catch(() => null);
  const story = tfEnd ? await waitFor('the end in the transcript', async () => {
    const e = await transcriptEntries(tfEnd);
    return e.some((x) => /^Done /.test(x)) ? e : false;
  }, 20_000).catch((e) => e.message) : 'no transcript';
  const all = Array.isArray(story) ? story : [];
  const has = (re) => all.some((x) => re.test(x));
  check('transcript: the goal first', all[0]?.startsWith('You gave the goal') && all[0].includes(GOAL), all[0]);
  check('transcript: the agent\'s messages, each before its step', has(new RegExp(`^Agent before step \\d+ .*${SAY_FAREWELL.replace(/[.()]/g, '\\$&')}`)) && has(new RegExp(SAY_TESTS.replace(/[.;]/g, '\\$&'))), JSON.stringify(all.filter((x) => x.startsWith('Agent')).slice(0, 3)));
  check('transcript: tool rows with status and files', has(/^✓ Step \d+ write src\/farewell\.py done .*src\/farewell\.py \+2 −0 added/), JSON.stringify(all.filter((x) => /farewell\.py/.test(x))));
  check('transcript: the refusal, with what the agent was told', has(/^✗ Step \d+ write \.GIT\/config failed .*What the agent was told: .*refused/), JSON.stringify(all.filter((x) => /\.GIT/.test(x))));
  check('transcript: the plan moving', has(/^Plan .*done: Read the greeter/), JSON.stringify(all.filter((x) => x.startsWith('Plan')).slice(0, 3)));
  check('transcript: your steers (palette, selection, rein: comments)', has(new RegExp(`^You steered .*${STEER.replace(/[()]/g, '\\$&')}`)) && has(/^You steered about src\/greet\.py:1/) && has(/^You steered about check\.sh:\d+ \(a rein: comment\)/), JSON.stringify(all.filter((x) => x.startsWith('You steered'))));
  check('transcript: take over and hand back', has(/^Taken over by .*I want to add a helper myself/) && has(/^Handed back to the agent, with the note: added shout\(\); carry on/), JSON.stringify(all.filter((x) => /taken over|handed back/i.test(x))));
  check('transcript: your changes as a step', has(/^You Step \d+ your changes while holding control.*src\/greet\.py/), JSON.stringify(all.filter((x) => /^You Step/.test(x))));
  check('transcript: the decisions and your answers', has(/^Rein stopped for you .*git tag v1/) && has(/^You answered .*deny — `git tag v1` is not run/) && has(/^You answered .*approve — `\.\/check\.sh` may run/), JSON.stringify(all.filter((x) => /stopped for you|answered/.test(x))));
  check('transcript: pause, resume and the end', has(/^Paused by you/) && has(/^Resumed by you/) && has(/^Done .*Added farewell\(\) and documented it\./), JSON.stringify(all.slice(-3)));
  const outputs = tfEnd ? await tfEnd.locator('li.output details').count() : 0;
  const openOutputs = tfEnd ? await tfEnd.locator('li.output details[open]').count() : 1;
  check('transcript: command output is there, collapsed', outputs >= 2 && openOutputs === 0, `${outputs} outputs, ${openOutputs} open`);
  if (tfEnd) {
    // Expanding a command's output shows it whole.
    await tfEnd.locator('li.output summary', { hasText: './test.sh' }).first().click();
    const shown = await tfEnd.locator('li.output details[open] pre').first().innerText().catch(() => '');
    check('transcript: expanding an output shows the command\'s output', /test 1 \.\.\. ok[\s\S]*10 passed/.test(shown), shown.slice(0, 200));
  }
  await shot('transcript-done');
  if (tfEnd) {
    await tfEnd.locator('button.file', { hasText: 'src/farewell.py' }).first().click();
    const fileDiff = await waitFor('the diff of the file clicked in the transcript', async () => (await tabTitles()).find((t) => /farewell\.py \(Step \d+: write src\/farewell\.py\)/.test(t)), 15_000).catch((e) => e.message);
    check('clicking a file in the transcript opens that step\'s diff of it', /farewell\.py \(Step/.test(String(fileDiff)), String(fileDiff));
  }

  // The status bar menu offers the controls that are legal now.
  await statusLocator().click();
  const menu = await waitFor('the controls menu', async () => {
    const items = await quickInput().locator('.monaco-list-row').allInnerTexts();
    return items.some((x) => x.includes('Show state')) ? items : false;
  }, 15_000).catch(() => []);
  check('clicking the status bar lists the legal controls (done: Start task)', menu.some((x) => x.includes('Start task')) && !menu.some((x) => x.includes('Pause')), JSON.stringify(menu));
  await shot('menu');
  await page.keyboard.press('Escape');

  // 13. Rewind (palette, quick pick of checkpoints): the tree goes back to the end of a step.
  await palette('Rein: Rewind');
  await quickInput().locator('.quick-input-title', { hasText: 'Rein: Rewind' }).waitFor({ timeout: 15_000 });
  // Every step is offered once, the start and reads included (one per checkpoint hid them).
  const rewindInput = quickInput().locator('input[type="text"]').first();
  const rewindRows = async (text) => {
    await rewindInput.fill(text);
    await quickInput().locator('.monaco-list-row', { hasText: text }).first().waitFor({ timeout: 10_000 }).catch(() => {});
    await sleep(200);
    return quickInput().locator('.monaco-list-row', { hasText: text }).count();
  };
  const startRows = await rewindRows('working tree at start');
  const readRows = await rewindRows(': read ');
  const readSteps = (diskState()?.steps ?? []).filter((st) => st.action.startsWith('read ') && st.checkpoint).length;
  check('the rewind picker offers the start and each read step', startRows === 1 && readSteps > 0 && readRows >= Math.min(readSteps, 5), `start ${startRows}, reads ${readRows} of ${readSteps}`);
  await rewindInput.fill('write NOTES.md');
  const notesPick = quickInput().locator('.monaco-list-row', { hasText: 'write NOTES.md' }).first();
  await notesPick.waitFor({ timeout: 15_000 });
  await notesPick.click();
  const rewound = await waitFor('src/farewell.py gone after the rewind', () => !existsSync(join(repo, 'src/farewell.py')), 30_000).catch(() => false);
  check('Rewind to "write NOTES.md" puts the tree back (farewell.py gone, NOTES.md kept)', rewound === true && existsSync(join(repo, 'NOTES.md')));

  // 13b. `rein restore` in a terminal changes files behind the editor (no rein/filesChanged):
  // VS Code's own file watcher reloads the open clean buffer, as the README says.
  await openFile('README.md');
  const beforeRestore = await waitFor('README.md as rewound', async () => ((await editorText()).includes('Says hello.') ? true : false), 30_000).catch((e) => e.message);
  check('the rewind reloaded the open README.md (its edit is gone)', beforeRestore === true, String(beforeRestore));
  const readmeStep = (finalState?.steps ?? []).find((st) => st.action === 'edit README.md');
  let restoreOut = '';
  try {
    restoreOut = execFileSync(REIN_BIN, ['restore', `step:${readmeStep?.n}`], { cwd: repo, encoding: 'utf8' });
  } catch (e) {
    restoreOut = String(e?.stderr ?? e);
  }
  check('rein restore from the CLI puts README.md back as the step left it', readFileSync(join(repo, 'README.md'), 'utf8').includes('Says hello and goodbye.'), restoreOut);
  const followed = await waitFor('the open README.md to follow rein restore', async () => (await editorText()).includes('Says hello and goodbye.'), 30_000).catch((e) => e.message);
  check('the open clean README.md follows a rein restore run outside VS Code (its file watcher)', followed === true, String(followed));

  // 14. A second task, from an agent that reports no plan progress, aborted with "discard".
  writeFileSync(join(repo, '.rein', 'plan.json'), JSON.stringify(plainPlan, null, 2) + '\n');
  await startTask('second task to abort');
  const run2 = await waitStatus(/Agent running/).catch((e) => e.message);
  check('a second task starts once the first is done', /Agent running/.test(run2), run2);
  await showReinView();
  const noProgress = await waitTree('the plan without progress', (r) => r.some((x) => /^Plan\s*6 items · no progress reported$/.test(x)) && r.some((x) => x === 'The agent reports no plan progress')).catch((e) => e.message);
  const planRows = (await treeRows()).map((x) => x.replace(/\s+/g, ' ').trim()).filter((x) => PLAN_ITEMS.includes(x.replace(/\s*(pending|done|in progress)$/, '')));
  check('an agent that reports no plan progress: the view says so and shows no item as pending or done', Array.isArray(noProgress) && planRows.length === 6 && planRows.every((x) => PLAN_ITEMS.includes(x)), Array.isArray(noProgress) ? JSON.stringify(planRows) : noProgress);
  // The comments the first task got are still in check.sh; saving the file in the second task
  // sends only the new one.
  const task1 = new Set((finalState?.constraints ?? []).filter((c) => c.source === 'comment').map((c) => c.text));
  await openFile('check.sh');
  const kept = (await editorText()).split('\n').filter((l) => /rein:/.test(l) && task1.has(l.replace(/^.*rein:\s*/, '').trim()));
  check('check.sh still holds a rein: comment the first task was given', kept.length > 0, await editorText());
  await page.locator('.editor-group-container.active .monaco-editor .view-lines').first().click();
  await page.keyboard.press('Control+End');
  await page.keyboard.press('Enter');
  await page.keyboard.type(COMMENT3, { delay: 10 });
  await page.keyboard.press('Control+S');
  const task2 = await waitFor('the new comment delivered to the second task', () => {
    const s = diskState();
    const c = (s?.constraints ?? []).find((k) => k.source === 'comment' && k.text.includes('name of the check'));
    return s?.task?.goal === 'second task to abort' && c?.status === 'delivered' ? s : false;
  }, 60_000).catch((e) => e.message);
  const again = typeof task2 === 'object' ? (task2.constraints ?? []).filter((c) => c.source === 'comment' && task1.has(c.text)) : null;
  check('a comment delivered to the first task is not sent to the second (only the new one is)', Array.isArray(again) && again.length === 0, typeof task2 === 'object' ? JSON.stringify(task2.constraints) : String(task2));
  // You edit inside a block the agent wrote, then abort: the agent's lines of that block stay
  // (your version of it is kept whole), and the view says which.
  const wrote = await waitFor('the second task\'s notes', () => readFileSync(join(repo, 'NOTES.md'), 'utf8').includes('AGENT three'), 90_000).catch(() => false);
  check('the second task wrote its block into NOTES.md', wrote === true);
  await openFile('NOTES.md');
  await page.locator('.editor-group-container.active .monaco-editor .view-line', { hasText: 'AGENT two' }).first().click();
  await page.keyboard.press('End');
  await page.keyboard.type(' fixed by HUMAN', { delay: 10 });
  await page.keyboard.press('Control+S');
  await waitFor('your edit on disk', () => readFileSync(join(repo, 'NOTES.md'), 'utf8').includes('fixed by HUMAN'), 10_000).catch(() => {});
  await palette('Rein: Abort the Task');
  await quickInput().locator('.monaco-list-row', { hasText: 'Discard' }).first().waitFor({ timeout: 15_000 });
  await quickInput().locator('.monaco-list-row', { hasText: 'Discard' }).first().click();
  const aborted = await waitStatus(/Task aborted/).catch((e) => e.message);
  check('Abort (discard) from the palette: status bar says aborted', /Task aborted/.test(aborted), aborted);
  check('task state on disk is aborted', diskState()?.status === 'aborted', diskState()?.status);
  const keptByAbort = diskState()?.keptAgentLines ?? [];
  const keptLines = keptByAbort.find((k) => k.path === 'NOTES.md')?.lines ?? [];
  const notesAfter = readFileSync(join(repo, 'NOTES.md'), 'utf8');
  check('the abort keeps your edit and says exactly which agent lines stayed (keptAgentLines)', notesAfter.includes('AGENT two fixed by HUMAN') && JSON.stringify(keptLines.map((l) => l.text)) === '["AGENT one","AGENT three"]', `${JSON.stringify(keptByAbort)} ${notesAfter}`);
  await showReinView();
  const keptRows = keptLines.length ? await waitTree('the kept agent lines', (r) => r.some((x) => /^Agent lines the abort kept\s*2$/.test(x)) && keptLines.every((l) => r.some((x) => x.includes(l.text) && x.includes(`NOTES.md:${l.line}`)))).catch((e) => e.message) : 'no kept lines';
  check('the Rein view lists the agent lines the abort kept, with file and line', Array.isArray(keptRows), Array.isArray(keptRows) ? '' : String(keptRows));
  // The stop reason above names the kept lines too: the row is the one with file and line.
  const keptRow = page.locator('#workbench\\.parts\\.sidebar .monaco-list-row', { hasText: 'AGENT three' }).filter({ hasText: `NOTES.md:${keptLines[1]?.line}` }).first();
  if (keptLines.length) {
    await keptRow.click();
    // The cursor was on the line you edited (5): it moves to the kept line.
    let at = '';
    await waitFor('NOTES.md open on the kept line', async () => {
      const st = (await page.locator('#workbench\\.parts\\.statusbar').innerText()).replace(/\s+/g, ' ');
      at = /Ln (\d+),/.exec(st)?.[1] ?? '';
      return Number(at) === keptLines[1].line;
    }, 10_000).catch(() => {});
    check('clicking a kept line opens its file on that line', Number(at) === keptLines[1].line, `Ln ${at}, kept at ${keptLines[1].line}`);
  }
  await shot('aborted');

  await longTask();
  await reopened();

  if (SHOT && midShot) {
    copyFileSync(midShot, SHOT);
  }
}

// 15. A long task: the extension declares experimental.rein.stateDeltas, so after the first
// whole state it gets only what changed; at the end what it holds is the server's state
// (`rein.state`, compared by the extension when Show State fetches it), and the view lists the
// newest steps with the older ones in pages.
const LONG = 400;
async function longTask() {
  const longPlan = {
    steps: [
      { plan: [{ text: 'Write the numbers', status: 'active' }, 'Read one back'], say: 'One number per step, into ten files.' },
      ...Array.from({ length: LONG }, (_, i) => ({ write: { path: `nums/n${i % 10}.txt`, content: `${i}\n` }, item: 1, say: `Writing ${i}.` })),
      { read: 'nums/n0.txt', item: 2, say: 'Reading one back.' },
      { finish: `Wrote ${LONG} numbers.` },
    ],
  };
  writeFileSync(join(repo, '.rein', 'plan.json'), JSON.stringify(longPlan, null, 2) + '\n');
  const mark = existsSync(EXT_LOG) ? statSync(EXT_LOG).size : 0;
  const logSince = () => (existsSync(EXT_LOG) ? readFileSync(EXT_LOG, 'utf8').slice(mark) : '');
  const t0 = Date.now();
  await startTask('a long task');
  const done = await waitStatus(/Agent done/, 900_000).catch((e) => e.message);
  check(`a long task (${LONG} steps) runs to its end`, /Agent done/.test(done), done);
  console.log(`   (the long task took ${Math.round((Date.now() - t0) / 1000)}s)`);
  const disk = diskState();
  const total = (disk?.stepsOmitted ?? 0) + (disk?.steps ?? []).length;
  // How the state came: logged by the extension when the task ended.
  const ended = await waitFor('the counts of the long task in the extension log', () => /state: task \S+ done at version \d+ \(\d+ steps\): .*/.exec(logSince())?.[0], 15_000).catch((e) => e.message);
  const m = /done at version (\d+) \((\d+) steps\): (\d+) deltas?, (\d+) whole states?, (\d+) gaps?, (\d+) stale/.exec(String(ended));
  check('the long task reached the extension as deltas (one whole state at the start, no gap)', !!m && Number(m[3]) >= LONG && Number(m[4]) <= 2 && Number(m[5]) === 0 && Number(m[2]) === total, `${ended}; ${total} steps on disk`);
  // Show State fetches rein.state; the extension compares it with what it holds first.
  await palette('Rein: Show State');
  const compared = await waitFor('the comparison with rein.state in the log', () => /state: (in step|OUT OF STEP|behind)[^\n]*/.exec(logSince())?.[0], 15_000).catch((e) => e.message);
  check('at the end the state the extension holds is rein.state\'s (same version, every field and step)', new RegExp(`^state: in step with the server at version ${disk?.version} \\(${total} steps\\)$`).test(String(compared)), `${compared}; disk version ${disk?.version}, ${total} steps`);
  // The view: the newest step first, the count, and the older steps in pages at the end.
  await showReinView();
  const top = await waitTree('the newest of the long task\'s steps', (r) => r.some((x) => new RegExp(`^Steps\\s*${total - 1}$`).test(x)) && r.some((x) => x.startsWith(`${total - 1}. `))).catch((e) => e.message);
  check('the view lists the long task\'s newest step first, with the count', Array.isArray(top), Array.isArray(top) ? '' : String(top));
  await page.locator('#workbench\\.parts\\.sidebar .monaco-list').first().focus();
  await page.keyboard.press('End');
  const earlier = await waitTree('Earlier steps at the end of the steps', (r) => r.some((x) => /^Earlier steps\s*\d+–\d+$/.test(x)), 15_000).catch((e) => e.message);
  check('older steps are in pages under "Earlier steps"', Array.isArray(earlier), Array.isArray(earlier) ? '' : String(earlier));
  if (Array.isArray(earlier)) {
    await page.locator('#workbench\\.parts\\.sidebar .monaco-list-row', { hasText: 'Earlier steps' }).first().click();
    const pages = await waitTree('a page of older steps', (r) => r.some((x) => /^Steps \d+–\d+\s*100$/.test(x)), 15_000).catch((e) => e.message);
    check('"Earlier steps" opens on pages of 100 steps', Array.isArray(pages), Array.isArray(pages) ? '' : String(pages));
  }
  await shot('long-task');
}

// 16. Quit and reopen (a reload of the window): the transcript that was open comes back
// filled from the task, not as an empty pane.
async function reopened() {
  await palette('Rein: Show Transcript');
  await transcriptFrame();
  await page.reload();
  await page.locator('.monaco-workbench').waitFor({ timeout: 60_000 });
  // Its tab came back; shown, it fills from the task (no Show Transcript: that would open a
  // new one).
  const tab = page.locator('.tab', { hasText: 'Rein: Transcript' }).first();
  const tabBack = await tab.waitFor({ timeout: 30_000 }).then(() => true, () => false);
  check('after a reload the transcript\'s tab is still there', tabBack);
  if (tabBack) await tab.click();
  const back = await waitFor('the transcript after the reload', async () => {
    const f = await transcriptFrame(5_000).catch(() => null);
    if (!f) return false;
    const e = await transcriptEntries(f);
    return e.some((x) => x.includes('a long task')) ? e : false;
  }, 90_000).catch((e) => e.message);
  check('after a reload the open transcript comes back with the task, not empty', Array.isArray(back), Array.isArray(back) ? '' : String(back));
  await shot('reopened');
}

// 17. Three agents at once, each in a worktree of its own (issue 27): started from the palette,
// listed in the Rein view with their status, holder, plan and waiting decisions, counted in
// the status bar; paused all at once; one's decision answered from the one queue; one taken
// over (its worktree opens in a new window); one landed into the working tree, one discarded.
// Every check is cross-checked against the server (`rein tasks --json`) and git.
const LONG_THINK = 600_000; // a step the tasks sit in until they are paused (cut short then)
const wtPlans = {
  farewell: {
    steps: [
      { plan: [{ text: 'Write farewell()', status: 'active' }, 'Document it', 'Check it'], think_ms: 800, say: 'A farewell beside the greeting.' },
      { write: { path: 'src/farewell.py', content: 'def farewell(name):\n    return "bye " + name\n' }, item: 1, think_ms: 1500 },
      { edit: { path: 'README.md', old: 'Says hello.', new: 'Says hello and goodbye.' }, item: 2, think_ms: 1500 },
      { read: 'README.md', item: 3, think_ms: LONG_THINK },
      { finish: 'Added farewell().' },
    ],
  },
  tag: {
    steps: [
      { plan: [{ text: 'Write the notes', status: 'active' }, 'Tag the release'], think_ms: 800, say: 'Notes, then a tag.' },
      { write: { path: 'NOTES.md', content: '# Notes\n\nv1: the greeter.\n' }, item: 1, think_ms: 1500 },
      // Not on the allow-list: it waits for the person's decision.
      { run: { cmd: 'git tag v1', timeout_s: 30 }, item: 2, think_ms: 500 },
      { read: 'NOTES.md', think_ms: LONG_THINK },
      { finish: 'Tagged.' },
    ],
  },
  shout: {
    steps: [
      { plan: [{ text: 'Write shout()', status: 'active' }, 'Test it'], think_ms: 800, say: 'A louder greeting.' },
      { write: { path: 'src/shout.py', content: 'def shout(name):\n    return name.upper()\n' }, item: 1, think_ms: 1500 },
      { read: 'src/shout.py', item: 2, think_ms: LONG_THINK },
      { finish: 'Added shout().' },
    ],
  },
};
const WT_GOALS = { farewell: 'Add a farewell', tag: 'Write release notes and tag v1', shout: 'Add a shout() helper' };

async function worktreeTasks() {
  const files = Object.fromEntries(Object.entries(wtPlans).map(([k, v]) => [`.rein/${k}.json`, JSON.stringify(v, null, 2) + '\n']));
  const { dir: dir2, repo: repo2 } = makeRepo(REIN_BIN, wtPlans.farewell, { files });
  try {
    await worktreeScenario(repo2);
  } finally {
    // Whatever is left is discarded, so no engine or worktree outlives the test.
    for (const t of cliTasks(repo2)?.tasks ?? []) {
      try {
        execFileSync(REIN_BIN, ['discard', t.taskId, '--force'], { cwd: repo2, encoding: 'utf8', stdio: 'pipe' });
      } catch {}
    }
    if (!process.env.KEEP) cleanup(dir2);
  }
}

/** `rein tasks --json` in the repository: the server's own list. */
function cliTasks(cwd) {
  try {
    return JSON.parse(execFileSync(REIN_BIN, ['tasks', '--json'], { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 30_000 }));
  } catch {
    return null;
  }
}
/** The worktree tasks of `rein tasks --json` (what this scenario starts). */
const wtTasks = (l) => (l?.tasks ?? []).filter((t) => t.isolation === 'worktree');
/** Tasks the server lists more than once (a worktree task also as the task here). */
const listedTwice = (l) => (l?.tasks ?? []).filter((t, i, all) => all.findIndex((u) => u.taskId === t.taskId) !== i);

/** The view row of the task named `name` ("task 2"). */
const taskRow = (name) => page.locator('#workbench\\.parts\\.sidebar .monaco-list-row').filter({ hasText: `${name}: ` }).first();
/** Right-clicks a task's row and runs the item `title` of its context menu. */
async function taskMenuItem(name, title) {
  const item = page.locator('.context-view .action-item', { hasText: title }).first();
  // The rows move as the tasks' states come in (a stop reason appears under a task): a click
  // that met another row opens its menu instead; like a user, close it and click again.
  for (let attempt = 1; ; attempt++) {
    await taskRow(name).click({ button: 'right' });
    const shown = await item.waitFor({ state: 'visible', timeout: 5_000 }).then(() => true, (e) => (attempt >= 3 ? Promise.reject(e) : false));
    if (shown) break;
    await page.keyboard.press('Escape');
    await sleep(500);
  }
  // The workbench's menus act on a hovered item's Enter (a synthetic click can come too soon).
  await item.hover();
  await sleep(250);
  await page.keyboard.press('Enter');
}
/** Hovers a task's row and clicks its inline action whose title starts with `title`. */
async function taskAction(name, title) {
  const row = taskRow(name);
  const action = row.locator(`.action-label[aria-label^="${title}"]`).first();
  for (let attempt = 1; ; attempt++) {
    await page.mouse.move(0, 0);
    await row.hover();
    const shown = await action.waitFor({ state: 'visible', timeout: 5_000 }).then(() => true, (e) => (attempt >= 3 ? Promise.reject(e) : false));
    if (shown) break;
  }
  await action.click();
}

async function worktreeScenario(repo2) {
  const settingsFile = join(repo2, '.vscode', 'settings.json');
  const baseSettings = JSON.parse(readFileSync(settingsFile, 'utf8'));
  /** Points rein.agent at one of the plans (the next Start Task runs it). */
  const usePlan = async (name) => {
    writeFileSync(settingsFile, JSON.stringify({ ...baseSettings, 'rein.agent': { kind: 'script', plan: `.rein/${name}.json` } }, null, 2) + '\n');
    await sleep(2500); // VS Code reads the changed settings file
  };
  await openWorkbench(cs.urlFor(repo2));
  const idle = await waitStatus(/no task/, 90_000).catch((e) => e.message);
  check('worktree tasks: the window on the second repository is up (no task)', /no task/.test(idle), idle);
  await showReinView();

  // Three tasks, each started in a worktree of its own from the palette; the last carries the
  // uncommitted change (the settings file naming its plan) into its worktree.
  const started = [];
  for (const [key, where] of [['farewell', 'worktree'], ['tag', 'worktree'], ['shout', 'carry']]) {
    await usePlan(key);
    await startTask(WT_GOALS[key], where);
    const t = await waitFor(`the server lists "${WT_GOALS[key]}" in a worktree`, () => cliTasks(repo2)?.tasks.find((x) => x.goal === WT_GOALS[key] && x.isolation === 'worktree'), 60_000).catch(() => null);
    started.push(t);
  }
  const [t1, t2, t3] = started;
  check('Start Task "in a worktree" starts three tasks, each on its own branch and worktree', started.every((t) => t && t.branch?.startsWith('rein/') && t.worktree && existsSync(t.worktree)) && new Set(started.map((t) => t?.worktree)).size === 3, JSON.stringify(started));
  const own = await waitFor('each plan\'s first file in its own worktree', () => started.every((t, i) => t && existsSync(join(t.worktree, ['src/farewell.py', 'NOTES.md', 'src/shout.py'][i]))), 90_000).catch((e) => e.message);
  check('each task runs its own plan (the rein.agent the window had at its start), in its own worktree', own === true, `${own} ${JSON.stringify(cliTasks(repo2))}`);
  const carried = t3 ? readFileSync(join(t3.worktree, '.vscode', 'settings.json'), 'utf8') : '';
  check('"with your uncommitted changes" carries them into the worktree (carry)', carried.includes('.rein/shout.json'), carried);
  check('the person\'s working tree is untouched by the three agents', !existsSync(join(repo2, 'src/farewell.py')) && !existsSync(join(repo2, 'NOTES.md')) && !existsSync(join(repo2, 'src/shout.py')), git(repo2, 'status', '--short'));

  // The view: a Tasks group, one row per task with status, holder, plan x/y, waiting decisions.
  const listed = await waitTree('three tasks, task 2 waiting on its decision', (r) =>
    r.some((x) => /^Tasks\s*\d+ running · 1 waiting$/.test(x)) &&
    r.some((x) => x.startsWith(`task 1: ${WT_GOALS.farewell}`) && /running · plan \d\/3/.test(x)) &&
    r.some((x) => x.startsWith(`task 2: ${WT_GOALS.tag}`) && /waiting for you · plan \d\/2 · 1 waiting/.test(x)) &&
    r.some((x) => x.startsWith(`task 3: ${WT_GOALS.shout}`) && /running · plan \d\/2/.test(x)) &&
    r.some((x) => x.startsWith('task 2: The agent wants to run `git tag v1`')), 90_000).catch((e) => e.message);
  check('the Rein view lists the three tasks: status, plan x/y, and task 2\'s waiting decision under it', Array.isArray(listed), Array.isArray(listed) ? '' : `${listed}\n${JSON.stringify(await treeRows())}`);
  const bar = await waitStatus(/Rein: 2 running · 1 waiting/, 30_000).catch((e) => e.message);
  check('the status bar counts running tasks and waiting decisions ("2 running · 1 waiting")', /2 running · 1 waiting/.test(bar), bar);
  const badge = (await page.locator('.activitybar .action-item a[aria-label^="Rein"] ~ .badge, .activitybar .action-item:has(a[aria-label^="Rein"]) .badge-content').first().innerText().catch(() => '')).trim();
  check('the Rein view\'s badge shows the one waiting decision', badge === '1', JSON.stringify(badge));
  const hover = await hoverRow(`task 1: ${WT_GOALS.farewell}`);
  check('a task row\'s tooltip names its branch and worktree', t1 && hover.includes(t1.branch) && hover.includes(t1.worktree), hover);
  await page.mouse.move(0, 0);
  // The screenshot for the README: the view wide enough to read each row, every task open,
  // a file of the person's beside.
  await openFile('src/greet.py');
  const wide = (await page.locator('#workbench\\.parts\\.sidebar').boundingBox())?.width ?? 0;
  await sidebarWidth(600);
  for (const name of ['task 1', 'task 3']) {
    const twistie = taskRow(name).locator('.monaco-tl-twistie.collapsible.collapsed');
    if (await twistie.count()) await twistie.first().click();
  }
  await page.mouse.move(0, 0);
  await sleep(800);
  const tasksShot = await shot('three-worktree-tasks');
  if (TASKS_SHOT) copyFileSync(tasksShot, TASKS_SHOT);
  await sidebarWidth(wide);
  // A worktree task's transcript, from its context menu: a panel of its own, live.
  await taskMenuItem('task 1', 'Show Its Transcript');
  const tr = await waitFor('task 1\'s transcript', async () => {
    const f = await transcriptFrame(5_000).catch(() => null);
    if (!f) return false;
    const e = await transcriptEntries(f);
    return e.some((x) => x.includes(WT_GOALS.farewell)) && e.some((x) => x.includes('src/farewell.py')) ? e : false;
  }, 60_000).catch((e) => e.message);
  const trTab = await page.locator('.tab', { hasText: 'Rein: Transcript (task 1)' }).count();
  check('"Show Its Transcript" opens task 1\'s transcript (rein.transcript with its taskId) in a tab of its own', Array.isArray(tr) && trTab === 1, Array.isArray(tr) ? `tabs ${JSON.stringify(await tabTitles())}` : String(tr));

  // Pause all (the view's title action; the palette has it too): every running agent stops.
  await palette('Rein: Pause All Agents');
  const paused = await waitFor('every task paused or waiting (rein tasks)', () => {
    const w = wtTasks(cliTasks(repo2));
    return w.length === 3 && w.every((t) => t.status === 'paused' || t.status === 'awaiting_decision') && w.filter((t) => t.status === 'paused').length >= 2 ? w : false;
  }, 60_000).catch((e) => e.message);
  check('Pause All pauses every running task (rein tasks: none running)', typeof paused === 'object', typeof paused === 'object' ? '' : `${paused} ${JSON.stringify(cliTasks(repo2))}`);
  // Task 2 waits on its decision; whether pause all also pauses it is the server's to say.
  const pausedBar = await waitStatus(/Rein: 0 running · [23] paused · 1 waiting/, 30_000).catch((e) => e.message);
  check('the status bar follows: "0 running · 2 paused · 1 waiting"', /0 running · [23] paused · 1 waiting/.test(pausedBar), pausedBar);
  const pausedRows = await waitTree('tasks 1 and 3 paused', (r) => r.some((x) => x.startsWith('task 1: ') && /paused/.test(x)) && r.some((x) => x.startsWith('task 3: ') && /paused/.test(x)), 30_000).catch((e) => e.message);
  check('the view shows tasks 1 and 3 paused', Array.isArray(pausedRows), Array.isArray(pausedRows) ? '' : String(pausedRows));

  // The one queue of decisions: oldest first, each naming its task; answered with its taskId.
  await palette('Rein: Answer Decisions');
  await quickInput().locator('.quick-input-title', { hasText: 'Answer Decisions' }).first().waitFor({ timeout: 15_000 });
  const queueRows = (await quickInput().locator('.monaco-list-row').allInnerTexts()).map((x) => x.replace(/\s+/g, ' ').trim());
  check('Answer Decisions lists the waiting decision naming its task ("task 2: …")', queueRows.length === 1 && queueRows[0].startsWith('task 2: The agent wants to run `git tag v1`') && queueRows[0].includes('approve / deny'), JSON.stringify(queueRows));
  await quickInput().locator('.monaco-list-row').first().click();
  await quickInput().locator('.monaco-list-row', { hasText: 'deny' }).first().waitFor({ timeout: 15_000 });
  await quickInput().locator('.monaco-list-row', { hasText: 'deny' }).first().click();
  const answered = await waitFor('task 2\'s decision answered (rein tasks)', () => {
    const l = cliTasks(repo2);
    return l && l.decisions.length === 0 && l.tasks.find((t) => t.taskId === t2?.taskId)?.decisions.length === 0 ? l : false;
  }, 30_000).catch((e) => e.message);
  check('the answer reaches task 2 (rein.decide with its taskId): the queue is empty', typeof answered === 'object', typeof answered === 'object' ? '' : `${answered} ${JSON.stringify(cliTasks(repo2))}`);
  const noTag = (() => { try { return git(repo2, 'tag', '--list', 'v1').trim() === ''; } catch { return false; } })();
  check('denied, task 2 never ran git tag v1', noTag);
  const quietBar = await waitStatus(/ 0 waiting/, 30_000).catch((e) => e.message);
  check('the status bar says 0 waiting after the answer', / 0 waiting/.test(quietBar), quietBar);

  // Resume all, then pause one task alone from its row (its inline button, with its taskId).
  await palette('Rein: Resume All Agents');
  const resumed = await waitFor('tasks 1 and 3 running again (rein tasks)', () => {
    const w = wtTasks(cliTasks(repo2));
    return ['task 1', 'task 3'].every((n) => w.find((t) => t.name === n)?.status === 'running') ? w : false;
  }, 60_000).catch((e) => e.message);
  check('Resume All resumes every paused task', Array.isArray(resumed), Array.isArray(resumed) ? '' : `${resumed} ${JSON.stringify(cliTasks(repo2))}`);
  await waitTree('task 1 running in the view', (r) => r.some((x) => x.startsWith('task 1: ') && /running/.test(x)), 30_000).catch(() => {});
  await taskAction('task 1', 'Pause This Task');
  const one = await waitFor('task 1 paused, task 3 still running (rein tasks)', () => {
    const w = wtTasks(cliTasks(repo2));
    return w.find((t) => t.name === 'task 1')?.status === 'paused' && w.find((t) => t.name === 'task 3')?.status === 'running' ? w : false;
  }, 30_000).catch((e) => e.message);
  check('a task row\'s Pause pauses that task only (the others run on)', Array.isArray(one), Array.isArray(one) ? '' : `${one} ${JSON.stringify(cliTasks(repo2))} toasts: ${JSON.stringify(await toasts())}`);
  if (!Array.isArray(one)) await shot('pause-one');
  // Stopped again for the land below (a task that runs is not landed).
  await palette('Rein: Pause All Agents');
  await waitFor('task 1 paused again', () => wtTasks(cliTasks(repo2)).find((t) => t.name === 'task 1')?.status === 'paused', 60_000).catch(() => {});
  await waitTree('tasks 1 and 3 paused again in the view', (r) => r.some((x) => x.startsWith('task 1: ') && /paused/.test(x)) && r.some((x) => x.startsWith('task 3: ') && /paused/.test(x)), 30_000).catch(() => {});

  // Take over task 3 from its controls: its worktree opens in a new window (rein.worktreeTakeover
  // "newWindow", the default).
  const popup = page.context().waitForEvent('page', { timeout: 30_000 }).catch(() => null);
  await taskMenuItem('task 3', 'Take Over This Task');
  await answer('Rein: Take Over', 'I will finish shout() myself');
  const win = await popup;
  const winUrl = win ? win.url() : '';
  check('taking over a worktree task opens its worktree in a new window', !!t3 && decodeURIComponent(winUrl).includes(`folder=${t3.worktree}`), `${winUrl} vs ${t3?.worktree}`);
  const held = await waitFor('task 3 held by the person (rein tasks)', () => wtTasks(cliTasks(repo2)).find((t) => t.taskId === t3?.taskId && t.holder === 'human'), 30_000).catch(() => null);
  check('task 3 is yours (holder human), the others still the agents\'', !!held && wtTasks(cliTasks(repo2)).filter((t) => t.holder === 'agent').length === 2, JSON.stringify(cliTasks(repo2)));
  // Every request above named its task; none of them may make a worktree task the task here.
  const twice = listedTwice(cliTasks(repo2));
  check('the server lists each task once after requests that name a worktree task (none becomes "here")', twice.length === 0, `listed twice: ${JSON.stringify(twice)}`);
  if (win) {
    // The new window's own rein lsp joins the worktree's engine: it shows the task you hold.
    const there = await waitFor('the worktree window\'s status bar', async () => {
      const t = (await win.locator('#workbench\\.parts\\.statusbar a[aria-label^="Rein"]').first().getAttribute('aria-label', { timeout: 2000 })) ?? '';
      return /You hold control/.test(t) ? t : false;
    }, 90_000).catch((e) => e.message);
    check('the worktree\'s window serves task 3 from its engine (status bar: you hold control)', /You hold control/.test(there), there);
    await win.close().catch(() => {});
  }
  await page.bringToFront();

  // Land task 1 (paused) into the working tree as uncommitted changes.
  const headBefore2 = git(repo2, 'rev-parse', 'HEAD').trim();
  await closeToasts();
  await taskAction('task 1', 'Land This Task');
  const asChanges = quickInput().locator('.monaco-list-row', { hasText: 'As uncommitted changes' }).first();
  await asChanges.waitFor({ timeout: 15_000 });
  await asChanges.click();
  const landed = await waitFor('the land report in the status bar', async () => {
    const t = (await page.locator('#workbench\\.parts\\.statusbar').innerText()).replace(/\s+/g, ' ');
    return /landed task 1/.test(t) ? t : false;
  }, 60_000).catch((e) => e.message);
  check('Land says what came over ("landed task 1 as uncommitted changes: 2 files applied")', /landed task 1 as uncommitted changes: 2 files applied; its worktree and branch are removed/.test(landed), landed);
  const readme = readFileSync(join(repo2, 'README.md'), 'utf8');
  check('task 1\'s work is in the working tree, uncommitted (HEAD unchanged)', existsSync(join(repo2, 'src/farewell.py')) && readme.includes('Says hello and goodbye.') && git(repo2, 'rev-parse', 'HEAD').trim() === headBefore2, git(repo2, 'status', '--short'));
  const gone1 = await waitFor('task 1 gone from the list', () => {
    const l = cliTasks(repo2);
    return l && !wtTasks(l).some((t) => t.taskId === t1?.taskId) ? l : false;
  }, 30_000).catch(() => null);
  check('landed, task 1\'s worktree and branch are removed', !!gone1 && !!t1 && !existsSync(t1.worktree) && git(repo2, 'branch', '--list', t1.branch).trim() === '', git(repo2, 'worktree', 'list'));
  const after1 = await waitTree('task 1 gone from the view', (r) => !r.some((x) => x.startsWith('task 1: ')) && r.some((x) => x.startsWith('task 2: ')), 30_000).catch((e) => e.message);
  check('the view drops the landed task', Array.isArray(after1), Array.isArray(after1) ? '' : String(after1));

  // Discard task 2 while its worktree holds a file of yours (issue 36, 4b): what the discard
  // would remove of yours is asked of the server first, so the one dialog names it and offers
  // Discard Anyway; no "discard task 2?" before it, no refusal after. Declined, nothing is done.
  if (t2) writeFileSync(join(t2.worktree, 'mine.txt'), 'the person\'s\n');
  await taskAction('task 2', 'Discard This Task');
  const heldDialog = page.locator('.monaco-dialog-box');
  await heldDialog.waitFor({ timeout: 15_000 });
  const heldText = (await heldDialog.innerText()).replace(/\s+/g, ' ');
  await shot('discard-over-your-change');
  check('Discard over your file in its worktree asks once, naming it, with "Discard Anyway (removes your changes: mine.txt)"', heldText.includes('holds your changes (mine.txt)') && heldText.includes('Discard Anyway (removes your changes: mine.txt)') && !heldText.includes('discard task 2:'), heldText);
  await page.keyboard.press('Escape');
  await heldDialog.waitFor({ state: 'hidden', timeout: 15_000 }).catch(() => {});
  await sleep(1500);
  const stillThere = !!t2 && existsSync(join(t2.worktree, 'mine.txt')) && wtTasks(cliTasks(repo2)).some((t) => t.taskId === t2.taskId);
  check('declined, task 2 and your file stay, and nothing more is asked', stillThere && (await page.locator('.monaco-dialog-box').count()) === 0, JSON.stringify({ stillThere, toasts: await toasts() }));
  if (t2) rmSync(join(t2.worktree, 'mine.txt'), { force: true });

  // Discard task 2 (asked first, in a dialog).
  await taskAction('task 2', 'Discard This Task');
  const dialog = page.locator('.monaco-dialog-box');
  await dialog.waitFor({ timeout: 15_000 });
  const dialogText = (await dialog.innerText()).replace(/\s+/g, ' ');
  check('Discard asks first, naming the task, its worktree and branch', dialogText.includes(`discard task 2: ${WT_GOALS.tag}`) && !!t2 && dialogText.includes(t2.branch), dialogText);
  await dialog.locator('.monaco-button', { hasText: /^Discard$/ }).first().click();
  const gone2 = await waitFor('task 2 discarded', () => {
    const l = cliTasks(repo2);
    return l && !wtTasks(l).some((t) => t.taskId === t2?.taskId) ? l : false;
  }, 30_000).catch(() => null);
  check('Discard removes task 2, its worktree and its branch; the working tree keeps task 1\'s work', !!gone2 && !!t2 && !existsSync(t2.worktree) && git(repo2, 'branch', '--list', t2.branch).trim() === '' && existsSync(join(repo2, 'src/farewell.py')) && !existsSync(join(repo2, 'NOTES.md')), git(repo2, 'worktree', 'list'));
  const left = await waitTree('only task 3 left', (r) => r.some((x) => x.startsWith('task 3: ') && /you hold it/.test(x)) && !r.some((x) => /^task [12]: /.test(x)), 30_000).catch((e) => e.message);
  check('the view lists only task 3, held by you', Array.isArray(left), Array.isArray(left) ? '' : String(left));
  await shot('worktree-tasks-after');
}

// 18. A task is a conversation (issue 30): a scripted task finishes; Continue from the
// palette sends the follow-up, the task runs turn 2 and finishes, the transcript shows it;
// Start Task then offers to continue or start anew; after a newer task the Rein view's
// History lists the older one with its turns, opens its transcript read-only, and its
// Continue button continues it (it is the task here again). Cross-checked with the files.
const convPlan = {
  steps: [
    { write: { path: 'one.txt', content: 'one\n' }, say: 'The first file.', think_ms: 500 },
    { finish: 'Wrote one.txt.' },
  ],
  turns: [
    [{ write: { path: 'two.txt', content: 'two\n' }, say: 'Now the second file, as you asked.', think_ms: 500 }, { finish: 'Wrote two.txt.' }],
    [{ write: { path: 'three.txt', content: 'three\n' }, say: 'And a third.', think_ms: 500 }, { finish: 'Wrote three.txt.' }],
  ],
};
const CONV_GOAL = 'Write the first file';
const CONV_GOAL2 = 'Write the files again';

async function conversation() {
  const { dir: dir3, repo: repo3 } = makeRepo(REIN_BIN, convPlan);
  try {
    await conversationScenario(repo3);
  } finally {
    if (!process.env.KEEP) cleanup(dir3);
  }
}

/** The state of task `id` (default: the current one) in `repo`, from disk. */
function taskOnDisk(repo3, id) {
  const rein = join(repo3, '.git', 'rein');
  try {
    const task = id ?? readFileSync(join(rein, 'current'), 'utf8').trim();
    return JSON.parse(readFileSync(join(rein, 'tasks', task, 'state.json'), 'utf8'));
  } catch {
    return null;
  }
}

/** The History row of the Rein view whose goal is exactly `goal`. */
const historyRow = (goal) => page.locator('#workbench\\.parts\\.sidebar .monaco-list-row').filter({ has: page.locator('.label-name', { hasText: new RegExp(`^${goal}$`) }) }).first();

async function conversationScenario(repo3) {
  await openWorkbench(cs.urlFor(repo3));
  const idle = await waitStatus(/no task/, 90_000).catch((e) => e.message);
  check('conversation: the window on the third repository is up (no task)', /no task/.test(idle), idle);
  await showReinView();
  await startTask(CONV_GOAL);
  const done1 = await waitStatus(/Agent done/, 90_000).catch((e) => e.message);
  const first = taskOnDisk(repo3);
  check('conversation: the scripted task finishes its first turn', /Agent done/.test(done1) && first?.status === 'done' && existsSync(join(repo3, 'one.txt')), `${done1}; ${first?.status}`);
  // The person's own change between turns: the agent is told of it, and it stays theirs.
  writeFileSync(join(repo3, 'README.md'), '# greeter\n\nSays hello, and more.\n');

  // Continue from the command palette: the text is asked, the task runs turn 2 and finishes.
  await palette('Rein: Continue the Task');
  await shot('continue-ask');
  await answer('Rein: Continue', 'now write the second file');
  const turn2 = await waitFor('the second turn done on disk', () => {
    const s = taskOnDisk(repo3);
    return s?.task.id === first?.task.id && s.status === 'done' && s.turns?.length === 1 ? s : false;
  }, 90_000).catch((e) => e.message);
  check('Continue from the palette sends the follow-up: the same task runs turn 2 and finishes', typeof turn2 === 'object' && turn2.turns[0].text === 'now write the second file' && readFileSync(join(repo3, 'two.txt'), 'utf8') === 'two\n', JSON.stringify(typeof turn2 === 'object' ? turn2.turns : turn2));
  check('the person\'s change between the turns is kept', readFileSync(join(repo3, 'README.md'), 'utf8').includes('and more'));
  const done2 = await waitStatus(/Agent done/, 30_000).catch((e) => e.message);
  check('the status bar says done again after turn 2', /Agent done/.test(done2), done2);

  await palette('Rein: Show Transcript');
  const entries = await waitFor('the follow-up in the transcript', async () => {
    const f = await transcriptFrame(5_000).catch(() => null);
    const e = f ? await transcriptEntries(f) : [];
    return e.some((x) => /Wrote two\.txt/.test(x)) ? e : false;
  }, 60_000).catch((e) => e.message);
  const youAt = Array.isArray(entries) ? entries.findIndex((x) => /^You: turn 2, from step \d+/.test(x)) : -1;
  check('the transcript shows the follow-up as "You:" after the first turn\'s end, then the agent\'s second turn', youAt > 0 && /now write the second file/.test(entries[youAt]) && /Your changes since its last turn/.test(entries[youAt]) && entries.slice(0, youAt).some((x) => /^Done .*Wrote one\.txt/.test(x)) && /your changes since the agent's last turn: README\.md/.test(entries[youAt - 1]) && entries.slice(youAt).some((x) => /Now the second file, as you asked/.test(x)), Array.isArray(entries) ? entries.join(' | ') : String(entries));
  await shot('conversation-transcript');
  await closeQuickInput();
  await palette('View: Close All Editors');

  // Start Task on the ended task offers to continue it; a new task is started instead.
  await palette('Rein: Start Task');
  const offer = await quickInput().locator('.quick-input-title', { hasText: 'the task here has ended' }).first().waitFor({ state: 'visible', timeout: 15_000 }).then(async () => (await quickInput().locator('.monaco-list-row').allInnerTexts()).map((t) => t.replace(/\s+/g, ' ').trim()), (e) => e.message);
  check('Start Task on the ended task offers "Continue: <goal>" or "New task"', Array.isArray(offer) && offer.some((x) => x.includes(`Continue: ${CONV_GOAL}`)) && offer.some((x) => x.includes('New task')), JSON.stringify(offer));
  await shot('start-offers-continue');
  await page.keyboard.press('Escape');
  await startTask(CONV_GOAL2);
  const newer = await waitFor('the newer task done on disk', () => {
    const s = taskOnDisk(repo3);
    return s && s.task.id !== first?.task.id && s.status === 'done' ? s : false;
  }, 90_000).catch((e) => e.message);
  check('a new task starts and finishes beside the earlier one', typeof newer === 'object', String(newer));

  // The History lists both, newest first; the older one with its turns.
  await showReinView();
  const group = page.locator('#workbench\\.parts\\.sidebar .monaco-list-row', { hasText: /^History/ }).first();
  await group.waitFor({ timeout: 30_000 }).catch(() => {});
  if ((await group.getAttribute('aria-expanded').catch(() => null)) !== 'true') await group.click();
  const hist = await waitTree('the History rows', (r) => {
    // A row's label and description read as one text ("Write the first filedone · …").
    const a = r.findIndex((x) => x.startsWith(CONV_GOAL2) && /current · done/.test(x));
    const b = r.findIndex((x) => x.startsWith(CONV_GOAL));
    return a >= 0 && b > a && /done · .* ago · \d+ steps · 2 turns/.test(r[b]);
  }, 30_000).catch((e) => e.message);
  check('the History lists the tasks newest first, the older one with "2 turns", the newer as current', Array.isArray(hist), Array.isArray(hist) ? '' : String(hist));
  await shot('conversation-history');

  // Clicking the older task opens its transcript, read-only, in a panel of its own.
  await historyRow(CONV_GOAL).click();
  const tab = await page.locator('.tab', { hasText: 'earlier:' }).first().waitFor({ timeout: 20_000 }).then(() => true, () => false);
  const old = await waitFor('the earlier task\'s transcript', async () => {
    for (const f of page.frames()) {
      if (f === page.mainFrame()) continue;
      const h = await f.locator('#head h1').innerText({ timeout: 500 }).catch(() => '');
      if (h === CONV_GOAL) return transcriptEntries(f);
    }
    return false;
  }, 30_000).catch((e) => e.message);
  check('clicking an older task in History opens its transcript read-only (its own panel, its goal and turns)', tab && Array.isArray(old) && old.some((x) => /now write the second file/.test(x)) && !old.some((x) => x.includes(CONV_GOAL2)), Array.isArray(old) ? old.join(' | ') : String(old));
  check('opening an older task leaves the task here as it was', taskOnDisk(repo3)?.task.id === newer?.task?.id);
  await page.mouse.move(700, 600);
  await shot('conversation-earlier-transcript');

  // Its Continue button continues it: it is the task here again and runs turn 3.
  await closeQuickInput();
  const row = historyRow(CONV_GOAL);
  const action = row.locator('.action-label[aria-label^="Continue the Task"]').first();
  for (let attempt = 1; attempt <= 3; attempt++) {
    await page.mouse.move(0, 0);
    await row.hover();
    if (await action.waitFor({ state: 'visible', timeout: 5_000 }).then(() => true, () => false)) break;
  }
  await action.click();
  await answer('Rein: Continue', 'and a third file');
  const turn3 = await waitFor('the earlier task\'s third turn done on disk', () => {
    const s = taskOnDisk(repo3);
    return s?.task.id === first?.task.id && s.status === 'done' && s.turns?.length === 2 ? s : false;
  }, 90_000).catch((e) => e.message);
  check('Continue on an older task in History makes it the task here again and runs its next turn', typeof turn3 === 'object' && turn3.turns[1].text === 'and a third file' && existsSync(join(repo3, 'three.txt')), typeof turn3 === 'object' ? '' : String(turn3));
  const again = await waitTree('the older task current with 3 turns', (r) => r.some((x) => x.startsWith(CONV_GOAL) && /current · done .* 3 turns/.test(x)), 30_000).catch((e) => e.message);
  check('the view follows: the History marks the continued task current with 3 turns, the view shows its turn', Array.isArray(again) && again.some((x) => /^You: and a third file\s*turn 3$/.test(x)), Array.isArray(again) ? '' : String(again));
  const live = await waitFor('the live transcript of the continued task', async () => {
    const tabs = await tabTitles();
    return tabs.some((t) => /Rein: Transcript(?! \()/.test(t)) && !tabs.some((t) => t.includes('earlier:')) ? tabs : false;
  }, 20_000).catch((e) => e.message);
  const liveEntries = await waitFor('the continued task in the live transcript', async () => {
    const f = await transcriptFrame(5_000).catch(() => null);
    const e = f ? await transcriptEntries(f) : [];
    return e.some((x) => /^You: turn 3/.test(x)) && e.some((x) => /Wrote three\.txt/.test(x)) ? e : false;
  }, 30_000).catch((e) => e.message);
  check('its read-only panel gave way to the live transcript of the task here, with turn 3', Array.isArray(live) && Array.isArray(liveEntries), `${live}; ${Array.isArray(liveEntries) ? '' : liveEntries}`);
  await page.mouse.move(700, 600);
  await shot('conversation-continued');

  // Its plan holds no further turn: Continue asks no words, the server's refusal says why.
  await closeToasts();
  await palette('Rein: Continue the Task');
  const noMore = await waitToast(/cannot take a further turn/, 20_000).catch((e) => e.message);
  const asked = await quickInput().locator('.quick-input-title', { hasText: 'Rein: Continue' }).count();
  check('Continue on a task whose agent takes no further turn asks nothing and says why, naming Start Task', Array.isArray(noMore) && !asked && noMore.some((t) => /cannot take a further turn.*"Rein: Start Task"/.test(t)), Array.isArray(noMore) ? noMore.join(' | ') : String(noMore));
}

const started = Date.now();
try {
  await boot();
  if (ONLY !== 'main' && ONLY !== 'tasks' && ONLY !== 'conversation') await firstHour();
  if (ONLY !== 'setup' && ONLY !== 'tasks' && ONLY !== 'conversation') await scenario();
  if (ONLY !== 'setup' && ONLY !== 'main' && ONLY !== 'conversation') await worktreeTasks();
  if (!ONLY || ONLY === 'conversation') await conversation();
} catch (e) {
  check('scenario ran to the end', false, e?.stack ?? String(e));
  if (page) await shot('failure');
} finally {
  await browser?.close().catch(() => {});
  await cs?.stop().catch(() => {});
  rmSync(GO, { force: true });
  if (!process.env.KEEP) cleanup(dir);
  else console.log(`kept ${dir}`);
}
console.log(`took ${Math.round((Date.now() - started) / 1000)}s; screenshots in ${ART}`);
console.log(`vscode-e2e: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
