// Unit tests of the pure logic (no VS Code needed): `npm test`.
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import {
  TaskState,
  Step,
  statusText,
  legalControls,
  checkpointChoices,
  stepRange,
  parseNameStatus,
  serverSettings,
  resolveServerPath,
  serverNotFoundText,
  isNotFoundError,
  onFileChanged,
  decisionContext,
  inlineChoice,
  constraintDescription,
  stepRow,
  stepIcon,
  constraintIcon,
  constraintTooltip,
  steerPrompt,
  answeredLabel,
  errorMessage,
  isActive,
  tooltipLines,
  sandboxLine,
  planSummary,
  planRow,
  stepTooltip,
  stepParts,
  wrapRows,
  latestWords,
  stepPages,
  exitText,
  OutputFollower,
  OutputChunk,
  NO_PLAN_PROGRESS,
  handbackNotice,
} from '../src/model';

function mk(over: Partial<TaskState> = {}): TaskState {
  return {
    version: 3,
    task: { id: 't1', goal: 'add a greeting', started: '2025-01-01T00:00:00Z' },
    status: 'running',
    control: { holder: 'agent', since: '2025-01-01T00:00:00Z', reason: 'started' },
    steps: [],
    plan: [],
    constraints: [],
    decisions: [],
    heldFiles: [],
    ...over,
  };
}

const steps = [
  { n: 1, action: 'read README.md', author: 'agent' as const, status: 'done' as const, checkpoint: 'aaaa1111' },
  { n: 2, action: 'write src/a.txt', author: 'agent' as const, status: 'done' as const, checkpoint: 'bbbb2222' },
  { n: 3, action: 'run make', author: 'agent' as const, status: 'done' as const, checkpoint: 'bbbb2222' },
  { n: 4, action: 'your edits', author: 'human' as const, status: 'done' as const, checkpoint: 'cccc3333' },
  { n: 5, action: 'run deploy', author: 'agent' as const, status: 'rolled_back' as const, checkpoint: null },
];

test('status text: "no task" only once the server is up; starting, stopped and not found say so', () => {
  assert.equal(statusText(null).text, '$(circle-outline) Rein: no task');
  assert.equal(statusText(null, 'starting').text, '$(loading~spin) Rein: starting');
  assert.equal(statusText(mk(), 'starting').text, '$(loading~spin) Rein: starting');
  assert.equal(statusText(null, 'stopped').text, '$(circle-slash) Rein: server stopped');
  assert.equal(statusText(null, 'stopped').tone, 'error');
  assert.equal(statusText(null, 'missing').text, '$(error) Rein: rein not found');
  assert.match(statusText(null, 'missing').tooltip.join(' '), /rein\.serverPath/);
  assert.equal(statusText(null, 'missing').tone, 'error');
});

test('status text: running shows the step being worked on', () => {
  const s = mk({ steps: steps.slice(0, 4).map((x) => ({ ...x })) });
  const st = statusText(s);
  assert.equal(st.text, '$(sync~spin) Agent running · step 5');
  assert.equal(st.tone, 'normal');
  assert.equal(statusText(mk()).text, '$(sync~spin) Agent running · step 1');
});

test('status text: a stop queued behind an approved command says so at once', () => {
  const s = mk({ queuedStop: { intent: 'take over', behind: 'git push origin main', since: '' } });
  const st = statusText(s);
  assert.equal(st.text, '$(watch) Take over queued behind `git push origin main`');
  assert.equal(st.tone, 'warning');
  assert.ok(st.tooltip.some((l) => l.includes('lands when `git push origin main` ends')));
});

