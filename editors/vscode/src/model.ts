// Pure logic over Rein's task state: what the status bar says, which controls are legal,
// how the view labels things, which checkpoints a step spans. No `vscode` import here, so
// everything in this file is unit-tested with `node --test` (see test/model.test.ts).

export type Status =
  | 'running'
  | 'paused'
  | 'awaiting_decision'
  | 'human'
  | 'aborted'
  | 'done'
  | 'failed';

export type Holder = 'agent' | 'human' | 'none';

export interface Location {
  path: string;
  line: number;
  endLine?: number | null;
}

export interface PlanItem {
  id?: string;
  text: string;
  status?: 'pending' | 'active' | 'done' | 'skipped';
  /** How much it matters, when the agent says (ACP: high, medium, low). */
  priority?: string | null;
  /** The human edited it by hand: the agent's plan updates leave it alone. */
  editedByHuman?: boolean;
  /** The agent calls it done, but Rein's record of its last step says otherwise (why). */
  contradicted?: string | null;
}

/** An ACP agent's own tool call behind a step. */
export interface ToolCall {
  id: string;
  kind: string;
  /** Where it acted (`line` 1-based). */
  locations?: { path: string; line?: number | null }[];
  diffs?: { path: string; added: number; removed: number }[];
}

export interface Step {
  n: number;
  action: string;
  /** `unattributed`: the tree changed while the agent ran and Rein cannot tell who changed it. */
  author: 'agent' | 'human' | 'unattributed';
  status: 'done' | 'failed' | 'skipped' | 'rolled_back';
  checkpoint?: string | null;
  /** The id of the plan item the agent worked on. */
  planItem?: string | null;
  /** What the agent said on its way to the step (the last 4 KiB). */
  message?: string | null;
  /** Its reasoning, when it shows it (the last 1 KiB; show collapsed). */
  thought?: string | null;
  /** What came of it, as the agent was told: why it failed or was refused, a command's exit. */
  detail?: string | null;
  /** The end of a command's output (the last 4 KiB). */
  output?: string | null;
  tool?: ToolCall | null;
}

/** `rein/output`: live output of a command the agent runs (client declares experimental.rein.output). */
export interface OutputChunk {
  taskId: string;
  id: string;
  step: number;
  command: string;
  terminal: string | null;
  seq: number;
  chunk: string;
  skipped: number;
  state: 'running' | 'paused' | 'ended';
  exit?: { code: number | null; signal: number | null };
}

export interface Constraint {
  id?: string;
  text: string;
  source?: 'command' | 'comment' | 'human';
  status?: 'queued' | 'delivered';
  deliveredAtStep?: number | null;
  location?: Location | null;
}

export type DecisionKind =
  | 'approve_command'
  | 'merge_conflict'
  | 'protected_lines'
  | 'held_file'
  | 'question'
  | 'sandbox_denied'
  | 'agent_place'
  | 'rerun_command';

export interface Decision {
  id: string;
  kind: DecisionKind;
  question: string;
  options: string[];
  detail?: string | null;
  path?: string | null;
}

/** A decision no longer open: what was asked, who answered, what. */
export interface AnsweredDecision extends Decision {
  choice: string;
  by: 'agent' | 'human';
  at: string;
}

export interface TaskState {
  version: number;
  task: { id: string; goal: string; base?: string | null; agent?: unknown; started: string };
  status: Status;
  control: { holder: Holder; since: string; reason: string };
  heldFiles?: string[];
  plan?: PlanItem[];
  /** Whether the agent reports progress on its plan; false: "the agent reports no plan progress". */
  planProgress?: boolean;
  steps?: Step[];
  constraints?: Constraint[];
  decisions?: Decision[];
  answered?: AnsweredDecision[];
  lastAgentCheckpoint?: string | null;
  humanChanges?: unknown[];
  stopReason?: string | null;
  agentMoves?: number;
  remainingMoves?: number | null;
  head?: string | null;
  protectedLines?: Record<string, string[]>;
  summary?: string | null;
  /** After an abort: agent lines that stayed where you edited inside their block (`line` 1-based). */
  keptAgentLines?: { path: string; lines: { line: number; text: string }[] }[];
  /** Files that changed while the agent ran that Rein cannot attribute: kept by abort. */
  unattributedChanges?: { path: string; kind: string; at: string; size?: number | null; atStep: number; checkpoint?: string | null }[];
  sandbox?: SandboxInfo | null;
  /** A stop waiting for an approved irreversible command to end. */
  queuedStop?: { intent: string; behind: string; since: string } | null;
  /** The follow-ups, each a turn of the conversation (turn 1, the goal, is not listed). */
  turns?: { n: number; text: string; at: string; fromStep: number; checkpoint?: string | null }[];
}

/** The sandbox in force for a task (`state.sandbox`). */
export interface SandboxInfo {
  mode: 'workspace-write' | 'read-only' | 'off';
  inForce: boolean;
  landlockAbi?: number | null;
  unavailable?: string | null;
  network?: string[];
  /** What it enforces on this machine. */
  enforced?: string[];
  /** What this machine cannot enforce (an older kernel, no user namespaces). */
  notEnforced?: string[];
}

