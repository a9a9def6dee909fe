#!/usr/bin/env python3
"""A scripted stand-in for the Anthropic Messages API, for driving the real Claude Code
harness (claude-agent-acp) in end-to-end tests. Standard library only.

    python3 anthropic_model.py SCRIPT.json [PORT_FILE] [LOG_FILE]

Listens on 127.0.0.1 on a free port and prints `PORT <n>` as its first stdout line (and
writes `<n>` to PORT_FILE when given). Every request is appended to LOG_FILE (default: the
script path + ".log") as one JSON line: {"n", "method", "path", "kind", "turn", "body"}.

The script:

    {
      "turns": [
        {"blocks": [{"type": "tool_use", "name": "Write",
                     "input": {"file_path": "/abs/a.txt", "content": "hi\\n"}}]},
        {"when": "handed back", "delay_s": 0.5,
         "blocks": [{"type": "text", "text": "done"}]}
      ],
      "side_text": "ok",
      "fallback_text": "Nothing more to do."
    }

Only requests of the main agent loop (they carry tools) play turns; side requests (title
generation, quota checks, summaries: no tools; prompt suggestions: tools, but their last
user message holds one of `side_markers`, default ["[SUGGESTION MODE"]) are answered with `side_text`. Each main
request takes the first unused turn whose `when` (a substring, or a list of substrings that
must all occur; `when_any`: a list of which one must occur) is found in the last user message (tool results included); a turn without
`when` matches anything, so turns play in order unless a `when` turn fits first. When no
turn is left, the answer is `fallback_text` with `end_turn`.

A block is a `text`, a `tool_use` or a `thinking` block (`{"type": "thinking", "thinking":
TEXT}`, streamed as thinking deltas and a signature). A turn may carry `delay_s` (think this long before answering; a client that hangs up
meanwhile gets the turn back unused, as a model that never answered), `stop_reason`
(default: `tool_use` when the turn has a tool_use block, else `end_turn`), and `once`
(keep the turn consumed even when the client hung up during its delay).
"""

import json
import os
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {"used": set(), "n": 0, "tool_ids": 0}
SCRIPT = {}
LOG_PATH = None


