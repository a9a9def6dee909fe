// The transcript webview: the task as a conversation, live while it runs (new entries asked
// for with `rein.transcript {since: next}` after each state change, the running command's
// output from `rein/output`) and readable after it ended. Its HTML comes from transcript.ts.

import * as vscode from 'vscode';
import { OutputChunk, TaskState, exitText } from './model';
import { Entry, Transcript, TranscriptRenderer, renderHead, esc } from './transcript';

/** What the panel needs from the extension. */
export interface TranscriptHost {
  /** Runs `rein.transcript`; undefined when the server cannot answer. */
  fetch(since: number): Promise<Transcript | undefined>;
  state(): TaskState | null;
  /** The command running now, with its output so far as one chunk. */
  running(): OutputChunk | undefined;
  openStep(step: number, path?: string): void;
  openFile(path: string, line?: number): void;
  log(msg: string): void;
  /** The panel's tab icon. */
  icon: vscode.Uri;
  /** The panel's title (default "Rein: Transcript"). */
  title?: string;
  /** The worktree task it shows, kept with the panel so a reload brings back the same one. */
  taskId?: string;
  /** A line under the head (an earlier task's: read-only). */
  note?: string;
  /** How the task is named in the title, and whether it is an earlier task: kept with the
   * panel so a reload brings it back as it was. */
  name?: string;
  earlier?: boolean;
}

export class TranscriptPanel {
  private panel: vscode.WebviewPanel | undefined;
  private taskId: string | null | undefined;
  private next = 0;
  private renderer = new TranscriptRenderer();
  private html: string[] = [];
  private busy: Promise<void> | undefined;
  private again = false;
  /** The command whose output is shown live at the end, until its step's entries arrive. */
  private live: { step: number; terminal: boolean; ended: boolean } | undefined;
  /** The steps the transcript has a tool entry for, and those it has output for. */
  private readonly toolSteps = new Set<number>();
  private readonly outputSteps = new Set<number>();
  private lastHead = '';

  constructor(private readonly host: TranscriptHost) {}

  /** Whether the panel is open (the entries are only fetched while it is). */
  get open(): boolean {
    return !!this.panel;
  }

  /** Entries as fetched so far (for the output of a step after it ended). */
  readonly entries: Entry[] = [];

  async show(): Promise<void> {
    if (this.panel) {
      this.panel.reveal(undefined, false);
      await this.sync();
      return;
    }
    const column = vscode.window.activeTextEditor ? vscode.ViewColumn.Beside : vscode.ViewColumn.Active;
    await this.attach(vscode.window.createWebviewPanel(TranscriptPanel.viewType, this.host.title ?? 'Rein: Transcript', column, TranscriptPanel.options));
  }

  /** The panel's type, for VS Code to restore it after a reload (`registerWebviewPanelSerializer`). */
  static readonly viewType = 'rein.transcript';

  private static readonly options: vscode.WebviewPanelOptions & vscode.WebviewOptions = {
    enableScripts: true,
    // The transcript keeps its scroll position and what you expanded while it is hidden.
    retainContextWhenHidden: true,
    localResourceRoots: [],
  };

  /**
   * A transcript VS Code kept open across a reload (or a quit and reopen): it is filled again
   * from the task, where it was, instead of staying an empty pane.
   */
  async restore(panel: vscode.WebviewPanel): Promise<void> {
    if (this.panel) {
      // Already opened meanwhile: one transcript, not two.
      panel.dispose();
      return;
    }
    panel.webview.options = TranscriptPanel.options;
    await this.attach(panel);
  }

  private async attach(panel: vscode.WebviewPanel): Promise<void> {
    this.panel = panel;
    this.panel.iconPath = this.host.icon;
    this.panel.onDidDispose(() => {
      this.panel = undefined;
    });
    this.panel.webview.onDidReceiveMessage((m: { action?: string; step?: string; path?: string; line?: string }) => {
      if (m.action === 'openStep' && m.step) this.host.openStep(Number(m.step), m.path || undefined);
      if (m.action === 'openFile' && m.path) this.host.openFile(m.path, m.line ? Number(m.line) : undefined);
    });
    this.reset();
    this.lastHead = this.head(this.host.state());
    this.panel.webview.html = this.page();
    const running = this.host.running();
    if (running) this.onOutput(running);
    await this.sync();
  }

  /** After every state change: the head follows, new entries are fetched. */
  onState(state: TaskState | null): void {
    if (!this.panel) return;
    const head = this.head(state);
    if (head !== this.lastHead) {
      this.lastHead = head;
      void this.post({ type: 'head', html: head });
    }
    void this.sync();
  }

