// Pop-ups that must go away by themselves: a decision's prompt once the decision is answered
// anywhere (the Rein view, the palette, another editor, a terminal), and the message about a
// server that cannot start once it runs. VS Code cannot close a notification shown with
// `showWarningMessage` and friends, so these are progress notifications, which close when
// their promise settles; their choices are command links in the message (notifications open
// command links), since a progress notification has no buttons of its own.
import * as vscode from 'vscode';

/** The command a prompt's links run, with the prompt's key and the choice. */
export const ANSWER_COMMAND = 'rein.ui.answerPrompt';

/** A Markdown link that runs `command` with `args` when clicked in a notification. */
export function commandLink(label: string, command: string, args: unknown[] = []): string {
  return `[${label}](command:${command}?${encodeURIComponent(JSON.stringify(args))})`;
}

/** The message of a prompt: its text, then a link per choice. */
export function promptMessage(key: string, text: string, choices: string[]): string {
  const links = choices.map((c) => commandLink(c, ANSWER_COMMAND, [key, c]));
  return links.length ? `${text} — ${links.join(' · ')}` : text;
}

interface Pending {
  settle: (choice: string | null) => void;
  /** Whether what the prompt asks about is still open. */
  open: () => boolean;
}

const pending = new Map<string, Pending>();
let made = 0;

/**
 * Shows `text` until a choice is clicked (resolves to it), the person closes it (null), or
 * `open` is found false by `withdrawAnswered` (null).
 */
export function ask(title: string, text: string, choices: string[], open: () => boolean): Promise<string | null> {
  const key = `p${++made}`;
  return new Promise((resolve) => {
    void vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title, cancellable: true },
      (progress, token) =>
        new Promise<void>((done) => {
          const settle = (choice: string | null) => {
            if (!pending.delete(key)) return;
            resolve(choice);
            done();
          };
          pending.set(key, { settle, open });
          token.onCancellationRequested(() => settle(null));
          progress.report({ message: promptMessage(key, text, choices) });
          // Answered before it was even drawn.
          if (!open()) settle(null);
        }),
    );
  });
}

/** A prompt's link was clicked. */
export function answer(key: string, choice: string): void {
  pending.get(key)?.settle(choice);
}

/** Closes every prompt whose question is no longer open. */
export function withdrawAnswered(): void {
  for (const p of [...pending.values()]) if (!p.open()) p.settle(null);
}