/** What the kernel can confine, from the server's `experimental.rein.landlock` at initialize. */
export interface Landlock {
  abi?: number | null;
  unavailable?: string | null;
  enforced?: string[];
  notEnforced?: string[];
}

/** " — NOT enforced here: …" when the sandbox holds only in part, else "". */
function partly(missing: string[] | undefined): string {
  return missing?.length ? ` — NOT enforced here: ${missing.join('; ')}` : '';
}

/** The tooltip line about the sandbox: the task's when there is one, else the kernel's. */
export function sandboxLine(sb: SandboxInfo | null | undefined, here?: Landlock | null): string | undefined {
  if (sb) {
    if (sb.mode === 'off') return 'Sandbox: off — commands and the agent run with your full rights';
    if (!sb.inForce) return `Sandbox: cannot be had here (${sb.unavailable ?? 'no Landlock'}) — commands and the agent run unconfined`;
    const net = sb.network?.length ? `; network for: ${sb.network.join(', ')}` : '';
    return `Sandbox: ${sb.mode} (Landlock ABI ${sb.landlockAbi ?? '?'})${net}${partly(sb.notEnforced)}`;
  }
  if (here?.unavailable) return `Sandbox: cannot be had here (${here.unavailable})`;
  if (here?.abi) return `Sandbox: Landlock ABI ${here.abi} available${partly(here.notEnforced)}`;
  return undefined;
}

export const TERMINAL: readonly Status[] = ['aborted', 'done', 'failed'];

export function isTerminal(status: Status): boolean {
  return TERMINAL.includes(status);
}

/** A task exists and has not ended. */
export function isActive(state: TaskState | null | undefined): state is TaskState {
  return !!state && !isTerminal(state.status);
}

/** The number of the last step taken (0 before the first). */
export function lastStep(state: TaskState): number {
  const steps = state.steps ?? [];
  return steps.reduce((m, s) => Math.max(m, s.n), 0);
}

const DECISION_WAIT: Record<DecisionKind, string> = {
  approve_command: 'needs approval',
  protected_lines: 'needs approval',
  merge_conflict: 'merge conflict',
  held_file: 'needs a file you hold',
  question: 'agent asks you',
  sandbox_denied: 'sandbox denied a command',
  agent_place: 'agent needs a place to write',
  rerun_command: 'run a stopped command again?',
};

export type Tone = 'normal' | 'warning' | 'error';

export interface StatusText {
  /** The status bar text, with `$(codicon)` icons. */
  text: string;
  /** One line per fact, for the tooltip (Markdown-safe plain text). */
  tooltip: string[];
  tone: Tone;
}

/**
 * Where the language server is: `up` only once the client runs (so "no task" means the server
 * answered), `starting` before that, `stopped` after it ended or failed, `missing` when no
 * `rein` binary could be found to start.
 */
export type ServerPhase = 'up' | 'starting' | 'stopped' | 'missing';

/** What the status bar shows: who holds control and where the run is. */
export function statusText(state: TaskState | null | undefined, server: ServerPhase = 'up', here?: Landlock | null): StatusText {
  if (server === 'starting') {
    return { text: '$(loading~spin) Rein: starting', tooltip: ['Starting the Rein language server (rein lsp).'], tone: 'normal' };
  }
  if (server === 'missing') {
    return { text: '$(error) Rein: rein not found', tooltip: ['No rein binary to start: set rein.serverPath or install rein. Click for controls.'], tone: 'error' };
  }
  if (server === 'stopped') {
    return { text: '$(circle-slash) Rein: server stopped', tooltip: ['The Rein language server is not running. Click for controls.'], tone: 'error' };
  }
  if (!state) {
    const sb = sandboxLine(null, here);
    const tooltip = ['No Rein task in this repository. Click to start one.', ...(sb ? [sb] : [])];
    return { text: '$(circle-outline) Rein: no task', tooltip, tone: 'normal' };
  }
  const n = lastStep(state);
  let text: string;
  let tone: Tone = 'normal';
  switch (state.status) {
    case 'running':
      if (state.queuedStop) {
        // Said at once: the stop lands when the approved command ends, never in its middle.
        const q = state.queuedStop;
        const cmd = q.behind.split('\n')[0];
        text = `$(watch) ${q.intent[0].toUpperCase()}${q.intent.slice(1)} queued behind \`${cmd.length > 40 ? cmd.slice(0, 40) + '…' : cmd}\``;
        tone = 'warning';
      } else {
        text = `$(sync~spin) Agent running · step ${n + 1}`;
      }
      break;
    case 'paused':
      // The step it stopped in (a frozen command's, or the next one), as "running" names it
      // and the view's "Running …" row does: one number for one step everywhere.
      text = state.stopReason?.startsWith('interrupted')
        ? `$(debug-pause) Paused: interrupted · step ${n + 1}`
        : `$(debug-pause) Paused · step ${n + 1}`;
      tone = 'warning';
      break;
    case 'awaiting_decision': {
      const d = (state.decisions ?? [])[0];
      text = `$(debug-pause) Paused: ${d ? DECISION_WAIT[d.kind] ?? 'needs your decision' : 'needs your decision'}`;
      tone = 'warning';
      break;
    }
    case 'human':
      text = '$(person) You hold control';
      break;
    case 'done':
      text = `$(check) Agent done · ${n} step${n === 1 ? '' : 's'}`;
      break;
    case 'aborted':
      text = '$(circle-slash) Task aborted';
      break;
    case 'failed':
      text = '$(error) Task failed';
      tone = 'error';
      break;
    default:
      text = `$(question) Rein: ${String(state.status)}`;
  }
  const sb = state.sandbox;
  if (sb && !sb.inForce && sb.mode !== 'off' && !isTerminal(state.status)) {
    // Said where it is always seen: the person asked for a sandbox and has none.
    text += ' · $(unlock) unconfined';
    if (tone === 'normal') tone = 'warning';
  } else if (sb && sb.inForce && sb.notEnforced?.length && !isTerminal(state.status)) {
    // Also always seen: the sandbox holds only in part on this machine.
    text += ' · $(unlock) partly confined';
    if (tone === 'normal') tone = 'warning';
  }
  return { text, tooltip: tooltipLines(state, here), tone };
}