  /** A `rein/output` notification: the running command's output grows at the end. */
  onOutput(c: OutputChunk): void {
    this.live = { step: c.step, terminal: !!c.terminal, ended: c.state === 'ended' };
    const chunk = (c.skipped ? `[… ${c.skipped} bytes not shown …]\n` : '') + c.chunk;
    void this.post({ type: 'live', id: c.id, step: c.step, command: c.command, chunk, state: c.state, exit: c.state === 'ended' ? exitText(c.exit) : '' });
    if (this.covered()) {
      this.live = undefined;
      void this.post({ type: 'append', html: '', liveDone: true });
    }
  }

  /** The head: the task's, with the host's note under it. */
  private head(state: TaskState | null): string {
    return renderHead(state) + (this.host.note ? `<p class="note-head">${esc(this.host.note)}</p>` : '');
  }

  /** Closes the panel. */
  close(): void {
    this.panel?.dispose();
  }

  /** Fetches the entries after the last one (one request at a time; a change meanwhile asks again). */
  async sync(): Promise<void> {
    if (!this.panel) return;
    if (this.busy) {
      this.again = true;
      return this.busy;
    }
    this.busy = (async () => {
      do {
        this.again = false;
        await this.fetchOnce();
      } while (this.again && this.panel);
    })();
    try {
      await this.busy;
    } finally {
      this.busy = undefined;
    }
  }

  private async fetchOnce(): Promise<void> {
    const state = this.host.state();
    // A new task (or none): start over from its first entry.
    if (state && this.taskId !== undefined && state.task.id !== this.taskId) {
      this.reset();
      void this.post({ type: 'reset', html: '' });
    }
    const t = await this.host.fetch(this.next);
    if (!t || !this.panel) return;
    if (t.taskId !== (this.taskId ?? t.taskId) || t.next < this.next) {
      // The task moved on under us: ask again from the start.
      this.reset();
      void this.post({ type: 'reset', html: '' });
      const all = await this.host.fetch(0);
      if (!all) return;
      this.append(all);
      return;
    }
    this.append(t);
  }

  private append(t: Transcript): void {
    this.taskId = t.taskId;
    this.next = t.next;
    if (!t.entries.length) return;
    const html = t.entries.map((e) => this.renderer.render(e));
    this.entries.push(...t.entries);
    this.html.push(...html);
    for (const e of t.entries) {
      if (e.kind === 'tool') this.toolSteps.add(e.step);
      if (e.kind === 'output') this.outputSteps.add(e.step);
    }
    const done = this.covered();
    if (done) this.live = undefined;
    void this.post({ type: 'append', html: html.join(''), liveDone: done });
  }

  /**
   * Whether the transcript now holds what the live box shows, so it gives way: an ended
   * command's output entry, or for Rein's own run (whose step ends with it) its step.
   */
  private covered(): boolean {
    const l = this.live;
    if (!l?.ended) return false;
    return this.outputSteps.has(l.step) || (!l.terminal && this.toolSteps.has(l.step));
  }

  private reset(): void {
    this.taskId = undefined;
    this.next = 0;
    this.renderer = new TranscriptRenderer();
    this.html = [];
    this.entries.length = 0;
    this.live = undefined;
    this.toolSteps.clear();
    this.outputSteps.clear();
  }

  private async post(m: object): Promise<void> {
    try {
      await this.panel?.webview.postMessage(m);
    } catch (e) {
      this.host.log(`transcript: ${e}`);
    }
  }