test('status text: paused, interrupted, decisions', () => {
  // The step it stopped in, as running says it (steps 1 and 2 done: paused in step 3).
  assert.equal(statusText(mk({ status: 'running', steps: steps.slice(0, 2) })).text, '$(sync~spin) Agent running · step 3');
  assert.equal(statusText(mk({ status: 'paused', steps: steps.slice(0, 2) })).text, '$(debug-pause) Paused · step 3');
  assert.equal(statusText(mk({ status: 'paused', stopReason: 'interrupted: rein stopped' })).text, '$(debug-pause) Paused: interrupted · step 1');
  const d = (kind: any) => mk({ status: 'awaiting_decision', decisions: [{ id: 'd1', kind, question: 'Run ./deploy.sh?', options: ['approve', 'deny'] }] });
  assert.equal(statusText(d('approve_command')).text, '$(debug-pause) Paused: needs approval');
  assert.equal(statusText(d('question')).text, '$(debug-pause) Paused: agent asks you');
  assert.equal(statusText(d('merge_conflict')).text, '$(debug-pause) Paused: merge conflict');
  assert.equal(statusText(d('held_file')).text, '$(debug-pause) Paused: needs a file you hold');
  assert.equal(statusText(d('approve_command')).tone, 'warning');
  assert.equal(statusText(mk({ status: 'awaiting_decision' })).text, '$(debug-pause) Paused: needs your decision');
});

test('status text: human and terminal states', () => {
  assert.equal(statusText(mk({ status: 'human', control: { holder: 'human', since: '', reason: 'taken over' } })).text, '$(person) You hold control');
  assert.equal(statusText(mk({ status: 'done', steps: steps.slice(0, 1) })).text, '$(check) Agent done · 1 step');
  assert.equal(statusText(mk({ status: 'done', steps })).text, '$(check) Agent done · 5 steps');
  assert.equal(statusText(mk({ status: 'aborted' })).text, '$(circle-slash) Task aborted');
  assert.equal(statusText(mk({ status: 'failed' })).tone, 'error');
});

test('tooltip names control, plan progress, queued steers and held files', () => {
  const lines = tooltipLines(
    mk({
      plan: [{ text: 'a', status: 'done' }, { text: 'b', status: 'active' }, { text: 'c' }],
      planProgress: true,
      constraints: [{ text: 'x', status: 'queued' }, { text: 'y', status: 'delivered', deliveredAtStep: 2 }],
      heldFiles: ['src/a.rs'],
    }),
  );
  assert.ok(lines.includes('Task: add a greeting'));
  assert.ok(lines.includes('Control: the agent — started'));
  assert.ok(lines.includes('Plan: 1/3 done — now: b'), lines.join('\n'));
  const stale = tooltipLines(mk({ plan: [{ text: 'a', status: 'pending' }, { text: 'b', status: 'pending' }] }));
  assert.ok(stale.includes('Plan: 2 items · no progress reported'), stale.join('\n'));
  assert.ok(lines.includes('Steers queued: 1'));
  assert.ok(lines.includes('You hold: src/a.rs'));
});

test('legal controls follow the status', () => {
  assert.deepEqual(legalControls(null), ['start']);
  assert.deepEqual(legalControls(mk()), ['pause', 'steer', 'takeover', 'abort', 'transcript', 'state']);
  assert.deepEqual(legalControls(mk({ status: 'paused' })), ['resume', 'steer', 'takeover', 'rewind', 'abort', 'transcript', 'state']);
  assert.deepEqual(legalControls(mk({ status: 'awaiting_decision' })), ['decide', 'steer', 'takeover', 'abort', 'transcript', 'state']);
  assert.deepEqual(legalControls(mk({ status: 'human', heldFiles: ['a'] })), ['handback', 'steer', 'release', 'rewind', 'abort', 'transcript', 'state']);
  assert.deepEqual(legalControls(mk({ status: 'done' })), ['continue', 'start', 'transcript', 'state']);
  assert.deepEqual(legalControls(mk({ status: 'done', steps })), ['continue', 'start', 'rewind', 'transcript', 'state']);
  assert.deepEqual(legalControls(mk({ status: 'aborted' })), ['continue', 'start', 'transcript', 'state']);
  assert.ok(!isActive(mk({ status: 'aborted' })));
  assert.ok(isActive(mk({ status: 'human' })));
});

