#!/usr/bin/env python3
"""A scripted stand-in for the OpenAI Responses API, for driving the real Codex against it.

Usage: openai_responses_model.py SCRIPT.json LOG.jsonl

Listens on 127.0.0.1, port 0, and prints `PORT <n>` as its first stdout line. Every request
(method, path, body) is appended to LOG.jsonl as one JSON line, so a test can read what Codex
sent (tools, input, the reconcile report Rein prompted with).

`POST /v1/responses` answers with a streamed Responses SSE: `response.created`,
`response.in_progress`, then per output item `response.output_item.added`, text deltas for a
message, `response.output_item.done`, and `response.completed` with usage.

The script is {"turns": [turn, ...]}; a turn is
  {"items": [item, ...], "delay_s": 0, "when": "text" or ["text", "other text"]}
and each item one of
  {"message": "text"}
  {"function_call": {"name": "shell", "arguments": {...} or "json text"}}
  {"custom_tool_call": {"name": "apply_patch", "input": "*** Begin Patch ..."}}
  {"raw": {... a Responses output item as is ...}}
Each request takes one unused turn: first one with a `when` text that occurs in the latest input
item (the last message or tool output Codex sent), else the first unused turn without `when`.
When none is left the model says "Nothing left to do." and ends. `delay_s` holds the stream
open (after `response.created`) before the items, so a test can pause or take over meanwhile.
Requests that are not a model turn (Codex also asks for things like titles, with no tools) are
answered with a short message and take no turn.
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
COUNTER = [0]


def log(entry):
    with LOCK:
        with open(LOG_PATH, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def next_id(prefix):
    with LOCK:
        COUNTER[0] += 1
        return "%s_%d" % (prefix, COUNTER[0])


def latest_input_text(body):
    items = body.get("input")
    if isinstance(items, str):
        return items
    if not isinstance(items, list) or not items:
        return ""
    return json.dumps(items[-1])


def choose_turn(body):
    text = latest_input_text(body)
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
    return None, {"items": [{"message": "Nothing left to do."}]}


def build_item(spec):
    if "message" in spec:
        return {
            "type": "message",
            "id": next_id("msg"),
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": spec["message"], "annotations": []}],
        }
    if "function_call" in spec:
        fc = spec["function_call"]
        args = fc.get("arguments", {})
        if not isinstance(args, str):
            args = json.dumps(args)
        return {
            "type": "function_call",
            "id": next_id("fc"),
            "call_id": fc.get("call_id") or next_id("call"),
            "name": fc["name"],
            "arguments": args,
            "status": "completed",
        }
    if "custom_tool_call" in spec:
        ct = spec["custom_tool_call"]
        return {
            "type": "custom_tool_call",
            "id": next_id("ctc"),
            "call_id": ct.get("call_id") or next_id("call"),
            "name": ct["name"],
            "input": ct["input"],
            "status": "completed",
        }
    if "raw" in spec:
        return spec["raw"]
    raise ValueError("unknown item %r" % (spec,))


USAGE = {
    "input_tokens": 100,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 20,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 120,
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return raw.decode("utf-8", "replace")

    def _json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        log({"method": "GET", "path": self.path, "t": time.time()})
        if self.path.rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": [], "models": []})
        else:
            self._json(404, {"error": {"message": "not here"}})

    def do_POST(self):
        body = self._body()
        path = self.path.split("?")[0]
        if not path.endswith("/responses"):
            log({"method": "POST", "path": self.path, "body": body, "t": time.time()})
            self._json(404, {"error": {"message": "not here"}})
            return
        if not isinstance(body, dict) or not body.get("tools"):
            # Not an agent turn (no tools): answer without consuming the script.
            idx, turn = None, {"items": [{"message": "Task"}]}
        else:
            idx, turn = choose_turn(body)
        log({"method": "POST", "path": self.path, "turn": idx, "body": body, "t": time.time()})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        rid = next_id("resp")
        seq = [0]

        def event(kind, **fields):
            seq[0] += 1
            fields["type"] = kind
            fields["sequence_number"] = seq[0]
            self.wfile.write(("event: %s\ndata: %s\n\n" % (kind, json.dumps(fields))).encode())
            self.wfile.flush()

        base = {"id": rid, "object": "response", "created_at": int(time.time()), "model": body.get("model") if isinstance(body, dict) else "mock", "output": []}
        try:
            event("response.created", response=dict(base, status="in_progress"))
            event("response.in_progress", response=dict(base, status="in_progress"))
            delay = float(turn.get("delay_s") or 0)
            end = time.time() + delay
            while time.time() < end:
                time.sleep(min(0.1, max(0.0, end - time.time())))
            outputs = []
            for n, spec in enumerate(turn.get("items", [])):
                item = build_item(spec)
                added = dict(item)
                if item["type"] == "message":
                    added["content"] = []
                    added["status"] = "in_progress"
                event("response.output_item.added", output_index=n, item=added)
                if item["type"] == "message":
                    text = item["content"][0]["text"]
                    event("response.content_part.added", item_id=item["id"], output_index=n, content_index=0, part={"type": "output_text", "text": "", "annotations": []})
                    event("response.output_text.delta", item_id=item["id"], output_index=n, content_index=0, delta=text)
                    event("response.output_text.done", item_id=item["id"], output_index=n, content_index=0, text=text)
                event("response.output_item.done", output_index=n, item=item)
                outputs.append(item)
            event("response.completed", response=dict(base, status="completed", output=outputs, usage=USAGE))
        except (BrokenPipeError, ConnectionResetError):
            log({"event": "client closed", "turn": idx, "t": time.time()})


def main():
    global LOG_PATH, SCRIPT
    with open(sys.argv[1], encoding="utf-8") as f:
        SCRIPT = json.load(f)
    LOG_PATH = sys.argv[2]
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    print("PORT %d" % srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
