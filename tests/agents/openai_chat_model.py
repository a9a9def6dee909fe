#!/usr/bin/env python3
"""A scripted stand-in for the OpenAI chat-completions API, for driving real harnesses that
speak it (Qwen Code, OpenCode, Copilot CLI) against it.

Usage: openai_chat_model.py SCRIPT.json LOG.jsonl

Listens on 127.0.0.1, port 0, and prints `PORT <n>` as its first stdout line. Every request
is appended to LOG.jsonl as one JSON line ({n, method, path, kind, turn, body}): `kind` is
`main` for a request that offers tools (an agent turn, which takes a scripted turn) and
`aside` for the rest (titles, summaries), answered with a short text.

`POST .../chat/completions` answers streamed (`stream: true`: `chat.completion.chunk` events,
then `data: [DONE]`) or whole. `GET .../models` lists the model asked for.

The script is {"turns": [turn, ...]}; a turn is
  {"say": TEXT?, "calls": [{"name": TOOL, "arguments": {...}}...]?, "when": TEXT or [TEXT...]?,
   "delay_s": SECONDS?}
Each agent request takes one unused turn: the first with a `when` text found in its last
message (its content as JSON text), else the first unused turn without `when`. When none is
left the model says "Nothing left to do." and stops. A turn whose calls name a tool the
request does not offer is still sent (the harness says what it makes of it). `delay_s` holds
the stream open (after the first chunk) before the rest, so a test can pause or take over
meanwhile.
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
SCRIPT = {"turns": []}
USED = set()
LOG_PATH = None
COUNT = [0]


def log(entry):
    with LOCK:
        COUNT[0] += 1
        entry["n"] = COUNT[0]
        with open(LOG_PATH, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def last_message_text(body):
    msgs = body.get("messages") or []
    return json.dumps(msgs[-1]) if msgs else ""


def choose_turn(body):
    text = last_message_text(body)
    with LOCK:
        turns = SCRIPT.get("turns", [])
        for i, t in enumerate(turns):
            when = t.get("when")
            if isinstance(when, str):
                when = [when]
            if i not in USED and when and any(w in text for w in when):
                USED.add(i)
                return i, t
        for i, t in enumerate(turns):
            if i not in USED and not t.get("when"):
                USED.add(i)
                return i, t
    return None, {"say": "Nothing left to do."}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return {"raw": raw.decode("utf-8", "replace")}

    def _json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        log({"method": "GET", "path": self.path, "kind": "get"})
        if self.path.split("?")[0].rstrip("/").endswith("/models"):
            model = {"id": "mock", "object": "model", "owned_by": "rein-tests",
                     "capabilities": {"supports": {"tool_calls": True, "streaming": True}}}
            self._json(200, {"object": "list", "data": [model]})
        else:
            self._json(404, {"error": {"message": "not here"}})

    def do_POST(self):
        body = self._body()
        path = self.path.split("?")[0]
        if not path.endswith("/chat/completions"):
            log({"method": "POST", "path": self.path, "kind": "other", "body": body})
            self._json(404, {"error": {"message": "not here"}})
            return
        if body.get("tools"):
            kind = "main"
            idx, turn = choose_turn(body)
        else:
            kind, idx, turn = "aside", None, {"say": "Task"}
        log({"method": "POST", "path": self.path, "kind": kind, "turn": idx, "body": body})
        model = body.get("model") or "mock"
        cid = "chatcmpl-%d" % COUNT[0]
        calls = [
            {
                "index": i,
                "id": "call_%d_%d" % (COUNT[0], i),
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}))},
            }
            for i, c in enumerate(turn.get("calls", []))
        ]
        finish = "tool_calls" if calls else "stop"
        usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
        if not body.get("stream"):
            message = {"role": "assistant", "content": turn.get("say")}
            if calls:
                message["tool_calls"] = [dict(c) for c in calls]
                for c in message["tool_calls"]:
                    del c["index"]
            self._json(200, {"id": cid, "object": "chat.completion", "created": int(time.time()),
                             "model": model, "usage": usage,
                             "choices": [{"index": 0, "message": message, "finish_reason": finish}]})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

        def chunk(delta, finish_reason=None, with_usage=False):
            obj = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()),
                   "model": model,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}
            if with_usage:
                obj["usage"] = usage
            self.wfile.write(("data: %s\n\n" % json.dumps(obj)).encode())
            self.wfile.flush()

        try:
            chunk({"role": "assistant", "content": ""})
            end = time.time() + float(turn.get("delay_s") or 0)
            while time.time() < end:
                time.sleep(min(0.1, max(0.0, end - time.time())))
            if turn.get("say"):
                chunk({"content": turn["say"]})
            for c in calls:
                chunk({"tool_calls": [c]})
            chunk({}, finish, with_usage=True)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            log({"event": "client closed", "turn": idx})


def main():
    global LOG_PATH, SCRIPT
    with open(sys.argv[1], encoding="utf-8") as f:
        SCRIPT = json.load(f)
    LOG_PATH = sys.argv[-1]
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    print("PORT %d" % srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
