// Unit tests of applying `rein/stateChanged` (whole states and deltas) to the state held:
// `npm test`.
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { TaskState, Step } from '../src/model';
import { applyStateChanged, firstDifference, StateDelta, SyncCounts, Applied } from '../src/sync';

function step(n: number, action = `write f${n}.txt`, extra: Partial<Step> = {}): Step {
  return { n, action, author: 'agent', checkpoint: `c${n}`, status: 'done', ...extra } as Step;
}

function state(version: number, steps: number, task = 't1'): TaskState {
  return {
    version,
    task: { id: task, goal: 'g', started: 'x' },
    status: 'running',
    control: { holder: 'agent', since: 'x', reason: 'started' },
    steps: Array.from({ length: steps }, (_, i) => step(i)),
    stopReason: 'r',
  };
}

function delta(base: number, version: number, from: number, items: Step[], changed: Record<string, unknown> = {}, taskId = 't1'): StateDelta {
  return { taskId, base, version, changed, steps: { from, items } };
}

function applied(r: Applied): TaskState {
  assert.equal(r.kind, 'delta', JSON.stringify(r));
  return (r as { state: TaskState }).state;
}

test('a whole state replaces what is held, also with no task', () => {
  const held = state(3, 2);
  const r = applyStateChanged(held, { state: state(1, 0, 't2') });
  assert.equal(r.kind, 'whole');
  assert.equal((r as { state: TaskState }).state.task.id, 't2');
  assert.deepEqual(applyStateChanged(held, { state: null }), { kind: 'whole', state: null });
});

test('a delta on the version held sets fields, removes nulled ones, appends steps, and leaves the held state alone', () => {
  const held = state(5, 3);
  held.queuedStop = { intent: 'pause', behind: 'x', since: 'y' };
  const before = JSON.stringify(held);
  const next = applied(applyStateChanged(held, delta(5, 6, 3, [step(3)], { status: 'paused', queuedStop: null, stopReason: null })));
  assert.equal(next.version, 6);
  assert.equal(next.status, 'paused');
  assert.ok(!('queuedStop' in next) && !('stopReason' in next));
  assert.deepEqual(next.steps?.map((s) => s.n), [0, 1, 2, 3]);
  assert.equal(JSON.stringify(held), before, 'the held state is not changed');
});

test('steps replaced from an index: an earlier step changed (a terminal\'s output landed on it)', () => {
  const held = state(7, 5);
  const r = applyStateChanged(held, delta(7, 8, 2, [step(2, 'run cargo test', { output: 'ok' }), step(3), step(4), step(5)]));
  const next = applied(r);
  assert.equal((r as { stepsFrom: number }).stepsFrom, 2);
  assert.deepEqual(next.steps?.map((s) => s.n), [0, 1, 2, 3, 4, 5]);
  assert.equal(next.steps?.[2].output, 'ok');
  assert.equal(next.steps?.[1], held.steps?.[1], 'the steps before `from` are the ones held');
  // Cut and nothing new: the steps after `from` are gone.
  assert.deepEqual(applied(applyStateChanged(held, delta(7, 8, 1, []))).steps?.map((s) => s.n), [0]);
});

test('a gap: the delta is from a version not held, or cuts past the steps held', () => {
  const held = state(4, 2);
  assert.equal(applyStateChanged(held, delta(5, 6, 2, [step(2)])).kind, 'gap', 'a notification was missed');
  assert.equal(applyStateChanged(held, delta(3, 5, 2, [step(2)])).kind, 'gap', 'overlaps what is held, not applicable');
  assert.equal(applyStateChanged(held, delta(4, 5, 3, [step(3)])).kind, 'gap', 'would leave a hole');
  assert.equal(applyStateChanged(null, delta(4, 5, 2, [])).kind, 'gap', 'nothing held');
});

test('out of order: a delta for a version already held (a reply brought it first) is stale', () => {
  const held = state(9, 4);
  assert.deepEqual(applyStateChanged(held, delta(8, 9, 3, [step(3)])), { kind: 'stale' });
  assert.deepEqual(applyStateChanged(held, delta(6, 7, 3, [step(3)])), { kind: 'stale' });
  // The next one in order applies on the reply's version.
  assert.equal(applyStateChanged(held, delta(9, 10, 4, [step(4)])).kind, 'delta');
});

test('a task switch: a delta about another task is a gap; the new task\'s whole state replaces', () => {
  const held = state(12, 6, 'old');
  const r = applyStateChanged(held, delta(12, 13, 6, [], {}, 'new'));
  assert.equal(r.kind, 'gap');
  assert.match((r as { why: string }).why, /task new.*task old/);
  const whole = applyStateChanged(held, { state: state(1, 0, 'new') });
  assert.equal(whole.kind, 'whole');
  assert.equal(applied(applyStateChanged((whole as { state: TaskState }).state, delta(1, 2, 0, [step(0)], {}, 'new'))).steps?.length, 1);
});

