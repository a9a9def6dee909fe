"""A test agent on the official ACP Python SDK (PyPI agent-client-protocol, pinned in
requirements.txt): the SDK does the framing, the handshake and the dispatch; what the agent does
is the scenario's, the same JSON that agent.mjs plays (see README.md beside this file).

Usage: python agent.py SCENARIO.json. Everything it does and every answer it gets is appended
to the scenario's log as JSON lines, for tests/acp_sdk.rs to read.
"""

import asyncio
import hashlib
import json
import os
import sys
from typing import Any

from acp import PROTOCOL_VERSION, RequestError, run_agent
from acp.helpers import start_tool_call, update_agent_message_text, update_tool_call
from acp.schema import (
    AgentCapabilities,
    InitializeResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    ToolCallLocation,
    ToolCallUpdate,
)

SESSION = "sdk-session"

with open(sys.argv[1], encoding="utf-8") as f:
    scenario = json.load(f)


def log(entry: dict) -> None:
    with open(scenario["log"], "a", encoding="utf-8") as f:
        f.write(json.dumps({"sdk": "python", **entry}) + "\n")


# Which process of the scenario this is: earlier ones logged a start each.
try:
    with open(scenario["log"], encoding="utf-8") as f:
        started = sum('"event": "start"' in line for line in f)
except FileNotFoundError:
    started = 0
turns = (scenario["sessions"][started] if "sessions" in scenario else scenario.get("turns")) or []
log({"event": "start", "pid": os.getpid(), "process": started})


