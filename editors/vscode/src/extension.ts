// Rein for VS Code: a thin shell over `rein lsp`. Every decision is the server's; this file
// gives each control a native home (palette, keybindings, status bar, view, context menu).

import * as fs from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';
import {
  LanguageClient,
  LanguageClientOptions,
  Executable,
  ExecuteCommandRequest,
  DidChangeConfigurationNotification,
  ShowMessageRequest,
  ShowMessageRequestParams,
  MessageActionItem,
  State as ClientState,
} from 'vscode-languageclient/node';
import {
  TaskState,
  Decision,
  OutputChunk,
  exitText,
  statusText,
  legalControls,
  CONTROLS,
  checkpointChoices,
  stepRange,
  inlineChoice,
  isActive,
  isTerminal,
  steerPrompt,
  serverSettings,
  resolveServerPath,
  serverNotFoundText,
  isNotFoundError,
  errorMessage,
  onFileChanged,
  handbackNotice,
  Landlock,
  ServerPhase,
} from './model';
import { ReinTree, Node } from './view';
import { LiveOutput } from './output';
import { TranscriptPanel } from './transcriptPanel';
import { StateChanged, applyStateChanged, firstDifference, SyncCounts } from './sync';
import { Transcript } from './transcript';
import * as git from './git';
import * as prompts from './prompts';
import {
  Tasks,
  TaskSummary,
  QueuedDecision,
  Landed,
  TaskControl,
  TASK_CONTROLS,
  parseTasks,
  hasWorktreeTasks,
  findTask,
  taskActive,
  taskControls,
  taskLabel,
  taskDescription,
  tasksStatusText,
  decisionQueue,
  queueRow,
  startChoices,
  landSummary,
  PastTask,
  currentPast,
  pastDescription,
  startOrContinue,
} from './tasks';

const REPORT_SCHEME = 'rein-report';
const GIT_SCHEME = 'rein-git';

let client: LanguageClient | undefined;
/** Why the server could not be started (no binary, a failed start), until the next start. */
let serverProblem: { notFound: boolean; text: string } | undefined;
/** The server problem whose message is on screen. */
let shownProblem: typeof serverProblem;
let state: TaskState | null = null;
/** Every task of the repository as the server last listed it (`rein.tasks`, `rein/tasks`). */
let tasks: Tasks | null = null;
/** The open transcripts of worktree tasks, each with that task's state as last fetched. */
const taskTranscripts = new Map<string, { panel: TranscriptPanel; state: TaskState | null }>();
/** How the current task's state arrived (deltas, whole states, gaps), for the log. */
const syncCounts = new SyncCounts();
/** A `rein.state` fetch after a gap is on its way (one at a time). */
let fetchingAfterGap = false;
/** The task here and whether it had ended, when the history was last asked for. */
let historyFor = '';
/** The task whose end was logged with its counts. */
let endLogged: string | undefined;
let output: vscode.OutputChannel;
let statusItem: vscode.StatusBarItem;
let tree: ReinTree;
let treeView: vscode.TreeView<Node>;
let liveOutput: LiveOutput;
let transcript: TranscriptPanel;
/** The running command's id and state as the view last drew it (redrawn when it changes). */
let drawnRun = '';
let workspaceRoot: vscode.Uri | undefined;
let repoRoot: vscode.Uri | undefined;
let extensionPath = '';
let workspaceState: vscode.Memento | undefined;
/** The steer notice in the status bar, shown until that steer reaches the agent. */
let steerNotice: { id: string; item: vscode.Disposable } | undefined;
const GOAL_KEY = 'rein.pendingGoal';
const reports = new Map<string, string>();
const reportChanged = new vscode.EventEmitter<vscode.Uri>();

/** For tests and other extensions: the current state and a way to run a server command. */
export interface ReinApi {
  state(): TaskState | null;
  call(command: string, arg?: object): Promise<unknown>;
}

export async function activate(context: vscode.ExtensionContext): Promise<ReinApi> {
  extensionPath = context.extensionPath;
  output = teeToFile(vscode.window.createOutputChannel('Rein'), process.env.REIN_VSCODE_LOG);
  workspaceState = context.workspaceState;
  workspaceRoot = vscode.workspace.workspaceFolders?.find((f) => f.uri.scheme === 'file')?.uri;
  // The folder may be the top of a working tree or anywhere inside one (a subfolder).
  repoRoot = undefined;
  if (workspaceRoot) {
    const top = await git.repoTop(workspaceRoot.fsPath);
    if (top) repoRoot = vscode.Uri.file(top);
  }
  log(repoRoot ? `repository: ${repoRoot.fsPath} (folder ${workspaceRoot?.fsPath})` : `no git working tree at ${workspaceRoot?.fsPath ?? '(no folder)'}: Rein stays idle until asked`);

  statusItem = vscode.window.createStatusBarItem('rein.status', vscode.StatusBarAlignment.Left, 1000);
  statusItem.name = 'Rein';
  statusItem.command = 'rein.ui.menu';
  context.subscriptions.push(statusItem, output);

  liveOutput = new LiveOutput(() => vscode.workspace.getConfiguration('rein').get<boolean>('output.reveal', true));
  context.subscriptions.push(liveOutput);
  transcript = new TranscriptPanel({
    fetch: (since) => fetchTranscript(since),
    state: () => state,
    running: () => liveOutput.running(),
    openStep: (n, p) => void openStep(n, p),
    openFile: (p, line) => void openRepoFile(p, line),
    log,
    icon: vscode.Uri.joinPath(context.extensionUri, 'media', 'rein.svg'),
  });

  context.subscriptions.push(
    vscode.window.registerWebviewPanelSerializer(TranscriptPanel.viewType, {
      deserializeWebviewPanel: (panel, saved: { taskId?: string | null; name?: string | null; earlier?: boolean } | undefined) =>
        saved?.taskId && saved.taskId !== state?.task.id ? restoreTaskTranscript(panel, saved.taskId, saved.name ?? undefined, !!saved.earlier) : transcript.restore(panel),
    }),
  );

  tree = new ReinTree(() => repoRoot);
  treeView = vscode.window.createTreeView('rein.task', { treeDataProvider: tree, showCollapseAll: false });
  context.subscriptions.push(treeView);

  context.subscriptions.push(
    vscode.workspace.registerTextDocumentContentProvider(REPORT_SCHEME, {
      onDidChange: reportChanged.event,
      provideTextDocumentContent: (uri) => reports.get(uri.path) ?? '',
    }),
    vscode.workspace.registerTextDocumentContentProvider(GIT_SCHEME, {
      provideTextDocumentContent: (uri) =>
        repoRoot ? git.showFile(repoRoot.fsPath, uri.query, uri.path.replace(/^\//, '')) : '',
    }),
  );

  const cmd = (id: string, fn: (...args: any[]) => unknown) =>
    context.subscriptions.push(vscode.commands.registerCommand(id, fn));
  cmd('rein.ui.start', startTask);
  cmd('rein.ui.pause', () => hereOrTask('pause', () => call('rein.pause')));
  cmd('rein.ui.resume', () => hereOrTask('resume', () => call('rein.resume')));
  cmd('rein.ui.steer', () => hereOrTask('steer', steer));
  cmd('rein.ui.steerSelection', (uri?: vscode.Uri, range?: unknown) => steerSelection(uri, range));
  // The server's "steer about this selection…" code action: {uri, range} in LSP terms; the
  // client asks for the text, then sends rein.steer with uri and range.
  cmd('rein.steerSelection', (arg?: { uri?: string; range?: unknown }) => {
    if (client && arg && typeof arg.uri === 'string' && arg.range) {
      const p2c = client.protocol2CodeConverter;
      return steerSelection(p2c.asUri(arg.uri), p2c.asRange(arg.range as any));
    }
    return steerSelection();
  });
  cmd('rein.ui.abort', () => hereOrTask('abort', abort));
  cmd('rein.ui.takeover', () => hereOrTask('takeover', takeover));
  cmd('rein.ui.handback', () => hereOrTask('handback', handback));
  cmd('rein.ui.state', showState);
  cmd('rein.ui.rewind', rewind);
  cmd('rein.ui.discardChange', discardChange);
  cmd('rein.ui.menu', menu);
  cmd('rein.ui.decide', (node?: Node) => decide(node));
  cmd('rein.ui.approve', (node?: Node) => decideInline(node, 'approve'));
  cmd('rein.ui.deny', (node?: Node) => decideInline(node, 'deny'));
  cmd('rein.ui.release', (arg?: Node | vscode.Uri) => release(arg));
  // From a row's click: the step number; from the row's context menu: the row (then the diff,
  // even of a command step).
  cmd('rein.ui.openStep', (arg: number | Node, p?: string) =>
    typeof arg === 'number' ? openStep(arg, p) : arg?.kind === 'step' ? openStep(arg.step.n, undefined, true) : undefined,
  );
  cmd('rein.ui.stepOutput', (n: number) => showStepOutput(n));
  cmd('rein.ui.transcript', () => showTranscript());
  cmd('rein.ui.output', () => liveOutput.show());
  cmd('rein.ui.refresh', refresh);
  cmd('rein.ui.restartServer', restartServer);
  cmd(prompts.ANSWER_COMMAND, (key: string, choice: string) => prompts.answer(key, choice));
  cmd('rein.ui.pauseAll', () => all('pause'));
  cmd('rein.ui.resumeAll', () => all('resume'));
  cmd('rein.ui.decisions', () => answerDecisions());
  cmd('rein.ui.answerQueued', (d?: QueuedDecision) => (d ? answerQueued(d) : answerDecisions()));
  cmd('rein.ui.continue', (arg?: Node | string) => continueTask(arg));
  cmd('rein.ui.history.transcript', (arg?: Node | string) => showPastTranscript(arg));
  cmd('rein.ui.task.menu', (arg?: TaskArg) => taskMenu(arg));
  for (const c of Object.keys(TASK_CONTROLS) as TaskControl[]) {
    cmd(`rein.ui.task.${c}`, (arg?: TaskArg) => taskControl(c, arg));
  }

  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (!e.affectsConfiguration('rein')) return;
      if (e.affectsConfiguration('rein.serverPath')) {
        // A server that could not start is simply tried again; a running one is asked first.
        if (serverProblem) void restartServer();
        else
          void vscode.window
            .showInformationMessage('Rein: the server path changed.', 'Restart the Server')
            .then((a) => a && restartServer());
      }
      if (client?.isRunning()) {
        void client.sendNotification(DidChangeConfigurationNotification.type, { settings: { rein: settings() } });
      }
    }),
    { dispose: () => void client?.stop() },
  );

  render();
  await startClient();
  return { state: () => state, call: (c, a) => call(c, a ?? {}) };
}