function holderText(h: Holder): string {
  return h === 'agent' ? 'the agent' : h === 'human' ? 'you' : 'nobody (the task ended)';
}

export function tooltipLines(state: TaskState, here?: Landlock | null): string[] {
  const lines = [`Task: ${state.task.goal}`, `Status: ${state.status.replace('_', ' ')}`];
  lines.push(`Control: ${holderText(state.control.holder)} — ${state.control.reason}`);
  if (state.stopReason) lines.push(`Why stopped: ${state.stopReason}`);
  if (state.queuedStop) {
    lines.push(`Your ${state.queuedStop.intent} lands when \`${state.queuedStop.behind}\` ends: it was approved and cannot be undone, so it is never interrupted.`);
  }
  const plan = planSummary(state);
  if (plan.total) lines.push(`Plan: ${plan.description}${plan.active ? ` — now: ${plan.active.text}` : ''}`);
  const queued = (state.constraints ?? []).filter((c) => c.status !== 'delivered').length;
  if (queued) lines.push(`Steers queued: ${queued}`);
  const held = state.heldFiles ?? [];
  if (held.length) lines.push(`You hold: ${held.join(', ')}`);
  const open = state.decisions ?? [];
  for (const d of open) lines.push(`Decision ${d.id}: ${d.question}`);
  if (state.summary) lines.push(`Summary: ${state.summary}`);
  const sb = sandboxLine(state.sandbox, here);
  if (sb) lines.push(sb);
  lines.push('Click for the controls you can use now.');
  return lines;
}

export type Control =
  | 'continue'
  | 'start'
  | 'pause'
  | 'resume'
  | 'steer'
  | 'decide'
  | 'takeover'
  | 'handback'
  | 'release'
  | 'rewind'
  | 'abort'
  | 'transcript'
  | 'state';

/** The controls that are legal now, most useful first (the server stays the authority). */
export function legalControls(state: TaskState | null | undefined): Control[] {
  if (!state || isTerminal(state.status)) {
    // An ended task's conversation can go on (the server says whether its agent takes a turn).
    const c: Control[] = state ? ['continue', 'start'] : ['start'];
    if (state && checkpointChoices(state).length) c.push('rewind');
    if (state) c.push('transcript', 'state');
    return c;
  }
  const held: Control[] = (state.heldFiles ?? []).length ? ['release'] : [];
  switch (state.status) {
    case 'running':
      return ['pause', 'steer', 'takeover', ...held, 'abort', 'transcript', 'state'];
    case 'paused':
      return ['resume', 'steer', 'takeover', ...held, 'rewind', 'abort', 'transcript', 'state'];
    case 'awaiting_decision':
      return ['decide', 'steer', 'takeover', ...held, 'abort', 'transcript', 'state'];
    case 'human':
      return ['handback', 'steer', ...held, 'rewind', 'abort', 'transcript', 'state'];
    default:
      return ['state'];
  }
}

export interface ControlInfo {
  label: string;
  detail: string;
  command: string;
}

export const CONTROLS: Record<Control, ControlInfo> = {
  continue: { label: '$(comment-discussion) Continue the task…', detail: 'Your next words to the same agent: a new turn of this conversation', command: 'rein.ui.continue' },
  start: { label: '$(play) Start task…', detail: 'Give the agent a goal', command: 'rein.ui.start' },
  pause: { label: '$(debug-pause) Pause', detail: 'Freeze the agent, keep everything', command: 'rein.ui.pause' },
  resume: { label: '$(debug-continue) Resume', detail: 'Let the agent carry on', command: 'rein.ui.resume' },
  steer: { label: '$(comment) Steer…', detail: 'A correction the agent gets before its next step', command: 'rein.ui.steer' },
  decide: { label: '$(question) Answer the open decision…', detail: 'The agent waits for you', command: 'rein.ui.decide' },
  takeover: { label: '$(person) Take over…', detail: 'Stop the agent and hold control yourself', command: 'rein.ui.takeover' },
  handback: { label: '$(debug-step-over) Hand back…', detail: 'Give control back; the agent reconciles your changes', command: 'rein.ui.handback' },
  release: { label: '$(unlock) Hand a file back…', detail: 'Let the agent write a file you hold', command: 'rein.ui.release' },
  rewind: { label: '$(history) Rewind…', detail: 'Put the tree back to a checkpoint', command: 'rein.ui.rewind' },
  abort: { label: '$(debug-stop) Abort…', detail: 'Stop the task, keep or discard its changes', command: 'rein.ui.abort' },
  transcript: { label: '$(comment-discussion) Show transcript', detail: 'The task as a conversation: what the agent said and did, your steers and answers', command: 'rein.ui.transcript' },
  state: { label: '$(json) Show state', detail: 'The task state as JSON', command: 'rein.ui.state' },
};