test('firstDifference: null and absent are the same; otherwise the path of the first difference', () => {
  assert.equal(firstDifference({ a: 1, b: null }, { a: 1 }), null);
  assert.equal(firstDifference(state(2, 3), state(2, 3)), null);
  const other = state(2, 3);
  other.steps![1] = step(1, 'edited');
  assert.equal(firstDifference(state(2, 3), other), 'steps[1].action');
  assert.equal(firstDifference(state(2, 3), state(2, 4)), 'steps.length (3 ≠ 4)');
  assert.equal(firstDifference({ a: [1] }, { a: { 0: 1 } }), 'a');
});

test('the counts start again with each task', () => {
  const c = new SyncCounts();
  c.count('a', 'whole');
  c.count('a', 'delta');
  c.count('a', 'delta');
  assert.equal(c.text(), '2 deltas, 1 whole state, 0 gaps, 0 stale');
  c.count('b', 'gap');
  assert.equal(c.text(), '0 deltas, 0 whole states, 1 gap, 0 stale');
});

/** A small deterministic generator (mulberry32), so a failure replays. */
function rng(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = seed;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The delta between two versions of one task, as the server builds it (server/src/lsp/sync.rs). */
function diff(a: TaskState, b: TaskState): StateDelta {
  const changed: Record<string, unknown> = {};
  const ao = a as unknown as Record<string, unknown>;
  const bo = b as unknown as Record<string, unknown>;
  for (const k of new Set([...Object.keys(ao), ...Object.keys(bo)])) {
    if (k === 'steps' || k === 'version') continue;
    if (JSON.stringify(ao[k]) !== JSON.stringify(bo[k])) changed[k] = bo[k] ?? null;
  }
  const as = a.steps ?? [];
  const bs = b.steps ?? [];
  let from = 0;
  while (from < as.length && from < bs.length && JSON.stringify(as[from]) === JSON.stringify(bs[from])) from++;
  return delta(a.version, b.version, from, bs.slice(from), changed, b.task.id);
}

test('a long task through missed notifications, replies ahead of them and a task switch ends equal to the server\'s state', () => {
  for (let seed = 1; seed <= 20; seed++) {
    const rand = rng(seed);
    // The server's states, one per version, over two tasks.
    const versions: TaskState[] = [state(1, 0, 'first')];
    for (let v = 2; v <= 400; v++) {
      const prev = versions[versions.length - 1];
      let s: TaskState = JSON.parse(JSON.stringify(prev));
      s.version = v;
      const r = rand();
      if (v === 250) s = state(1, 0, 'second');
      else if (r < 0.6) s.steps!.push(step(s.steps!.length, `write ${v}`, { message: `step ${v}` }));
      else if (r < 0.7 && s.steps!.length) s.steps![Math.floor(rand() * s.steps!.length)].output = `out ${v}`;
      else if (r < 0.8) s.status = s.status === 'running' ? 'paused' : 'running';
      else if (r < 0.9) s.queuedStop = s.queuedStop ? null : { intent: 'pause', behind: `b${v}`, since: 'y' };
      else s.stopReason = rand() < 0.5 ? null : `reason ${v}`;
      if (s.queuedStop === null) delete s.queuedStop;
      if (s.stopReason === null) delete s.stopReason;
      versions.push(s);
    }
    // What the client gets: each change in order (whole for a new task), some missed, and at
    // times a reply whose state is ahead of the notifications.
    let held: TaskState | null = null;
    const counts = new SyncCounts();
    for (let i = 0; i < versions.length; i++) {
      const s = versions[i];
      const prev = versions[i - 1];
      if (i < versions.length - 1 && rand() < 0.05) continue; // missed (never the last: nothing would follow to show it)
      const p = !prev || prev.task.id !== s.task.id ? { state: s } : diff(prev, s);
      const r = applyStateChanged(held, p);
      counts.count(s.task.id, r.kind);
      if (r.kind === 'whole' || r.kind === 'delta') held = r.state;
      // A gap fetches the server's state now.
      if (r.kind === 'gap') held = s;
      if (rand() < 0.05) {
        const ahead = versions[Math.min(versions.length - 1, i + 1 + Math.floor(rand() * 3))];
        // A reply's state replaces an older one of the same task only (extension.ts setState).
        if (!held || ahead.task.id !== held.task.id || ahead.version > held.version) held = ahead;
      }
    }
    assert.equal(firstDifference(held, versions[versions.length - 1]), null, `seed ${seed}`);
    assert.ok(counts.deltas > counts.gaps, `seed ${seed}: ${counts.text()}`);
  }
});
