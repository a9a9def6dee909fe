// Shared pieces of the end-to-end test: a scratch git repo with a scripted plan, code-server
// with the packaged extension, and a headless Chromium driving it.

import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, writeFileSync, chmodSync, rmSync, existsSync, createWriteStream } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import net from 'node:net';
import { chromium } from 'playwright-core';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function git(cwd, ...args) {
  return execFileSync('git', args, { cwd, encoding: 'utf8' });
}

/**
 * A git repository with a few files, a check script and a slow scripted plan; `files` are more
 * files (path → content; a `.sh` is made executable), `settings` more workspace settings.
 */
export function makeRepo(reinBin, plan, { files = {}, settings = {} } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'rein-vscode-e2e-'));
  const repo = join(dir, 'repo');
  mkdirSync(join(repo, 'src'), { recursive: true });
  mkdirSync(join(repo, '.rein'));
  mkdirSync(join(repo, '.vscode'));
  writeFileSync(join(repo, 'README.md'), '# greeter\n\nSays hello.\n');
  writeFileSync(join(repo, 'src', 'greet.py'), 'def greet(name):\n    return "hi " + name\n');
  writeFileSync(join(repo, 'check.sh'), '#!/bin/sh\ngrep -q farewell src/farewell.py && echo checked\n');
  chmodSync(join(repo, 'check.sh'), 0o755);
  writeFileSync(join(repo, '.rein', 'plan.json'), JSON.stringify(plan, null, 2) + '\n');
  for (const [rel, content] of Object.entries(files)) {
    mkdirSync(join(repo, rel, '..'), { recursive: true });
    writeFileSync(join(repo, rel), content);
    if (rel.endsWith('.sh')) chmodSync(join(repo, rel), 0o755);
  }
  writeFileSync(
    join(repo, '.vscode', 'settings.json'),
    JSON.stringify(
      {
        'rein.serverPath': reinBin,
        'rein.agent': { kind: 'script', plan: '.rein/plan.json' },
        'rein.steer.onSave': true,
        ...settings,
      },
      null,
      2,
    ) + '\n',
  );
  git(repo, 'init', '-q', '-b', 'main');
  git(repo, 'config', 'user.email', 'e2e@example.invalid');
  git(repo, 'config', 'user.name', 'e2e');
  git(repo, 'add', '-A');
  git(repo, 'commit', '-q', '-m', 'initial');
  return { dir, repo };
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

/** PATH without the directories that hold a `rein`, so the editor finds only what the test gives it. */
function pathWithoutRein() {
  return (process.env.PATH ?? '').split(':').filter((d) => d && !existsSync(join(d, 'rein'))).join(':');
}

/** Installs the .vsix and starts code-server on the folder; resolves once it answers HTTP. */
export async function startCodeServer({ bin, vsix, folder, dataDir, logFile, extensionLog, settings = {} }) {
  const userDir = join(dataDir, 'user');
  const extDir = join(dataDir, 'extensions');
  mkdirSync(join(userDir, 'User'), { recursive: true });
  // The User settings every window starts from; `extra` are the test's own (rein.serverPath).
  const writeSettings = (extra) =>
    writeFileSync(
      join(userDir, 'User', 'settings.json'),
      JSON.stringify(
        {
          'workbench.startupEditor': 'none',
          'security.workspace.trust.enabled': false,
          'workbench.tips.enabled': false,
          'workbench.enableExperiments': false,
          'extensions.autoCheckUpdates': false,
          'extensions.autoUpdate': false,
          'extensions.ignoreRecommendations': true,
          'telemetry.telemetryLevel': 'off',
          'git.openRepositoryInParentFolders': 'never',
          'git.autoRepositoryDetection': false,
          'files.autoSave': 'off',
          'update.mode': 'none',
          'workbench.colorTheme': 'Default Dark Modern',
          'window.restoreWindows': 'none',
          'editor.minimap.enabled': false,
          // The DOM renderer: the terminal's text is in the page for the test to read.
          'terminal.integrated.gpuAcceleration': 'off',
          ...extra,
        },
        null,
        2,
      ),
    );
  writeSettings(settings);
  const common = ['--user-data-dir', userDir, '--extensions-dir', extDir];
  execFileSync(bin, [...common, '--install-extension', vsix, '--force'], { stdio: 'pipe', encoding: 'utf8' });
  const port = await freePort();
  const log = createWriteStream(logFile);
  const proc = spawn(
    bin,
    [
      ...common,
      '--bind-addr', `127.0.0.1:${port}`,
      '--auth', 'none',
      '--disable-telemetry',
      '--disable-update-check',
      '--disable-workspace-trust',
      '--disable-getting-started-override',
      folder,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'], detached: true, env: { ...process.env, PATH: pathWithoutRein(), PASSWORD: undefined, ...(extensionLog ? { REIN_VSCODE_LOG: extensionLog } : {}) } },
  );
  proc.stdout.pipe(log);
  proc.stderr.pipe(log);
  const url = `http://127.0.0.1:${port}/`;
  const deadline = Date.now() + 90_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`code-server exited with ${proc.exitCode}; see ${logFile}`);
    try {
      const r = await fetch(`${url}healthz`);
      if (r.ok) break;
    } catch {}
    if (Date.now() > deadline) throw new Error(`code-server did not answer on ${url}; see ${logFile}`);
    await sleep(500);
  }
  return {
    url: `${url}?folder=${encodeURIComponent(folder)}`,
    /** The workbench on another folder (a new window: the extension activates afresh). */
    urlFor: (other) => `${url}?folder=${encodeURIComponent(other)}`,
    userDir,
    /** Rewrites the User settings (the base plus `extra`); a window opened after sees them. */
    setUserSettings: writeSettings,
    stop: async () => {
      if (proc.exitCode !== null) return;
      try {
        process.kill(-proc.pid, 'SIGTERM');
      } catch {}
      for (let i = 0; i < 50 && proc.exitCode === null; i++) await sleep(100);
      if (proc.exitCode === null) {
        try {
          process.kill(-proc.pid, 'SIGKILL');
        } catch {}
      }
    },
  };
}

export async function launchBrowser() {
  const executablePath = process.env.CHROMIUM ?? '/usr/bin/chromium';
  if (!existsSync(executablePath)) throw new Error(`no Chromium at ${executablePath}`);
  return chromium.launch({
    executablePath,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
  });
}

/** Polls `fn` until it returns a truthy value; throws with `what` on timeout. */
export async function waitFor(what, fn, timeout = 60_000, every = 250) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last instanceof Error ? ` (${last.message})` : ''}`);
    await sleep(every);
  }
}

export function cleanup(dir) {
  try {
    rmSync(dir, { recursive: true, force: true });
  } catch {}
}
