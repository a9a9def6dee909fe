// Several tasks at once (worktree tasks beside the one here): the task list the server sends
// (`rein.tasks`, `rein/tasks`), the one queue of decisions across tasks, and how the status
// bar, the view and the pickers put them in words. Pure logic, no `vscode` import, unit-tested
// with `node --test` (see test/tasks.test.ts).

import type { StatusText, Tone } from './model';

/** One task as `rein.tasks` sums it up. */
export interface TaskSummary {
  taskId: string;
  /** "here" (in place) or "task N". */
  name: string;
  goal: string;
  /** `running`, `paused`, `awaiting_decision`, `human`, `done`, `failed`, `aborted`, `starting`. */
  status: string;
  holder: string;
  isolation: 'none' | 'worktree';
  branch?: string;
  worktree?: string;
  /** Plan items done, and in all. */
  plan: [number, number];
  steps: number;
  lastStep?: string;
  stopReason?: string;
  /** Its open decisions' ids. */
  decisions: string[];
}

/** An open decision in the one queue, named by its task. */
export interface QueuedDecision {
  taskId: string;
  /** The task's name ("task 2", "here"). */
  task: string;
  decisionId: string;
  /** The question, prefixed by the task's name. */
  question: string;
  options: string[];
  /** When it was first seen (RFC 3339). */
  since: string;
}

/** One task of the working tree as the history lists it (`rein.tasks` `history`). */
export interface PastTask {
  taskId: string;
  goal: string;
  /** `done`, `failed`, `aborted`, or a live status for the task under way. */
  status: string;
  /** When it started (RFC 3339). */
  started: string;
  /** When its last step or turn was (RFC 3339). */
  updated?: string;
  steps: number;
  /** Turns of its conversation: 1 plus its follow-ups. */
  turns: number;
  /** The latest follow-up's text. */
  lastTurn?: string;
  stopReason?: string;
  /** It has ended and its agent takes a further turn (`rein.continue`). */
  canContinue: boolean;
  /** It is the working tree's current task. */
  current: boolean;
  /** How a worktree task ended ("landed here from task 1's worktree", "discarded with …"). */
  ended?: string;
}

export interface Tasks {
  tasks: TaskSummary[];
  decisions: QueuedDecision[];
  /** Every task of the working tree, newest first. */
  history: PastTask[];
}

/**
 * Reads a `rein.tasks` reply or `rein/tasks` notification; null when it is not one. The
 * notification carries no history (it stays small): the one `previous` held is kept.
 */
