// Unit tests of the transcript's HTML (no VS Code needed): `npm test`.
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { Entry, TranscriptRenderer, renderHead, esc, clock } from '../src/transcript';
import { TaskState } from '../src/model';

const at = '2025-01-01T12:03:04Z';

/** A task told as the server tells it: the story a person away for ten minutes reads. */
const story: Entry[] = [
  { kind: 'goal', at, text: 'Add a <farewell>' },
  { kind: 'plan', at, by: 'agent', progress: true, items: [{ id: 'p1', text: 'Read', status: 'active' }, { id: 'p2', text: 'Write', status: 'pending' }] },
  { kind: 'message', at, step: 1, text: 'First I read how greet() is written.', thought: 'the file is short' },
  { kind: 'tool', at, step: 1, title: 'read src/greet.py', status: 'done', planItem: 'p1', checkpoint: 'aaa', files: [] },
  { kind: 'plan', at, by: 'agent', progress: true, items: [{ id: 'p1', text: 'Read', status: 'done' }, { id: 'p2', text: 'Write', status: 'active' }] },
  { kind: 'tool', at, step: 2, title: 'write .GIT/config', status: 'failed', detail: 'path ".GIT/config" refused: it is the repository\'s own', files: [] },
  { kind: 'tool', at, step: 3, title: 'write src/farewell.py', status: 'done', planItem: 'p2', checkpoint: 'bbb', files: [{ path: 'src/farewell.py', kind: 'added', added: 2, removed: 0 }] },
  { kind: 'steer', at, id: 'c1', text: 'keep greet() plain', urgent: false, source: 'command' },
  { kind: 'steer', at, id: 'c2', text: 'say which check', location: { path: 'check.sh', line: 2 }, urgent: true, source: 'comment' },
  { kind: 'delivered', at, step: 4, ids: ['c1', 'c2'] },
  { kind: 'tool', at, step: 4, title: 'run ./test.sh', status: 'done', detail: 'exit code 0', checkpoint: 'bbb', files: [] },
  { kind: 'output', at, step: 4, command: './test.sh', text: 'test 1 ok\ntest 2 ok\n', truncated: false },
  { kind: 'control', at, what: 'taken_over', text: 'taken over by the user: I want to add a helper myself' },
  { kind: 'human', at, step: 5, title: 'your changes while holding control: src/greet.py', checkpoint: 'ccc', files: [{ path: 'src/greet.py', kind: 'modified', added: 3, removed: 0 }] },
  { kind: 'control', at, what: 'handed_back', text: 'handed back to the agent, with the note: carry on' },
  { kind: 'decision', at, id: 'd1', decisionKind: 'approve_command', question: 'Run `git tag v1`?', options: ['approve', 'deny'], detail: 'git tag v1' },
  { kind: 'answer', at, id: 'd1', choice: 'deny', by: 'human' },
  { kind: 'end', at, status: 'done', text: 'Added farewell().' },
];

function renderAll(entries: Entry[]): string[] {
  const r = new TranscriptRenderer();
  return entries.map((e) => r.render(e));
}

test('every entry is rendered, in order, one list item each', () => {
  const html = renderAll(story);
  assert.equal(html.length, story.length);
  for (const h of html) assert.match(h, /^<li class="entry [^"]+"[^>]*>.*<\/li>$/s);
});

test('text is escaped everywhere', () => {
  assert.equal(esc('<a href="x">&\'</a>'), '&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;');
  const [goal] = renderAll([story[0]]);
  assert.match(goal, /Add a &lt;farewell&gt;/);
  assert.doesNotMatch(goal, /<farewell>/);
  const [evil] = renderAll([{ kind: 'message', at: null, step: 1, text: '<script>alert(1)</script>' }]);
  assert.doesNotMatch(evil, /<script>/);
});

test('the agent\'s words, its thought collapsed', () => {
  const html = renderAll(story)[2];
  assert.match(html, /class="entry agent"/);
  assert.match(html, /First I read how greet\(\) is written\./);
  assert.match(html, /<details class="thought"><summary>Thought<\/summary>/);
  assert.doesNotMatch(html, /<details[^>]* open/);
});