test('checkpoint choices: every step that has a checkpoint, once, newest first, as step:N', () => {
  // Step 3 shares step 2's checkpoint (a command that changed nothing): listed all the same.
  const c = checkpointChoices(mk({ steps: [{ n: 0, action: 'working tree at start', author: 'human' as const, status: 'done' as const, checkpoint: 'ffff0000' }, ...steps] }));
  assert.deepEqual(c.map((x) => x.checkpoint), ['step:4', 'step:3', 'step:2', 'step:1', 'step:0']);
  assert.equal(c[0].label, 'Step 4: your edits');
  assert.equal(c[0].description, 'human · cccc3333');
  assert.equal(c[1].step, 3);
  assert.equal(c[1].description, 'agent · bbbb2222');
  assert.equal(c[4].label, 'Step 0: working tree at start');
});

test('step range spans the previous checkpoint to this one', () => {
  const s = mk({ steps });
  assert.deepEqual(stepRange(s, 1), { from: null, to: 'aaaa1111', same: false });
  assert.deepEqual(stepRange(s, 2), { from: 'aaaa1111', to: 'bbbb2222', same: false });
  assert.deepEqual(stepRange(s, 3), { from: 'bbbb2222', to: 'bbbb2222', same: true });
  assert.deepEqual(stepRange(s, 4), { from: 'bbbb2222', to: 'cccc3333', same: false });
  assert.equal(stepRange(s, 5), null);
  assert.equal(stepRange(s, 9), null);
});

test('name-status parsing (-z)', () => {
  assert.deepEqual(parseNameStatus('M\0src/a.rs\0A\0new file.txt\0D\0old\0'), [
    { status: 'M', path: 'src/a.rs' },
    { status: 'A', path: 'new file.txt' },
    { status: 'D', path: 'old' },
  ]);
  assert.deepEqual(parseNameStatus(''), []);
});

test('server settings carry only what the user set', () => {
  const vals: Record<string, unknown> = {};
  assert.deepEqual(serverSettings((k) => vals[k]), {});
  vals['agent'] = { kind: 'script', plan: '.rein/plan.json' };
  vals['steer.onSave'] = false;
  vals['policy'] = {};
  assert.deepEqual(serverSettings((k) => vals[k]), { agent: { kind: 'script', plan: '.rein/plan.json' }, steer: { onSave: false } });
});

test('server path: setting, then PATH, then bundled; whether it is there', () => {
  const base = { extensionPath: '/ext', pathEnv: '/usr/bin:/opt/rein/bin', workspaceRoot: '/ws', home: '/home/u', platform: 'linux' };
  assert.deepEqual(resolveServerPath({ ...base, setting: '/x/rein', exists: () => false }), { path: '/x/rein', from: 'setting', found: false });
  assert.deepEqual(resolveServerPath({ ...base, setting: '/x/rein', exists: (p) => p === '/x/rein' }), { path: '/x/rein', from: 'setting', found: true });
  assert.equal(resolveServerPath({ ...base, setting: '~/bin/rein', exists: () => false }).path, '/home/u/bin/rein');
  assert.equal(resolveServerPath({ ...base, setting: '${workspaceFolder}/target/debug/rein', exists: () => false }).path, '/ws/target/debug/rein');
  assert.equal(resolveServerPath({ ...base, setting: 'target/debug/rein', exists: () => false }).path, '/ws/target/debug/rein');
  // A bare name in the setting is found on PATH, as the spawn would find it.
  assert.deepEqual(resolveServerPath({ ...base, setting: 'rein-dev', exists: (p) => p === '/opt/rein/bin/rein-dev' }), { path: 'rein-dev', from: 'setting', found: true });
  assert.deepEqual(resolveServerPath({ ...base, setting: 'rein-dev', exists: () => false }), { path: 'rein-dev', from: 'setting', found: false });
  assert.deepEqual(resolveServerPath({ ...base, setting: '', exists: (p) => p === '/opt/rein/bin/rein' || p === '/ext/bin/rein' }), { path: '/opt/rein/bin/rein', from: 'path', found: true });
  assert.deepEqual(resolveServerPath({ ...base, setting: ' ', exists: (p) => p === '/ext/bin/rein' }), { path: '/ext/bin/rein', from: 'bundled', found: true });
  assert.deepEqual(resolveServerPath({ ...base, setting: '', exists: () => false }), { path: 'rein', from: 'none', found: false });
});