export interface CheckpointChoice {
  checkpoint: string;
  label: string;
  description: string;
  step: number;
}

/**
 * Steps to rewind to, newest first: every step that ended on a checkpoint, once each (a read
 * ends on the checkpoint before it, and is listed too), named `step:N` as the server resolves
 * it, so the picker shows the same steps as the transcript and Neovim's.
 */
export function checkpointChoices(state: TaskState): CheckpointChoice[] {
  const seen = new Set<number>();
  const out: CheckpointChoice[] = [];
  const steps = [...(state.steps ?? [])].sort((a, b) => b.n - a.n);
  for (const s of steps) {
    if (!s.checkpoint || seen.has(s.n)) continue;
    seen.add(s.n);
    out.push({
      checkpoint: `step:${s.n}`,
      step: s.n,
      label: `Step ${s.n}: ${s.action}`,
      description: `${s.author} · ${s.checkpoint.slice(0, 8)}${s.status === 'done' ? '' : ` · ${s.status.replace('_', ' ')}`}`,
    });
  }
  return out;
}

/**
 * The two commits a step's diff spans: `to` is the step's checkpoint, `from` the checkpoint of
 * the closest earlier step that has one, or `null` when there is none (then the caller diffs
 * against the checkpoint's git parent, the task's base). `same` when the step changed nothing.
 */
export function stepRange(state: TaskState, n: number): { from: string | null; to: string; same: boolean } | null {
  const steps = [...(state.steps ?? [])].sort((a, b) => a.n - b.n);
  const i = steps.findIndex((s) => s.n === n);
  if (i < 0) return null;
  const to = steps[i].checkpoint;
  if (!to) return null;
  for (let j = i - 1; j >= 0; j--) {
    const c = steps[j].checkpoint;
    if (c) return { from: c, to, same: c === to };
  }
  return { from: null, to, same: false };
}

export interface NameStatus {
  status: 'A' | 'M' | 'D' | 'T' | string;
  path: string;
}

/** Parses `git diff --name-status --no-renames -z` output. */
export function parseNameStatus(out: string): NameStatus[] {
  const parts = out.split('\0');
  const res: NameStatus[] = [];
  for (let i = 0; i + 1 < parts.length; i += 2) {
    const status = parts[i].trim();
    const path = parts[i + 1];
    if (!status || !path) continue;
    res.push({ status: status[0], path });
  }
  return res;
}

/** Whether the plan's statuses are progress the agent reported (else they are not facts). */
export function planReported(state: TaskState): boolean {
  // A finished task's items are done whether or not the agent reported along the way.
  return state.planProgress === true || state.status === 'done';
}

export interface PlanSummary {
  /** The statuses are reported progress. */
  progress: boolean;
  total: number;
  done: number;
  skipped: number;
  /** The item being worked on, when the agent says. */
  active?: PlanItem;
  /** "2/5 done", "2/4 done · 1 skipped", "5 items · no progress reported", "none yet". */
  description: string;
}

/** The plan at a glance: done out of the items not skipped, or that no progress is reported. */
export function planSummary(state: TaskState): PlanSummary {
  const plan = state.plan ?? [];
  const progress = planReported(state);
  // An item the agent calls done whose step Rein recorded as not done is not counted done.
  const done = plan.filter((p) => p.status === 'done' && !p.contradicted).length;
  const doubtful = plan.filter((p) => p.status === 'done' && p.contradicted).length;
  const skipped = plan.filter((p) => p.status === 'skipped').length;
  // Waiting on a decision, the agent is not at its active item: the head says what it waits on.
  const waiting = (state.decisions ?? []).length > 0;
  const active = progress && !waiting ? plan.find((p) => p.status === 'active') : undefined;
  let description: string;
  if (!plan.length) description = 'none yet';
  else if (!progress) description = `${plan.length} item${plan.length === 1 ? '' : 's'} · no progress reported`;
  else description = `${done}/${plan.length - skipped} done${doubtful ? ` · ${doubtful} marked done, not done` : ''}${skipped ? ` · ${skipped} skipped` : ''}`;
  return { progress, total: plan.length, done, skipped, active, description };
}

/** Said where the plan's statuses would be when the agent reports none. */
export const NO_PLAN_PROGRESS = 'The agent reports no plan progress';