  private page(): string {
    const nonce = Array.from({ length: 32 }, () => 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789'[Math.floor(Math.random() * 62)]).join('');
    const csp = `default-src 'none'; style-src 'nonce-${nonce}'; script-src 'nonce-${nonce}';`;
    return `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeAttr(this.host.title ?? 'Rein: Transcript')}</title>
<style nonce="${nonce}">${STYLE}</style></head>
<body data-task="${escapeAttr(this.host.taskId ?? '')}" data-name="${escapeAttr(this.host.name ?? '')}" data-earlier="${this.host.earlier ? '1' : ''}">
<header id="head" aria-live="polite">${this.lastHead}</header>
<main>
<ol id="entries" aria-label="Transcript">${this.html.join('')}</ol>
<section id="live" hidden aria-label="Running command output">
  <div class="head"><span class="icon" aria-hidden="true">▶</span><span id="live-title"></span> <span id="live-state" class="badge"></span></div>
  <pre id="live-out" class="out" tabindex="0"></pre>
</section>
</main>
<script nonce="${nonce}">${SCRIPT}</script>
</body></html>`;
  }
}

const STYLE = `
:root { color-scheme: light dark; }
body { font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); color: var(--vscode-foreground); background: var(--vscode-editor-background); margin: 0; padding: 0 16px 24px; line-height: 1.45; }
#head { position: sticky; top: 0; background: var(--vscode-editor-background); border-bottom: 1px solid var(--vscode-panel-border, transparent); padding: 10px 0 6px; z-index: 1; }
h1 { font-size: 1.25em; margin: 0 0 2px; font-weight: 600; }
.status { margin: 0; color: var(--vscode-descriptionForeground); }
.note-head { margin: 2px 0 0; color: var(--vscode-descriptionForeground); font-style: italic; }
.waiting { margin: 4px 0 0; color: var(--vscode-editorWarning-foreground); font-weight: 600; }
ol#entries { list-style: none; margin: 8px 0 0; padding: 0; }
.entry { margin: 6px 0; padding: 6px 10px; border-radius: 4px; border-left: 3px solid transparent; }
.entry .head { display: flex; flex-wrap: wrap; gap: 0 6px; align-items: baseline; }
.entry time { margin-left: auto; color: var(--vscode-descriptionForeground); font-size: 0.9em; font-variant-numeric: tabular-nums; padding-left: 8px; }
.who { font-weight: 600; }
.muted { color: var(--vscode-descriptionForeground); }
.text { white-space: pre-wrap; overflow-wrap: anywhere; margin-top: 2px; }
.agent { background: var(--vscode-textBlockQuote-background); border-left-color: var(--vscode-charts-blue, var(--vscode-focusBorder)); }
.you { background: var(--vscode-textBlockQuote-background); border-left-color: var(--vscode-charts-orange, var(--vscode-editorWarning-foreground)); margin-left: 24px; }
.you-step { border-left-color: var(--vscode-charts-orange, var(--vscode-editorWarning-foreground)); margin-left: 24px; }
.tool { border-left-color: var(--vscode-panel-border, transparent); padding-top: 2px; padding-bottom: 2px; }
.tool .icon { color: var(--vscode-charts-green, var(--vscode-foreground)); width: 1em; display: inline-block; }
.tool.failed .icon, .detail.failed .label { color: var(--vscode-errorForeground); }
.tool.failed { border-left-color: var(--vscode-errorForeground); }
.step { color: var(--vscode-descriptionForeground); font-variant-numeric: tabular-nums; }
.title { font-family: var(--vscode-editor-font-family); }
.badge { font-size: 0.85em; padding: 0 6px; border-radius: 8px; background: var(--vscode-badge-background); color: var(--vscode-badge-foreground); }
.badge.s-done { background: transparent; color: var(--vscode-descriptionForeground); padding: 0; }
.badge.s-failed, .badge.s-skipped, .badge.s-rolled_back { background: var(--vscode-inputValidation-errorBackground, var(--vscode-badge-background)); color: var(--vscode-errorForeground); border: 1px solid var(--vscode-errorForeground); }
.badge.warn { background: transparent; color: var(--vscode-editorWarning-foreground); border: 1px solid var(--vscode-editorWarning-foreground); }
.detail { margin: 2px 0 0 1.4em; }
.detail pre, pre.detail { margin: 2px 0; white-space: pre-wrap; overflow-wrap: anywhere; font-family: var(--vscode-editor-font-family); font-size: var(--vscode-editor-font-size); }
.files { list-style: none; margin: 2px 0 0 1.4em; padding: 0; }
.stat .add { color: var(--vscode-charts-green, inherit); } .stat .del { color: var(--vscode-errorForeground); }
button.link { background: none; border: none; padding: 0; font: inherit; color: var(--vscode-textLink-foreground); cursor: pointer; text-align: left; }
button.link.title { font-family: var(--vscode-editor-font-family); }
button.link:hover { text-decoration: underline; color: var(--vscode-textLink-activeForeground); }
button:focus-visible, summary:focus-visible, pre:focus-visible { outline: 1px solid var(--vscode-focusBorder); outline-offset: 2px; }
details > summary { cursor: pointer; }
.thought { margin-top: 4px; color: var(--vscode-descriptionForeground); }
.thought .text { font-style: italic; }
.output { padding-top: 0; padding-bottom: 0; margin-left: 1.4em; }
pre.out { margin: 4px 0; padding: 6px 8px; max-height: 24em; overflow: auto; background: var(--vscode-textCodeBlock-background); font-family: var(--vscode-editor-font-family); font-size: var(--vscode-editor-font-size); white-space: pre-wrap; overflow-wrap: anywhere; }
code { font-family: var(--vscode-editor-font-family); background: var(--vscode-textCodeBlock-background); padding: 0 3px; border-radius: 3px; }
.plan.moved summary, .plan .head { color: var(--vscode-descriptionForeground); }
ol.plan { margin: 4px 0 2px; padding-left: 2.2em; }
.pmark { display: inline-block; width: 1.2em; }
.pmark.p-done { color: var(--vscode-charts-green, inherit); } .pmark.p-active { color: var(--vscode-charts-blue, inherit); }
.note { padding-top: 0; padding-bottom: 0; font-size: 0.95em; }
.decision { border: 1px solid var(--vscode-editorWarning-foreground); border-left-width: 3px; }
.control { display: flex; align-items: center; gap: 8px; color: var(--vscode-descriptionForeground); padding: 2px 0; }
.control .rule { flex: 1; border-top: 1px solid var(--vscode-panel-border, var(--vscode-descriptionForeground)); }
.control.c-taken_over .ctext, .control.c-handed_back .ctext { color: var(--vscode-foreground); font-weight: 600; }
.control time { margin-left: 8px; font-weight: normal; color: var(--vscode-descriptionForeground); }
.turn { margin-top: 16px; border-left-width: 4px; }
.turn .report { margin-top: 4px; color: var(--vscode-descriptionForeground); }
.end { border: 1px solid var(--vscode-charts-green, var(--vscode-focusBorder)); }
.end.e-aborted, .end.e-failed { border-color: var(--vscode-errorForeground); }
#live { margin: 6px 0 0 1.4em; }
#live .head { display: flex; gap: 6px; align-items: baseline; color: var(--vscode-descriptionForeground); }
body.vscode-high-contrast .entry { border: 1px solid var(--vscode-contrastBorder); }
`;

// Runs in the webview: applies what the extension posts, keeps following the end when you
// were there, and sends clicks on links back.
const SCRIPT = `
const vscode = acquireVsCodeApi();
// Marks the panel as one to bring back after a reload (its content is fetched again then).
vscode.setState({ transcript: true, taskId: document.body.dataset.task || null, name: document.body.dataset.name || null, earlier: !!document.body.dataset.earlier });
const list = document.getElementById('entries');
const head = document.getElementById('head');
const live = document.getElementById('live');
const liveOut = document.getElementById('live-out');
const liveTitle = document.getElementById('live-title');
const liveState = document.getElementById('live-state');
let liveStep = null;
// Following the end, as a terminal does, until you scroll up; scrolling back down follows again.
const root = document.scrollingElement || document.documentElement;
let following = true;
window.addEventListener('scroll', () => { following = root.scrollTop + window.innerHeight >= root.scrollHeight - 40; });
const follow = () => { if (following) requestAnimationFrame(() => { root.scrollTop = root.scrollHeight; }); };
window.addEventListener('message', (ev) => {
  const m = ev.data;
  if (m.type === 'head') head.innerHTML = m.html;
  if (m.type === 'reset') { list.innerHTML = m.html; live.hidden = true; liveStep = null; }
  if (m.type === 'append') {
    list.insertAdjacentHTML('beforeend', m.html);
    if (m.liveDone) { live.hidden = true; liveStep = null; liveOut.textContent = ''; }
  }
  if (m.type === 'live') {
    if (liveStep !== m.id) { liveStep = m.id; liveOut.textContent = ''; }
    live.hidden = false;
    liveTitle.textContent = (m.state === 'ended' ? 'Ran ' : 'Running ') + m.command + ' (step ' + m.step + ')';
    liveState.textContent = m.state === 'ended' ? m.exit : m.state;
    if (m.chunk) {
      liveOut.textContent = (liveOut.textContent + m.chunk).slice(-65536);
      liveOut.scrollTop = liveOut.scrollHeight;
    }
  }
  follow();
});
document.addEventListener('click', (ev) => {
  const b = ev.target.closest('[data-action]');
  if (!b) return;
  vscode.postMessage({ action: b.dataset.action, step: b.dataset.step, path: b.dataset.path, line: b.dataset.line });
});
follow();
`;

function escapeAttr(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