def log(entry):
    with LOCK:
        with open(LOG_PATH, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def flatten(content):
    """The text of a message's content: strings, text blocks and tool_result contents."""
    if isinstance(content, str):
        return content
    out = []
    if isinstance(content, list):
        for b in content:
            if not isinstance(b, dict):
                continue
            t = b.get("type")
            if t == "text":
                out.append(b.get("text", ""))
            elif t == "tool_result":
                out.append("[tool_result%s] " % (" error" if b.get("is_error") else ""))
                out.append(flatten(b.get("content", "")))
    return "\n".join(out)


def last_user_text(body):
    for m in reversed(body.get("messages", [])):
        if m.get("role") == "user":
            return flatten(m.get("content"))
    return ""


def matches(turn, text):
    anyof = turn.get("when_any")
    if anyof is not None and not any(s in text for s in anyof):
        return False
    w = turn.get("when")
    if w is None:
        return True
    if isinstance(w, str):
        w = [w]
    return all(s in text for s in w)


def pick_turn(text):
    with LOCK:
        for i, t in enumerate(SCRIPT.get("turns", [])):
            if i not in STATE["used"] and matches(t, text):
                STATE["used"].add(i)
                return i, t
    return None, None


def unuse(i):
    with LOCK:
        STATE["used"].discard(i)


def next_tool_id():
    with LOCK:
        STATE["tool_ids"] += 1
        return "toolu_%04d_%d" % (STATE["tool_ids"], os.getpid())


def is_main(body):
    """The main agent loop carries tools; so does Claude Code's prompt-suggestion side
    request, told apart by its marker in the last user message."""
    tools = body.get("tools") or []
    if not tools:
        return False
    text = last_user_text(body)
    markers = SCRIPT.get("side_markers", ["[SUGGESTION MODE"])
    return not any(m in text for m in markers)


def usage(out_tokens=1):
    return {
        "input_tokens": 10,
        "output_tokens": out_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet stderr
        pass

    def _json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", "req_stand_in")
        self.end_headers()
        self.wfile.write(data)

    def _body(self):
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return {"_raw": raw.decode("utf-8", "replace")}

    def do_GET(self):
        with LOCK:
            STATE["n"] += 1
            n = STATE["n"]
        log({"n": n, "method": "GET", "path": self.path, "kind": "unknown"})
        if self.path.startswith("/v1/models"):
            self._json(200, {"data": [], "has_more": False, "first_id": None, "last_id": None})
        else:
            self._json(200, {})

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self):
        body = self._body()
        path = self.path.split("?", 1)[0]
        with LOCK:
            STATE["n"] += 1
            n = STATE["n"]
        if path == "/v1/messages/count_tokens":
            log({"n": n, "method": "POST", "path": self.path, "kind": "count_tokens"})
            self._json(200, {"input_tokens": 100})
            return
        if path != "/v1/messages":
            log({"n": n, "method": "POST", "path": self.path, "kind": "unknown", "body": body})
            self._json(200, {})
            return
        model = body.get("model", "claude-stand-in")
        if not is_main(body):
            log({"n": n, "method": "POST", "path": self.path, "kind": "side", "body": body})
            blocks = [{"type": "text", "text": SCRIPT.get("side_text", "ok")}]
            self._answer(body, model, blocks, "end_turn")
            return
        text = last_user_text(body)
        i, turn = pick_turn(text)
        log({"n": n, "method": "POST", "path": self.path, "kind": "main", "turn": i, "body": body})
        if turn is None:
            blocks = [{"type": "text", "text": SCRIPT.get("fallback_text", "Nothing more to do.")}]
            self._answer(body, model, blocks, "end_turn")
            return
        delay = float(turn.get("delay_s", 0))
        if delay > 0 and not self._think(delay):
            if not turn.get("once"):
                unuse(i)
            log({"n": n, "event": "hung up while thinking", "turn": i})
            return
        blocks = []
        for b in turn.get("blocks", []):
            b = dict(b)
            if b.get("type") == "tool_use":
                b.setdefault("id", next_tool_id())
            blocks.append(b)
        stop = turn.get("stop_reason") or (
            "tool_use" if any(b.get("type") == "tool_use" for b in blocks) else "end_turn"
        )
        try:
            self._answer(body, model, blocks, stop)
        except (BrokenPipeError, ConnectionResetError):
            if not turn.get("once"):
                unuse(i)
            log({"n": n, "event": "hung up while answering", "turn": i})

    def _think(self, delay):
        """Sleeps `delay` seconds; False as soon as the client hangs up."""
        end = time.monotonic() + delay
        sock = self.connection
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return True
            r, _, _ = select.select([sock], [], [], min(left, 0.05))
            if r:
                try:
                    if sock.recv(1, socket.MSG_PEEK) == b"":
                        return False
                except OSError:
                    return False
                time.sleep(min(left, 0.05))

    def _answer(self, body, model, blocks, stop):
        msg_id = "msg_%d" % int(time.time() * 1e6)
        if not body.get("stream"):
            self._json(
                200,
                {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": blocks,
                    "stop_reason": stop,
                    "stop_sequence": None,
                    "usage": usage(5),
                },
            )
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("request-id", "req_stand_in")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True

        def ev(name, data):
            self.wfile.write(("event: %s\ndata: %s\n\n" % (name, json.dumps(data))).encode())
            self.wfile.flush()

        ev(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": usage(1),
                },
            },
        )
        for idx, b in enumerate(blocks):
            if b.get("type") == "tool_use":
                ev(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": idx,
                        "content_block": {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}},
                    },
                )
                js = json.dumps(b.get("input", {}))
                for k in range(0, len(js), 40):
                    ev(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": idx,
                            "delta": {"type": "input_json_delta", "partial_json": js[k : k + 40]},
                        },
                    )
            elif b.get("type") == "thinking":
                ev(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": idx,
                        "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                    },
                )
                t = b.get("thinking", "")
                for k in range(0, max(len(t), 1), 40):
                    ev(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": idx,
                            "delta": {"type": "thinking_delta", "thinking": t[k : k + 40]},
                        },
                    )
                ev(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": idx, "delta": {"type": "signature_delta", "signature": "stand-in"}},
                )
            else:
                ev(
                    "content_block_start",
                    {"type": "content_block_start", "index": idx, "content_block": {"type": "text", "text": ""}},
                )
                t = b.get("text", "")
                for k in range(0, max(len(t), 1), 40):
                    ev(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": idx,
                            "delta": {"type": "text_delta", "text": t[k : k + 40]},
                        },
                    )
            ev("content_block_stop", {"type": "content_block_stop", "index": idx})
        ev(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        )
        ev("message_stop", {"type": "message_stop"})


def main():
    global SCRIPT, LOG_PATH
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    with open(sys.argv[1], encoding="utf-8") as f:
        SCRIPT = json.load(f)
    port_file = sys.argv[2] if len(sys.argv) > 2 else None
    LOG_PATH = sys.argv[3] if len(sys.argv) > 3 else sys.argv[1] + ".log"
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    port = server.server_address[1]
    if port_file:
        tmp = port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.rename(tmp, port_file)
    print("PORT %d" % port, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
