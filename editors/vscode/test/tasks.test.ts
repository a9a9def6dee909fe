// Unit tests of the task list's logic (several tasks at once; no VS Code needed): `npm test`.
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import {
  Tasks,
  TaskSummary,
  QueuedDecision,
  parseTasks,
  hasWorktreeTasks,
  taskCounts,
  tasksStatusText,
  taskDescription,
  taskContext,
  taskControls,
  decisionQueue,
  queueRow,
  startChoices,
  landSummary,
  PastTask,
  ago,
  pastDescription,
  pastTooltip,
  pastContext,
  currentPast,
  startOrContinue,
} from '../src/tasks';

function task(over: Partial<TaskSummary> = {}): TaskSummary {
  return {
    taskId: 't1',
    name: 'task 1',
    goal: 'add a farewell',
    status: 'running',
    holder: 'agent',
    isolation: 'worktree',
    branch: 'rein/t1',
    worktree: '/wt/t1',
    plan: [1, 3],
    steps: 4,
    decisions: [],
    ...over,
  };
}

function queued(over: Partial<QueuedDecision> = {}): QueuedDecision {
  return { taskId: 't2', task: 'task 2', decisionId: 'd1', question: 'task 2: The agent wants to run `git tag v1`', options: ['approve', 'deny'], since: '2026-12-06T10:00:00Z', ...over };
}

test('parseTasks takes a rein/tasks notification and refuses what is not one', () => {
  const t = parseTasks({ tasks: [task(), { nonsense: true }], decisions: [queued()] });
  assert.equal(t?.tasks.length, 1);
  assert.equal(t?.decisions.length, 1);
  assert.equal(parseTasks({ state: null }), null);
  assert.equal(parseTasks(null), null);
});

test('only worktree tasks make the view list tasks (a single task here stays as it was)', () => {
  assert.equal(hasWorktreeTasks({ tasks: [task({ isolation: 'none', name: 'here' })], decisions: [], history: [] }), false);
  assert.equal(hasWorktreeTasks({ tasks: [task()], decisions: [], history: [] }), true);
  assert.equal(hasWorktreeTasks(null), false);
});

test('the status bar counts running tasks and waiting decisions across tasks', () => {
  const t: Tasks = {
    tasks: [task(), task({ taskId: 't2', name: 'task 2', status: 'awaiting_decision', decisions: ['d1'] }), task({ taskId: 't3', name: 'task 3', status: 'starting' }), task({ taskId: 't4', name: 'task 4', status: 'paused' })],
    decisions: [queued()],
    history: [],
  };
  assert.deepEqual(taskCounts(t), { running: 2, paused: 1, human: 0, waiting: 1 });
  const st = tasksStatusText(t);
  assert.equal(st.text, '$(bell-dot) Rein: 2 running · 1 paused · 1 waiting');
  assert.equal(st.tone, 'warning');
  assert.ok(st.tooltip.some((l) => l.startsWith('task 2: add a farewell — waiting for you')));
  const quiet = tasksStatusText({ tasks: [task()], decisions: [], history: [] });
  assert.equal(quiet.text, '$(sync~spin) Rein: 1 running · 0 waiting');
  assert.equal(quiet.tone, 'normal');
});

test('a task row says status, holder, plan x/y and how many decisions wait', () => {
  assert.equal(taskDescription(task()), 'running · plan 1/3');
  assert.equal(taskDescription(task({ status: 'awaiting_decision', decisions: ['d1', 'd2'] })), 'waiting for you · plan 1/3 · 2 waiting');
  assert.equal(taskDescription(task({ status: 'human', holder: 'human' })), 'you hold it · plan 1/3');
  assert.equal(taskDescription(task({ plan: [0, 0], steps: 1 })), 'running · 1 step');
});

test('a task row\'s context value carries status, holder, isolation and waiting decisions for the menus', () => {
  assert.equal(taskContext(task()), 'task:running:agent:worktree');
  assert.equal(taskContext(task({ status: 'paused', decisions: ['d1'] })), 'task:paused:agent:worktree:decisions');
  assert.equal(taskContext(task({ isolation: 'none' })), 'task:running:agent:none');
});

test('land is offered only once a worktree task stands still; discard for any worktree task', () => {
  assert.deepEqual(taskControls(task()), ['pause', 'steer', 'takeover', 'abort', 'transcript', 'open', 'discard']);
  assert.deepEqual(taskControls(task({ status: 'paused' })), ['resume', 'steer', 'takeover', 'abort', 'transcript', 'land', 'open', 'discard']);
  assert.deepEqual(taskControls(task({ status: 'done' })), ['transcript', 'land', 'open', 'discard']);
  assert.deepEqual(taskControls(task({ status: 'awaiting_decision', decisions: ['d1'] }))[0], 'decide');
  assert.deepEqual(taskControls(task({ status: 'human', holder: 'human' })).slice(0, 1), ['handback']);
  // The task here has no worktree: neither land nor discard.
  assert.deepEqual(taskControls(task({ isolation: 'none' })), ['pause', 'steer', 'takeover', 'abort', 'transcript']);
});

