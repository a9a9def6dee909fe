// Keeping the extension's copy of the task state in step with the server's `rein/stateChanged`:
// the whole state, or (the extension declares `experimental.rein.stateDeltas`) only what
// changed since a version (docs/protocol.md, "State deltas"). A long task so costs each step
// the same, not the length of its history. Pure logic, no `vscode` import, unit-tested with
// `node --test` (see test/sync.test.ts).

import { TaskState, Step } from './model';

/** What changed between versions `base` and `version` of task `taskId`. */
export interface StateDelta {
  taskId: string;
  base: number;
  version: number;
  /** Top-level fields with their new value; `null`: the field is now absent or empty. */
  changed: Record<string, unknown>;
  /** Keep the first `from` steps, then these. */
  steps: { from: number; items: Step[] };
}

/** The params of `rein/stateChanged`. */
export type StateChanged = { state: TaskState | null } | StateDelta;

/** What a notification does to the state held. */
export type Applied =
  /** It replaces what is held (a new task, a restart, the first notification). */
  | { kind: 'whole'; state: TaskState | null }
  /** It applied: the new state, and the first step index that changed. */
  | { kind: 'delta'; state: TaskState; stepsFrom: number }
  /** It is about a version already held or older (a reply brought a newer state first). */
  | { kind: 'stale' }
  /** It cannot apply to what is held: the whole state has to be fetched (`rein.state`). */
  | { kind: 'gap'; why: string };

export function isDelta(p: StateChanged): p is StateDelta {
  return !('state' in p) && typeof (p as StateDelta).taskId === 'string';
}

/** Applies a `rein/stateChanged` to `held` without changing `held`. */
export function applyStateChanged(held: TaskState | null, p: StateChanged | null | undefined): Applied {
  if (!p || typeof p !== 'object') return { kind: 'whole', state: null };
  if (!isDelta(p)) return { kind: 'whole', state: (p as { state?: TaskState | null }).state ?? null };
  if (!held) return { kind: 'gap', why: `no state held for task ${p.taskId}` };
  if (held.task.id !== p.taskId) return { kind: 'gap', why: `a change to task ${p.taskId}, the state held is task ${held.task.id}` };
  if (held.version === p.base) {
    const steps = held.steps ?? [];
    const from = p.steps?.from ?? steps.length;
    // The server never cuts past what it sent; more would leave a hole.
    if (from > steps.length) return { kind: 'gap', why: `steps from ${from}, ${steps.length} held` };
    const next: TaskState = { ...held };
    const fields = next as unknown as Record<string, unknown>;
    for (const [k, v] of Object.entries(p.changed ?? {})) {
      if (k === '__proto__' || k === 'steps' || k === 'version') continue;
      if (v === null) delete fields[k];
      else fields[k] = v;
    }
    next.steps = steps.slice(0, from).concat(p.steps?.items ?? []);
    next.version = p.version;
    return { kind: 'delta', state: next, stepsFrom: from };
  }
  if (p.version <= held.version) return { kind: 'stale' };
  return { kind: 'gap', why: `version ${held.version} held, the change is from ${p.base} to ${p.version}` };
}

/**
 * Where two states differ, as a path (`steps[12].output`), or `null` when they are the same.
 * A field that is `null` and one that is absent are the same (a delta's `null` removes it).
 */
export function firstDifference(a: unknown, b: unknown, path = ''): string | null {
  if (a === b) return null;
  if (a == null && b == null) return null;
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b)) return path || '(top)';
    if (a.length !== b.length) return `${path}.length (${a.length} ≠ ${b.length})`;
    for (let i = 0; i < a.length; i++) {
      const d = firstDifference(a[i], b[i], `${path}[${i}]`);
      if (d) return d;
    }
    return null;
  }
  if (typeof a === 'object' && typeof b === 'object' && a && b) {
    const ao = a as Record<string, unknown>;
    const bo = b as Record<string, unknown>;
    for (const k of new Set([...Object.keys(ao), ...Object.keys(bo)])) {
      const d = firstDifference(ao[k], bo[k], path ? `${path}.${k}` : k);
      if (d) return d;
    }
    return null;
  }
  return path || '(top)';
}

/** How the state of one task reached the extension, for the log. */
export class SyncCounts {
  task: string | undefined;
  whole = 0;
  deltas = 0;
  stale = 0;
  gaps = 0;

  /** Counts one notification for `taskId` (a new task starts the counts again). */
  count(taskId: string | undefined, kind: Applied['kind']): void {
    if (taskId && taskId !== this.task) {
      this.task = taskId;
      this.whole = this.deltas = this.stale = this.gaps = 0;
    }
    if (kind === 'whole') this.whole++;
    else if (kind === 'delta') this.deltas++;
    else if (kind === 'stale') this.stale++;
    else this.gaps++;
  }

  /** "412 deltas, 1 whole state, 0 gaps, 0 stale". */
  text(): string {
    const n = (k: number, one: string, many = `${one}s`) => `${k} ${k === 1 ? one : many}`;
    return `${n(this.deltas, 'delta')}, ${n(this.whole, 'whole state')}, ${n(this.gaps, 'gap')}, ${this.stale} stale`;
  }
}