export function parseTasks(v: unknown, previous?: Tasks | null): Tasks | null {
  if (!v || typeof v !== 'object') return null;
  const o = v as { tasks?: unknown; decisions?: unknown; history?: unknown };
  if (!Array.isArray(o.tasks)) return null;
  // One row per task: a task listed twice (here and in its worktree) is the worktree's.
  const byId = new Map<string, TaskSummary>();
  for (const t of o.tasks) {
    if (!t || typeof t !== 'object' || typeof (t as TaskSummary).taskId !== 'string') continue;
    const s = t as TaskSummary;
    const had = byId.get(s.taskId);
    if (!had || (had.isolation !== 'worktree' && s.isolation === 'worktree')) byId.set(s.taskId, s);
  }
  const seen = new Set<string>();
  const decisions = (Array.isArray(o.decisions) ? (o.decisions as QueuedDecision[]) : []).filter((d) => {
    const key = `${d.taskId}/${d.decisionId}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
  const history = Array.isArray(o.history)
    ? (o.history as PastTask[]).filter((p) => p && typeof p === 'object' && typeof p.taskId === 'string')
    : (previous?.history ?? []);
  return { tasks: [...byId.values()], decisions, history };
}

/** Whether any task runs in a worktree (then the view lists the tasks, the status bar counts). */
export function hasWorktreeTasks(t: Tasks | null | undefined): t is Tasks {
  return !!t && t.tasks.some((s) => s.isolation === 'worktree');
}

const ENDED = ['done', 'failed', 'aborted'];

/** A task that has not ended. */
export function taskActive(s: TaskSummary): boolean {
  return !ENDED.includes(s.status);
}

/** The task a `taskId` names, if the list has it. */
export function findTask(t: Tasks | null | undefined, taskId: string | undefined): TaskSummary | undefined {
  return taskId ? t?.tasks.find((s) => s.taskId === taskId) : undefined;
}

/** The decisions waiting, oldest first (the server sends them so; kept so if it did not). */
export function decisionQueue(t: Tasks | null | undefined): QueuedDecision[] {
  return [...(t?.decisions ?? [])].sort((a, b) => Date.parse(a.since) - Date.parse(b.since));
}

export interface TaskCounts {
  running: number;
  paused: number;
  human: number;
  /** Open decisions across tasks. */
  waiting: number;
}

export function taskCounts(t: Tasks): TaskCounts {
  const c: TaskCounts = { running: 0, paused: 0, human: 0, waiting: t.decisions.length };
  for (const s of t.tasks) {
    if (s.status === 'running' || s.status === 'starting') c.running++;
    else if (s.status === 'paused') c.paused++;
    else if (s.status === 'human') c.human++;
  }
  return c;
}

const STATUS_WORDS: Record<string, string> = {
  running: 'running',
  starting: 'starting',
  paused: 'paused',
  awaiting_decision: 'waiting for you',
  human: 'you hold it',
  done: 'done',
  failed: 'failed',
  aborted: 'aborted',
};

/** A task's status in words. */
export function statusWords(status: string): string {
  return STATUS_WORDS[status] ?? status.replace(/_/g, ' ');
}

const STATUS_ICONS: Record<string, string> = {
  running: 'sync~spin',
  starting: 'loading~spin',
  paused: 'debug-pause',
  awaiting_decision: 'question',
  human: 'person',
  done: 'check',
  failed: 'error',
  aborted: 'circle-slash',
};

/** The codicon of a task's status. */
export function statusIcon(status: string): string {
  return STATUS_ICONS[status] ?? 'circle-outline';
}

/** "2 decisions" / "1 decision". */
function plural(n: number, what: string): string {
  return `${n} ${what}${n === 1 ? '' : 's'}`;
}

/** What the status bar shows while there are worktree tasks: how many run, how many wait on you. */
export function tasksStatusText(t: Tasks): StatusText {
  const c = taskCounts(t);
  const parts = [`${c.running} running`];
  if (c.paused) parts.push(`${c.paused} paused`);
  if (c.human) parts.push(`${c.human} yours`);
  parts.push(`${c.waiting} waiting`);
  const icon = c.waiting ? '$(bell-dot)' : c.running ? '$(sync~spin)' : '$(layers)';
  const tone: Tone = c.waiting ? 'warning' : 'normal';
  const tooltip = t.tasks.map((s) => `${s.name}: ${s.goal} — ${taskDescription(s)}`);
  if (c.waiting) tooltip.push(`${plural(c.waiting, 'decision')} waiting: Rein: Answer Decisions shows the oldest first.`);
  tooltip.push('Click for the controls of every task.');
  return { text: `${icon} Rein: ${parts.join(' · ')}`, tooltip, tone };
}

/** A task row's description: status, holder, plan x/y, decisions waiting. */
export function taskDescription(s: TaskSummary): string {
  const parts = [statusWords(s.status)];
  if (s.holder === 'human' && s.status !== 'human') parts.push('you hold it');
  const [done, total] = s.plan ?? [0, 0];
  if (total) parts.push(`plan ${done}/${total}`);
  else parts.push(plural(s.steps ?? 0, 'step'));
  if (s.decisions?.length) parts.push(`${s.decisions.length} waiting`);
  return parts.join(' · ');
}

/** A task row's label: its name and goal. */
export function taskLabel(s: TaskSummary): string {
  return `${s.name}: ${s.goal}`;
}

/** A task row's tooltip: everything the summary says. */
export function taskTooltip(s: TaskSummary): string {
  const lines = [`${s.name}: ${s.goal}`, `Status: ${statusWords(s.status)}`, `Control: ${s.holder === 'human' ? 'you' : s.holder === 'agent' ? 'the agent' : 'nobody'}`];
  const [done, total] = s.plan ?? [0, 0];
  if (total) lines.push(`Plan: ${done} of ${total} done`);
  lines.push(`Steps: ${s.steps ?? 0}${s.lastStep ? ` (last: ${s.lastStep})` : ''}`);
  if (s.stopReason) lines.push(`Why stopped: ${s.stopReason}`);
  if (s.decisions?.length) lines.push(`${plural(s.decisions.length, 'decision')} waiting for you`);
  if (s.isolation === 'worktree') {
    if (s.branch) lines.push(`Branch: ${s.branch}`);
    if (s.worktree) lines.push(`Worktree: ${s.worktree}`);
  } else {
    lines.push('Runs here, in your working tree.');
  }
  return lines.join('\n');
}

/**
 * A task row's context value, for the view's menus: `task:<status>:<holder>:<isolation>`, then
 * `:decisions` when one waits.
 */
export function taskContext(s: TaskSummary): string {
  return `task:${s.status}:${s.holder}:${s.isolation}${s.decisions?.length ? ':decisions' : ''}`;
}

export type TaskControl = 'pause' | 'resume' | 'steer' | 'decide' | 'takeover' | 'handback' | 'abort' | 'transcript' | 'land' | 'discard' | 'open';

/** The controls that are legal for a task now, most useful first (the server stays the authority). */
export function taskControls(s: TaskSummary): TaskControl[] {
  const wt = s.isolation === 'worktree';
  const out: TaskControl[] = [];
  if (s.decisions?.length) out.push('decide');
  switch (s.status) {
    case 'running':
    case 'starting':
      out.push('pause', 'steer', 'takeover', 'abort');
      break;
    case 'paused':
      out.push('resume', 'steer', 'takeover', 'abort');
      break;
    case 'awaiting_decision':
      out.push('steer', 'takeover', 'abort');
      break;
    case 'human':
      out.push('handback', 'steer', 'abort');
      break;
  }
  out.push('transcript');
  // Landing is refused while the task runs: offered once it stands still.
  if (wt && s.status !== 'running' && s.status !== 'starting' && s.status !== 'aborted') out.push('land');
  if (wt) out.push('open', 'discard');
  return out;
}

export const TASK_CONTROLS: Record<TaskControl, { label: string; detail: string }> = {
  pause: { label: '$(debug-pause) Pause', detail: 'Freeze this agent, keep everything' },
  resume: { label: '$(debug-continue) Resume', detail: 'Let this agent carry on' },
  steer: { label: '$(comment) Steer…', detail: 'A correction this agent gets before its next step' },
  decide: { label: '$(question) Answer its decision…', detail: 'This agent waits for you' },
  takeover: { label: '$(person) Take over…', detail: 'Stop this agent and hold control yourself (its worktree opens)' },
  handback: { label: '$(debug-step-over) Hand back…', detail: 'Give control back; the agent reconciles your changes' },
  abort: { label: '$(debug-stop) Abort…', detail: 'Stop this task' },
  transcript: { label: '$(comment-discussion) Show transcript', detail: 'What this agent said and did' },
  land: { label: '$(git-merge) Land…', detail: 'Bring its work into your working tree (three-way merge; yours is never overwritten)' },
  discard: { label: '$(trash) Discard…', detail: 'Remove its worktree and branch' },
  open: { label: '$(folder-opened) Open its worktree', detail: 'Open the folder it works in' },
};

/** Where Start Task can run a task. */
export interface StartWhere {
  id: 'here' | 'worktree' | 'carry';
  label: string;
  detail: string;
}

/** The places Start Task offers: here only while no task runs here. */
export function startChoices(hereBusy: boolean): StartWhere[] {
  const out: StartWhere[] = [];
  if (!hereBusy) out.push({ id: 'here', label: '$(home) Here, in your working tree', detail: 'The agent edits the files you have open; you can take over at any time.' });
  out.push({ id: 'worktree', label: '$(git-branch) In a worktree', detail: 'A linked worktree on a new branch rein/<task> from HEAD; your working tree is untouched. Land its work when it is done.' });
  out.push({ id: 'carry', label: '$(git-branch) In a worktree, with your uncommitted changes', detail: 'As above, starting from HEAD plus the changes you have not committed.' });
  return out;
}

/** What `rein.land` answers. */
export interface Landed {
  taskId: string;
  applied?: string[];
  merged?: string[];
  already?: string[];
  overlaps?: { path: string; decisionId: string; hunks?: number }[];
  unsaved?: string[];
  failed?: [string, string][];
  commit?: string | null;
  removed?: boolean;
}

/** A land's report in one line, and whether it left something for the person to do. */
export function landSummary(name: string, r: Landed): { text: string; attention: boolean } {
  const parts: string[] = [];
  const n = (a: unknown[] | undefined) => a?.length ?? 0;
  if (n(r.applied)) parts.push(`${plural(n(r.applied), 'file')} applied`);
  if (n(r.merged)) parts.push(`${n(r.merged)} merged with yours`);
  if (n(r.already)) parts.push(`${n(r.already)} already as yours`);
  if (n(r.overlaps)) parts.push(`${plural(n(r.overlaps), 'overlap')} kept as yours and asked (${r.overlaps!.map((o) => o.path).join(', ')})`);
  if (n(r.unsaved)) parts.push(`${n(r.unsaved)} with unsaved edits left alone (${r.unsaved!.join(', ')})`);
  if (n(r.failed)) parts.push(`${n(r.failed)} failed (${r.failed!.map(([p, why]) => `${p}: ${why}`).join('; ')})`);
  if (!parts.length) parts.push('nothing to bring over');
  const how = r.commit ? `as commit ${r.commit.slice(0, 8)}` : 'as uncommitted changes';
  const after = r.removed ? '; its worktree and branch are removed' : '; its worktree is kept';
  return { text: `Rein: landed ${name} ${how}: ${parts.join(', ')}${after}.`, attention: !!(n(r.overlaps) || n(r.unsaved) || n(r.failed)) };
}

/** A queued decision as a picker row: the question (it names its task), its answers, its age. */
export function queueRow(d: QueuedDecision, now = Date.now()): { label: string; description: string; detail: string } {
  const age = Math.max(0, Math.round((now - Date.parse(d.since)) / 1000));
  const ago = age < 60 ? `${age}s ago` : age < 3600 ? `${Math.round(age / 60)} min ago` : `${Math.round(age / 3600)} h ago`;
  const question = d.question.startsWith(`${d.task}:`) ? d.question : `${d.task}: ${d.question}`;
  return { label: question, description: d.options.length ? d.options.join(' / ') : 'answer it', detail: `${d.decisionId} · asked ${Number.isNaN(age) ? d.since : ago}` };
}

/** "12 s ago", "5 min ago", "3 h ago", "4 days ago" from an RFC 3339 time. */
export function ago(at: string | undefined, now = Date.now()): string {
  const t = at ? Date.parse(at) : NaN;
  if (Number.isNaN(t)) return '';
  const s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  const d = Math.round(s / 86400);
  return `${d} day${d === 1 ? '' : 's'} ago`;
}

/** A history row's description: status, when, steps, turns. */
export function pastDescription(p: PastTask, now = Date.now()): string {
  const parts = [statusWords(p.status)];
  const when = ago(p.updated ?? p.started, now);
  if (when) parts.push(when);
  parts.push(plural(p.steps ?? 0, 'step'));
  if ((p.turns ?? 1) > 1) parts.push(plural(p.turns, 'turn'));
  if (p.ended) parts.push(p.ended);
  return parts.join(' · ');
}

/** A history row's tooltip: everything the history says, and what a click does. */
export function pastTooltip(p: PastTask): string {
  const lines = [p.goal, `Status: ${statusWords(p.status)}${p.current ? ' (the current task)' : ''}`, `Started: ${p.started}`];
  if (p.updated) lines.push(`Last activity: ${p.updated}`);
  lines.push(`Steps: ${p.steps ?? 0} · turns: ${p.turns ?? 1}`);
  if (p.lastTurn) lines.push(`Your last follow-up: ${p.lastTurn}`);
  if (p.stopReason) lines.push(`How it ended: ${p.stopReason}`);
  if (p.ended) lines.push(`Its worktree: ${p.ended}`);
  lines.push('Click to read its transcript.');
  if (p.canContinue) lines.push('Continue it (the same agent conversation) with the inline action or the context menu.');
  else if (!taskActive({ status: p.status } as TaskSummary)) lines.push('Its agent takes no further turn.');
  return lines.join('\n');
}

/**
 * A history row's context value, for the view's menus: `past:<status>`, then `:current` for
 * the working tree's current task, then `:continue` when it can be continued.
 */
export function pastContext(p: PastTask): string {
  return `past:${p.status}${p.current ? ':current' : ''}${p.canContinue ? ':continue' : ''}`;
}

/** The current task as the history lists it, if it does. */
export function currentPast(t: Tasks | null | undefined): PastTask | undefined {
  return t?.history.find((p) => p.current);
}

/** What Start Task offers when the task here has ended: continuing it, or a new task. */
export interface StartOrContinue {
  id: 'continue' | 'new';
  label: string;
  detail: string;
}

/**
 * Start Task's first question when the task here has ended and its agent takes another turn
 * (`canContinue`; unknown when the history is not there, so it is offered and the server
 * decides): continue it, or start a new one.
 */
export function startOrContinue(goal: string, status: string, canContinue: boolean | undefined): StartOrContinue[] | undefined {
  if (taskActive({ status } as TaskSummary) || canContinue === false) return undefined;
  return [
    { id: 'continue', label: `$(reply) Continue: ${goal}`, detail: `The same agent and conversation: your words are its next turn (it is ${statusWords(status)}).` },
    { id: 'new', label: '$(add) New task', detail: 'A new goal for a new agent session.' },
  ];
}