test('the decision queue is oldest first and each row names its task', () => {
  const q = decisionQueue({ tasks: [], decisions: [queued({ decisionId: 'd9', since: '2026-12-06T10:05:00Z' }), queued({ taskId: 't3', task: 'task 3', question: 'Keep the old API?', options: [], since: '2026-12-06T10:01:00Z' })], history: [] });
  assert.deepEqual(q.map((d) => d.task), ['task 3', 'task 2']);
  const row = queueRow(q[0], Date.parse('2026-12-06T10:03:00Z'));
  assert.equal(row.label, 'task 3: Keep the old API?');
  assert.equal(row.description, 'answer it');
  assert.match(row.detail, /asked 2 min ago/);
  assert.equal(queueRow(q[1], Date.parse('2026-12-06T10:05:30Z')).label, 'task 2: The agent wants to run `git tag v1`');
});

test('Start Task offers here only while no task runs here', () => {
  assert.deepEqual(startChoices(false).map((c) => c.id), ['here', 'worktree', 'carry']);
  assert.deepEqual(startChoices(true).map((c) => c.id), ['worktree', 'carry']);
});

test('a land report says what came over and flags what waits on the person', () => {
  const plain = landSummary('task 1', { taskId: 't1', applied: ['a', 'b'], merged: [], already: [], overlaps: [], unsaved: [], failed: [], removed: true });
  assert.equal(plain.text, 'Rein: landed task 1 as uncommitted changes: 2 files applied; its worktree and branch are removed.');
  assert.equal(plain.attention, false);
  const hard = landSummary('task 2', { taskId: 't2', applied: [], merged: ['m'], overlaps: [{ path: 'src/x.py', decisionId: 'd3' }], unsaved: ['u.txt'], commit: 'abcdef0123', removed: false });
  assert.equal(hard.attention, true);
  assert.match(hard.text, /as commit abcdef01: 1 merged with yours, 1 overlap kept as yours and asked \(src\/x\.py\), 1 with unsaved edits left alone \(u\.txt\); its worktree is kept\./);
  assert.match(landSummary('task 3', { taskId: 't3' }).text, /nothing to bring over/);
});

function past(over: Partial<PastTask> = {}): PastTask {
  return { taskId: '20261206-100000-aaaa', goal: 'add a farewell', status: 'done', started: '2026-12-06T10:00:00Z', updated: '2026-12-06T10:05:00Z', steps: 4, turns: 1, canContinue: true, current: false, ...over };
}

test('the history comes with rein.tasks; a rein/tasks notification (without it) keeps the one held', () => {
  const first = parseTasks({ tasks: [], decisions: [], history: [past(), past({ taskId: 'x', current: true }), { nonsense: true }] });
  assert.deepEqual(first?.history.map((p) => p.taskId), ['20261206-100000-aaaa', 'x']);
  assert.equal(currentPast(first)?.taskId, 'x');
  const next = parseTasks({ tasks: [task()], decisions: [] }, first);
  assert.equal(next?.history.length, 2);
  assert.deepEqual(parseTasks({ tasks: [], decisions: [] })?.history, []);
  // A newer list replaces the history, even an empty one.
  assert.deepEqual(parseTasks({ tasks: [], decisions: [], history: [] }, first)?.history, []);
});

test('a history row says status, when, steps and turns (turns only past the first)', () => {
  const now = Date.parse('2026-12-06T10:17:00Z');
  assert.equal(pastDescription(past(), now), 'done · 12 min ago · 4 steps');
  assert.equal(pastDescription(past({ status: 'aborted', turns: 3, steps: 1 }), now), 'aborted · 12 min ago · 1 step · 3 turns');
  assert.equal(pastDescription(past({ updated: undefined }), now), 'done · 17 min ago · 4 steps');
  assert.equal(ago('2026-12-04T10:00:00Z', now), '2 days ago');
  assert.equal(ago('not a time', now), '');
});

test('a history row\'s tooltip and context say whether it can be continued', () => {
  assert.equal(pastContext(past()), 'past:done:continue');
  assert.equal(pastContext(past({ canContinue: false, current: true })), 'past:done:current');
  assert.equal(pastContext(past({ status: 'running', canContinue: false, current: true })), 'past:running:current');
  assert.match(pastTooltip(past({ lastTurn: 'now add tests' })), /Your last follow-up: now add tests/);
  assert.match(pastTooltip(past()), /Continue it/);
  assert.match(pastTooltip(past({ canContinue: false })), /takes no further turn/);
});

test('Start Task offers to continue an ended task whose agent takes a turn, else goes straight on', () => {
  assert.deepEqual(startOrContinue('add a farewell', 'done', true)?.map((c) => c.id), ['continue', 'new']);
  assert.match(startOrContinue('add a farewell', 'aborted', undefined)![0].label, /Continue: add a farewell/);
  assert.equal(startOrContinue('add a farewell', 'done', false), undefined);
  assert.equal(startOrContinue('add a farewell', 'running', true), undefined);
});