test('a missing server binary is said in the editor terms: the setting and how to install', () => {
  const none = serverNotFoundText({ path: 'rein', from: 'none' }, '');
  assert.match(none, /^Rein: no rein binary found/);
  assert.match(none, /rein\.serverPath is empty/);
  assert.match(none, /not on PATH/);
  assert.match(none, /cargo install --path server/);
  assert.doesNotMatch(none, /ENOENT|spawn|`/);
  const set = serverNotFoundText({ path: '/opt/nowhere/rein', from: 'setting' }, '/opt/nowhere/rein ');
  assert.match(set, /rein\.serverPath is "\/opt\/nowhere\/rein", but there is no executable rein at \/opt\/nowhere\/rein/);
  assert.match(set, /cargo install --path server/);
  assert.ok(isNotFoundError(new Error('Launching server using command rein failed. Error: spawn rein ENOENT')));
  assert.ok(isNotFoundError({ message: 'spawn /x/rein EACCES' }));
  assert.ok(!isNotFoundError(new Error('Connection to server got closed')));
});

test('decision context values drive the inline approve/deny buttons', () => {
  const d = { id: 'd1', kind: 'approve_command' as const, question: 'Run it?', options: ['approve', 'deny'] };
  assert.equal(decisionContext(d), 'decision:approve,deny');
  assert.match(decisionContext(d), /^decision:.*approve/);
  assert.equal(decisionContext({ ...d, kind: 'held_file', options: ['release', 'skip', 'take over'] }), 'decision:release,skip,take-over');
  assert.equal(decisionContext({ ...d, kind: 'question', options: [] }), 'decision:answer');
  assert.equal(inlineChoice(d, 'deny'), 'deny');
  assert.equal(inlineChoice({ ...d, options: ['keep mine'] }, 'approve'), undefined);
});

test('step rows keep their meaning when cut: the command or the files first, the rest described', () => {
  const denied = { n: 9, action: 'run git tag v1 → not done: the human chose deny', author: 'agent' as const, status: 'skipped' as const, checkpoint: '978c6b4aa' };
  assert.deepEqual(stepRow(denied), { label: '9. run git tag v1', description: 'not done: the human chose deny · 978c6b4' });
  assert.equal(stepIcon(denied), 'circle-slash');
  const human = { n: 5, action: 'your changes while holding control: src/greet.py', author: 'human' as const, status: 'done' as const, checkpoint: '08c5e1f00' };
  assert.deepEqual(stepRow(human), { label: '5. src/greet.py', description: 'your changes while holding control · 08c5e1f' });
  assert.deepEqual(stepRow({ n: 0, action: 'working tree at start', author: 'human', status: 'done', checkpoint: '965a20e11' }), { label: '0. working tree at start', description: '965a20e' });
  // An agent action with a colon stays whole: "finish: …" is what it did.
  assert.deepEqual(stepRow({ n: 12, action: 'finish: Added farewell()', author: 'agent', status: 'done', checkpoint: null }), { label: '12. finish: Added farewell()', description: '' });
  assert.deepEqual(stepRow({ n: 5, action: 'run deploy', author: 'agent', status: 'rolled_back', checkpoint: null }), { label: '5. run deploy', description: 'rolled back' });
});

test('a steer icon says queued or delivered, so a cut row still tells', () => {
  assert.equal(constraintIcon({ text: 'x' }), 'watch');
  assert.equal(constraintIcon({ text: 'x', status: 'queued' }), 'watch');
  assert.equal(constraintIcon({ text: 'x', status: 'delivered', deliveredAtStep: 2 }), 'pass');
});

test('constraint descriptions', () => {
  assert.equal(constraintDescription({ text: 'x' }), 'queued');
  assert.equal(constraintDescription({ text: 'x', status: 'delivered', deliveredAtStep: 3, location: { path: 'src/a.rs', line: 9 } }), '✓ step 3 · a.rs:10');
  const tip = constraintTooltip({ id: 'c1', text: 'keep greet() returning a plain string', status: 'delivered', deliveredAtStep: 3 });
  assert.match(tip, /^keep greet\(\) returning a plain string\n/);
  assert.match(tip, /Delivered to the agent before step 3/);
});

test('error messages: refusals are warnings with the server text', () => {
  assert.deepEqual(errorMessage('rein.handback', { code: -32803, message: 'take over first' }), { text: 'take over first', severity: 'warning' });
  assert.equal(errorMessage('rein.steer', { code: -32602, message: 'needs text' }).severity, 'error');
  assert.equal(errorMessage('rein.rewind', new Error('boom')).text, 'Rein: rein.rewind failed: boom');
});

test('the sandbox shows in the tooltip, and an unconfined task in the status text', () => {
  const confined = mk({ sandbox: { mode: 'workspace-write', inForce: true, landlockAbi: 7, network: ['cargo fetch'] } });
  assert.ok(tooltipLines(confined).includes('Sandbox: workspace-write (Landlock ABI 7); network for: cargo fetch'));
  assert.equal(statusText(confined).text, '$(sync~spin) Agent running · step 1');
  const none = mk({ sandbox: { mode: 'workspace-write', inForce: false, unavailable: 'REIN_LANDLOCK=off' } });
  assert.equal(statusText(none).text, '$(sync~spin) Agent running · step 1 · $(unlock) unconfined');
  assert.equal(statusText(none).tone, 'warning');
  assert.match(sandboxLine(none.sandbox) ?? '', /cannot be had here \(REIN_LANDLOCK=off\)/);
  const off = mk({ sandbox: { mode: 'off', inForce: false } });
  assert.equal(statusText(off).text, '$(sync~spin) Agent running · step 1');
  assert.match(sandboxLine(off.sandbox) ?? '', /off — .*full rights/);
  assert.ok(statusText(null, 'up', { unavailable: 'no Landlock' }).tooltip.includes('Sandbox: cannot be had here (no Landlock)'));
  assert.ok(statusText(null, 'up', { abi: 7 }).tooltip.includes('Sandbox: Landlock ABI 7 available'));
  assert.equal(statusText(mk({ status: 'awaiting_decision', decisions: [{ id: 'd1', kind: 'sandbox_denied', question: 'q', options: ['approve', 'deny'] }] })).text, '$(debug-pause) Paused: sandbox denied a command');
  assert.deepEqual(serverSettings((k) => (k === 'sandbox' ? 'read-only' : undefined)), { sandbox: 'read-only' });
  const partial = mk({ sandbox: { mode: 'workspace-write', inForce: true, landlockAbi: 3, notEnforced: ['network: TCP connect and bind (needs Landlock ABI 4; this kernel has 3)'] } });
  assert.match(statusText(partial).text, /partly confined/);
  assert.equal(statusText(partial).tone, 'warning');
  assert.match(sandboxLine(partial.sandbox) ?? '', /ABI 3\) — NOT enforced here: network: TCP/);
  assert.doesNotMatch(statusText(confined).text, /partly/);
  assert.match(statusText(null, 'up', { abi: 3, notEnforced: ['signals'] }).tooltip.join('\n'), /ABI 3 available — NOT enforced here: signals/);
});

test('the steer prompt says what happens next in each state', () => {
  assert.match(steerPrompt(mk()), /keeps running/);
  for (const status of ['paused', 'awaiting_decision', 'human'] as const) {
    assert.doesNotMatch(steerPrompt(mk({ status })), /keeps running/, status);
  }
  assert.match(steerPrompt(mk({ status: 'paused' })), /stays paused until you resume/);
  assert.match(steerPrompt(mk({ status: 'human' })), /when you hand back/);
  assert.match(steerPrompt(mk({ status: 'paused' }), true), /URGENT/);
});

test('answered decisions say who answered what', () => {
  const base = { id: 'd1', kind: 'approve_command' as const, question: 'The agent wants to run `git tag v1`. Approve?', options: ['approve', 'deny'], detail: 'git tag v1', by: 'human' as const, at: '2025-01-01T00:00:00Z' };
  assert.equal(answeredLabel({ ...base, choice: 'deny' }), 'you denied `git tag v1`');
  assert.equal(answeredLabel({ ...base, choice: 'approve' }), 'you approved `git tag v1`');
  assert.equal(answeredLabel({ ...base, choice: 'take over' }), 'you took over instead (`git tag v1`)');
  assert.equal(answeredLabel({ ...base, kind: 'question', detail: null, question: 'Which name?', options: [], choice: 'shout' }), 'you answered: shout');
  assert.equal(answeredLabel({ ...base, kind: 'merge_conflict', detail: null, path: 'a.rs', options: ['keep mine', "take agent's"], choice: 'keep mine' }), 'you chose "keep mine" (a.rs)');
});

const plan5 = [
  { id: 'p1', text: 'Read the greeter', status: 'done' as const },
  { id: 'p2', text: 'Adjust the greeting', status: 'done' as const },
  { id: 'p3', text: 'Add a farewell', status: 'active' as const },
  { id: 'p4', text: 'Document it', status: 'pending' as const },
  { id: 'p5', text: 'Run the check', status: 'pending' as const, editedByHuman: true },
];

test('plan progress counts done items truly and names the one in progress', () => {
  const s = planSummary(mk({ plan: plan5, planProgress: true }));
  assert.equal(s.description, '2/5 done');
  assert.equal(s.active?.text, 'Add a farewell');
  const skipped = planSummary(mk({ plan: [...plan5.slice(0, 4), { ...plan5[4], status: 'skipped' }], planProgress: true }));
  assert.equal(skipped.description, '2/4 done · 1 skipped');
  assert.equal(planSummary(mk()).description, 'none yet');
});

test('without reported progress the plan says so instead of showing items pending', () => {
  const stale = mk({ plan: plan5.map((p) => ({ ...p, status: 'pending' as const })), planProgress: false });
  const s = planSummary(stale);
  assert.equal(s.progress, false);
  assert.equal(s.description, '5 items · no progress reported');
  assert.equal(s.active, undefined);
  const row = planRow(stale.plan![3], false);
  assert.equal(row.description, '');
  assert.notEqual(row.icon, 'circle-large-outline');
  assert.match(row.tooltip, new RegExp(NO_PLAN_PROGRESS));
  assert.doesNotMatch(row.tooltip, /pending/);
  // A finished task's items are done, reported or not.
  assert.equal(planSummary({ ...stale, status: 'done', plan: plan5.map((p) => ({ ...p, status: 'done' as const })) }).description, '5/5 done');
});

test('plan rows: status, the human\'s edits, priority', () => {
  assert.deepEqual(planRow(plan5[2], true).description, 'in progress');
  assert.equal(planRow(plan5[2], true).icon, 'arrow-right');
  assert.equal(planRow(plan5[0], true).icon, 'pass');
  assert.equal(planRow(plan5[3], true).description, '');
  assert.equal(planRow(plan5[4], true).description, 'edited by you');
  assert.match(planRow(plan5[4], true).tooltip, /You edited this item by hand/);
  assert.equal(planRow({ text: 'x', status: 'pending', priority: 'high' }, true).description, 'high priority');
});

test('an item the agent calls done whose step was not done says so and is not counted done', () => {
  const why = 'marked done by the agent; its step 5 was not done on your word';
  const plan = plan5.map((p, i) => ({ ...p, status: 'done' as const, ...(i === 1 ? { contradicted: why } : {}) }));
  assert.equal(planSummary(mk({ plan, planProgress: true })).description, '4/5 done · 1 marked done, not done');
  const row = planRow(plan[1], true);
  assert.equal(row.description, why);
  assert.equal(row.icon, 'warning');
  assert.match(row.tooltip, /Rein's record says otherwise/);
  // Waiting on a decision, "now:" does not name the active item.
  const active = plan5.map((p, i) => ({ ...p, status: i === 2 ? ('active' as const) : ('pending' as const) }));
  assert.equal(planSummary(mk({ plan: active, planProgress: true })).active?.text, plan5[2].text);
  const decision = { id: 'd1', kind: 'approve_command' as const, question: 'git push?', options: ['approve', 'deny'] };
  assert.equal(planSummary(mk({ plan: active, planProgress: true, status: 'awaiting_decision', decisions: [decision] })).active, undefined);
});

test('a step shows what the agent said, what it was told, and where its thought is', () => {
  const refused = {
    n: 4,
    action: 'write .GIT/config',
    author: 'agent' as const,
    status: 'failed' as const,
    checkpoint: 'abcdef123',
    planItem: 'p3',
    message: 'I will configure git.\nThen carry on.',
    thought: 'maybe the config needs a user',
    detail: 'path ".GIT/config" refused: it names the repository\'s .git directory',
  };
  const row = stepRow(refused);
  assert.equal(row.label, '4. write .GIT/config');
  assert.equal(row.description, 'failed: path ".GIT/config" refused: it names the repository\'s .git directory · abcdef1');
  const tip = stepTooltip(refused, plan5);
  assert.match(tip, /for plan item p3: Add a farewell/);
  assert.match(tip, /The agent said:\nI will configure git\.\nThen carry on\./);
  assert.match(tip, /What the agent was told:\npath "\.GIT\/config" refused: it names/);
  assert.doesNotMatch(tip, /maybe the config/, 'the thought stays collapsed, out of the tooltip');
  assert.deepEqual(stepParts(refused).map((p) => p.kind), ['message', 'thought', 'detail']);
  assert.equal((stepParts(refused)[2] as { failed: boolean }).failed, true);
  const ran = { n: 8, action: 'run ./test.sh', author: 'agent' as const, status: 'done' as const, checkpoint: 'c', detail: 'exit code 0', output: 'test 1 ok\n' };
  const parts = stepParts(ran);
  assert.deepEqual(parts.map((p) => p.kind), ['detail', 'output']);
  assert.equal((parts[1] as { exit: string }).exit, 'exit code 0');
  assert.match(stepTooltip(ran), /Click to see its output/);
  const acp = { n: 3, action: 'edit a.rs', author: 'agent' as const, status: 'done' as const, tool: { id: 't1', kind: 'edit', locations: [{ path: 'a.rs', line: 4 }, { path: 'b.rs' }], diffs: [{ path: 'a.rs', added: 2, removed: 1 }] } };
  assert.deepEqual(stepParts(acp), [
    { kind: 'diff', path: 'a.rs', added: 2, removed: 1 },
    { kind: 'location', path: 'b.rs', line: null },
  ]);
});

test('latest words, wrapped rows, exits', () => {
  const s = mk({
    steps: [
      { n: 1, action: 'read a', author: 'agent', status: 'done', message: 'first' },
      { n: 2, action: 'your edits', author: 'human', status: 'done' },
      { n: 3, action: 'read b', author: 'agent', status: 'done', message: 'second' },
      { n: 4, action: 'read c', author: 'agent', status: 'done' },
    ],
  });
  assert.equal(latestWords(s)?.n, 3);
  assert.deepEqual(wrapRows('one two three four', 9), ['one two', 'three', 'four']);
  assert.deepEqual(wrapRows('a\n\n  \nb'), ['a', 'b']);
  assert.equal(exitText({ code: 0, signal: null }), 'exit 0');
  assert.equal(exitText({ code: null, signal: 9 }), 'killed (signal 9)');
});

test('live output follows the running command: header, chunks, paused/resumed, exit', () => {
  const f = new OutputFollower();
  const c = (over: Partial<OutputChunk>): OutputChunk => ({ taskId: 't', id: '8-1', step: 8, command: './test.sh', terminal: null, seq: 1, chunk: '', skipped: 0, state: 'running', ...over });
  let out = f.append(c({ seq: 1 }));
  out += f.append(c({ seq: 2, chunk: 'test 1 ok\ntest 2' }));
  out += f.append(c({ seq: 3, state: 'paused' }));
  out += f.append(c({ seq: 4, state: 'running', chunk: ' ok\n' }));
  out += f.append(c({ seq: 5, state: 'ended', exit: { code: 0, signal: null }, step: 8 }));
  assert.equal(
    out,
    '── step 8 · ./test.sh ──\ntest 1 ok\ntest 2\n── paused: the command is frozen until the agent is resumed ──\n── resumed ──\n ok\n── exit 0 (step 8) ──\n',
  );
  // Another command, a terminal, skipped bytes; then the first one speaks again.
  let more = f.append(c({ id: '9-1', step: 9, command: 'cargo test', terminal: 'term-1', chunk: 'x', skipped: 100 }));
  more += f.append(c({ id: '10-1', step: 10, command: 'ls', chunk: 'a\n' }));
  more += f.append(c({ id: '9-1', step: 9, command: 'cargo test', terminal: 'term-1', chunk: 'y\n', seq: 2 }));
  assert.equal(
    more,
    '\n── step 9 · cargo test (terminal term-1) ──\n[… 100 bytes not shown …]\nx\n\n── step 10 · ls ──\na\n\n── step 9 · cargo test (terminal term-1) (continued) ──\ny\n',
  );
});

test('a long task\'s steps in pages: the newest at once, the older pages stay put as steps are added', () => {
  const steps = (k: number) => Array.from({ length: k }, (_, n) => ({ n, action: `a${n}`, author: 'agent', status: 'done' }) as Step);
  assert.deepEqual(stepPages(steps(3), 100), { recent: steps(3).reverse(), earlier: [] });
  assert.equal(stepPages(steps(200), 100).recent.length, 200);
  const at201 = stepPages(steps(201), 100);
  assert.deepEqual(at201.recent.map((s) => s.n).slice(0, 2), [200, 199]);
  assert.equal(at201.recent.length, 101);
  assert.deepEqual(at201.earlier, [{ start: 0, end: 100, first: 0, last: 99 }]);
  // 10,000 steps: at most two pages redrawn, 98 pages of older ones, newest page first.
  const big = stepPages(steps(10_000), 100);
  assert.equal(big.recent.length, 200);
  assert.equal(big.recent[0].n, 9999);
  assert.equal(big.earlier.length, 98);
  assert.deepEqual(big.earlier[0], { start: 9700, end: 9800, first: 9700, last: 9799 });
  assert.deepEqual(big.earlier[97], { start: 0, end: 100, first: 0, last: 99 });
  // One step more: the pages there were stay as they were, one more page comes first.
  const more = stepPages(steps(10_001), 100);
  assert.equal(more.recent.length, 101);
  assert.deepEqual(more.earlier.slice(1), big.earlier);
  assert.deepEqual(more.earlier[0], { start: 9800, end: 9900, first: 9800, last: 9899 });
});

test('a file Rein changed: a clean buffer reloads; a dirty one only once it holds the file\'s text, and is then marked saved', () => {
  assert.equal(onFileChanged(false, 'old\n', 'new\n'), 'reload');
  assert.equal(onFileChanged(false, 'same\n', 'same\n'), 'leave');
  // The person's unsaved text is theirs until Rein gave the buffer the file's (merged) text.
  assert.equal(onFileChanged(true, 'typed over old\n', 'merged\n'), 'leave');
  assert.equal(onFileChanged(true, 'merged\n', 'merged\n'), 'markSaved');
});

test('the handback notice counts the files and names the submodules whose inside the person changed', () => {
  assert.equal(handbackNotice({ changes: [{}], submodules: [] }), 'Rein: handed back to the agent (1 changed file reported).');
  assert.equal(handbackNotice({ changes: [], submodules: ['sub'] }), 'Rein: handed back to the agent (0 changed files and the inside of submodule sub reported).');
  assert.equal(handbackNotice(undefined), 'Rein: handed back to the agent (0 changed files reported).');
});