test('tool calls: status, plan item, refusal in the words the agent got, files that open the step diff', () => {
  const html = renderAll(story);
  assert.match(html[3], /Step 1<\/span> <span class="title">read src\/greet\.py<\/span>/);
  assert.match(html[3], /for “Read”/);
  assert.match(html[5], /class="entry tool failed"/);
  assert.match(html[5], /What the agent was told:<\/span><pre>path &quot;\.GIT\/config&quot; refused: it is the repository&#39;s own<\/pre>/);
  assert.match(html[5], />failed</);
  assert.match(html[6], /data-action="openStep" data-step="3" data-path="src\/farewell\.py"/);
  assert.match(html[6], /\+2<\/span> <span class="del">−0/);
  assert.match(html[6], /<button[^>]*data-action="openStep" data-step="3"[^>]*>write src\/farewell\.py<\/button>/);
});

test('plan moves say what moved and how far along it is', () => {
  const html = renderAll(story);
  assert.match(html[1], /The agent’s plan/);
  assert.match(html[1], /0\/2 done/);
  assert.match(html[4], /done: Read · now: Write/);
  assert.match(html[4], /1\/2 done/);
  const [, noProgress] = renderAll([
    story[0],
    { kind: 'plan', at: null, by: 'agent', progress: false, items: [{ id: 'p1', text: 'Read', status: 'pending' }] },
  ]);
  assert.match(noProgress, /The agent reports no plan progress/);
  assert.doesNotMatch(noProgress, /pending/);
  const [, , human] = renderAll([
    story[0],
    story[1],
    { kind: 'plan', at: null, by: 'human', progress: true, items: [{ id: 'p1', text: 'Read it all', status: 'active', editedByHuman: true }] },
  ]);
  assert.match(human, /You edited the plan/);
  assert.match(human, /edited by you/);
});

test('steers, delivery, output collapsed, control, the human\'s step, decisions and answers, the end', () => {
  const html = renderAll(story);
  assert.match(html[7], /class="entry you steer"/);
  assert.match(html[7], /keep greet\(\) plain/);
  assert.match(html[8], /about <button[^>]*data-action="openFile" data-path="check\.sh" data-line="2">check\.sh:3<\/button>/);
  assert.match(html[8], /urgent/);
  assert.match(html[8], /a rein: comment/);
  assert.match(html[9], /c1 \(“keep greet\(\) plain”\), c2 \(“say which check”\) before step 4/);
  assert.match(html[11], /<details><summary>Output of <code>\.\/test\.sh<\/code> <span class="muted">step 4 · exit 0 · 2 lines<\/span><\/summary><pre class="out">test 1 ok\ntest 2 ok\n<\/pre><\/details>/);
  assert.match(html[12], /class="entry control c-taken_over"/);
  assert.match(html[12], />Taken over by the user: I want to add a helper myself</);
  assert.match(html[13], /class="entry you-step"/);
  assert.match(html[13], /data-path="src\/greet\.py"/);
  assert.match(html[14], />Handed back to the agent, with the note: carry on</);
  assert.match(html[15], /Rein<\/span> stopped for you/);
  assert.match(html[15], /Answers: approve \/ deny/);
  assert.match(html[16], /deny — `git tag v1` is not run/);
  assert.match(html[17], /class="entry end e-done"/);
  assert.match(html[17], /Added farewell\(\)\./);
});

test('times are local clock times with the instant in datetime', () => {
  assert.equal(clock(null), '');
  assert.equal(clock('not a time'), '');
  assert.match(clock(at), /^\d\d:\d\d:\d\d$/);
  assert.match(renderAll([story[0]])[0], /<time datetime="2025-01-01T12:03:04Z">\d\d:\d\d:\d\d<\/time>/);
});

test('the head: goal, where the run is, the plan, what waits for you', () => {
  const s: TaskState = {
    version: 1,
    task: { id: 't', goal: 'Add a <farewell>', started: at },
    status: 'awaiting_decision',
    control: { holder: 'agent', since: at, reason: 'started' },
    plan: [{ id: 'p1', text: 'Read', status: 'done' }, { id: 'p2', text: 'Write', status: 'active' }],
    planProgress: true,
    decisions: [{ id: 'd1', kind: 'approve_command', question: 'Run `git tag v1`?', options: ['approve', 'deny'] }],
  };
  const head = renderHead(s);
  assert.match(head, /<h1>Add a &lt;farewell&gt;<\/h1>/);
  assert.match(head, /Paused: needs approval/);
  // Waiting for approval, the agent is not at "Write": the head says what it waits on instead.
  assert.match(head, /Plan 1\/2 done</);
  assert.doesNotMatch(head, /now: Write/);
  assert.match(head, /Waiting for you: Run `git tag v1`\?/);
  assert.match(renderHead({ ...s, status: 'running', decisions: [] }), /Plan 1\/2 done — now: Write/);
  assert.match(renderHead(null), /No Rein task/);
});

test('an ACP tool call shows its kind and where it acted (1-based lines)', () => {
  const [html] = renderAll([
    { kind: 'tool', at: null, step: 7, title: 'Edit a.rs', status: 'done', files: [], tool: { id: 't1', kind: 'edit', locations: [{ path: 'a.rs', line: 5 }, { path: 'b.rs' }] } },
  ]);
  assert.match(html, /<span class="muted">edit · a\.rs:5, b\.rs<\/span>/);
});

test('a follow-up is the person speaking again: "You:" with its text, the report of their changes folded', () => {
  const [turn, bare] = renderAll([
    { kind: 'turn', at, turn: 2, step: 7, text: 'now add <tests>', report: '# What you changed\n\n- src/greet.py' },
    { kind: 'turn', at, turn: 3, step: 9, text: 'and a README line', report: null },
  ]);
  assert.match(turn, /^<li class="entry you turn" data-turn="2">/);
  assert.match(turn, /<span class="who">You:<\/span> <span class="muted">turn 2, from step 7<\/span>/);
  assert.match(turn, /now add &lt;tests&gt;/);
  assert.match(turn, /<details class="report"><summary>Your changes since its last turn, as the agent was told<\/summary><pre class="detail"># What you changed/);
  assert.doesNotMatch(turn, /<details[^>]* open/);
  assert.doesNotMatch(bare, /<details/);
  assert.match(bare, /turn 3, from step 9/);
});

test('the head names the turn under way once the task was continued', () => {
  const base = { version: 1, task: { id: 't', goal: 'g', started: at }, status: 'running', control: { holder: 'agent', since: at, reason: '' } } as TaskState;
  assert.doesNotMatch(renderHead(base), /turn/);
  assert.match(renderHead({ ...base, turns: [{ n: 2, text: 'now add <tests>', at, fromStep: 5 }] }), /turn 2: now add &lt;tests&gt;/);
});
