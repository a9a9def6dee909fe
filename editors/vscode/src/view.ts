// The Rein view: goal and control, what the agent last said and is running, plan progress,
// steps with the agent's words and outcomes, steers, decisions, files you hold, and after an
// abort the agent's lines it kept. While there are worktree tasks, a "Tasks" group on top lists
// every task with its controls and the decisions it waits on. "History" at the end lists the
// working tree's tasks, newest first: each opens its transcript, and one that ended can be
// continued.

import * as vscode from 'vscode';
import {
  TaskState,
  Step,
  StepPart,
  OutputChunk,
  planRow,
  planSummary,
  stepTooltip,
  stepParts,
  stepFailed,
  firstLine,
  wrapRows,
  latestWords,
  NO_PLAN_PROGRESS,
  isActive,
  Decision,
  Constraint,
  AnsweredDecision,
  answeredLabel,
  constraintTooltip,
  stepIcon,
  stepRow,
  constraintIcon,
  constraintDescription,
  decisionContext,
  statusText,
  tooltipLines,
  lastStep,
  stepPages,
} from './model';
import {
  Tasks,
  TaskSummary,
  QueuedDecision,
  hasWorktreeTasks,
  taskCounts,
  taskLabel,
  taskDescription,
  taskTooltip,
  taskContext,
  statusIcon,
  PastTask,
  pastDescription,
  pastTooltip,
  pastContext,
} from './tasks';

type Group = 'plan' | 'steps' | 'constraints' | 'decisions' | 'held' | 'kept' | 'tasks' | 'history';

export type Node =
  | { kind: 'info'; id: string; label: string; description?: string; icon?: string; tooltip?: string }
  | { kind: 'group'; group: Group }
  | { kind: 'plan'; index: number }
  | { kind: 'step'; step: Step }
  | { kind: 'earlier' }
  | { kind: 'page'; start: number; end: number; first: number; last: number }
  | { kind: 'part'; step: Step; part: StepPart; index: number }
  | { kind: 'row'; id: string; text: string }
  | { kind: 'kept'; path: string; line: number; text: string }
  | { kind: 'constraint'; constraint: Constraint; index: number }
  | { kind: 'decision'; decision: Decision }
  | { kind: 'answered'; answered: AnsweredDecision; index: number }
  | { kind: 'held'; path: string }
  | { kind: 'task'; task: TaskSummary }
  | { kind: 'queued'; decision: QueuedDecision }
  | { kind: 'past'; past: PastTask }
  | { kind: 'taskInfo'; task: TaskSummary; id: string; label: string; description?: string; icon: string; tooltip?: string };

export class ReinTree implements vscode.TreeDataProvider<Node> {
  private readonly changed = new vscode.EventEmitter<Node | undefined>();
  readonly onDidChangeTreeData = this.changed.event;
  private state: TaskState | null = null;
  private running: OutputChunk | undefined;
  private tasks: Tasks | null = null;

  constructor(private readonly root: () => vscode.Uri | undefined) {}

  /** Redraws for this state, the command running now (from `rein/output`) and the task list. */
  update(state: TaskState | null, running?: OutputChunk, tasks?: Tasks | null): void {
    this.state = state;
    this.running = running;
    this.tasks = tasks ?? null;
    this.changed.fire(undefined);
  }

  /** The rows of the "Tasks" group and of each task in it. */
  private taskChildren(node?: Node): Node[] | undefined {
    const t = this.tasks;
    if (!hasWorktreeTasks(t)) return undefined;
    if (node?.kind === 'group' && node.group === 'tasks') return t.tasks.map((task) => ({ kind: 'task', task }));
    if (node?.kind !== 'task') return undefined;
    const s = t.tasks.find((x) => x.taskId === node.task.taskId) ?? node.task;
    const out: Node[] = t.decisions.filter((d) => d.taskId === s.taskId).map((decision) => ({ kind: 'queued', decision }));
    if (s.lastStep) out.push({ kind: 'taskInfo', task: s, id: 'last', label: s.lastStep, description: `step ${s.steps}`, icon: 'history', tooltip: `Its last step (${s.steps}): ${s.lastStep}` });
    // A waiting decision says why it stopped already (it is the row above).
    if (s.stopReason && s.status !== 'running' && !s.decisions?.length) out.push({ kind: 'taskInfo', task: s, id: 'stop', label: s.stopReason, icon: 'info', tooltip: s.stopReason });
    if (s.isolation === 'worktree') {
      out.push({
        kind: 'taskInfo',
        task: s,
        id: 'where',
        label: s.branch ?? 'worktree',
        description: s.worktree,
        icon: 'git-branch',
        tooltip: `Branch ${s.branch ?? '?'}, worktree ${s.worktree ?? '?'}.\nClick to open the worktree.`,
      });
    } else {
      out.push({ kind: 'taskInfo', task: s, id: 'where', label: 'in your working tree', icon: 'home', tooltip: 'This task runs here: its details are below.' });
    }
    return out;
  }

