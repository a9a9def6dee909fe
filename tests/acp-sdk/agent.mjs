// A test agent on the official ACP TypeScript SDK (@agentclientprotocol/sdk, pinned in
// package.json): the SDK does the framing, the handshake and the dispatch; what the agent does
// is the scenario's, the same JSON that agent.py plays (see README.md beside this file).
//
// Usage: node agent.mjs SCENARIO.json. Everything it does and every answer it gets is
// appended to the scenario's log as JSON lines, for tests/acp_sdk.rs to read.
import { createHash } from "node:crypto";
import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const SESSION = "sdk-session";
const scenario = JSON.parse(readFileSync(process.argv[2], "utf8"));
const log = (entry) => appendFileSync(scenario.log, JSON.stringify({ sdk: "typescript", ...entry }) + "\n");
// Which process of the scenario this is: earlier ones logged a start each.
let started = 0;
try {
  started = readFileSync(scenario.log, "utf8").split("\n").filter((l) => l.includes('"event":"start"')).length;
} catch {}
const turns = (scenario.sessions ? scenario.sessions[started] : scenario.turns) ?? [];
log({ event: "start", pid: process.pid, process: started });

let cwd = process.cwd();
let turn = 0;
let cancelled = false;
let wake = () => {};
const woken = () => new Promise((resolve) => (wake = resolve));
const abs = (p) => (p.startsWith("/") ? p : join(cwd, p));
const sha256 = (text) => createHash("sha256").update(text, "utf8").digest("hex");

function crash(code, when) {
  process.stderr.write(`sdk agent (typescript): crashing ${when} with code ${code}\n`);
  process.exit(code);
}

async function act(client, a) {
  const sessionId = SESSION;
  if (a.say !== undefined) {
    await client.notify(acp.methods.client.session.update, {
      sessionId,
      update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: a.say } },
    });
  } else if (a.write) {
    try {
      await client.request(acp.methods.client.fs.writeTextFile, { sessionId, path: abs(a.write.path), content: a.write.content });
      log({ event: "write", path: a.write.path, ok: true });
    } catch (e) {
      log({ event: "write", path: a.write.path, ok: false, error: String(e?.message ?? e) });
    }
  } else if (a.read !== undefined) {
    try {
      const r = await client.request(acp.methods.client.fs.readTextFile, { sessionId, path: abs(a.read) });
      log({ event: "read", path: a.read, ok: true, bytes: Buffer.byteLength(r.content, "utf8"), sha256: sha256(r.content) });
    } catch (e) {
      log({ event: "read", path: a.read, ok: false, error: String(e?.message ?? e), code: e?.code });
    }
  } else if (a.roundtrip) {
    // Read a file and write exactly what came back, to itself and to a copy.
    const { path, to } = a.roundtrip;
    const r = await client.request(acp.methods.client.fs.readTextFile, { sessionId, path: abs(path) });
    log({ event: "read", path, ok: true, bytes: Buffer.byteLength(r.content, "utf8"), sha256: sha256(r.content) });
    for (const target of [path, to]) {
      await client.request(acp.methods.client.fs.writeTextFile, { sessionId, path: abs(target), content: r.content });
      log({ event: "write", path: target, ok: true });
    }
  } else if (a.permission) {
    const p = a.permission;
    const r = await client.request(acp.methods.client.session.requestPermission, {
      sessionId,
      toolCall: { toolCallId: `perm-${p.command}`, title: p.title, kind: "execute", rawInput: { command: p.command } },
      options: [
        { optionId: "allow", name: "Allow", kind: "allow_once" },
        { optionId: "reject", name: "Reject", kind: "reject_once" },
      ],
    });
    const outcome = r.outcome.outcome === "selected" ? r.outcome.optionId : r.outcome.outcome;
    log({ event: "permission", title: p.title, outcome });
  } else if (a.terminal) {
    await terminal(client, a.terminal);
  } else if (a.edit_file) {
    // The agent writes the file itself and reports the tool call, as a harness does.
    const { path, content, title } = a.edit_file;
    const toolCallId = `edit-${path}`;
    await client.notify(acp.methods.client.session.update, {
      sessionId,
      update: { sessionUpdate: "tool_call", toolCallId, title, kind: "edit", status: "in_progress", locations: [{ path: abs(path) }] },
    });
    mkdirSync(dirname(abs(path)), { recursive: true });
    writeFileSync(abs(path), content);
    await client.notify(acp.methods.client.session.update, {
      sessionId,
      update: { sessionUpdate: "tool_call_update", toolCallId, status: "completed" },
    });
    log({ event: "edited", path });
  } else if (a.ignore_cancel) {
    log({ event: "ignoring_cancel" });
    await new Promise(() => {});
  } else if (a.crash !== undefined) {
    crash(a.crash, "mid-turn");
  } else if (a.garbage !== undefined) {
    // Straight to stdout, around the SDK: a stray print, as a buggy agent makes.
    process.stdout.write(a.garbage + "\n");
    log({ event: "garbage" });
  } else {
    log({ event: "unknown_action", action: a });
  }
}

