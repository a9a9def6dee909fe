// Live output of the commands the agent runs (`rein/output`): a pseudo-terminal, "Rein: Agent
// Output", that follows the running command (a header with its step and command, "paused" /
// "resumed", how it ended), and what is running now for the Rein view and the transcript.

import * as vscode from 'vscode';
import { OutputChunk, OutputFollower } from './model';

/** At most this much output is kept: the running command's for a late viewer, and the
 *  terminal's history to replay when it is opened again after you closed it. */
const KEEP = 64 * 1024;

/** Bold headers, dim markers: what Rein says stands apart from what the command printed. */
function decorate(kind: 'header' | 'marker' | 'exit', line: string): string {
  return kind === 'header' ? `\x1b[1m${line}\x1b[0m` : kind === 'exit' ? `\x1b[1m${line}\x1b[0m` : `\x1b[2m${line}\x1b[0m`;
}

/** The terminal shows `\n` as a line feed only; its lines need `\r\n`. */
function crlf(text: string): string {
  return text.replace(/\r?\n/g, '\r\n');
}

export class LiveOutput {
  private follower = new OutputFollower(decorate);
  /** The command running now, its output so far as one chunk (the newest 64 KiB). */
  private now: OutputChunk | undefined;
  private revealedFor: string | undefined;
  private terminal: vscode.Terminal | undefined;
  private readonly write = new vscode.EventEmitter<string>();
  /** Whether the terminal is open (what is written before that is replayed from `history`). */
  private opened = false;
  private history = '';
  private readonly subscriptions: vscode.Disposable[] = [];

  constructor(private readonly reveal: () => boolean) {
    this.subscriptions.push(
      vscode.window.onDidCloseTerminal((t) => {
        if (t !== this.terminal) return;
        // Closed by you: the next command opens it again, with what it showed.
        this.terminal = undefined;
        this.opened = false;
      }),
    );
  }

  /** Appends a notification; shows the terminal (focus stays where it is) when a task's first command starts. */
  add(c: OutputChunk): void {
    const text = crlf(this.follower.append(c));
    this.history = (this.history + text).slice(-KEEP);
    if (this.opened) this.write.fire(text);
    if (c.state === 'ended') {
      if (this.now?.id === c.id) this.now = undefined;
    } else {
      const so = ((this.now?.id === c.id ? this.now.chunk : '') + c.chunk).slice(-KEEP);
      this.now = { ...c, chunk: so, skipped: 0 };
    }
    // Shown by itself once per task, so hiding the panel is respected for the rest of it.
    if (this.revealedFor !== c.taskId && this.reveal()) {
      this.revealedFor = c.taskId;
      this.show(true);
    }
  }

  /** Shows the terminal, creating it when there is none. */
  show(preserveFocus = false): void {
    if (!this.terminal) {
      const pty: vscode.Pseudoterminal = {
        onDidWrite: this.write.event,
        open: () => {
          this.opened = true;
          this.write.fire(this.history || crlf('Output of the commands the agent runs shows here while they run.\n'));
        },
        close: () => {
          this.opened = false;
        },
        handleInput: () => {
          this.write.fire(crlf('\n(This terminal shows the agent\'s commands; it takes no input. Steer the agent with Rein: Steer.)\n'));
        },
      };
      this.terminal = vscode.window.createTerminal({ name: 'Rein: Agent Output', pty, iconPath: new vscode.ThemeIcon('hubot') });
    }
    this.terminal.show(preserveFocus);
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
    this.terminal?.dispose();
    this.write.dispose();
    for (const s of this.subscriptions) s.dispose();
  }
}
