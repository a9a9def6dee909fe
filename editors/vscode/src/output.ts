// Live output of the commands the agent runs (`rein/output`): an output channel that follows
// the running command (a header with its step and command, "paused" / "resumed", how it
// ended), and what is running now for the Rein view and the transcript.

import * as vscode from 'vscode';
import { OutputChunk, OutputFollower } from './model';

/** At most this much of the running command's output is kept for a late viewer. */
const KEEP = 64 * 1024;

export class LiveOutput {
  readonly channel: vscode.OutputChannel;
  private follower = new OutputFollower();
  /** The command running now, its output so far as one chunk (the newest 64 KiB). */
  private now: OutputChunk | undefined;
  private revealedFor: string | undefined;

  constructor(private readonly reveal: () => boolean) {
    this.channel = vscode.window.createOutputChannel('Rein: Agent Output');
  }

  /** Appends a notification; shows the channel (keeping focus where it is) when a task's first command starts. */
  add(c: OutputChunk): void {
    this.channel.append(this.follower.append(c));
    if (c.state === 'ended') {
      if (this.now?.id === c.id) this.now = undefined;
    } else {
      const text = ((this.now?.id === c.id ? this.now.chunk : '') + c.chunk).slice(-KEEP);
      this.now = { ...c, chunk: text, skipped: 0 };
    }
    // Shown once per task, so closing the panel is respected for the rest of it.
    if (this.revealedFor !== c.taskId && this.reveal()) {
      this.revealedFor = c.taskId;
      this.channel.show(true);
    }
  }

  /** The command running now, with its output so far, or undefined. */
  running(): OutputChunk | undefined {
    return this.now;
  }

  /** The task ended or another began: nothing runs any more. */
  clearRunning(): void {
    this.now = undefined;
  }

  dispose(): void {
    this.channel.dispose();
  }
}