export async function deactivate(): Promise<void> {
  await client?.stop();
  client = undefined;
}

function settings() {
  const cfg = vscode.workspace.getConfiguration('rein');
  // Only values the user set, so that unset ones leave rein.toml in force.
  return serverSettings((key) => {
    const i = cfg.inspect(key);
    return i?.workspaceFolderValue ?? i?.workspaceValue ?? i?.globalValue;
  });
}

/** The output channel, also copied to `file` when set (REIN_VSCODE_LOG, used by the e2e test). */
function teeToFile(channel: vscode.OutputChannel, file: string | undefined): vscode.OutputChannel {
  if (!file) return channel;
  const write = (s: string) => {
    try {
      fs.appendFileSync(file, s);
    } catch {
      // The log copy is best effort.
    }
  };
  return new Proxy(channel, {
    get(target, prop, receiver) {
      if (prop === 'append') return (v: string) => (write(v), target.append(v));
      if (prop === 'appendLine') return (v: string) => (write(v + '\n'), target.appendLine(v));
      const value = Reflect.get(target, prop, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

function log(msg: string) {
  output.appendLine(`[${new Date().toISOString()}] ${msg}`);
}

// ---------------------------------------------------------------------------------------------
// The language client

async function startClient(): Promise<void> {
  if (!workspaceRoot || !repoRoot) {
    // Outside a git working tree there is nothing to serve: a Rein command says so, once.
    render();
    return;
  }
  serverProblem = undefined;
  const cfg = vscode.workspace.getConfiguration('rein');
  const setting = cfg.get<string>('serverPath') ?? '';
  const resolved = resolveServerPath({
    setting,
    workspaceRoot: workspaceRoot.fsPath,
    pathEnv: process.env.PATH,
    extensionPath,
    home: process.env.HOME,
    exists: (p) => {
      try {
        if (!fs.statSync(p).isFile()) return false;
        try {
          fs.accessSync(p, fs.constants.X_OK);
        } catch {
          // A .vsix may drop the executable bit of the bundled binary: put it back.
          if (!p.startsWith(path.join(extensionPath, 'bin'))) return false;
          fs.chmodSync(p, 0o755);
        }
        return true;
      } catch {
        return false;
      }
    },
    platform: process.platform,
  });
  if (!resolved.found) {
    // Said before any spawn, so the language client's own "couldn't create connection" and
    // a raw "spawn rein ENOENT" never appear.
    log(`server: no executable at ${resolved.path} (${resolved.from})`);
    serverProblem = { notFound: true, text: serverNotFoundText(resolved, setting) };
    sayServerProblem();
    render();
    return;
  }
  log(`server: ${resolved.path} (${resolved.from})`);
  const run: Executable = { command: resolved.path, args: ['lsp'], options: { cwd: workspaceRoot.fsPath } };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: 'file', pattern: `${workspaceRoot.fsPath.replace(/[[\]{}*?]/g, '?')}/**/*` }],
    initializationOptions: settings(),
    outputChannel: output,
    middleware: {
      // Server commands run from code actions come through here: fill in what the server
      // needs the client to ask for, report errors readably, and open the reports.
      executeCommand: async (command, args) => {
        let arg = (args[0] ?? {}) as Record<string, unknown>;
        if (command === 'rein.steer' && typeof arg.text !== 'string') {
          const text = await askSteerText(arg.uri ? 'Steer about this selection' : undefined);
          if (text === undefined) return undefined;
          arg = { ...arg, text: text.text, urgent: arg.urgent ?? text.urgent };
        }
        if (command === 'rein.takeover' && arg.reason === undefined) {
          const reason = await askReason();
          if (reason === undefined) return undefined;
          arg = { ...arg, reason };
        }
        if (command === 'rein.handback' && !(await saveBeforeHandback())) return undefined;
        return call(command, arg);
      },
      workspace: {
        configuration: async (params, token, next) => {
          const res = await next(params, token);
          if (!Array.isArray(res)) return res;
          return params.items.map((item, i) => (item.section === 'rein' ? settings() : res[i]));
        },
      },
    },
  };
  client = new LanguageClient('rein', 'Rein', { run, debug: run }, clientOptions);
  // The server offers "Steer about this selection…" only to clients that run it themselves.
  client.registerFeature({
    fillClientCapabilities(caps) {
      const experimental = (caps.experimental ?? {}) as Record<string, unknown>;
      // output: the server sends rein/output, the live output of the agent's commands.
      // stateDeltas: rein/stateChanged carries only what changed (sync.ts applies it).
      caps.experimental = { ...experimental, rein: { steerSelection: true, output: true, stateDeltas: true } };
    },
    initialize() {},
    getState() {
      return { kind: 'static' };
    },
    clear() {},
  });
  client.onDidChangeState((e) => {
    log(`client: ${ClientState[e.oldState]} -> ${ClientState[e.newState]}`);
    render();
    // After an automatic restart the state may have moved on without us.
    if (e.oldState === ClientState.Starting && e.newState === ClientState.Running) void refresh();
  });
  client.onNotification('rein/stateChanged', (p: StateChanged) => onStateChanged(p));
  // A decision's prompt, closed by itself once the decision is answered anywhere.
  client.onRequest(ShowMessageRequest.type, (p: ShowMessageRequestParams) => askDecision(p));
  client.onNotification('rein/filesChanged', (p: { uris: string[] }) => void reloadClean(p?.uris ?? []));
  client.onNotification('rein/output', (c: OutputChunk) => onOutput(c));
  client.onNotification('rein/tasks', (p: unknown) => onTasks(p));
  try {
    await client.start();
    // A message about a server that could not start goes once it runs.
    prompts.withdrawAnswered();
  } catch (e) {
    log(`server failed to start: ${e}`);
    serverProblem = isNotFoundError(e)
      ? { notFound: true, text: serverNotFoundText({ ...resolved, from: resolved.from === 'setting' ? 'setting' : 'none' }, setting) }
      : { notFound: false, text: `Rein: could not start the language server (${resolved.path} lsp): ${(e as Error)?.message ?? e}` };
    sayServerProblem();
    render();
    return;
  }
  render();
  void fetchTasks();
}

/**
 * Shows why the server is not running, with the actions that fix it. Never awaited: a command
 * that meets a missing server ends at once instead of waiting for the toast to be dismissed.
 */
function sayServerProblem(): void {
  const p = serverProblem;
  // Said once while it is on screen; it closes by itself once the server runs.
  if (!p || shownProblem === p) return;
  // An earlier problem's message goes first.
  prompts.withdrawAnswered();
  shownProblem = p;
  const settings = 'Open Settings';
  const retry = 'Retry';
  const showLog = 'Show Log';
  void prompts.ask('Rein', p.text, [settings, retry, showLog], () => serverProblem === p).then((pick) => {
    if (shownProblem === p) shownProblem = undefined;
    if (pick === settings) void vscode.commands.executeCommand('workbench.action.openSettings', '@id:rein.serverPath');
    if (pick === retry) void restartServer();
    if (pick === showLog) output.show();
  });
}

/**
 * `window/showMessageRequest` (a decision): asked as a prompt that closes by itself once the
 * decision is no longer open, whoever answered it; the choice clicked is the answer.
 */
async function askDecision(p: ShowMessageRequestParams): Promise<MessageActionItem | null> {
  const choices = (p.actions ?? []).map((a) => a.title);
  const asked = (d: Decision) => (d.detail ? `${d.question}\n\n${d.detail}` : d.question) === p.message;
  // Open while a decision of the state reads as this message (a prompt can come before the
  // state that holds its decision: open until a state says otherwise).
  let seen = false;
  const open = () => {
    const there = !!state?.decisions?.some(asked);
    seen ||= there;
    return there || !seen;
  };
  const pick = await prompts.ask('Rein needs your decision', p.message, choices, open);
  return pick === null ? null : { title: pick };
}

async function restartServer(): Promise<void> {
  const c = client;
  client = undefined;
  try {
    await c?.stop();
  } catch (e) {
    log(`stop: ${e}`);
  }
  await startClient();
}

function serverUp(): boolean {
  return !!client && client.state === ClientState.Running;
}

/** Where the server is, for the status bar: `up` only once the client runs. */
function serverPhase(): ServerPhase {
  if (serverProblem) return serverProblem.notFound ? 'missing' : 'stopped';
  if (!client || client.state === ClientState.Starting) return 'starting';
  return client.state === ClientState.Running ? 'up' : 'stopped';
}

/** The one message for a folder outside git, with the action that fixes it. */
function notARepositoryText(folder: string): string {
  return `Rein: ${folder} is not inside a git working tree. Rein keeps its checkpoints in git: run git init there, or open a folder inside a repository.`;
}

/** True when the folder is inside a git working tree; else says so once and offers git init. */
async function ensureRepository(): Promise<boolean> {
  if (repoRoot) return true;
  if (!workspaceRoot) {
    void vscode.window.showWarningMessage('Rein: open a folder inside a git working tree first (File: Open Folder…).');
    return false;
  }
  const init = 'git init';
  const pick = await vscode.window.showWarningMessage(notARepositoryText(workspaceRoot.fsPath), init);
  if (pick !== init) return false;
  try {
    await git.git(workspaceRoot.fsPath, ['init']);
  } catch (e) {
    void vscode.window.showErrorMessage(`Rein: git init failed: ${(e as Error).message}`);
    return false;
  }
  const top = await git.repoTop(workspaceRoot.fsPath);
  if (!top) return false;
  repoRoot = vscode.Uri.file(top);
  log(`git init in ${top}`);
  await startClient();
  return serverUp();
}

/** Runs a server command; shows refusals and errors as notifications; applies the state. */
async function call<T = any>(command: string, arg: object = {}, rethrow = false): Promise<T | undefined> {
  if (!repoRoot) {
    await ensureRepository();
    return undefined;
  }
  if (!client || !serverUp()) {
    if (serverProblem) {
      sayServerProblem();
      return undefined;
    }
    void vscode.window.showErrorMessage('Rein: the language server is not running.', 'Restart the Server', 'Show Log').then((pick) => {
      if (pick === 'Restart the Server') void restartServer();
      if (pick === 'Show Log') output.show();
    });
    return undefined;
  }
  log(`-> ${command} ${JSON.stringify(arg)}`);
  try {
    const res = (await client.sendRequest(ExecuteCommandRequest.type, { command, arguments: [arg] })) as any;
    if (res && typeof res === 'object' && 'state' in res) setState(res.state ?? null, true);
    await afterCommand(command, res);
    return res as T;
  } catch (e) {
    if (rethrow) throw e;
    const m = errorMessage(command, e);
    log(`<- ${command} failed: ${(e as any)?.code ?? ''} ${m.text}`);
    if (m.severity === 'warning') void vscode.window.showWarningMessage(`Rein: ${m.text}`);
    else void vscode.window.showErrorMessage(m.text.startsWith('Rein') ? m.text : `Rein: ${m.text}`);
    return undefined;
  }
}

/**
 * Whether a state a reply carries is the task here (the one the view details and
 * `rein/stateChanged` follows), not a worktree task's, which must not replace it.
 */
function isHere(next: TaskState | null): boolean {
  if (!next) return true;
  const t = findTask(tasks, next.task?.id);
  return !t || t.isolation !== 'worktree';
}

async function afterCommand(command: string, res: any): Promise<void> {
  if (!res || typeof res !== 'object') return;
  const open = vscode.workspace.getConfiguration('rein').get<boolean>('openReports', true);
  if (command === 'rein.takeover' && typeof res.markdown === 'string') {
    if (open) await showReport('/Rein handover.md', res.markdown);
    notice(open, 'Rein: you hold control. Edit freely; hand back when you are done.');
  }
  if (command === 'rein.handback' && typeof res.markdown === 'string') {
    if (open) await showReport('/Rein reconcile report.md', res.markdown);
    notice(open, handbackNotice(res.reconcile));
  }
}

/** A transient status bar message when a report is on screen anyway, else a notification. */
function notice(quiet: boolean, text: string): void {
  if (quiet) vscode.window.setStatusBarMessage(`$(info) ${text}`, 6000);
  else void vscode.window.showInformationMessage(text);
}

async function showReport(name: string, markdown: string): Promise<void> {
  const uri = vscode.Uri.from({ scheme: REPORT_SCHEME, path: name });
  reports.set(uri.path, markdown);
  reportChanged.fire(uri);
  try {
    // Locked: the preview stays on the report instead of following the active editor.
    await vscode.commands.executeCommand('markdown.showPreview', uri, [uri], { locked: true });
  } catch (e) {
    log(`markdown preview unavailable (${e}); opening the report as text`);
    const doc = await vscode.workspace.openTextDocument(uri);
    await vscode.window.showTextDocument(doc, { preview: true });
  }
}

/**
 * The one place the task state changes (server notifications, command replies, refreshes):
 * everything that shows it follows from here.
 */
function setState(next: TaskState | null, fromReply = false): void {
  // Only the task here is followed this way; a worktree task's state is fetched for it.
  if (!isHere(next)) {
    log(`state: task ${next?.task.id} runs in a worktree: not shown as the task here`);
    return;
  }
  // Replies and notifications interleave; never step back to an older version of one task.
  if (next && state && next.task?.id === state.task?.id && next.version < state.version) return;
  if (!next && fromReply && state) return;
  state = next;
  // The history says how each task stands: asked again when a task here begins or ends.
  const historyKey = state ? `${state.task.id}:${isTerminal(state.status)}` : '';
  if (historyKey !== historyFor) {
    historyFor = historyKey;
    void fetchTasks();
  }
  // A command runs only while its task does (a paused one is frozen, still there).
  const run = liveOutput.running();
  if (run && (!state || state.task.id !== run.taskId || isTerminal(state.status))) liveOutput.clearRunning();
  // "steer cN queued" stays only while it is: gone once delivered (or the task moved on).
  if (steerNotice) {
    const c = state?.constraints?.find((k) => k.id === steerNotice!.id);
    if (!c || c.status === 'delivered') {
      steerNotice.item.dispose();
      steerNotice = undefined;
    }
  }
  render();
  // A decision's prompt goes once the decision is answered, here or anywhere else.
  prompts.withdrawAnswered();
  // The transcript asks for the entries after the ones it has (docs/protocol.md, Transcript).
  transcript.onState(state);
  if (state && isTerminal(state.status) && endLogged !== state.task.id && syncCounts.task === state.task.id) {
    endLogged = state.task.id;
    log(`state: task ${state.task.id} ${state.status} at version ${state.version} (${state.steps?.length ?? 0} steps): ${syncCounts.text()}`);
  }
}

/**
 * `rein/stateChanged`: a whole state replaces; a delta applies to the version held; a delta
 * that cannot apply (a notification missed, another task) fetches the whole state.
 */
function onStateChanged(p: StateChanged): void {
  const r = applyStateChanged(state, p);
  const task = r.kind === 'whole' || r.kind === 'delta' ? r.state?.task.id : 'taskId' in p ? p.taskId : undefined;
  syncCounts.count(task, r.kind);
  switch (r.kind) {
    case 'whole':
    case 'delta':
      setState(r.state);
      break;
    case 'stale':
      break;
    case 'gap':
      log(`state: ${r.why}; fetching the whole state`);
      if (!fetchingAfterGap) {
        fetchingAfterGap = true;
        void refresh().finally(() => (fetchingAfterGap = false));
      }
      break;
  }
}

/** `rein/output`: the terminal follows the command, the transcript shows it live. */
function onOutput(c: OutputChunk): void {
  if (state && c.taskId !== state.task.id) return;
  liveOutput.add(c);
  transcript.onOutput(c);
  // The view's "Running …" row changes when a command starts, pauses, resumes or ends.
  const run = liveOutput.running();
  const key = run ? `${run.id}:${run.state}` : '';
  if (key !== drawnRun) render();
}

/** Shows "steer cN queued" in the status bar until the state says it was delivered. */
function noteSteerQueued(id: string): void {
  steerNotice?.item.dispose();
  const item = vscode.window.setStatusBarMessage(`$(comment) Rein: steer ${id} queued for the next step`);
  steerNotice = { id, item };
  setState(state);
}

async function refresh(): Promise<void> {
  if (!serverUp()) {
    render();
    return;
  }
  void fetchTasks();
  try {
    const res = (await client!.sendRequest(ExecuteCommandRequest.type, { command: 'rein.state', arguments: [{}] })) as any;
    const theirs: TaskState | null = res?.state ?? null;
    // What the extension held, checked against the server's when both are at one version: a
    // difference is a bug in keeping it in step (deltas), said in the log.
    if (state && theirs && state.task.id === theirs.task.id) {
      const d = state.version === theirs.version ? firstDifference(state, theirs) : null;
      log(
        state.version !== theirs.version
          ? `state: behind the server: version ${state.version} held, the server's is ${theirs.version}`
          : d
            ? `state: OUT OF STEP with the server at version ${theirs.version}: first difference at ${d}; taking the server's`
            : `state: in step with the server at version ${theirs.version} (${theirs.steps?.length ?? 0} steps)`,
      );
    }
    setState(theirs);
  } catch (e) {
    log(`rein.state failed: ${(e as Error)?.message ?? e}`);
    render();
  }
}

function render(): void {
  const phase = serverPhase();
  const many = phase === 'up' && hasWorktreeTasks(tasks);
  const st = many ? tasksStatusText(tasks!) : statusText(state, phase, landlock());
  if (!repoRoot) {
    // Not inside a git working tree: Rein has nothing to show until a command asks for it.
    statusItem.hide();
    tree.update(null);
    return;
  }
  statusItem.text = st.text;
  const md = new vscode.MarkdownString(st.tooltip.map((l) => l.replace(/([\\`*_{}[\]()#+\-.!|<>])/g, '\\$1')).join('  \n'));
  statusItem.tooltip = md;
  statusItem.backgroundColor =
    st.tone === 'warning'
      ? new vscode.ThemeColor('statusBarItem.warningBackground')
      : st.tone === 'error'
        ? new vscode.ThemeColor('statusBarItem.errorBackground')
        : undefined;
  const plain = statusItem.text.replace(/\$\([^)]*\)\s*/g, '');
  statusItem.accessibilityInformation = { label: plain.startsWith('Rein') ? plain : `Rein: ${plain}` };
  statusItem.show();

  const run = liveOutput.running();
  drawnRun = run ? `${run.id}:${run.state}` : '';
  tree.update(state, run, tasks);
  // One count for the decisions of every task (the queue), else the task here's.
  const decisions = many ? tasks!.decisions.length : (state?.decisions ?? []).length;
  treeView.badge = decisions ? { value: decisions, tooltip: `${decisions} open decision(s)` } : undefined;
  treeView.description = state || many ? st.text.replace(/\$\([^)]*\)\s*/g, '') : undefined;

  void vscode.commands.executeCommand('setContext', 'rein.active', isActive(state));
  void vscode.commands.executeCommand('setContext', 'rein.status', state?.status ?? 'none');
  void vscode.commands.executeCommand('setContext', 'rein.holder', state?.control.holder ?? 'none');
  void vscode.commands.executeCommand('setContext', 'rein.tasks', many);
  void vscode.commands.executeCommand('setContext', 'rein.canContinue', !!state && isTerminal(state.status) && currentPast(tasks)?.canContinue !== false);

  if (reports.has(STATE_DOC.path) && !stateDocTimer) {
    // The whole state as text costs its size: written at most once a second, not per step.
    stateDocTimer = setTimeout(() => {
      stateDocTimer = undefined;
      writeStateDoc();
    }, 1000);
  }
}

const STATE_DOC = vscode.Uri.from({ scheme: REPORT_SCHEME, path: '/Rein state.json' });
let stateDocTimer: ReturnType<typeof setTimeout> | undefined;

/** The "Rein state.json" document (Show State) shows the state held now. */
function writeStateDoc(): void {
  reports.set(STATE_DOC.path, JSON.stringify(state, null, 2) + '\n');
  reportChanged.fire(STATE_DOC);
}

/**
 * These files changed on disk (the agent wrote them, or Rein wrote the person's unsaved text
 * into them, merged): open buffers show the file (`onFileChanged` says which and how).
 */
async function reloadClean(uris: string[]): Promise<void> {
  // VS Code's file watcher reloads clean buffers by itself; this only catches a missed event,
  // and marks saved a dirty buffer Rein gave the file's text.
  await new Promise((r) => setTimeout(r, 600));
  for (const raw of uris) {
    const uri = vscode.Uri.parse(raw);
    const doc = vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri.toString());
    if (!doc) continue;
    let disk: string;
    try {
      disk = await fs.promises.readFile(uri.fsPath, 'utf8');
    } catch {
      continue;
    }
    // Judged on the buffer as it is after the read, right before the revert: a keystroke
    // typed since Rein gave it the file's text makes it `leave`.
    const action = onFileChanged(doc.isDirty, doc.getText(), disk);
    if (action === 'leave') continue;
    log(
      action === 'reload'
        ? `reloading ${uri.fsPath} from disk (the agent wrote it)`
        : `marking ${uri.fsPath} saved: it holds the file's text (Rein merged your unsaved change into it)`,
    );
    try {
      await vscode.commands.executeCommand('workbench.action.files.revert', uri);
    } catch (e) {
      log(`revert failed: ${e}`);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Commands

interface Preflight {
  repository: string | null;
  agent: unknown;
  problem: { kind: 'no_repository' | 'no_agent' | 'task_active'; message: string } | null;
}

async function startTask(): Promise<void> {
  // The repository and the agent are checked before the goal is asked, so no goal is typed
  // for nothing.
  if (!(await ensureRepository())) return;
  if (!client || !serverUp()) return void (await call('rein.state'));
  let pre: Preflight;
  try {
    pre = (await client.sendRequest(ExecuteCommandRequest.type, { command: 'rein.preflight', arguments: [{}] })) as Preflight;
  } catch (e) {
    log(`rein.preflight failed: ${(e as Error)?.message ?? e}`);
    pre = { repository: repoRoot?.fsPath ?? null, agent: settings().agent ?? null, problem: null };
  }
  if (pre.problem?.kind === 'no_agent' && !settings().agent) {
    const configure = 'Configure Agent…';
    const pick = await vscode.window.showWarningMessage(
      'Rein: no agent is configured for this repository, so a task has nothing to run. Choose one in the rein.agent setting or in a rein.toml.',
      configure,
    );
    if (pick === configure) await configureAgent();
    return;
  }
  // The task here has ended: its conversation can go on instead of a new one beginning.
  if (state && isTerminal(state.status) && !workspaceState?.get<string>(GOAL_KEY)) {
    const listed = currentPast(tasks);
    const offer = startOrContinue(state.task.goal, state.status, listed && isTerminal(listed.status as TaskState['status']) ? listed.canContinue : undefined);
    if (offer) {
      const pick = await vscode.window.showQuickPick(offer, {
        title: `Rein: Start Task — the task here has ended (${state.status})`,
        placeHolder: `Continue "${state.task.goal}" with your next words, or start a new task?`,
        ignoreFocusOut: true,
      });
      if (!pick) return;
      if (pick.id === 'continue') return continueTask();
    }
  }
  // A task running here leaves room for more in worktrees only.
  const hereBusy = isActive(state) || pre.problem?.kind === 'task_active';
  // A goal typed for a start that failed comes back, so it is never lost.
  const kept = workspaceState?.get<string>(GOAL_KEY) ?? '';
  const goal = await vscode.window.showInputBox({
    title: 'Rein: Start Task',
    prompt: kept ? 'What should the agent do? (your last goal, kept because that start failed)' : 'What should the agent do?',
    placeHolder: 'e.g. add input validation to the parser',
    value: kept,
    ignoreFocusOut: true,
    validateInput: (v) => (v.trim() ? undefined : 'Give the agent a goal'),
  });
  if (!goal?.trim()) return;
  await workspaceState?.update(GOAL_KEY, goal.trim());
  const where = await vscode.window.showQuickPick(
    startChoices(hereBusy).map((c) => ({ ...c, label: c.label })),
    {
      title: 'Rein: Start Task — where should it run?',
      placeHolder: hereBusy
        ? `A task runs here${state ? ` ("${state.task.goal}")` : ''}: the new one runs in a worktree of its own.`
        : 'Here, in your working tree, or in a worktree of its own (several can run at once)',
      ignoreFocusOut: true,
    },
  );
  if (!where) return;
  const agent = settings().agent;
  const arg: Record<string, unknown> = { goal: goal.trim(), ...(agent ? { agent } : {}) };
  if (where.id !== 'here') {
    arg.isolation = 'worktree';
    if (where.id === 'carry') arg.carry = true;
  }
  const res = await call<{ taskId?: string }>('rein.start', arg);
  if (res) await workspaceState?.update(GOAL_KEY, undefined);
  if (res && where.id !== 'here') {
    await fetchTasks();
    const t = findTask(tasks, res.taskId);
    vscode.window.setStatusBarMessage(`$(git-branch) Rein: ${t ? t.name : 'the task'} started in a worktree${t?.branch ? ` on ${t.branch}` : ''}`, 6000);
  }
}

/** The rein.toml a user starts from: one agent on, the others shown. */
const REIN_TOML_TEMPLATE = `# Rein's settings for this repository. Every agent kind and key is in Rein's
# docs/agents.md. The VS Code setting "rein.agent" wins over this file.

[agent]
# An ACP agent: Claude Code through its ACP adapter (Codex, Gemini CLI and Goose work too).
kind = "acp"
command = ["npx", "-y", "@agentclientprotocol/claude-agent-acp"]

# Or a local OpenAI-compatible server (Ollama, llama.cpp, vLLM):
# kind = "openai"
# baseUrl = "http://127.0.0.1:11434/v1"
# model = "qwen2.5-coder"

# Or a scripted plan (for trying Rein out):
# kind = "script"
# plan = ".rein/plan.json"
`;

/** Offers the two ways to configure an agent: the setting, or a rein.toml template. */
async function configureAgent(): Promise<void> {
  const toml = repoRoot ? vscode.Uri.joinPath(repoRoot, 'rein.toml') : undefined;
  const pick = await vscode.window.showQuickPick(
    [
      { label: '$(settings-gear) Open the rein.agent setting', detail: 'Set the agent for this workspace or for every folder.', id: 'setting' },
      { label: '$(new-file) Write a rein.toml template', detail: 'A rein.toml at the top of the repository with an ACP agent on and the others shown; edit it, save, then start the task.', id: 'toml' },
    ],
    { title: 'Rein: Configure Agent', placeHolder: 'Where should the agent be configured?', ignoreFocusOut: true },
  );
  if (pick?.id === 'setting') {
    await vscode.commands.executeCommand('workbench.action.openSettings', '@id:rein.agent');
  } else if (pick?.id === 'toml' && toml) {
    let exists = true;
    try {
      await vscode.workspace.fs.stat(toml);
    } catch {
      exists = false;
    }
    if (!exists) await vscode.workspace.fs.writeFile(toml, Buffer.from(REIN_TOML_TEMPLATE, 'utf8'));
    await vscode.window.showTextDocument(await vscode.workspace.openTextDocument(toml));
    if (exists) void vscode.window.showInformationMessage('Rein: this repository already has a rein.toml; it is open.');
  }
}

/** Asks for a steer's text; the button toggles "urgent" (cut the in-flight step first). */
function askSteerText(title?: string): Promise<{ text: string; urgent: boolean } | undefined> {
  return new Promise((resolve) => {
    const box = vscode.window.createInputBox();
    let urgent = false;
    const urgentOff = { iconPath: new vscode.ThemeIcon('zap'), tooltip: 'Urgent: cut the current step first (off)' };
    const urgentOn = { iconPath: new vscode.ThemeIcon('flame'), tooltip: 'Urgent: cut the current step first (on)' };
    box.title = title ?? 'Rein: Steer the Agent';
    box.prompt = steerPrompt(state);
    box.placeholder = 'e.g. use the existing helper instead of a new one';
    box.ignoreFocusOut = true;
    box.buttons = [urgentOff];
    let done = false;
    const finish = (v: { text: string; urgent: boolean } | undefined) => {
      if (done) return;
      done = true;
      resolve(v);
      box.dispose();
    };
    box.onDidTriggerButton(() => {
      urgent = !urgent;
      box.buttons = [urgent ? urgentOn : urgentOff];
      box.prompt = steerPrompt(state, urgent);
    });
    box.onDidAccept(() => {
      const text = box.value.trim();
      if (!text) {
        box.validationMessage = 'Say what the agent should do differently';
        return;
      }
      finish({ text, urgent });
    });
    box.onDidHide(() => finish(undefined));
    box.show();
  });
}

/**
 * Whether the state on screen says `command` cannot apply now. Then it is sent bare and the
 * server's refusal (its words, naming what to do) is shown, instead of a prompt whose answer
 * would be thrown away. The server still decides; this only spares the typing.
 */
function refusedBeforeAsking(command: 'steer' | 'takeover' | 'handback'): boolean {
  if (!state) return false;
  if (state.status === 'done' || state.status === 'aborted' || state.status === 'failed') return true;
  if (command === 'handback') return state.status !== 'human';
  if (command === 'takeover') return state.status === 'human';
  return false;
}

async function steer(): Promise<void> {
  if (refusedBeforeAsking('steer')) {
    await call('rein.steer', { text: '' });
    return;
  }
  const t = await askSteerText();
  if (!t) return;
  const res = await call<{ constraintId: string }>('rein.steer', { text: t.text, ...(t.urgent ? { urgent: true } : {}) });
  if (res) noteSteerQueued(res.constraintId);
}

async function steerSelection(uriArg?: vscode.Uri, rangeArg?: unknown): Promise<void> {
  const editor = vscode.window.activeTextEditor;
  let uri = uriArg instanceof vscode.Uri ? uriArg : editor?.document.uri;
  let range: vscode.Range | undefined = rangeArg instanceof vscode.Range ? rangeArg : undefined;
  if (!range && editor && (!uri || editor.document.uri.toString() === uri.toString())) {
    const sel = editor.selection;
    range = sel.isEmpty ? editor.document.lineAt(sel.active.line).range : new vscode.Range(sel.start, sel.end);
    uri = editor.document.uri;
  }
  if (!uri || !range || !client || refusedBeforeAsking('steer')) {
    return steer();
  }
  const t = await askSteerText(`Steer about ${path.basename(uri.fsPath)}:${range.start.line + 1}${range.end.line !== range.start.line ? `-${range.end.line + 1}` : ''}`);
  if (!t) return;
  const c2p = client.code2ProtocolConverter;
  const res = await call<{ constraintId: string }>('rein.steer', {
    text: t.text,
    uri: c2p.asUri(uri),
    range: c2p.asRange(range),
    ...(t.urgent ? { urgent: true } : {}),
  });
  if (res) noteSteerQueued(res.constraintId);
}

async function abort(): Promise<void> {
  // Not the type guard: an ended task is still a task, named with its status.
  if (!state || isTerminal(state.status)) {
    void vscode.window.showWarningMessage(state ? `Rein: the task has ended (${state.status}); there is nothing to abort. Continue it, or start a new task.` : 'Rein: there is no running task to abort.');
    return;
  }
  const pick = await vscode.window.showQuickPick(
    [
      { label: '$(discard) Discard the agent\'s changes', detail: 'Your own edits are kept. The attempt stays recoverable under refs/rein/<task>/aborted.', keep: false },
      { label: '$(check) Keep the agent\'s changes', detail: 'Leave the working tree exactly as it is.', keep: true },
    ],
    { title: `Rein: Abort "${state.task.goal}"`, placeHolder: 'Stop the task. What about the changes the agent made?', ignoreFocusOut: true },
  );
  if (!pick) return;
  await call('rein.abort', { keepChanges: pick.keep });
}

function askReason(): Thenable<string | undefined> {
  return vscode.window.showInputBox({
    title: 'Rein: Take Over',
    prompt: 'Why are you taking over? (optional; Enter to skip)',
    placeHolder: 'e.g. it keeps breaking the tests',
    ignoreFocusOut: true,
  });
}

async function takeover(): Promise<void> {
  if (refusedBeforeAsking('takeover')) {
    await call('rein.takeover', {});
    return;
  }
  const reason = await askReason();
  if (reason === undefined) return;
  await call('rein.takeover', reason.trim() ? { reason: reason.trim() } : {});
}

/** Offers to save dirty files before a hand back; false when the user cancels. */
async function saveBeforeHandback(): Promise<boolean> {
  const dirty = vscode.workspace.textDocuments.filter((d) => d.isDirty && d.uri.scheme === 'file');
  if (!dirty.length) return true;
  const names = dirty.map((d) => vscode.workspace.asRelativePath(d.uri)).join(', ');
  const save = 'Save and Hand Back';
  const keep = 'Hand Back Without Saving';
  const pick = await vscode.window.showWarningMessage(
    `Rein: ${dirty.length} file${dirty.length === 1 ? ' has' : 's have'} unsaved changes (${names}).`,
    { modal: true, detail: 'Save before handing back? Unsaved edits are still reported to the agent, marked unsaved.' },
    save,
    keep,
  );
  if (pick === save) {
    for (const d of dirty) await d.save();
    return true;
  }
  return pick === keep;
}

async function handback(): Promise<void> {
  if (refusedBeforeAsking('handback')) {
    await call('rein.handback', {});
    return;
  }
  if (!(await saveBeforeHandback())) return;
  const note = await vscode.window.showInputBox({
    title: 'Rein: Hand Back',
    prompt: 'A note for the agent (optional; Enter to skip)',
    placeHolder: 'e.g. I fixed the parser; carry on with the tests',
    ignoreFocusOut: true,
  });
  if (note === undefined) return;
  await call('rein.handback', note.trim() ? { note: note.trim() } : {});
}

async function showState(): Promise<void> {
  await refresh();
  writeStateDoc();
  const doc = await vscode.workspace.openTextDocument(STATE_DOC);
  await vscode.window.showTextDocument(doc, { preview: true });
}

async function rewind(): Promise<void> {
  if (!state) {
    void vscode.window.showWarningMessage('Rein: there is no task, so no checkpoints to rewind to.');
    return;
  }
  const choices = checkpointChoices(state);
  if (!choices.length) {
    void vscode.window.showWarningMessage('Rein: this task has no checkpoints yet.');
    return;
  }
  const pick = await vscode.window.showQuickPick(
    choices.map((c) => ({ ...c, label: `$(history) ${c.label}` })),
    { title: 'Rein: Rewind', placeHolder: 'Take back the agent’s changes made after which step? (yours stay; the current tree is checkpointed first)', ignoreFocusOut: true, matchOnDescription: true },
  );
  if (!pick) return;
  await call('rein.rewind', { checkpoint: pick.checkpoint });
}

/** Discards one change Rein could not attribute (kept by abort), as the person chooses. */
async function discardChange(): Promise<void> {
  const changes = state?.unattributedChanges ?? [];
  if (!changes.length) {
    void vscode.window.showInformationMessage('Rein: no change made while the agent ran is waiting to be discarded.');
    return;
  }
  const pick = await vscode.window.showQuickPick(
    changes.map((u) => ({
      label: `$(discard) ${u.path}`,
      description: `${u.kind}${u.size != null ? ` · ${u.size} bytes` : ''} · step ${u.atStep}`,
      path: u.path,
    })),
    { title: 'Rein: Discard a Change Made While the Agent Ran', placeHolder: 'Rein cannot tell who made these; discard which one? (the file goes back to what it was before)', ignoreFocusOut: true },
  );
  if (!pick) return;
  await call('rein.discardChange', { path: pick.path });
}

/** What the server said at initialize this kernel can confine. */
function landlock(): Landlock | undefined {
  return (client?.initializeResult?.capabilities as any)?.experimental?.rein?.landlock;
}

async function menu(): Promise<void> {
  const st = statusText(state, serverPhase(), landlock());
  const items: (vscode.QuickPickItem & { command?: string })[] = legalControls(state).map((c) => ({
    label: CONTROLS[c].label,
    detail: CONTROLS[c].detail,
    command: CONTROLS[c].command,
  }));
  if (!serverUp()) items.unshift({ label: '$(debug-restart) Restart the Rein server', command: 'rein.ui.restartServer' });
  if (serverUp() && hasWorktreeTasks(tasks)) {
    const t = tasks;
    const extra: (vscode.QuickPickItem & { command?: string; task?: TaskSummary })[] = [{ label: 'All tasks', kind: vscode.QuickPickItemKind.Separator }];
    if (t.decisions.length) extra.push({ label: `$(question) Answer decisions (${t.decisions.length})…`, detail: 'The oldest first, each naming its task', command: 'rein.ui.decisions' });
    extra.push({ label: '$(debug-pause) Pause all', detail: 'Freeze every agent at once', command: 'rein.ui.pauseAll' });
    extra.push({ label: '$(debug-continue) Resume all', detail: 'Let every paused agent carry on', command: 'rein.ui.resumeAll' });
    extra.push({ label: CONTROLS.start.label, detail: 'Another agent, here or in a worktree of its own', command: 'rein.ui.start' });
    extra.push({ label: 'Tasks', kind: vscode.QuickPickItemKind.Separator });
    for (const task of t.tasks) extra.push({ label: `$(layers) ${taskLabel(task)}`, description: taskDescription(task), command: 'rein.ui.task.menu', task });
    const rest: (vscode.QuickPickItem & { command?: string; task?: TaskSummary })[] = [
      ...(state ? [{ label: 'Here', kind: vscode.QuickPickItemKind.Separator }, ...items.filter((i) => i.command !== 'rein.ui.start')] : []),
      { label: '', kind: vscode.QuickPickItemKind.Separator },
      { label: '$(list-tree) Show the Rein view', command: 'rein.task.focus' },
      { label: '$(output) Show the Rein log', command: '__log' },
    ];
    const pick = await vscode.window.showQuickPick([...extra, ...rest], {
      title: tasksStatusText(t).text.replace(/\$\([^)]*\)\s*/g, ''),
      placeHolder: 'Every task of this repository',
    });
    if (!pick?.command) return;
    if (pick.command === '__log') output.show();
    else if (pick.task) await taskMenu(pick.task.taskId);
    else await vscode.commands.executeCommand(pick.command);
    return;
  }
  items.push({ label: '', kind: vscode.QuickPickItemKind.Separator });
  items.push({ label: '$(list-tree) Show the Rein view', command: 'rein.task.focus' });
  items.push({ label: '$(output) Show the Rein log', command: '__log' });
  const pick = await vscode.window.showQuickPick(items, {
    title: `Rein: ${st.text.replace(/\$\([^)]*\)\s*/g, '')}`,
    placeHolder: state ? state.task.goal : 'No task in this repository',
  });
  if (!pick?.command) return;
  if (pick.command === '__log') output.show();
  else await vscode.commands.executeCommand(pick.command);
}

function decisionOf(node?: Node): Decision | undefined {
  if (node && node.kind === 'decision') {
    // Answer the decision as it is now, not as the tree item was drawn.
    return state?.decisions?.find((d) => d.id === node.decision.id) ?? node.decision;
  }
  return undefined;
}

async function decide(node?: Node): Promise<void> {
  let d = decisionOf(node);
  const open = state?.decisions ?? [];
  if (!d) {
    if (!open.length) {
      void vscode.window.showInformationMessage('Rein: no decision is open.');
      return;
    }
    if (open.length === 1) d = open[0];
    else {
      const p = await vscode.window.showQuickPick(open.map((x) => ({ label: x.question, description: x.kind.replace('_', ' '), d: x })), { title: 'Rein: Answer which decision?' });
      if (!p) return;
      d = p.d;
    }
  }
  let choice: string | undefined;
  if (d.kind === 'question') {
    choice = await vscode.window.showInputBox({ title: `Rein: the agent asks`, prompt: d.question, ignoreFocusOut: true });
  } else {
    const p = await vscode.window.showQuickPick(
      d.options.map((o) => ({ label: o, choice: o })),
      { title: `Rein: ${d.question}`, placeHolder: d.detail ?? d.question, ignoreFocusOut: true },
    );
    choice = p?.choice;
  }
  if (!choice?.trim()) return;
  await call('rein.decide', { decisionId: d.id, choice: choice.trim() });
}

async function decideInline(node: Node | undefined, which: 'approve' | 'deny'): Promise<void> {
  const d = decisionOf(node) ?? (state?.decisions?.length === 1 ? state.decisions[0] : undefined);
  if (!d) return decide(node);
  const choice = inlineChoice(d, which);
  if (!choice) return decide(node);
  await call('rein.decide', { decisionId: d.id, choice });
}

async function release(arg?: Node | vscode.Uri): Promise<void> {
  let uri: vscode.Uri | undefined;
  if (arg instanceof vscode.Uri) uri = arg;
  else if (arg && (arg as Node).kind === 'held' && repoRoot) uri = vscode.Uri.joinPath(repoRoot, (arg as { path: string }).path);
  if (!uri) {
    const held = state?.heldFiles ?? [];
    if (!held.length || !repoRoot) {
      void vscode.window.showInformationMessage('Rein: you hold no files.');
      return;
    }
    const p = held.length === 1 ? held[0] : await vscode.window.showQuickPick(held, { title: 'Rein: Hand which file back to the agent?' });
    if (!p) return;
    uri = vscode.Uri.joinPath(repoRoot, p);
  }
  await call('rein.release', { uri: client ? client.code2ProtocolConverter.asUri(uri) : uri.toString() });
}

/**
 * Opens what step `n` changed (its checkpoint against the one before; `only` narrows it to one
 * file). A command step that changed no files opens its output instead.
 */
async function openStep(n: number, only?: string, diff = false): Promise<void> {
  if (!state || !repoRoot) return;
  const step = state.steps?.find((s) => s.n === n);
  const range = stepRange(state, n);
  if (step && step.output != null && !only && !diff && (!range || range.same)) return showStepOutput(n);
  if (!step || !range) {
    void vscode.window.showInformationMessage(`Rein: step ${n} has no checkpoint to show.`);
    return;
  }
  if (range.same) {
    void vscode.window.showInformationMessage(`Rein: step ${n} (${step.action}) changed no files.`);
    return;
  }
  const cwd = repoRoot.fsPath;
  const from = range.from ?? (await git.resolveOrEmpty(cwd, `${range.to}^`));
  let files;
  try {
    files = await git.changedFiles(cwd, from, range.to);
  } catch (e) {
    void vscode.window.showErrorMessage(`Rein: cannot read the diff of step ${n}: ${(e as Error).message}`);
    return;
  }
  if (only) files = files.filter((f) => f.path === only);
  if (!files.length) {
    void vscode.window.showInformationMessage(`Rein: step ${n} (${step.action}) changed ${only ? `nothing in ${only}` : 'no files'}.`);
    return;
  }
  const side = (ref: string, p: string) => vscode.Uri.from({ scheme: GIT_SCHEME, path: `/${p}`, query: ref });
  const triple = (f: { path: string }) =>
    [vscode.Uri.joinPath(repoRoot!, f.path), side(from, f.path), side(range.to, f.path)] as const;
  const title = `Step ${n}: ${step.action}`;
  if (files.length === 1) {
    const [, l, r] = triple(files[0]);
    await vscode.commands.executeCommand('vscode.diff', l, r, `${files[0].path} (${title})`, { preview: true });
    return;
  }
  try {
    await vscode.commands.executeCommand('vscode.changes', title, files.map(triple));
  } catch {
    const p = await vscode.window.showQuickPick(files.map((f) => ({ label: f.path, description: f.status, f })), { title });
    if (!p) return;
    const [, l, r] = triple(p.f);
    await vscode.commands.executeCommand('vscode.diff', l, r, `${p.f.path} (${title})`);
  }
}

/** Opens a repository file, at a line when given (0-based). */
async function openRepoFile(rel: string, line?: number): Promise<void> {
  if (!repoRoot) return;
  const uri = vscode.Uri.joinPath(repoRoot, rel);
  const selection = line != null ? new vscode.Range(line, 0, line, 0) : undefined;
  try {
    await vscode.window.showTextDocument(uri, { selection, preview: true });
  } catch (e) {
    void vscode.window.showWarningMessage(`Rein: cannot open ${rel}: ${(e as Error).message}`);
  }
}

/** `rein.transcript {since}`, or undefined when the server cannot answer now. */
async function fetchTranscript(since: number): Promise<Transcript | undefined> {
  if (!client || !serverUp()) return undefined;
  try {
    return (await client.sendRequest(ExecuteCommandRequest.type, { command: 'rein.transcript', arguments: [{ since }] })) as Transcript;
  } catch (e) {
    log(`rein.transcript failed: ${(e as Error)?.message ?? e}`);
    return undefined;
  }
}

async function showTranscript(): Promise<void> {
  if (!repoRoot) {
    await ensureRepository();
    return;
  }
  await transcript.show();
}

/**
 * Opens the output of step `n` as a read-only document: the transcript's (up to 64 KiB)
 * when it has it, else the end the state keeps with the step (4 KiB).
 */
async function showStepOutput(n: number): Promise<void> {
  const step = state?.steps?.find((s) => s.n === n);
  let entry = transcript.entries.find((e) => e.kind === 'output' && e.step === n);
  if (!entry) {
    const all = await fetchTranscript(0);
    entry = all?.entries.find((e) => e.kind === 'output' && e.step === n);
  }
  const text = entry?.kind === 'output' ? entry.text : step?.output;
  if (text == null) {
    void vscode.window.showInformationMessage(`Rein: step ${n} ran no command, so it has no output.`);
    return;
  }
  const cut = entry?.kind === 'output' ? entry.truncated : text.length >= 4000;
  const how = entry?.kind === 'output' && entry.exit ? exitText(entry.exit) : step?.detail?.split('\n')[0] ?? '';
  const head = [`# Step ${n}: ${step?.action ?? (entry?.kind === 'output' ? entry.command : '')}`, how ? `# ${how}` : '', cut ? '# (the start of the output is cut: this is its end)' : ''].filter(Boolean).join('\n');
  const name = `/Step ${n} output.log`;
  const uri = vscode.Uri.from({ scheme: REPORT_SCHEME, path: name });
  reports.set(uri.path, `${head}\n\n${text}`);
  reportChanged.fire(uri);
  const doc = await vscode.workspace.openTextDocument(uri);
  await vscode.window.showTextDocument(doc, { preview: true });
}

// ---------------------------------------------------------------------------------------------
// A task is a conversation: follow-ups, and the working tree's earlier tasks

/** The history task a command means: a History row's, an id's, else none. */
function pastOf(arg?: Node | string): PastTask | undefined {
  if (arg && typeof arg === 'object' && arg.kind === 'past') return tasks?.history.find((p) => p.taskId === arg.past.taskId) ?? arg.past;
  if (typeof arg === 'string') return tasks?.history.find((p) => p.taskId === arg);
  return undefined;
}

/**
 * "Rein: Continue the Task…": the person's next words to the agent of an ended task, as the
 * next turn of the same conversation (`rein.continue {text, taskId?}`). The task here, or the
 * History row's (then that earlier task becomes the task here again).
 */
async function continueTask(arg?: Node | string): Promise<void> {
  if (!(await ensureRepository())) return;
  const picked = pastOf(arg);
  const old = picked && !picked.current ? picked : undefined;
  if (!old) {
    // The task here: while it runs its turn is not over, and an agent out of turns takes no
    // more. Sent bare, the server says so and names what to do (steer it, start a new task),
    // instead of asking for words that would be thrown away.
    // (A history listed while the task ran says no turn: only one listed after its end counts.)
    const listed = currentPast(tasks);
    const outOfTurns = listed?.canContinue === false && isTerminal(listed.status as TaskState['status']);
    if (!state || isActive(state) || outOfTurns) {
      await call('rein.continue', { text: '' });
      return;
    }
  } else if (!old.canContinue) {
    // Asking the server would make it the task here first: said as the history says it.
    void vscode.window.showWarningMessage(`Rein: "${old.goal}" cannot be continued: its agent takes no further turn. Start a new task instead.`);
    return;
  }
  const goal = old?.goal ?? state!.task.goal;
  const turn = (old?.turns ?? currentPast(tasks)?.turns ?? 1) + 1;
  const text = await vscode.window.showInputBox({
    title: `Rein: Continue "${goal}"`,
    prompt: `What should the agent do next? Turn ${turn} of the same conversation: it keeps what it read and did, and is told what you changed since.`,
    placeHolder: 'e.g. now add tests for it',
    ignoreFocusOut: true,
    validateInput: (v) => (v.trim() ? undefined : 'Say what the agent should do next'),
  });
  if (!text?.trim()) return;
  const res = await call<{ state?: TaskState }>('rein.continue', { text: text.trim(), ...(old ? { taskId: old.taskId } : {}) });
  if (!res) return;
  // The earlier task is the task here now: its read-only panel gives way to the live transcript.
  const earlier = old && taskTranscripts.get(old.taskId);
  if (earlier) {
    taskTranscripts.delete(old.taskId);
    const wasOpen = earlier.panel.open;
    earlier.panel.close();
    if (wasOpen) await showTranscript();
  }
  await fetchTasks();
}

/** A goal short enough for a tab's title. */
function shortGoal(goal: string): string {
  return goal.length > 40 ? `${goal.slice(0, 39)}…` : goal;
}

/**
 * An earlier task's transcript, read-only, in a panel of its own (`rein.transcript {taskId}`
 * reads it from the task's files); the task here's is the usual transcript. Without a row,
 * the task is picked from the history.
 */
async function showPastTranscript(arg?: Node | string): Promise<void> {
  if (!(await ensureRepository())) return;
  let p = pastOf(arg);
  if (!p) {
    await fetchTasks();
    const history = tasks?.history ?? [];
    if (!history.length) {
      void vscode.window.showInformationMessage('Rein: this working tree has no tasks yet.');
      return;
    }
    const pick = await vscode.window.showQuickPick(
      history.map((h) => ({ label: h.goal, description: `${h.current ? 'current · ' : ''}${pastDescription(h)}`, h })),
      { title: 'Rein: Open a Task from the History', placeHolder: 'The tasks of this working tree, newest first: its transcript opens', matchOnDescription: true },
    );
    if (!pick) return;
    p = pick.h;
  }
  if (p.current || p.taskId === state?.task.id) return showTranscript();
  const held = taskTranscripts.get(p.taskId) ?? { panel: newTaskTranscript(p.taskId, shortGoal(p.goal), true), state: null };
  taskTranscripts.set(p.taskId, held);
  held.state = (await fetchTaskState(p.taskId)) ?? held.state;
  await held.panel.show();
}

// ---------------------------------------------------------------------------------------------
// Several tasks at once: worktree tasks beside the one here

/** What a per-task command is given: a view row, a task id, or nothing (then it asks which). */
type TaskArg = Node | TaskSummary | string | undefined;

/**
 * A control from the palette, a keybinding or the view's title: the task here's while one runs
 * here (as always), else the worktree task's it fits (asked which when several do).
 */
async function hereOrTask(c: TaskControl, here: () => unknown): Promise<void> {
  if (isActive(state) || !hasWorktreeTasks(tasks) || !tasks.tasks.some(FITS[c])) {
    await here();
    return;
  }
  await taskControl(c);
}

/** Takes the task list the server sent (`rein/tasks`, `rein.tasks`). */
function onTasks(p: unknown): void {
  const next = parseTasks(p, tasks);
  if (!next) return;
  const line = next.tasks.map((t) => `${t.name} ${t.status}${t.decisions.length ? ` (${t.decisions.length} waiting)` : ''}`).join(', ');
  if (line !== loggedTasks) log(`tasks: ${(loggedTasks = line) || 'none'}`);
  tasks = next;
  render();
  // Open transcripts of worktree tasks follow their task (its whole state is fetched); an
  // earlier task's is filled once (a panel restored before the server answered).
  for (const [taskId, t] of taskTranscripts) {
    if (!findTask(tasks, taskId) && (t.state || !tasks.history.some((p) => p.taskId === taskId))) continue;
    void fetchTaskState(taskId).then((st) => {
      if (st) t.state = st;
      t.panel.onState(t.state);
    });
  }
}

let loggedTasks = '';

/** Asks the server for the task list (an older server without `rein.tasks`: none). */
async function fetchTasks(): Promise<void> {
  if (!client || !serverUp()) return;
  try {
    onTasks(await client.sendRequest(ExecuteCommandRequest.type, { command: 'rein.tasks', arguments: [{}] }));
  } catch (e) {
    log(`rein.tasks failed: ${(e as Error)?.message ?? e}`);
  }
}

/** A task's whole state (`rein.state {taskId}`), without touching the state held for here. */
async function fetchTaskState(taskId: string): Promise<TaskState | null> {
  if (!client || !serverUp()) return null;
  try {
    const res = (await client.sendRequest(ExecuteCommandRequest.type, { command: 'rein.state', arguments: [{ taskId }] })) as { state?: TaskState | null };
    return res?.state ?? null;
  } catch (e) {
    log(`rein.state ${taskId} failed: ${(e as Error)?.message ?? e}`);
    return null;
  }
}

/** The task a command means: the row's, the id's, else one picked among those `fits`. */
async function taskOf(arg: TaskArg, fits: (s: TaskSummary) => boolean, what: string): Promise<TaskSummary | undefined> {
  const id = typeof arg === 'string' ? arg : arg && 'kind' in arg ? (arg.kind === 'task' || arg.kind === 'taskInfo' ? arg.task.taskId : undefined) : arg?.taskId;
  if (id) {
    const t = findTask(tasks, id) ?? (arg && typeof arg === 'object' && 'kind' in arg && (arg.kind === 'task' || arg.kind === 'taskInfo') ? arg.task : undefined);
    if (t) return t;
  }
  await fetchTasks();
  const list = (tasks?.tasks ?? []).filter(fits);
  if (!list.length) {
    void vscode.window.showInformationMessage(`Rein: no task to ${what}.`);
    return undefined;
  }
  if (list.length === 1) return list[0];
  const pick = await vscode.window.showQuickPick(
    list.map((t) => ({ label: taskLabel(t), description: taskDescription(t), t })),
    { title: `Rein: ${what[0].toUpperCase()}${what.slice(1)} which task?`, ignoreFocusOut: true },
  );
  return pick?.t;
}

/** The controls of one task, as a picker (a task row's or the status bar's menu). */
async function taskMenu(arg?: TaskArg): Promise<void> {
  const t = await taskOf(arg, () => true, 'show the controls of');
  if (!t) return;
  const pick = await vscode.window.showQuickPick(
    taskControls(t).map((c) => ({ label: TASK_CONTROLS[c].label, detail: TASK_CONTROLS[c].detail, c })),
    { title: `Rein: ${taskLabel(t)}`, placeHolder: taskDescription(t) },
  );
  if (pick) await taskControl(pick.c, t.taskId);
}

const FITS: Record<TaskControl, (s: TaskSummary) => boolean> = {
  pause: (s) => s.status === 'running' || s.status === 'starting',
  resume: (s) => s.status === 'paused',
  steer: taskActive,
  decide: (s) => !!s.decisions?.length,
  takeover: (s) => taskActive(s) && s.holder !== 'human',
  handback: (s) => s.status === 'human',
  abort: taskActive,
  transcript: () => true,
  land: (s) => s.isolation === 'worktree',
  discard: (s) => s.isolation === 'worktree',
  open: (s) => s.isolation === 'worktree' && !!s.worktree,
};

/** Each control as the pickers ask for it ("Take over which task?"). */
const VERBS: Record<TaskControl, string> = {
  pause: 'pause',
  resume: 'resume',
  steer: 'steer',
  decide: 'answer a decision of',
  takeover: 'take over',
  handback: 'hand back',
  abort: 'abort',
  transcript: 'show the transcript of',
  land: 'land',
  discard: 'discard',
  open: 'open the worktree of',
};

/** Runs one control on one task, with its `taskId`. */
async function taskControl(c: TaskControl, arg?: TaskArg): Promise<void> {
  const t = await taskOf(arg, FITS[c], VERBS[c]);
  if (!t) return;
  const taskId = t.taskId;
  switch (c) {
    case 'pause':
    case 'resume':
      await call(`rein.${c}`, { taskId });
      break;
    case 'steer': {
      const text = await askSteerText(`Rein: Steer ${t.name}`);
      if (!text) return;
      await call('rein.steer', { taskId, text: text.text, ...(text.urgent ? { urgent: true } : {}) });
      break;
    }
    case 'decide': {
      const mine = decisionQueue(tasks).filter((d) => d.taskId === taskId);
      if (mine.length) await answerQueued(mine[0]);
      else void vscode.window.showInformationMessage(`Rein: ${t.name} waits on no decision.`);
      break;
    }
    case 'takeover': {
      const reason = await askReason();
      if (reason === undefined) return;
      const res = await call('rein.takeover', { taskId, ...(reason.trim() ? { reason: reason.trim() } : {}) });
      if (res && t.isolation === 'worktree') await openWorktree(findTask(tasks, taskId) ?? t, true);
      break;
    }
    case 'handback': {
      if (!(await saveBeforeHandback())) return;
      const note = await vscode.window.showInputBox({ title: `Rein: Hand ${t.name} Back`, prompt: 'A note for the agent (optional; Enter to skip)', ignoreFocusOut: true });
      if (note === undefined) return;
      await call('rein.handback', { taskId, ...(note.trim() ? { note: note.trim() } : {}) });
      break;
    }
    case 'abort': {
      // An ended task is said to be, before any prompt (the server would refuse the abort).
      if (!taskActive(t)) {
        void vscode.window.showWarningMessage(`Rein: ${t.name}: the task has ended (${t.status}); there is nothing to abort. Continue it, or start a new task.`);
        return;
      }
      const pick = await vscode.window.showQuickPick(
        [
          { label: "$(discard) Discard the agent's changes", detail: 'Your own edits are kept.', keep: false },
          { label: "$(check) Keep the agent's changes", detail: t.isolation === 'worktree' ? 'Leave its worktree as it is (land or discard it later).' : 'Leave the working tree exactly as it is.', keep: true },
        ],
        { title: `Rein: Abort ${taskLabel(t)}`, placeHolder: 'Stop the task. What about the changes the agent made?', ignoreFocusOut: true },
      );
      if (!pick) return;
      await call('rein.abort', { taskId, keepChanges: pick.keep });
      break;
    }
    case 'transcript':
      await showTaskTranscript(t);
      break;
    case 'land':
      await land(t);
      break;
    case 'discard':
      await discard(t);
      break;
    case 'open':
      await openWorktree(t, false);
      break;
  }
  await fetchTasks();
}

/** `rein.pause {all: true}` / `rein.resume {all: true}`: every task at once; refusals said. */
async function all(what: 'pause' | 'resume'): Promise<void> {
  const res = await call<{ tasks?: { taskId: string; status?: string; refused?: string }[] }>(`rein.${what}`, { all: true });
  if (!res) return;
  await fetchTasks();
  const name = (id: string) => findTask(tasks, id)?.name ?? id;
  const refused = (res.tasks ?? []).filter((r) => r.refused);
  const done = (res.tasks ?? []).filter((r) => !r.refused);
  const verb = what === 'pause' ? 'paused' : 'resumed';
  if (refused.length) {
    // A task waiting on a decision is stopped already: said, but only a warning when none moved.
    const text = `Rein: ${done.length} ${verb}; ${refused.map((r) => `${name(r.taskId)}: ${r.refused}`).join('; ')}`;
    if (done.length) void vscode.window.showInformationMessage(text);
    else void vscode.window.showWarningMessage(text);
  } else {
    vscode.window.setStatusBarMessage(`$(debug-${what}) Rein: ${done.length} task${done.length === 1 ? '' : 's'} ${verb}`, 5000);
  }
}

/** The one queue of decisions across tasks, oldest first; the picked one is answered. */
async function answerDecisions(): Promise<void> {
  await fetchTasks();
  const queue = decisionQueue(tasks);
  if (!queue.length) {
    // No task list (an older server): the task here's decisions.
    if (!tasks) return decide();
    void vscode.window.showInformationMessage('Rein: no decision is waiting.');
    return;
  }
  const now = Date.now();
  const pick = await vscode.window.showQuickPick(
    queue.map((d) => ({ ...queueRow(d, now), d })),
    { title: `Rein: Answer Decisions (${queue.length}, oldest first)`, placeHolder: 'Which one? Each names the task that asks.', ignoreFocusOut: true, matchOnDescription: true },
  );
  if (pick) await answerQueued(pick.d);
}

/** Asks the answer to one queued decision, then `rein.decide {taskId, decisionId, choice}`. */
async function answerQueued(d: QueuedDecision): Promise<void> {
  let choice: string | undefined;
  if (!d.options.length) {
    choice = await vscode.window.showInputBox({ title: `Rein: ${d.task} asks`, prompt: d.question, ignoreFocusOut: true });
  } else {
    const p = await vscode.window.showQuickPick(
      d.options.map((o) => ({ label: o })),
      { title: `Rein: ${d.question}`, placeHolder: `${d.task} waits for your answer`, ignoreFocusOut: true },
    );
    choice = p?.label;
  }
  if (!choice?.trim()) return;
  await call('rein.decide', { taskId: d.taskId, decisionId: d.decisionId, choice: choice.trim() });
  await fetchTasks();
}

/** `rein.land {taskId, as}`: asks how, then says what came over and what waits on you. */
async function land(t: TaskSummary): Promise<void> {
  // The server refuses to land a task at work: said before asking how to land it.
  if (['running', 'awaiting_decision', 'starting'].includes(t.status)) {
    void vscode.window.showWarningMessage(`Rein: ${t.name} is still ${t.status.replace('_', ' ')}: pause it or let it finish, then land it.`);
    return;
  }
  const branch = repoRoot ? await git.git(repoRoot.fsPath, ['rev-parse', '--abbrev-ref', 'HEAD']).then((b) => b.trim(), () => 'the current branch') : 'the current branch';
  const how = await vscode.window.showQuickPick(
    [
      { label: '$(diff) As uncommitted changes', detail: 'Three-way merged into your working tree; you review and commit them yourself.', as: 'changes' },
      { label: `$(git-commit) As a commit on ${branch}`, detail: 'Merged the same way, then committed on your current branch.', as: 'commit' },
    ],
    { title: `Rein: Land ${taskLabel(t)}`, placeHolder: 'Your changes, saved or not, are never overwritten: overlaps become decisions.', ignoreFocusOut: true },
  );
  if (!how) return;
  const res = await call<Landed>('rein.land', { taskId: t.taskId, as: how.as });
  if (!res) return;
  const sum = landSummary(t.name, res);
  log(sum.text);
  await fetchTasks();
  if (!sum.attention) {
    // The server says in a message that it landed; the details stay in the status bar.
    vscode.window.setStatusBarMessage(`$(git-merge) ${sum.text}`, 15000);
    return;
  }
  const answerThem = 'Answer Decisions';
  const pick = await vscode.window.showWarningMessage(sum.text, ...(res.overlaps?.length ? [answerThem] : []));
  if (pick === answerThem) await answerDecisions();
}

/**
 * `rein.discard {taskId}`, asking once. What it would remove of yours (your changes in its
 * worktree, unsaved text for its files) is asked of the server first (`check`): then the one
 * question offers Discard Anyway, naming those files; otherwise it asks to discard at all.
 * (Discarding a running task aborts it first, which may still find changes of yours: the
 * server refuses then, and that is offered.)
 */
async function discard(t: TaskSummary): Promise<void> {
  const would = await call<{ holds?: string[]; unsaved?: string[] }>('rein.discard', { taskId: t.taskId, check: true });
  if (!would) return;
  const yours = [...(would.holds ?? []), ...(would.unsaved ?? []).map((p) => `${p} (unsaved)`)];
  if (yours.length) {
    await discardAnyway(t, yours, `Rein: ${t.name}'s worktree holds your changes (${yours.join(', ')}). Land them first, or discard them with it.`);
    return;
  }
  const yes = 'Discard';
  const pick = await vscode.window.showWarningMessage(
    `Rein: discard ${taskLabel(t)}?`,
    { modal: true, detail: `${taskActive(t) ? 'The agent is stopped, then its' : 'Its'} worktree${t.worktree ? ` (${t.worktree})` : ''} and branch ${t.branch ?? ''} are removed. What it did there is not brought into your working tree.` },
    yes,
  );
  if (pick !== yes) return;
  try {
    await call('rein.discard', { taskId: t.taskId }, true);
  } catch (e) {
    const m = errorMessage('rein.discard', e);
    log(`<- rein.discard refused: ${m.text}`);
    const named = /holds your changes \((.*?)\):/.exec(m.text)?.[1];
    if (!named) {
      void vscode.window.showErrorMessage(m.text.startsWith('Rein') ? m.text : `Rein: ${m.text}`);
      return;
    }
    await discardAnyway(t, named.split(', '), m.text.startsWith('Rein') ? m.text : `Rein: ${m.text}`);
  }
  await fetchTasks();
}

/** The one question over the person's `files` in `t`'s worktree: Discard Anyway forces it. */
async function discardAnyway(t: TaskSummary, files: string[], text: string): Promise<void> {
  const force = `Discard Anyway (removes your changes: ${files.join(', ')})`;
  const again = await vscode.window.showWarningMessage(text, { modal: true }, force);
  if (again !== force) return;
  await call('rein.discard', { taskId: t.taskId, force: true });
  await fetchTasks();
}

/**
 * Opens a worktree task's folder, as `rein.worktreeTakeover` says: a new window (its own
 * `rein lsp` joins the worktree's engine, so your edits there are held like here) or added to
 * this workspace.
 */
async function openWorktree(t: TaskSummary, takingOver: boolean): Promise<void> {
  if (!t.worktree) {
    void vscode.window.showWarningMessage(`Rein: ${t.name} has no worktree to open.`);
    return;
  }
  const uri = vscode.Uri.file(t.worktree);
  const how = vscode.workspace.getConfiguration('rein').get<string>('worktreeTakeover', 'newWindow');
  log(`opening the worktree of ${t.name} (${t.worktree}) ${how === 'addToWorkspace' ? 'in this workspace' : 'in a new window'}`);
  if (how === 'addToWorkspace') {
    const folders = vscode.workspace.workspaceFolders ?? [];
    if (!folders.some((f) => f.uri.fsPath === uri.fsPath)) {
      vscode.workspace.updateWorkspaceFolders(folders.length, 0, { uri, name: `${t.name}: ${t.goal}` });
    }
    await vscode.commands.executeCommand('revealInExplorer', uri).then(undefined, () => undefined);
  } else {
    await vscode.commands.executeCommand('vscode.openFolder', uri, { forceNewWindow: true });
  }
  if (takingOver) notice(true, `Rein: you hold ${t.name}; edit in its worktree, then hand it back.`);
}

/** A worktree task's transcript, in a panel of its own. */
async function showTaskTranscript(t: TaskSummary): Promise<void> {
  if (t.isolation !== 'worktree' || t.taskId === state?.task.id) return showTranscript();
  const held = taskTranscripts.get(t.taskId) ?? { panel: newTaskTranscript(t.taskId, t.name), state: null };
  taskTranscripts.set(t.taskId, held);
  held.state = (await fetchTaskState(t.taskId)) ?? held.state;
  await held.panel.show();
}

function newTaskTranscript(taskId: string, name: string, earlier = false): TranscriptPanel {
  const held = () => taskTranscripts.get(taskId);
  // An earlier task's steps are in its checkpoints, not in the tree now: its diffs open once
  // it is the task here again (continued).
  const elsewhere = earlier
    ? () => void vscode.window.showInformationMessage(`Rein: "${name}" is an earlier task: its transcript is read-only here; continue it to work with its steps again.`)
    : undefined;
  return new TranscriptPanel({
    fetch: async (since) => {
      if (!client || !serverUp()) return undefined;
      try {
        return (await client.sendRequest(ExecuteCommandRequest.type, { command: 'rein.transcript', arguments: [{ taskId, since }] })) as Transcript;
      } catch (e) {
        log(`rein.transcript ${taskId} failed: ${(e as Error)?.message ?? e}`);
        return undefined;
      }
    },
    state: () => held()?.state ?? null,
    running: () => undefined,
    openStep: elsewhere ?? (() => void vscode.window.showInformationMessage(`Rein: ${name}'s steps are in its worktree: open it to see their diffs.`)),
    openFile: elsewhere ?? (() => void vscode.window.showInformationMessage(`Rein: ${name}'s files are in its worktree: open it to see them.`)),
    log,
    icon: vscode.Uri.joinPath(vscode.Uri.file(extensionPath), 'media', 'rein.svg'),
    title: earlier ? `Rein: Transcript (earlier: ${name})` : `Rein: Transcript (${name})`,
    name,
    earlier,
    note: earlier ? 'An earlier task of this working tree, read-only. Rein: Continue the Task… on its History row makes it the task here again.' : undefined,
    taskId,
  });
}

/** A worktree or earlier task's transcript VS Code kept open across a reload. */
async function restoreTaskTranscript(panel: vscode.WebviewPanel, taskId: string, saved?: string, earlier = false): Promise<void> {
  // Named as it was (the server may not answer yet: its state comes with the next task list).
  const name = findTask(tasks, taskId)?.name ?? saved ?? taskId;
  const held = { panel: newTaskTranscript(taskId, name, earlier), state: await fetchTaskState(taskId) };
  taskTranscripts.set(taskId, held);
  await held.panel.restore(panel);
}
