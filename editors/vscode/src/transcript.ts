// The transcript as HTML: the task as a conversation (the goal, the agent's words, each tool
// call with its files, command output, steers, control moving, decisions and answers), built
// from `rein.transcript` entries. Pure string building with every text escaped, no `vscode`
// import, so it is unit-tested with `node --test` (see test/transcript.test.ts); the webview
// that shows it is in transcriptPanel.ts.

import { PlanItem, TaskState, ToolCall, Location, DecisionKind, planSummary, statusText, exitText, NO_PLAN_PROGRESS } from './model';

export interface FileStat {
  path: string;
  kind: 'added' | 'modified' | 'deleted';
  added: number;
  removed: number;
}

type At = { at: string | null };

/** One `rein.transcript` entry (docs/protocol.md, "Transcript"). */
export type Entry =
  | (At & { kind: 'goal'; text: string })
  | (At & { kind: 'message'; step: number; text: string; thought?: string | null })
  | (At & { kind: 'plan'; items: PlanItem[]; progress: boolean; by: 'agent' | 'human' })
  | (At & {
      kind: 'tool';
      step: number;
      title: string;
      status: 'done' | 'failed' | 'skipped' | 'rolled_back';
      planItem?: string | null;
      detail?: string | null;
      checkpoint?: string | null;
      files: FileStat[];
      tool?: ToolCall | null;
    })
  | (At & {
      kind: 'output';
      step: number;
      command: string | null;
      terminal?: string | null;
      text: string;
      truncated: boolean;
      exit?: { code: number | null; signal: number | null } | null;
    })
  | (At & { kind: 'human'; step: number; title: string; checkpoint?: string | null; files: FileStat[] })
  | (At & { kind: 'unattributed'; step: number; title: string; checkpoint?: string | null; files: FileStat[] })
  | (At & { kind: 'steer'; id: string; text: string; location?: Location | null; urgent: boolean; source?: string | null })
  | (At & { kind: 'delivered'; step: number; ids: string[] })
  | (At & { kind: 'decision'; id: string; decisionKind: DecisionKind; question: string; options: string[]; detail?: string | null })
  | (At & { kind: 'answer'; id: string; choice: string; by: 'agent' | 'human' })
  | (At & { kind: 'control'; what: string; text: string })
  | (At & { kind: 'end'; status: 'done' | 'aborted' | 'failed'; text: string })
  | (At & { kind: 'turn'; turn: number; text: string; step: number; report?: string | null });

/** The `rein.transcript` reply. */
export interface Transcript {
  taskId: string | null;
  entries: Entry[];
  next: number;
}