const PLAN_STATUS_WORDS: Record<NonNullable<PlanItem['status']>, string> = {
  pending: 'pending',
  active: 'in progress',
  done: 'done',
  skipped: 'skipped',
};

export function planIcon(status: PlanItem['status']): string {
  switch (status) {
    case 'done':
      return 'pass';
    case 'active':
      return 'arrow-right';
    case 'skipped':
      return 'circle-slash';
    default:
      return 'circle-large-outline';
  }
}

/**
 * A plan item's row. Without reported progress its status is not shown at all (a stale
 * "pending" would mislead): a plain bullet, and the tooltip says why.
 */
export function planRow(item: PlanItem, progress: boolean): { label: string; description: string; icon: string; tooltip: string } {
  const status = item.status ?? 'pending';
  const parts: string[] = [];
  if (progress && status !== 'pending') parts.push(item.contradicted && status === 'done' ? item.contradicted : PLAN_STATUS_WORDS[status]);
  if (item.editedByHuman) parts.push('edited by you');
  if (item.priority && item.priority !== 'medium') parts.push(`${item.priority} priority`);
  const tip = [item.text, ''];
  tip.push(progress ? `Status: ${PLAN_STATUS_WORDS[status]}.` : `${NO_PLAN_PROGRESS}, so whether this is done is not known.`);
  if (item.contradicted) tip.push(`Rein's record says otherwise: ${item.contradicted}.`);
  if (item.priority) tip.push(`Priority: ${item.priority}.`);
  if (item.editedByHuman) tip.push('You edited this item by hand: the agent\'s plan updates leave it as you left it.');
  if (item.id) tip.push(`Plan item ${item.id}.`);
  const icon = !progress ? 'circle-small-filled' : item.contradicted && status === 'done' ? 'warning' : planIcon(status);
  return { label: item.text, description: parts.join(' · '), icon, tooltip: tip.join('\n') };
}

export function stepIcon(step: Step): string {
  if (step.status === 'failed') return 'error';
  if (step.status === 'rolled_back') return 'discard';
  if (step.status === 'skipped') return 'circle-slash';
  if (step.author === 'unattributed') return 'question';
  return step.author === 'human' ? 'person' : 'hubot';
}

