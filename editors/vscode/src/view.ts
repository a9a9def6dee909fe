// The Rein view: goal and control, plan, steps, steers, open decisions, files you hold.

import * as vscode from 'vscode';
import {
  TaskState,
  Step,
  Decision,
  Constraint,
  AnsweredDecision,
  answeredLabel,
  constraintTooltip,
  planIcon,
  stepIcon,
  stepRow,
  constraintIcon,
  constraintDescription,
  decisionContext,
  statusText,
  tooltipLines,
  lastStep,
} from './model';

type Group = 'plan' | 'steps' | 'constraints' | 'decisions' | 'held';

export type Node =
  | { kind: 'info'; id: string; label: string; description?: string; icon?: string; tooltip?: string }
  | { kind: 'group'; group: Group }
  | { kind: 'plan'; index: number }
  | { kind: 'step'; step: Step }
  | { kind: 'constraint'; constraint: Constraint; index: number }
  | { kind: 'decision'; decision: Decision }
  | { kind: 'answered'; answered: AnsweredDecision; index: number }
  | { kind: 'held'; path: string };

export class ReinTree implements vscode.TreeDataProvider<Node> {
  private readonly changed = new vscode.EventEmitter<Node | undefined>();
  readonly onDidChangeTreeData = this.changed.event;
  private state: TaskState | null = null;

  constructor(private readonly root: () => vscode.Uri | undefined) {}

  update(state: TaskState | null): void {
    this.state = state;
    this.changed.fire(undefined);
  }

  getChildren(node?: Node): Node[] {
    const s = this.state;
    if (!s) return [];
    if (!node) {
      const out: Node[] = [];
      const st = statusText(s);
      out.push({
        kind: 'info',
        id: 'goal',
        label: s.task.goal,
        description: st.text.replace(/\$\([^)]*\)\s*/g, ''),
        icon: 'target',
        tooltip: tooltipLines(s).join('\n'),
      });
      const holder = s.control.holder;
      out.push({
        kind: 'info',
        id: 'control',
        label: holder === 'human' ? 'You hold control' : holder === 'agent' ? 'The agent holds control' : 'Nobody holds control',
        description: s.control.reason,
        icon: holder === 'human' ? 'person' : holder === 'agent' ? 'hubot' : 'circle-slash',
        tooltip: `${s.control.reason}\nsince ${s.control.since}`,
      });
      // The control row already says why when control changed hands (taken over: the reason).
      const said = s.stopReason === s.control.reason;
      if (s.stopReason && !said && s.status !== 'running' && !(s.decisions ?? []).length && !(s.status === 'done' && s.summary)) {
        out.push({ kind: 'info', id: 'stop', label: s.stopReason, icon: 'info', tooltip: s.stopReason });
      }
      if (s.summary) {
        out.push({ kind: 'info', id: 'summary', label: s.summary, icon: 'note', tooltip: s.summary });
      }
      if ((s.decisions ?? []).length || (s.answered ?? []).length) out.push({ kind: 'group', group: 'decisions' });
      if ((s.heldFiles ?? []).length) out.push({ kind: 'group', group: 'held' });
      out.push({ kind: 'group', group: 'plan' });
      out.push({ kind: 'group', group: 'steps' });
      out.push({ kind: 'group', group: 'constraints' });
      return out;
    }
    if (node.kind !== 'group') return [];
    switch (node.group) {
      case 'plan':
        return (s.plan ?? []).map((_, index) => ({ kind: 'plan', index }));
      case 'steps':
        // Newest first: the step being watched is at the top.
        return [...(s.steps ?? [])].sort((a, b) => b.n - a.n).map((step) => ({ kind: 'step', step }));
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
        return item;
      }
      case 'group':
        return this.groupItem(node.group, s);
      case 'plan': {
        const p = s?.plan?.[node.index];
        const item = new vscode.TreeItem(p?.text ?? '', vscode.TreeItemCollapsibleState.None);
        item.id = `plan:${p?.id || node.index}`;
        item.description = p?.status && p.status !== 'pending' ? p.status : undefined;
        item.tooltip = `${p?.text ?? ''}${p?.status ? `\n${p.status}` : ''}`;
        item.iconPath = new vscode.ThemeIcon(planIcon(p?.status), p?.status === 'active' ? new vscode.ThemeColor('charts.blue') : undefined);
        item.contextValue = 'plan';
        return item;
      }
      case 'step': {
        const st = node.step;
        const row = stepRow(st);
        const item = new vscode.TreeItem(row.label, vscode.TreeItemCollapsibleState.None);
        item.id = `step:${st.n}`;
        item.description = row.description;
        item.iconPath = new vscode.ThemeIcon(stepIcon(st));
        item.tooltip = `Step ${st.n} by ${st.author}: ${st.action}\nstatus: ${st.status}${st.checkpoint ? `\ncheckpoint: ${st.checkpoint}\nClick to see what this step changed.` : ''}`;
        item.contextValue = st.checkpoint ? 'step:checkpoint' : 'step';
        if (st.checkpoint) item.command = { command: 'rein.ui.openStep', title: 'Open step diff', arguments: [st.n] };
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

  private groupItem(group: Group, s: TaskState | null): vscode.TreeItem {
    const E = vscode.TreeItemCollapsibleState.Expanded;
    let item: vscode.TreeItem;
    switch (group) {
      case 'plan': {
        const plan = s?.plan ?? [];
        const done = plan.filter((p) => p.status === 'done' || p.status === 'skipped').length;
        item = new vscode.TreeItem('Plan', E);
        item.description = plan.length ? `${done}/${plan.length}` : 'none yet';
        item.iconPath = new vscode.ThemeIcon('checklist');
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