/** Escapes text for HTML content and attribute values. */
export function esc(s: unknown): string {
  return String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

/** "14:03:07" in local time, or "" when the journal did not record when. */
export function clock(at: string | null | undefined): string {
  if (!at) return '';
  const d = new Date(at);
  if (Number.isNaN(d.getTime())) return '';
  const two = (n: number) => String(n).padStart(2, '0');
  return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
}

function time(at: string | null): string {
  const c = clock(at);
  return c ? `<time datetime="${esc(at)}">${c}</time>` : '';
}

const STEP_STATUS: Record<string, string> = { done: 'done', failed: 'failed', skipped: 'not done', rolled_back: 'rolled back' };
const PLAN_WORD: Record<string, string> = { pending: 'pending', active: 'in progress', done: 'done', skipped: 'skipped' };

function lineCount(text: string): number {
  if (!text) return 0;
  return text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
}

function fileList(step: number, files: FileStat[]): string {
  if (!files.length) return '';
  const rows = files
    .map(
      (f) =>
        `<li><button type="button" class="link file" data-action="openStep" data-step="${step}" data-path="${esc(f.path)}" title="Open what step ${step} changed in ${esc(f.path)}">${esc(f.path)}</button>` +
        ` <span class="stat"><span class="add">+${f.added}</span> <span class="del">−${f.removed}</span></span> <span class="muted">${esc(f.kind)}</span></li>`,
    )
    .join('');
  return `<ul class="files" aria-label="Files step ${step} changed">${rows}</ul>`;
}

function planList(items: PlanItem[], progress: boolean): string {
  const li = items
    .map((p) => {
      const st = p.status ?? 'pending';
      const mark = progress ? `<span class="pmark p-${esc(st)}" aria-hidden="true">${st === 'done' ? '✓' : st === 'active' ? '→' : st === 'skipped' ? '⊘' : '○'}</span>` : '';
      const word = progress ? ` <span class="muted">(${PLAN_WORD[st] ?? esc(st)})</span>` : '';
      const human = p.editedByHuman ? ' <span class="badge">edited by you</span>' : '';
      return `<li>${mark}${esc(p.text)}${word}${human}</li>`;
    })
    .join('');
  return `<ol class="plan">${li}</ol>`;
}

/**
 * Renders entries one after another, remembering what the next ones refer to (the plan before
 * a move, the steers' texts, what a decision asked, each step's outcome). Entries only ever
 * follow one another, so a live transcript renders each once.
 */
export class TranscriptRenderer {
  private plan: PlanItem[] | undefined;
  private readonly steers = new Map<string, string>();
  private readonly asked = new Map<string, { kind: DecisionKind; question: string; detail?: string | null }>();
  private readonly outcome = new Map<number, string>();

  render(e: Entry): string {
    switch (e.kind) {
      case 'goal':
        return `<li class="entry you goal"><div class="head"><span class="who">You</span> gave the goal${time(e.at)}</div><div class="text">${esc(e.text)}</div></li>`;
      case 'message': {
        const thought = e.thought?.trim()
          ? `<details class="thought"><summary>Thought</summary><div class="text">${esc(e.thought)}</div></details>`
          : '';
        return `<li class="entry agent" data-step="${e.step}"><div class="head"><span class="who">Agent</span> <span class="muted">before step ${e.step}</span>${time(e.at)}</div><div class="text">${esc(e.text)}</div>${thought}</li>`;
      }
      case 'plan':
        return this.planEntry(e);
      case 'tool': {
        const failed = e.status !== 'done';
        if (e.detail) this.outcome.set(e.step, e.detail);
        const item = e.planItem ? this.plan?.find((p) => p.id === e.planItem) : undefined;
        const title =
          e.files.length > 0
            ? `<button type="button" class="link title" data-action="openStep" data-step="${e.step}" title="Open the diff of step ${e.step}">${esc(e.title)}</button>`
            : `<span class="title">${esc(e.title)}</span>`;
        const icon = failed ? '✗' : '✓';
        const acp = e.tool
          ? ` <span class="muted">${esc(e.tool.kind)}${(e.tool.locations ?? []).length ? ' · ' + (e.tool.locations ?? []).map((l) => `${esc(l.path)}${l.line != null ? `:${l.line}` : ''}`).join(', ') : ''}</span>`
          : '';
        const detail = e.detail
          ? failed
            ? `<div class="detail failed" role="note"><span class="label">What the agent was told:</span><pre>${esc(e.detail)}</pre></div>`
            : `<div class="detail"><span class="muted">${esc(e.detail)}</span></div>`
          : '';
        return (
          `<li class="entry tool ${failed ? 'failed' : 'ok'}" data-step="${e.step}">` +
          `<div class="head"><span class="icon" aria-hidden="true">${icon}</span><span class="step">Step ${e.step}</span> ${title}` +
          ` <span class="badge s-${esc(e.status)}">${STEP_STATUS[e.status] ?? esc(e.status)}</span>` +
          `${item ? ` <span class="muted">for “${esc(item.text)}”</span>` : ''}${acp}${time(e.at)}</div>` +
          `${detail}${fileList(e.step, e.files)}</li>`
        );
      }
      case 'output': {
        const exit = e.exit ? exitText(e.exit) : (this.outcome.get(e.step) ?? '').split('\n')[0].replace(/^exit code /, 'exit ');
        const n = lineCount(e.text);
        const facts = [exit, `${n} line${n === 1 ? '' : 's'}`, e.truncated ? 'the start cut' : ''].filter(Boolean).join(' · ');
        const cmd = e.command ? ` of <code>${esc(e.command)}</code>` : '';
        return (
          `<li class="entry output" data-step="${e.step}"><details><summary>Output${cmd} <span class="muted">step ${e.step} · ${esc(facts)}</span></summary>` +
          `<pre class="out">${esc(e.text) || '<span class="muted">(no output)</span>'}</pre></details></li>`
        );
      }
      case 'human':
        return `<li class="entry you-step" data-step="${e.step}"><div class="head"><span class="who">You</span> <span class="step">Step ${e.step}</span> ${e.files.length ? `<button type="button" class="link title" data-action="openStep" data-step="${e.step}">${esc(e.title)}</button>` : esc(e.title)}${time(e.at)}</div>${fileList(e.step, e.files)}</li>`;
      case 'unattributed':
        return `<li class="entry you-step" data-step="${e.step}"><div class="head"><span class="who">Someone</span> <span class="step">Step ${e.step}</span> ${e.files.length ? `<button type="button" class="link title" data-action="openStep" data-step="${e.step}">${esc(e.title)}</button>` : esc(e.title)}${time(e.at)}</div>${fileList(e.step, e.files)}</li>`;
      case 'steer': {
        this.steers.set(e.id, e.text);
        const where = e.location
          ? ` about <button type="button" class="link" data-action="openFile" data-path="${esc(e.location.path)}" data-line="${e.location.line}">${esc(e.location.path)}:${e.location.line + 1}</button>`
          : '';
        const how = e.source === 'comment' ? ' <span class="muted">(a rein: comment)</span>' : '';
        const urgent = e.urgent ? ' <span class="badge warn">urgent</span>' : '';
        return `<li class="entry you steer"><div class="head"><span class="who">You</span> steered${where}${how}${urgent} <span class="muted">${esc(e.id)}</span>${time(e.at)}</div><div class="text">${esc(e.text)}</div></li>`;
      }
      case 'delivered': {
        const which = e.ids.map((id) => (this.steers.has(id) ? `${esc(id)} (“${esc(short(this.steers.get(id)!))}”)` : esc(id))).join(', ');
        return `<li class="entry note"><span class="muted">The agent got your steer${e.ids.length === 1 ? '' : 's'} ${which} before step ${e.step}</span>${time(e.at)}</li>`;
      }
      case 'decision': {
        this.asked.set(e.id, { kind: e.decisionKind, question: e.question, detail: e.detail });
        const opts = e.decisionKind === 'question' ? 'any answer' : e.options.map(esc).join(' / ');
        return (
          `<li class="entry decision"><div class="head"><span class="who">Rein</span> stopped for you <span class="muted">${esc(e.id)} · ${esc(e.decisionKind.replace('_', ' '))}</span>${time(e.at)}</div>` +
          `<div class="text">${esc(e.question)}</div>${e.detail ? `<pre class="detail">${esc(e.detail)}</pre>` : ''}<div class="muted">Answers: ${opts}</div></li>`
        );
      }
      case 'answer':
        return `<li class="entry you answer"><div class="head"><span class="who">${e.by === 'human' ? 'You' : 'The agent'}</span> answered <span class="muted">${esc(e.id)}</span>${time(e.at)}</div><div class="text">${esc(this.answerWords(e.id, e.choice))}</div></li>`;
      case 'control': {
        // The server's words say who and why ("paused by you", "handed back to the agent, with
        // the note: …"); a rule across marks control moving.
        const text = e.text ? e.text[0].toUpperCase() + e.text.slice(1) : e.what.replace('_', ' ');
        return `<li class="entry control c-${esc(e.what)}"><span class="rule" aria-hidden="true"></span><span class="ctext">${esc(text)}${time(e.at)}</span><span class="rule" aria-hidden="true"></span></li>`;
      }
      case 'turn': {
        // A follow-up: the conversation goes on. What the person changed since the agent's
        // last turn (the report the agent got first) is there to read, folded.
        const report = e.report?.trim()
          ? `<details class="report"><summary>Your changes since its last turn, as the agent was told</summary><pre class="detail">${esc(e.report)}</pre></details>`
          : '';
        return (
          `<li class="entry you turn" data-turn="${e.turn}"><div class="head"><span class="who">You:</span> <span class="muted">turn ${e.turn}, from step ${e.step}</span>${time(e.at)}</div>` +
          `<div class="text">${esc(e.text)}</div>${report}</li>`
        );
      }
      case 'end':
        return `<li class="entry end e-${esc(e.status)}"><div class="head"><span class="who">${e.status === 'done' ? 'Done' : e.status === 'aborted' ? 'Aborted' : 'Failed'}</span>${time(e.at)}</div><div class="text">${esc(e.text)}</div></li>`;
    }
    return '';
  }

  private answerWords(id: string, choice: string): string {
    const d = this.asked.get(id);
    const what = d?.kind === 'approve_command' && d.detail ? `\`${d.detail.split('\n')[0]}\`` : d ? `“${short(d.question)}”` : '';
    switch (choice) {
      case 'approve':
        return `approve${what ? ` — ${what} may run` : ''}`;
      case 'deny':
        return `deny${what ? ` — ${what} is not run` : ''}`;
      default:
        return choice;
    }
  }

  private planEntry(e: Extract<Entry, { kind: 'plan' }>): string {
    const prev = this.plan;
    this.plan = e.items;
    const summary = planSummary({ plan: e.items, planProgress: e.progress } as TaskState);
    const by = e.by === 'human' ? 'You edited the plan' : prev ? 'Plan' : 'The agent’s plan';
    const full = planList(e.items, e.progress);
    if (!prev || e.by === 'human') {
      const note = e.progress ? summary.description : NO_PLAN_PROGRESS;
      return `<li class="entry plan"><div class="head"><span class="who">${by}</span> <span class="muted">${esc(note)}</span>${time(e.at)}</div>${full}</li>`;
    }
    const moved: string[] = [];
    for (const p of e.items) {
      const before = prev.find((q) => (p.id && q.id === p.id) || q.text === p.text);
      const st = p.status ?? 'pending';
      if (!before) moved.push(`new: ${p.text}`);
      else if (e.progress && (before.status ?? 'pending') !== st && st !== 'pending') moved.push(`${st === 'active' ? 'now' : PLAN_WORD[st]}: ${p.text}`);
      else if (before.text !== p.text) moved.push(`reworded: ${p.text}`);
    }
    for (const q of prev) if (!e.items.some((p) => (q.id && p.id === q.id) || p.text === q.text)) moved.push(`dropped: ${q.text}`);
    const what = moved.length ? moved.map(esc).join(' · ') : 'updated';
    const note = e.progress ? summary.description : NO_PLAN_PROGRESS;
    return `<li class="entry plan moved"><details><summary><span class="who">Plan</span> ${what} <span class="muted">(${esc(note)})</span>${time(e.at)}</summary>${full}</details></li>`;
  }
}

function short(s: string, max = 60): string {
  const one = s.replace(/\s+/g, ' ').trim();
  return one.length > max ? `${one.slice(0, max - 1)}…` : one;
}

/** The page's head: the goal, where the run is, the plan at a glance. */
export function renderHead(state: TaskState | null): string {
  if (!state) return '<h1>No Rein task</h1><p class="muted">Start a task (Rein: Start Task…); its transcript shows here.</p>';
  const st = statusText(state).text.replace(/\$\([^)]*\)\s*/g, '');
  const plan = planSummary(state);
  const planText = plan.total ? `Plan ${plan.description}${plan.active ? ` — now: ${plan.active.text}` : ''}` : '';
  const open = (state.decisions ?? []).map((d) => `<p class="waiting" role="status">Waiting for you: ${esc(d.question)}</p>`).join('');
  const turn = state.turns?.length ? state.turns[state.turns.length - 1] : undefined;
  const turnText = turn ? ` · <span>turn ${turn.n}: ${esc(short(turn.text))}</span>` : '';
  return `<h1>${esc(state.task.goal)}</h1><p class="status"><span class="state s-${esc(state.status)}">${esc(st)}</span>${turnText}${planText ? ` · <span>${esc(planText)}</span>` : ''}</p>${open}`;
}