/** The first line of a text, whitespace collapsed, cut to `max` characters. */
export function firstLine(text: string, max = 200): string {
  const line = (text.split('\n').find((l) => l.trim()) ?? '').replace(/\s+/g, ' ').trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

/** A step that did not do what the agent asked: its `detail` is what the agent was told. */
export function stepFailed(step: Step): boolean {
  return step.status !== 'done';
}

/**
 * A step's row. The side bar cuts a row at its default width, so the label keeps what means
 * most (what was run, the files a human step changed) and the rest goes to the description:
 * "9. run git tag v1" + "not done: the human chose deny", "5. src/greet.py" + "your changes
 * while holding control", "4. write .GIT/config" + "failed: path \".GIT/config\" refused: …".
 * The icon says who; the tooltip has the whole action and what the agent said.
 */
export function stepRow(step: Step): { label: string; description: string } {
  let head = step.action;
  let tail = '';
  const arrow = head.indexOf(' → ');
  if (arrow > 0) {
    tail = head.slice(arrow + 3);
    head = head.slice(0, arrow);
  } else if (step.author !== 'agent') {
    const colon = head.indexOf(': ');
    if (colon > 0) {
      tail = head.slice(0, colon);
      head = head.slice(colon + 2);
    }
  }
  const parts: string[] = [];
  if (tail) parts.push(tail);
  else if (step.status !== 'done') {
    const why = step.detail ? firstLine(step.detail, 120) : '';
    parts.push(`${step.status.replace('_', ' ')}${why ? `: ${why}` : ''}`);
  }
  if (step.checkpoint) parts.push(step.checkpoint.slice(0, 7));
  return { label: `${step.n}. ${head}`, description: parts.join(' · ') };
}

/**
 * A step's tooltip: the whole action, how it ended, the plan item, what the agent said on its
 * way to it, and for a step that did not do what was asked the very text the agent was told.
 * The thought stays out (it is shown collapsed under the step).
 */
export function stepTooltip(step: Step, plan: PlanItem[] = []): string {
  const lines = [`Step ${step.n} by ${step.author}: ${step.action}`, `status: ${step.status.replace('_', ' ')}`];
  const item = step.planItem ? plan.find((p) => p.id === step.planItem) : undefined;
  if (item) lines.push(`for plan item ${item.id}: ${item.text}`);
  if (step.message) lines.push('', 'The agent said:', step.message);
  if (step.detail) lines.push('', stepFailed(step) ? 'What the agent was told:' : 'Outcome:', step.detail);
  if (step.tool) lines.push('', `Tool call ${step.tool.id} (${step.tool.kind})`);
  if (step.checkpoint) lines.push('', `checkpoint: ${step.checkpoint}`);
  const clicks: string[] = [];
  if (step.output != null) clicks.push('Click to see its output');
  else if (step.checkpoint) clicks.push('Click to see what this step changed');
  if (step.thought) clicks.push('expand it for the agent\'s thought');
  if (clicks.length) lines.push(`${clicks.join('; ')}.`);
  return lines.join('\n');
}

/** What a step's children show: the agent's words, thought, outcome, output, where it acted. */
export type StepPart =
  | { kind: 'message'; text: string }
  | { kind: 'thought'; text: string }
  | { kind: 'detail'; text: string; failed: boolean }
  | { kind: 'output'; text: string; exit: string }
  | { kind: 'location'; path: string; line: number | null }
  | { kind: 'diff'; path: string; added: number; removed: number };

export function stepParts(step: Step): StepPart[] {
  const out: StepPart[] = [];
  if (step.message?.trim()) out.push({ kind: 'message', text: step.message });
  if (step.thought?.trim()) out.push({ kind: 'thought', text: step.thought });
  if (step.detail?.trim()) out.push({ kind: 'detail', text: step.detail, failed: stepFailed(step) });
  if (step.output != null) out.push({ kind: 'output', text: step.output, exit: step.detail ? firstLine(step.detail, 60) : '' });
  for (const d of step.tool?.diffs ?? []) out.push({ kind: 'diff', ...d });
  for (const l of step.tool?.locations ?? []) {
    if (!(step.tool?.diffs ?? []).some((d) => d.path === l.path)) out.push({ kind: 'location', path: l.path, line: l.line ?? null });
  }
  return out;
}

/** Splits a long text into rows of at most `width` characters, at spaces where it can. */
export function wrapRows(text: string, width = 80): string[] {
  const rows: string[] = [];
  for (const raw of text.replace(/\r/g, '').split('\n')) {
    let line = raw.trimEnd();
    if (!line.trim()) continue;
    while (line.length > width) {
      let cut = line.lastIndexOf(' ', width);
      if (cut < width / 2) cut = width;
      rows.push(line.slice(0, cut).trimEnd());
      line = line.slice(cut).trimStart();
    }
    rows.push(line);
  }
  return rows;
}

/** The agent's latest words: the newest agent step that carries a message. */
export function latestWords(state: TaskState): Step | undefined {
  let best: Step | undefined;
  for (const s of state.steps ?? []) {
    if (s.author === 'agent' && s.message?.trim() && (!best || s.n > best.n)) best = s;
  }
  return best;
}

/** How many steps one page of the Rein view lists. */
export const STEP_PAGE = 100;

/** A page of older steps: `steps[start..end)`, numbered `first`..`last`. */
export interface StepPage {
  start: number;
  end: number;
  first: number;
  last: number;
}

/**
 * A long task's steps as the view lists them: the newest (up to two pages) at once, newest
 * first, and the older ones in pages under "Earlier steps", newest page first. So a change
 * redraws at most two pages, not the whole history. Pages are cut from the first step (the
 * state lists steps in order), so a page keeps its steps while new ones are added.
 */
export function stepPages(steps: Step[], size = STEP_PAGE): { recent: Step[]; earlier: StepPage[] } {
  const cut = steps.length > 2 * size ? (Math.ceil(steps.length / size) - 2) * size : 0;
  const earlier: StepPage[] = [];
  for (let start = cut - size; start >= 0; start -= size) {
    const end = start + size;
    earlier.push({ start, end, first: steps[start].n, last: steps[end - 1].n });
  }
  return { recent: steps.slice(cut).sort((a, b) => b.n - a.n), earlier };
}

/** How a command ended, in words: "exit 0", "exit 101", "killed (signal 9)". */
export function exitText(exit: { code: number | null; signal: number | null } | null | undefined): string {
  if (!exit) return 'ended';
  if (exit.code != null) return `exit ${exit.code}`;
  if (exit.signal != null) return `killed (signal ${exit.signal})`;
  return 'ended';
}

/**
 * Turns `rein/output` notifications into the text of a terminal that follows the
 * running command: a header when a command starts (or another one speaks), the chunks as they
 * come, "paused" / "resumed" on their own lines, and how it ended.
 */
export class OutputFollower {
  /** `decorate` styles Rein's own lines (a terminal makes them bold or dim); plain by default. */
  constructor(private readonly decorate: (kind: 'header' | 'marker' | 'exit', line: string) => string = (_k, l) => l) {}

  private current: string | undefined;
  private atLineStart = true;
  private shown = 0;
  /** The commands that have not ended, and whether each is paused. */
  private readonly open = new Map<string, { paused: boolean }>();

  /** The text to append for this notification. */
  append(c: OutputChunk): string {
    let out = '';
    const nl = () => {
      if (!this.atLineStart) out += '\n';
      this.atLineStart = true;
    };
    let me = this.open.get(c.id);
    if (this.current !== c.id) {
      nl();
      const where = c.terminal ? ` (terminal ${c.terminal})` : '';
      out += `${this.shown ? '\n' : ''}${this.decorate('header', `── step ${c.step} · ${c.command}${where}${me ? ' (continued)' : ''} ──`)}\n`;
      this.current = c.id;
      this.shown++;
    }
    if (!me) {
      me = { paused: false };
      this.open.set(c.id, me);
    }
    // A resume is said before what the command printed since; a pause after what it printed.
    if (c.state !== 'paused' && me.paused) {
      me.paused = false;
      nl();
      out += `${this.decorate('marker', '── resumed ──')}\n`;
    }
    if (c.skipped > 0) {
      nl();
      out += `${this.decorate('marker', `[… ${c.skipped} bytes not shown …]`)}\n`;
    }
    if (c.chunk) {
      out += c.chunk;
      this.atLineStart = c.chunk.endsWith('\n');
    }
    if (c.state === 'paused' && !me.paused) {
      me.paused = true;
      nl();
      out += `${this.decorate('marker', '── paused: the command is frozen until the agent is resumed ──')}\n`;
    } else if (c.state === 'ended') {
      nl();
      out += `${this.decorate('exit', `── ${exitText(c.exit)} (step ${c.step}) ──`)}\n`;
      this.open.delete(c.id);
      this.current = undefined;
    }
    return out;
  }
}

/** A steer's icon: its status survives a row cut before the description. */
export function constraintIcon(c: Constraint): string {
  return c.status === 'delivered' ? 'pass' : 'watch';
}

/** A steer's row description, short enough to fit beside its text at the default width. */
export function constraintDescription(c: Constraint): string {
  const parts: string[] = [];
  if (c.status === 'delivered') {
    parts.push(c.deliveredAtStep != null ? `✓ step ${c.deliveredAtStep}` : '✓');
  } else {
    parts.push('queued');
  }
  if (c.location) parts.push(`${c.location.path.split('/').pop()}:${c.location.line + 1}`);
  return parts.join(' · ');
}

/** A steer's tooltip: the whole text and where it stands. */
export function constraintTooltip(c: Constraint): string {
  const lines = [c.text, ''];
  if (c.status === 'delivered') {
    lines.push(c.deliveredAtStep != null ? `Delivered to the agent before step ${c.deliveredAtStep}.` : 'Delivered to the agent.');
  } else {
    lines.push('Queued: the agent gets it before its next step.');
  }
  if (c.location) lines.push(`About ${c.location.path}:${c.location.line + 1}${c.source === 'comment' ? ' (a `rein:` comment)' : ''}.`);
  if (c.id) lines.push(`Steer ${c.id}.`);
  return lines.join('\n');
}

/** What the steer prompt says happens next, for the state the task is in. */
export function steerPrompt(state: TaskState | null | undefined, urgent = false): string {
  if (urgent) return 'URGENT: the step in flight is cut (rolled back) and the agent gets this first.';
  switch (state?.status) {
    case 'paused':
      return 'A correction the agent gets before its next step. It stays paused until you resume. Enter to send.';
    case 'awaiting_decision':
      return 'A correction the agent gets before its next step, once you answer the open decision. Enter to send.';
    case 'human':
      return 'A correction the agent gets when you hand back. Enter to send.';
    default:
      return 'A correction the agent gets before its next step (it keeps running). Enter to send.';
  }
}

/** One answered decision in words, from the user's side: "you denied `git tag v1`". */
export function answeredLabel(a: AnsweredDecision): string {
  const who = a.by === 'human' ? 'you' : 'the agent';
  const what = a.kind === 'approve_command' && a.detail ? `\`${a.detail.split('\n')[0]}\`` : a.path ? a.path : a.question;
  switch (a.choice) {
    case 'approve':
      return `${who} approved ${what}`;
    case 'deny':
      return `${who} denied ${what}`;
    case 'take over':
      return `${who} took over instead (${what})`;
    case 'abort':
      return `${who} aborted instead (${what})`;
    default:
      return a.kind === 'question' ? `${who} answered: ${a.choice}` : `${who} chose "${a.choice}" (${what})`;
  }
}

/** Tree-item context value of a decision: `decision:` plus its options, for menu `when`s. */
export function decisionContext(d: Decision): string {
  const opts = d.kind === 'question' ? ['answer'] : d.options.map((o) => o.replace(/\s+/g, '-'));
  return `decision:${opts.join(',')}`;
}

/** The option that answers "approve" / "deny" for an inline button, if the decision has one. */
export function inlineChoice(d: Decision, which: 'approve' | 'deny'): string | undefined {
  return d.options.find((o) => o.toLowerCase() === which);
}

/** Settings as sent to the server (initializationOptions / workspace configuration `rein`). */
export interface ReinSettings {
  agent?: unknown;
  steer?: { onSave?: boolean };
  policy?: unknown;
  sandbox?: string;
}

/**
 * Builds the `rein` configuration object from explicitly set values only, so unset settings
 * leave `rein.toml` in force (the server ranks the editor's values above the file's).
 */
export function serverSettings(get: (key: string) => unknown): ReinSettings {
  const out: ReinSettings = {};
  const agent = get('agent');
  if (agent && typeof agent === 'object' && Object.keys(agent as object).length) out.agent = agent;
  const onSave = get('steer.onSave');
  if (typeof onSave === 'boolean') out.steer = { onSave };
  const policy = get('policy');
  if (policy && typeof policy === 'object' && Object.keys(policy as object).length) out.policy = policy;
  const sandbox = get('sandbox');
  if (typeof sandbox === 'string' && sandbox) out.sandbox = sandbox;
  return out;
}

export interface ResolveEnv {
  setting: string;
  workspaceRoot?: string;
  pathEnv?: string;
  extensionPath: string;
  home?: string;
  exists: (p: string) => boolean;
  platform?: string;
}

/**
 * Where the `rein` binary is: the setting, else `rein` on PATH, else the bundled `bin/rein`.
 * `found` says whether an executable is there, so a missing one is said before any spawn.
 */
export function resolveServerPath(env: ResolveEnv): { path: string; from: 'setting' | 'path' | 'bundled' | 'none'; found: boolean } {
  const sep = env.platform === 'win32' ? ';' : ':';
  const exe = env.platform === 'win32' ? 'rein.exe' : 'rein';
  const join = (a: string, b: string) => (a.endsWith('/') ? a + b : `${a}/${b}`);
  const onPath = (name: string) => (env.pathEnv ?? '').split(sep).filter(Boolean).map((dir) => join(dir, name)).find((p) => env.exists(p));
  let setting = env.setting.trim();
  if (setting) {
    if (setting.startsWith('~/') && env.home) setting = join(env.home, setting.slice(2));
    if (env.workspaceRoot) setting = setting.replace(/\$\{workspaceFolder\}/g, env.workspaceRoot);
    const absolute = setting.startsWith('/') || /^[A-Za-z]:[\\/]/.test(setting);
    if (!absolute && env.workspaceRoot && setting.includes('/')) {
      setting = join(env.workspaceRoot, setting);
    }
    // A bare name ("rein", "rein-dev") is looked up on PATH, as the spawn would.
    if (!absolute && !setting.includes('/')) return { path: setting, from: 'setting', found: !!onPath(setting) };
    return { path: setting, from: 'setting', found: env.exists(setting) };
  }
  const p = onPath(exe);
  if (p) return { path: p, from: 'path', found: true };
  const bundled = join(join(env.extensionPath, 'bin'), exe);
  if (env.exists(bundled)) return { path: bundled, from: 'bundled', found: true };
  return { path: exe, from: 'none', found: false };
}

/** How to get the server, said wherever a missing binary is reported (a toast shows no Markdown). */
export const INSTALL_HINT =
  'Install it: "cargo install --path server" in a Rein checkout puts rein on PATH; or build it ("cargo build --release") and set rein.serverPath to its target/release/rein.';

/** The message for a server binary that is not there, naming the setting and the fix. */
export function serverNotFoundText(resolved: { path: string; from: string }, setting: string): string {
  if (resolved.from === 'setting') {
    return `Rein: rein.serverPath is "${setting.trim()}", but there is no executable rein at ${resolved.path}. Correct the setting, or clear it to use rein from PATH. ${INSTALL_HINT}`;
  }
  return `Rein: no rein binary found: rein.serverPath is empty, rein is not on PATH and this extension has none bundled. ${INSTALL_HINT}`;
}

/** True when a server start failed because the executable is not there (or not executable). */
export function isNotFoundError(e: unknown): boolean {
  const m = `${(e as { message?: string })?.message ?? e} ${(e as { code?: string })?.code ?? ''}`;
  return /\b(ENOENT|EACCES)\b/.test(m);
}

/** A one-line description of a JSON-RPC error for a notification. */
export function errorMessage(command: string, err: unknown): { text: string; severity: 'warning' | 'error' } {
  const e = err as { code?: number; message?: string };
  const msg = e?.message ?? String(err);
  // -32803 RequestFailed: not legal now; the message says what to do instead.
  if (e?.code === -32803) return { text: msg, severity: 'warning' };
  if (e?.code === -32602) return { text: msg, severity: 'error' };
  return { text: `Rein: ${command} failed: ${msg}`, severity: 'error' };
}

/**
 * What to do with an open buffer whose file Rein says changed on disk. A clean buffer that
 * differs from the file is reloaded. A dirty one is left alone, unless its text is the file's
 * already: Rein wrote the person's unsaved text into the file, merged with the agent's, and
 * gave the buffer the result (`workspace/applyEdit`). Reverting that buffer loses nothing and
 * marks it saved, so a later save can neither say the file is newer nor write an older text
 * over it.
 */
export function onFileChanged(dirty: boolean, text: string, disk: string): 'reload' | 'markSaved' | 'leave' {
  if (dirty) return text === disk ? 'markSaved' : 'leave';
  return text === disk ? 'leave' : 'reload';
}

/** What a handback reported, for the notice after it: the files the person changed, and the
 *  submodules whose files changed (Rein names a submodule, it does not list its files). */
export function handbackNotice(reconcile: { changes?: unknown; submodules?: unknown } | null | undefined): string {
  const n = Array.isArray(reconcile?.changes) ? reconcile.changes.length : 0;
  const subs = Array.isArray(reconcile?.submodules) ? reconcile.submodules.filter((s): s is string => typeof s === 'string') : [];
  const inside = subs.length ? ` and the inside of submodule${subs.length === 1 ? '' : 's'} ${subs.join(', ')}` : '';
  return `Rein: handed back to the agent (${n} changed file${n === 1 ? '' : 's'}${inside} reported).`;
}