def crash(code: int, when: str) -> None:
    sys.stderr.write(f"sdk agent (python): crashing {when} with code {code}\n")
    sys.stderr.flush()
    os._exit(code)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ScenarioAgent:
    def __init__(self) -> None:
        self.client: Any = None
        self.cwd = os.getcwd()
        self.turn = 0
        self.cancelled = asyncio.Event()

    def on_connect(self, conn: Any) -> None:
        self.client = conn

    def abs(self, path: str) -> str:
        return path if os.path.isabs(path) else os.path.join(self.cwd, path)

    async def initialize(self, protocol_version: int, client_capabilities=None, client_info=None, **kwargs):
        caps = client_capabilities
        log({
            "event": "initialize",
            "fs_read": bool(caps and caps.fs and caps.fs.read_text_file),
            "fs_write": bool(caps and caps.fs and caps.fs.write_text_file),
            "terminal": bool(caps and caps.terminal),
        })
        if "crash_on_initialize" in scenario:
            crash(scenario["crash_on_initialize"], "on initialize")
        if scenario.get("silent"):
            log({"event": "silent"})
            await asyncio.Event().wait()
        return InitializeResponse(protocol_version=PROTOCOL_VERSION, agent_capabilities=AgentCapabilities())

    async def new_session(self, cwd: str, mcp_servers=None, **kwargs):
        self.cwd = cwd
        log({"event": "session", "cwd": cwd, "mcp_servers": len(mcp_servers or [])})
        return NewSessionResponse(session_id=SESSION)

    async def cancel(self, session_id: str, **kwargs) -> None:
        log({"event": "cancel"})
        # An agent told to ignore cancel keeps waiting: only the scenario's own action ends it.
        if not any(a.get("ignore_cancel") for a in self.current):
            self.cancelled.set()

    async def prompt(self, prompt, session_id: str, **kwargs):
        n = self.turn
        self.turn += 1
        self.cancelled.clear()
        self.current = turns[n] if n < len(turns) else []
        log({"event": "prompt", "turn": n, "text": "\n".join(getattr(b, "text", "") for b in prompt)})
        for action in self.current:
            if self.cancelled.is_set():
                break
            act = asyncio.ensure_future(self.act(action))
            stop = asyncio.ensure_future(self.cancelled.wait())
            await asyncio.wait({act, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if not act.done():
                act.cancel()
            elif act.exception():
                raise act.exception()
        reason = "cancelled" if self.cancelled.is_set() else "end_turn"
        log({"event": "stop", "turn": n, "reason": reason})
        return PromptResponse(stop_reason=reason)

    async def act(self, a: dict) -> None:
        c, sid = self.client, SESSION
        if "say" in a:
            await c.session_update(session_id=sid, update=update_agent_message_text(a["say"]))
        elif "write" in a:
            w = a["write"]
            try:
                await c.write_text_file(session_id=sid, path=self.abs(w["path"]), content=w["content"])
                log({"event": "write", "path": w["path"], "ok": True})
            except RequestError as e:
                log({"event": "write", "path": w["path"], "ok": False, "error": str(e)})
        elif "read" in a:
            try:
                r = await c.read_text_file(session_id=sid, path=self.abs(a["read"]))
                log({"event": "read", "path": a["read"], "ok": True,
                     "bytes": len(r.content.encode("utf-8")), "sha256": sha256(r.content)})
            except RequestError as e:
                log({"event": "read", "path": a["read"], "ok": False, "error": str(e), "code": e.code})
        elif "roundtrip" in a:
            # Read a file and write exactly what came back, to itself and to a copy.
            path, to = a["roundtrip"]["path"], a["roundtrip"]["to"]
            r = await c.read_text_file(session_id=sid, path=self.abs(path))
            log({"event": "read", "path": path, "ok": True,
                 "bytes": len(r.content.encode("utf-8")), "sha256": sha256(r.content)})
            for target in (path, to):
                await c.write_text_file(session_id=sid, path=self.abs(target), content=r.content)
                log({"event": "write", "path": target, "ok": True})
        elif "permission" in a:
            p = a["permission"]
            r = await c.request_permission(
                session_id=sid,
                tool_call=ToolCallUpdate(tool_call_id=f"perm-{p['command']}", title=p["title"],
                                         kind="execute", raw_input={"command": p["command"]}),
                options=[
                    PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
                    PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
                ],
            )
            o = r.outcome
            outcome = o.option_id if o.outcome == "selected" else o.outcome
            log({"event": "permission", "title": p["title"], "outcome": outcome})
        elif "terminal" in a:
            await self.terminal(a["terminal"])
        elif "edit_file" in a:
            # The agent writes the file itself and reports the tool call, as a harness does.
            e = a["edit_file"]
            full, tid = self.abs(e["path"]), f"edit-{e['path']}"
            await c.session_update(session_id=sid, update=start_tool_call(
                tid, e["title"], kind="edit", status="in_progress", locations=[ToolCallLocation(path=full)]))
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w", encoding="utf-8", newline="") as f:
                f.write(e["content"])
            await c.session_update(session_id=sid, update=update_tool_call(tid, status="completed"))
            log({"event": "edited", "path": e["path"]})
        elif a.get("ignore_cancel"):
            log({"event": "ignoring_cancel"})
            await asyncio.Event().wait()
        elif "crash" in a:
            crash(a["crash"], "mid-turn")
        elif "garbage" in a:
            # Straight to stdout, around the SDK: a stray print, as a buggy agent makes.
            os.write(1, (a["garbage"] + "\n").encode("utf-8"))
            log({"event": "garbage"})
        else:
            log({"event": "unknown_action", "action": a})

    async def terminal(self, t: dict) -> None:
        """terminal/create; with `poll`, its output until it holds the text (logged as
        terminal_partial, with whether it had exited); with `kill`, kill; then its exit, its
        output and release."""
        c, sid = self.client, SESSION
        try:
            created = await c.create_terminal(session_id=sid, command=t["command"], args=t.get("args", []))
        except RequestError as e:
            log({"event": "terminal", "ok": False, "error": str(e)})
            return
        tid = created.terminal_id
        if "poll" in t:
            while True:
                o = await c.terminal_output(session_id=sid, terminal_id=tid)
                if t["poll"] in o.output:
                    log({"event": "terminal_partial", "output": o.output, "exited": o.exit_status is not None})
                    break
                await asyncio.sleep(0.02)
        if t.get("kill"):
            await c.kill_terminal(session_id=sid, terminal_id=tid)
            log({"event": "terminal_killed", "ok": True})
        exit_ = (await c.wait_for_terminal_exit(session_id=sid, terminal_id=tid))
        o = await c.terminal_output(session_id=sid, terminal_id=tid)
        await c.release_terminal(session_id=sid, terminal_id=tid)
        log({"event": "terminal", "ok": True, "output": o.output,
             "exit_code": exit_.exit_code, "signal": exit_.signal})


if __name__ == "__main__":
    asyncio.run(run_agent(ScenarioAgent()))