// terminal/create through the SDK's handle; with `poll`, its output until it holds the text
// (logged as terminal_partial, with whether it had exited); with `kill`, kill; then its exit,
// its output and release.
async function terminal(client, t) {
  let term;
  try {
    term = await client.createTerminal({ sessionId: SESSION, command: t.command, args: t.args ?? [] });
  } catch (e) {
    log({ event: "terminal", ok: false, error: String(e?.message ?? e) });
    return;
  }
  if (t.poll) {
    for (;;) {
      const o = await term.currentOutput();
      if (o.output.includes(t.poll)) {
        log({ event: "terminal_partial", output: o.output, exited: o.exitStatus != null });
        break;
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  if (t.kill) {
    await term.kill();
    log({ event: "terminal_killed", ok: true });
  }
  const exit = await term.waitForExit();
  const o = await term.currentOutput();
  await term.release();
  log({ event: "terminal", ok: true, output: o.output, exit_code: exit.exitCode ?? null, signal: exit.signal ?? null });
}

const app = acp
  .agent({ name: "rein-sdk-test-agent" })
  .onRequest(acp.methods.agent.initialize, async ({ params }) => {
    const fs = params.clientCapabilities?.fs ?? {};
    log({ event: "initialize", fs_read: fs.readTextFile ?? false, fs_write: fs.writeTextFile ?? false, terminal: params.clientCapabilities?.terminal ?? false });
    if (scenario.crash_on_initialize !== undefined) crash(scenario.crash_on_initialize, "on initialize");
    if (scenario.silent) {
      log({ event: "silent" });
      await new Promise(() => {});
    }
    return { protocolVersion: acp.PROTOCOL_VERSION, agentCapabilities: {}, authMethods: [] };
  })
  .onRequest(acp.methods.agent.session.new, async ({ params }) => {
    cwd = params.cwd;
    log({ event: "session", cwd: params.cwd, mcp_servers: params.mcpServers.length });
    return { sessionId: SESSION };
  })
  .onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
    const n = turn++;
    cancelled = false;
    log({ event: "prompt", turn: n, text: params.prompt.map((b) => b.text ?? "").join("\n") });
    for (const a of turns[n] ?? []) {
      if (cancelled) break;
      await Promise.race([act(client, a), woken()]);
    }
    const stopReason = cancelled ? "cancelled" : "end_turn";
    log({ event: "stop", turn: n, reason: stopReason });
    return { stopReason };
  })
  .onNotification(acp.methods.agent.session.cancel, async () => {
    log({ event: "cancel" });
    cancelled = true;
    // An agent told to ignore cancel keeps waiting: only the scenario's own action ends it.
    if (!(turns[turn - 1] ?? []).some((a) => a.ignore_cancel)) wake();
  });

const connection = app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
await connection.closed;