  /** Whether the history has a task to list. */
  private hasHistory(): boolean {
    return !!this.tasks?.history.length;
  }

  getChildren(node?: Node): Node[] {
    const fromTasks = this.taskChildren(node);
    if (fromTasks) return fromTasks;
    if (node?.kind === 'group' && node.group === 'history') return (this.tasks?.history ?? []).map((past) => ({ kind: 'past', past }));
    const s = this.state;
    if (!node && !s) {
      const top: Node[] = [];
      if (hasWorktreeTasks(this.tasks)) top.push({ kind: 'group', group: 'tasks' });
      if (this.hasHistory()) top.push({ kind: 'group', group: 'history' });
      return top;
    }
    if (!s) return [];
    if (!node) {
      const out: Node[] = [];
      if (hasWorktreeTasks(this.tasks)) out.push({ kind: 'group', group: 'tasks' });
      const st = statusText(s);
      out.push({
        kind: 'info',
        id: 'goal',
        label: s.task.goal,
        description: st.text.replace(/\$\([^)]*\)\s*/g, ''),
        icon: 'target',
        tooltip: tooltipLines(s).join('\n'),
      });
      // A continued task: the turn under way, in the person's words.
      const turn = s.turns?.length ? s.turns[s.turns.length - 1] : undefined;
      if (turn) {
        out.push({ kind: 'info', id: 'turn', label: `You: ${firstLine(turn.text)}`, description: `turn ${turn.n}`, icon: 'reply', tooltip: `Turn ${turn.n} of this task, from step ${turn.fromStep}: ${turn.text}\n\nClick for the whole transcript.` });
      }
      const holder = s.control.holder;
      out.push({
        kind: 'info',
        id: 'control',
        label: holder === 'human' ? 'You hold control' : holder === 'agent' ? 'The agent holds control' : 'Nobody holds control',
        description: s.control.reason,
        icon: holder === 'human' ? 'person' : holder === 'agent' ? 'hubot' : 'circle-slash',
        tooltip: `${s.control.reason}\nsince ${s.control.since}`,
      });
      const run = this.running;
      if (run && run.taskId === s.task.id) {
        out.push({
          kind: 'info',
          id: 'now',
          label: `Running ${run.command}`,
          description: `step ${run.step}${run.state === 'paused' ? ' · paused' : ''}`,
          icon: run.state === 'paused' ? 'debug-pause' : 'terminal',
          tooltip: `The agent is running \`${run.command}\` (step ${run.step})${run.state === 'paused' ? ', paused' : ''}.\nClick to follow its output.`,
        });
      }
      const said = latestWords(s);
      if (said?.message) {
        out.push({
          kind: 'info',
          id: 'said',
          label: firstLine(said.message),
          description: `the agent, before step ${said.n}`,
          icon: 'comment',
          tooltip: `The agent said, on its way to step ${said.n} (${said.action}):\n\n${said.message}\n\nClick for the whole transcript.`,
        });
      }
      // The control row already says why when control changed hands (taken over: the reason).
      const saidAlready = s.stopReason === s.control.reason;
      if (s.stopReason && !saidAlready && s.status !== 'running' && !(s.decisions ?? []).length && !(s.status === 'done' && s.summary)) {
        out.push({ kind: 'info', id: 'stop', label: s.stopReason, icon: 'info', tooltip: s.stopReason });
      }
      if (s.summary) {
        out.push({ kind: 'info', id: 'summary', label: s.summary, icon: 'note', tooltip: s.summary });
      }
      if ((s.decisions ?? []).length || (s.answered ?? []).length) out.push({ kind: 'group', group: 'decisions' });
      // Holding a file means something only while the task runs.
      if ((s.heldFiles ?? []).length && isActive(s)) out.push({ kind: 'group', group: 'held' });
      if ((s.keptAgentLines ?? []).some((k) => k.lines.length)) out.push({ kind: 'group', group: 'kept' });
      out.push({ kind: 'group', group: 'plan' });
      out.push({ kind: 'group', group: 'steps' });
      out.push({ kind: 'group', group: 'constraints' });
      if (this.hasHistory()) out.push({ kind: 'group', group: 'history' });
      return out;
    }
    if (node.kind === 'step') return stepParts(node.step).map((part, index) => ({ kind: 'part', step: node.step, part, index }));
    if (node.kind === 'part' && node.part.kind === 'thought') {
      return wrapRows(node.part.text).map((text, i) => ({ kind: 'row', id: `thought:${s.task.id}:${node.step.n}:${i}`, text }));
    }
    if (node.kind === 'earlier') return stepPages(s.steps ?? []).earlier.map((p) => ({ kind: 'page', ...p }));
    if (node.kind === 'page') {
      return (s.steps ?? []).slice(node.start, node.end).sort((a, b) => b.n - a.n).map((step) => ({ kind: 'step', step }));
    }
    if (node.kind !== 'group') return [];
    switch (node.group) {
      case 'plan': {
        const items: Node[] = (s.plan ?? []).map((_, index) => ({ kind: 'plan', index }));
        // Said instead of showing every item as pending when nothing says they are.
        if (items.length && !planSummary(s).progress) {
          items.unshift({ kind: 'info', id: 'noPlanProgress', label: NO_PLAN_PROGRESS, icon: 'info', tooltip: `${NO_PLAN_PROGRESS}: it gave a plan but does not say which items are done, so none is shown as done or pending.` });
        }
        return items;
      }
      case 'kept':
        return (s.keptAgentLines ?? []).flatMap((k) => k.lines.map((l) => ({ kind: 'kept' as const, path: k.path, line: l.line, text: l.text })));
      case 'steps': {
        // Newest first: the step being watched is at the top. A long task's older steps are in
        // pages, so each change redraws the newest ones only.
        const { recent, earlier } = stepPages(s.steps ?? []);
        const rows: Node[] = recent.map((step) => ({ kind: 'step', step }));
        if (earlier.length) rows.push({ kind: 'earlier' });
        return rows;
      }
      case 'constraints':
        return (s.constraints ?? []).map((constraint, index) => ({ kind: 'constraint', constraint, index }));
      case 'decisions': {
        // Open ones first, then the answered ones, newest first: what you said stays visible.
        const open: Node[] = (s.decisions ?? []).map((decision) => ({ kind: 'decision', decision }));
        const answered: Node[] = (s.answered ?? []).map((answered, index) => ({ kind: 'answered' as const, answered, index })).reverse();
        return [...open, ...answered];
      }
      case 'held':
        return (s.heldFiles ?? []).map((path) => ({ kind: 'held', path }));
      case 'tasks':
      case 'history':
        return [];
    }
  }

  getTreeItem(node: Node): vscode.TreeItem {
    const s = this.state;
    switch (node.kind) {
      case 'info': {
        const item = new vscode.TreeItem(node.label, vscode.TreeItemCollapsibleState.None);
        item.id = `info:${node.id}`;
        item.description = node.description;
        item.tooltip = node.tooltip;
        if (node.icon) item.iconPath = new vscode.ThemeIcon(node.icon);
        item.contextValue = `info:${node.id}`;
        if (node.id === 'goal' || node.id === 'control') {
          item.command = { command: 'rein.ui.menu', title: 'Controls' };
        }
        if (node.id === 'now') item.command = { command: 'rein.ui.output', title: 'Show the command output' };
        if (node.id === 'said' || node.id === 'turn') item.command = { command: 'rein.ui.transcript', title: 'Show the transcript' };
        return item;
      }
      case 'group':
        return this.groupItem(node.group, s);
      case 'plan': {
        const p = s?.plan?.[node.index] ?? { text: '' };
        const progress = s ? planSummary(s).progress : false;
        const row = planRow(p, progress);
        const item = new vscode.TreeItem(row.label, vscode.TreeItemCollapsibleState.None);
        item.id = `plan:${p.id || node.index}`;
        item.description = row.description || undefined;
        item.tooltip = row.tooltip;
        item.iconPath = new vscode.ThemeIcon(row.icon, progress && p.status === 'active' ? new vscode.ThemeColor('charts.blue') : progress && p.status === 'done' ? new vscode.ThemeColor('charts.green') : undefined);
        item.contextValue = p.editedByHuman ? 'plan:human' : 'plan';
        return item;
      }
      case 'step': {
        const st = node.step;
        const row = stepRow(st);
        const parts = stepParts(st);
        // A step that did not do what was asked opens on what the agent was told.
        const state = !parts.length
          ? vscode.TreeItemCollapsibleState.None
          : stepFailed(st) && st.detail
            ? vscode.TreeItemCollapsibleState.Expanded
            : vscode.TreeItemCollapsibleState.Collapsed;
        const item = new vscode.TreeItem(row.label, state);
        item.id = `step:${s?.task.id}:${st.n}`;
        item.description = row.description;
        item.iconPath = new vscode.ThemeIcon(stepIcon(st), stepFailed(st) && st.status !== 'skipped' ? new vscode.ThemeColor('errorForeground') : undefined);
        item.tooltip = stepTooltip(st, s?.plan ?? []);
        item.contextValue = st.checkpoint ? 'step:checkpoint' : 'step';
        if (st.checkpoint || st.output != null) item.command = { command: 'rein.ui.openStep', title: 'Open step', arguments: [st.n] };
        return item;
      }
      case 'part':
        return this.partItem(node.step, node.part, node.index);
      case 'earlier': {
        const pages = stepPages(s?.steps ?? []).earlier;
        const first = pages[pages.length - 1]?.first ?? 0;
        const last = pages[0]?.last ?? 0;
        const item = new vscode.TreeItem('Earlier steps', vscode.TreeItemCollapsibleState.Collapsed);
        item.id = `earlier:${s?.task.id}`;
        item.description = `${first}–${last}`;
        item.tooltip = `Steps ${first} to ${last}, in pages of ${pages.length ? pages[0].end - pages[0].start : 0}.`;
        item.iconPath = new vscode.ThemeIcon('history');
        return item;
      }
      case 'page': {
        const item = new vscode.TreeItem(`Steps ${node.first}–${node.last}`, vscode.TreeItemCollapsibleState.Collapsed);
        item.id = `page:${s?.task.id}:${node.start}`;
        item.description = `${node.end - node.start}`;
        item.iconPath = new vscode.ThemeIcon('list-ordered');
        return item;
      }
      case 'row': {
        const item = new vscode.TreeItem(node.text, vscode.TreeItemCollapsibleState.None);
        item.id = node.id;
        item.tooltip = node.text;
        return item;
      }
      case 'kept': {
        const item = new vscode.TreeItem(node.text.trim() || '(blank line)', vscode.TreeItemCollapsibleState.None);
        // `line` is 1-based (state.keptAgentLines).
        item.id = `kept:${node.path}:${node.line}`;
        item.description = `${node.path}:${node.line}`;
        item.iconPath = new vscode.ThemeIcon('warning', new vscode.ThemeColor('list.warningForeground'));
        item.tooltip = `${node.path}:${node.line}: ${node.text}\n\nThe agent wrote this line. The abort kept it because you edited inside the block it belongs to. Open it: the quick fix removes it.`;
        item.contextValue = 'kept';
        const root = this.root();
        if (root) {
          item.command = {
            command: 'vscode.open',
            title: 'Open',
            arguments: [vscode.Uri.joinPath(root, node.path), { selection: new vscode.Range(node.line - 1, 0, node.line - 1, 0) }],
          };
        }
        return item;
      }
      case 'constraint': {
        const c = node.constraint;
        const item = new vscode.TreeItem(c.text, vscode.TreeItemCollapsibleState.None);
        item.id = `constraint:${c.id || node.index}`;
        item.description = constraintDescription(c);
        item.iconPath = new vscode.ThemeIcon(constraintIcon(c));
        item.tooltip = constraintTooltip(c);
        item.contextValue = `constraint:${c.status ?? 'queued'}`;
        const root = this.root();
        if (c.location && root) {
          const uri = vscode.Uri.joinPath(root, c.location.path);
          const line = c.location.line;
          item.command = {
            command: 'vscode.open',
            title: 'Open',
            arguments: [uri, { selection: new vscode.Range(line, 0, c.location.endLine ?? line, 0) }],
          };
        }
        return item;
      }
      case 'decision': {
        const d = node.decision;
        const item = new vscode.TreeItem(d.question, vscode.TreeItemCollapsibleState.None);
        item.id = `decision:${d.id}`;
        item.description = d.kind === 'question' ? 'answer it' : d.options.join(' / ');
        item.iconPath = new vscode.ThemeIcon('question', new vscode.ThemeColor('list.warningForeground'));
        item.tooltip = `${d.id} (${d.kind.replace('_', ' ')}): ${d.question}${d.detail ? `\n\n${d.detail}` : ''}`;
        item.contextValue = decisionContext(d);
        item.command = { command: 'rein.ui.decide', title: 'Answer', arguments: [node] };
        return item;
      }
      case 'answered': {
        const a = node.answered;
        const item = new vscode.TreeItem(answeredLabel(a), vscode.TreeItemCollapsibleState.None);
        item.id = `answered:${a.id}:${node.index}`;
        item.description = a.id;
        const icon = a.choice === 'deny' || a.choice === 'abort' ? 'close' : a.choice === 'take over' ? 'person' : 'check';
        item.iconPath = new vscode.ThemeIcon(icon);
        item.tooltip = `${answeredLabel(a)}\n\n${a.question}${a.detail ? `\n\n${a.detail}` : ''}\n\nanswered by ${a.by === 'human' ? 'you' : a.by} at ${a.at}`;
        item.contextValue = 'answered';
        return item;
      }
      case 'task': {
        const t = node.task;
        const item = new vscode.TreeItem(taskLabel(t), t.decisions?.length ? vscode.TreeItemCollapsibleState.Expanded : vscode.TreeItemCollapsibleState.Collapsed);
        // A new id when a decision starts waiting, so the row opens on it (VS Code keeps the
        // collapsed state of an id it has drawn).
        item.id = `task:${t.taskId}${t.decisions?.length ? ':waiting' : ''}`;
        item.description = taskDescription(t);
        item.tooltip = taskTooltip(t);
        const tint = t.decisions?.length || t.status === 'awaiting_decision' ? 'list.warningForeground' : t.status === 'failed' ? 'errorForeground' : t.status === 'running' ? 'charts.blue' : undefined;
        item.iconPath = new vscode.ThemeIcon(statusIcon(t.decisions?.length ? 'awaiting_decision' : t.status), tint ? new vscode.ThemeColor(tint) : undefined);
        item.contextValue = taskContext(t);
        item.accessibilityInformation = { label: `${taskLabel(t)}, ${taskDescription(t)}` };
        return item;
      }
      case 'queued': {
        const d = node.decision;
        const item = new vscode.TreeItem(d.question, vscode.TreeItemCollapsibleState.None);
        item.id = `queued:${d.taskId}:${d.decisionId}`;
        item.description = d.options.length ? d.options.join(' / ') : 'answer it';
        item.iconPath = new vscode.ThemeIcon('question', new vscode.ThemeColor('list.warningForeground'));
        item.tooltip = `${d.decisionId}: ${d.question}\nasked ${d.since}\nClick to answer.`;
        item.contextValue = 'queued';
        item.command = { command: 'rein.ui.answerQueued', title: 'Answer', arguments: [d] };
        return item;
      }
      case 'past': {
        const p = node.past;
        const item = new vscode.TreeItem(p.goal, vscode.TreeItemCollapsibleState.None);
        item.id = `past:${p.taskId}`;
        item.description = `${p.current ? 'current · ' : ''}${pastDescription(p)}`;
        item.tooltip = pastTooltip(p);
        const tint = p.status === 'failed' ? 'errorForeground' : p.status === 'running' ? 'charts.blue' : undefined;
        item.iconPath = new vscode.ThemeIcon(statusIcon(p.status), tint ? new vscode.ThemeColor(tint) : undefined);
        item.contextValue = pastContext(p);
        item.accessibilityInformation = { label: `${p.goal}, ${item.description}` };
        item.command = { command: 'rein.ui.history.transcript', title: 'Show its transcript', arguments: [node] };
        return item;
      }
      case 'taskInfo': {
        const item = new vscode.TreeItem(node.label, vscode.TreeItemCollapsibleState.None);
        item.id = `taskInfo:${node.task.taskId}:${node.id}`;
        item.description = node.description;
        item.tooltip = node.tooltip;
        item.iconPath = new vscode.ThemeIcon(node.icon);
        item.contextValue = `taskInfo:${node.id}`;
        if (node.id === 'where' && node.task.isolation === 'worktree') {
          item.command = { command: 'rein.ui.task.open', title: 'Open the worktree', arguments: [{ kind: 'task', task: node.task }] };
        }
        return item;
      }
      case 'held': {
        const root = this.root();
        const uri = root ? vscode.Uri.joinPath(root, node.path) : undefined;
        const item = new vscode.TreeItem(node.path, vscode.TreeItemCollapsibleState.None);
        item.resourceUri = uri;
        item.iconPath = vscode.ThemeIcon.File;
        item.id = `held:${node.path}`;
        item.description = 'you hold it';
        item.tooltip = `You are editing ${node.path}: the agent's writes to it are held back until you hand it back.`;
        item.contextValue = 'heldFile';
        if (uri) item.command = { command: 'vscode.open', title: 'Open', arguments: [uri] };
        return item;
      }
    }
  }

  private partItem(st: Step, part: StepPart, index: number): vscode.TreeItem {
    const None = vscode.TreeItemCollapsibleState.None;
    let item: vscode.TreeItem;
    switch (part.kind) {
      case 'message':
        item = new vscode.TreeItem(firstLine(part.text, 300), None);
        item.description = 'the agent said';
        item.iconPath = new vscode.ThemeIcon('comment');
        item.tooltip = part.text;
        item.command = { command: 'rein.ui.transcript', title: 'Show the transcript' };
        break;
      case 'thought':
        // Collapsed: the agent's reasoning is there to read, not in the way.
        item = new vscode.TreeItem('Thought', vscode.TreeItemCollapsibleState.Collapsed);
        item.description = `${wrapRows(part.text).length} line(s), expand to read`;
        item.iconPath = new vscode.ThemeIcon('lightbulb');
        item.tooltip = part.text;
        break;
      case 'detail':
        item = new vscode.TreeItem(firstLine(part.text, 300), None);
        item.description = part.failed ? 'what the agent was told' : undefined;
        item.iconPath = new vscode.ThemeIcon(part.failed ? 'error' : 'info', part.failed ? new vscode.ThemeColor('errorForeground') : undefined);
        item.tooltip = part.failed ? `What the agent was told:\n\n${part.text}` : part.text;
        break;
      case 'output': {
        const lines = part.text ? part.text.split('\n').length - (part.text.endsWith('\n') ? 1 : 0) : 0;
        item = new vscode.TreeItem('Output', None);
        item.description = [part.exit, `${lines} line${lines === 1 ? '' : 's'}`].filter(Boolean).join(' · ');
        item.iconPath = new vscode.ThemeIcon('terminal');
        item.tooltip = `The end of the command's output. Click to open it.\n\n${part.text.slice(-1500)}`;
        item.command = { command: 'rein.ui.stepOutput', title: 'Show the output', arguments: [st.n] };
        break;
      }
      case 'diff':
        item = new vscode.TreeItem(part.path, None);
        item.description = `+${part.added} −${part.removed}`;
        item.iconPath = new vscode.ThemeIcon('diff');
        item.tooltip = `The agent said it changed ${part.path} (+${part.added} −${part.removed}). Click for what step ${st.n} changed there.`;
        item.command = { command: 'rein.ui.openStep', title: 'Open step diff', arguments: [st.n, part.path] };
        break;
      case 'location': {
        // An ACP tool location's line is 1-based.
        item = new vscode.TreeItem(`${part.path}${part.line != null ? `:${part.line}` : ''}`, None);
        item.description = 'where it acted';
        item.iconPath = new vscode.ThemeIcon('location');
        const root = this.root();
        if (root) {
          const line = Math.max(0, (part.line ?? 1) - 1);
          item.command = { command: 'vscode.open', title: 'Open', arguments: [vscode.Uri.joinPath(root, part.path), { selection: new vscode.Range(line, 0, line, 0) }] };
        }
        break;
      }
    }
    item.id = `step:${this.state?.task.id}:${st.n}:${part.kind}:${index}`;
    item.contextValue = `stepPart:${part.kind}`;
    return item;
  }

  private groupItem(group: Group, s: TaskState | null): vscode.TreeItem {
    const E = vscode.TreeItemCollapsibleState.Expanded;
    let item: vscode.TreeItem;
    switch (group) {
      case 'plan': {
        const sum = s ? planSummary(s) : undefined;
        item = new vscode.TreeItem('Plan', E);
        item.description = sum?.description ?? 'none yet';
        item.tooltip = sum?.total ? `Plan: ${sum.description}${sum.active ? `\nNow: ${sum.active.text}` : ''}${sum.progress ? '' : `\n${NO_PLAN_PROGRESS}.`}` : 'The agent gave no plan yet.';
        item.iconPath = new vscode.ThemeIcon('checklist');
        break;
      }
      case 'kept': {
        const n = (s?.keptAgentLines ?? []).reduce((m, k) => m + k.lines.length, 0);
        item = new vscode.TreeItem('Agent lines the abort kept', E);
        item.description = `${n}`;
        item.tooltip = 'Lines the agent wrote that stayed because you edited inside their block. Each has a quick fix that removes it.';
        item.iconPath = new vscode.ThemeIcon('warning');
        break;
      }
      case 'steps': {
        const n = s ? lastStep(s) : 0;
        item = new vscode.TreeItem('Steps', E);
        item.description = `${n}`;
        item.iconPath = new vscode.ThemeIcon('list-ordered');
        break;
      }
      case 'constraints': {
        const cs = s?.constraints ?? [];
        const queued = cs.filter((c) => c.status !== 'delivered').length;
        item = new vscode.TreeItem('Steers', E);
        item.description = cs.length ? `${cs.length}${queued ? `, ${queued} queued` : ''}` : 'none';
        item.iconPath = new vscode.ThemeIcon('comment-discussion');
        break;
      }
      case 'decisions': {
        const open = (s?.decisions ?? []).length;
        const answered = (s?.answered ?? []).length;
        item = new vscode.TreeItem('Decisions', E);
        item.description = [open ? `${open} open` : '', answered ? `${answered} answered` : ''].filter(Boolean).join(', ');
        item.iconPath = new vscode.ThemeIcon('question');
        break;
      }
      case 'tasks': {
        const t = this.tasks;
        const c = t ? taskCounts(t) : undefined;
        item = new vscode.TreeItem('Tasks', E);
        item.description = c ? `${c.running} running · ${c.waiting} waiting` : '';
        item.tooltip = 'Every task of this repository: the one here and those in worktrees. Hover a task for its controls; right-click for all of them.';
        item.iconPath = new vscode.ThemeIcon('layers');
        break;
      }
      case 'history': {
        const h = this.tasks?.history ?? [];
        // Collapsed while a task is shown above: it is there to go back to, not in the way.
        item = new vscode.TreeItem('History', s ? vscode.TreeItemCollapsibleState.Collapsed : E);
        item.description = `${h.length} task${h.length === 1 ? '' : 's'}`;
        item.tooltip = 'The tasks of this working tree, newest first. Click one to read its transcript; continue one that ended (the same agent conversation) from its row.';
        item.iconPath = new vscode.ThemeIcon('history');
        break;
      }
      case 'held':
        item = new vscode.TreeItem('Files you hold', E);
        item.description = `${(s?.heldFiles ?? []).length}`;
        item.iconPath = new vscode.ThemeIcon('lock');
        break;
    }
    item.id = `group:${group}`;
    item.contextValue = `${group}Group`;
    return item;
  }
}
