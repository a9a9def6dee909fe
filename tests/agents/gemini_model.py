#!/usr/bin/env python3
"""A scripted stand-in for the Gemini API (generativelanguage v1beta), for driving the real
Gemini CLI (`gemini --acp`) in end-to-end tests. Standard library only.

    python3 gemini_model.py SCRIPT.json LOG.jsonl

Listens on 127.0.0.1 on a free port and prints `PORT <n>` as its first stdout line. Gemini CLI
finds it through `GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:<n>`. Every request is appended to
LOG.jsonl as one JSON line: {"n", "method", "path", "kind", "turn", "body", "t"}.

Endpoints:
  POST /v1beta/models/{model}:streamGenerateContent?alt=sse   server-sent events, one
       `data: {"candidates": [{"content": {"role": "model", "parts": [...]},
       "finishReason": "STOP"}], "usageMetadata": {...}}` line per part
  POST /v1beta/models/{model}:generateContent                  the same answer as one JSON
  POST /v1beta/models/{model}:countTokens                      {"totalTokens": 100}
  GET  /v1beta/models[/{model}]                                a model list / the model

The script is {"turns": [turn, ...], "side_text": "..."}; a turn is
  {"parts": [part, ...], "when": "text" or ["text", ...], "when_any": [...],
   "delay_s": 0, "once": false}
and each part one of
  {"text": "..."}
  {"functionCall": {"name": "write_file", "args": {...}}}
Only requests of the main agent loop (they declare tools) play turns; the CLI's side requests
(routing, next-speaker and loop checks, titles, compression: no tools) are answered with
`side_text` (default `{}`: valid JSON for the checks that want JSON, which then do nothing).
Each main request takes the first unused turn whose `when` (a substring, or a list that must
all occur; `when_any`: a list of which one must occur) is found in the text of the latest user
content (its text parts and function responses as JSON); a turn without `when` matches
anything. When none is left the model says "Nothing left to do." and stops. `delay_s` thinks
that long before answering; a client that hangs up meanwhile gets the turn back unused (as a
model that never answered) unless the turn says `once`.
"""

import json
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {"used": set(), "n": 0}
SCRIPT = {}
LOG_PATH = None

USAGE = {"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110}


def log(entry):
    entry["t"] = time.time()
    with LOCK:
        with open(LOG_PATH, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def latest_user_text(body):
    """The text of the last user content: text parts, and function responses as JSON."""
    for c in reversed(body.get("contents") or []):
        if c.get("role", "user") != "user":
            continue
        out = []
        for p in c.get("parts") or []:
            if "text" in p:
                out.append(p["text"])
            elif "functionResponse" in p:
                out.append("[functionResponse] " + json.dumps(p["functionResponse"]))
        return "\n".join(out)
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


def is_main(body):
    """The agent loop declares function tools; the CLI's side requests do not."""
    for t in body.get("tools") or []:
        if t.get("functionDeclarations"):
            return True
    return False


def chunk(parts, finish):
    c = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        c["finishReason"] = "STOP"
    return {"candidates": [c], "usageMetadata": USAGE, "modelVersion": "stand-in"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet stderr
        pass

    def _json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self):
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return {"_raw": raw.decode("utf-8", "replace")}

    def _n(self):
        with LOCK:
            STATE["n"] += 1
            return STATE["n"]

    def do_GET(self):
        n = self._n()
        log({"n": n, "method": "GET", "path": self.path, "kind": "models"})
        path = self.path.split("?", 1)[0].rstrip("/")
        if path.endswith("/models"):
            self._json(200, {"models": []})
        elif "/models/" in path:
            name = path.split("/models/", 1)[1]
            self._json(200, {"name": "models/" + name, "inputTokenLimit": 1048576, "outputTokenLimit": 65536})
        else:
            self._json(404, {"error": {"code": 404, "message": "not here", "status": "NOT_FOUND"}})

    def do_POST(self):
        body = self._body()
        path = self.path.split("?", 1)[0]
        n = self._n()
        method = path.rsplit(":", 1)[1] if ":" in path else ""
        if method == "countTokens":
            log({"n": n, "method": "POST", "path": self.path, "kind": "count_tokens"})
            self._json(200, {"totalTokens": 100})
            return
        if method not in ("streamGenerateContent", "generateContent"):
            log({"n": n, "method": "POST", "path": self.path, "kind": "unknown", "body": body})
            self._json(404, {"error": {"code": 404, "message": "not here", "status": "NOT_FOUND"}})
            return
        stream = method == "streamGenerateContent"
        if not is_main(body):
            log({"n": n, "method": "POST", "path": self.path, "kind": "side", "body": body})
            self._answer(stream, [{"text": SCRIPT.get("side_text", "{}")}])
            return
        i, turn = pick_turn(latest_user_text(body))
        log({"n": n, "method": "POST", "path": self.path, "kind": "main", "turn": i, "body": body})
        if turn is None:
            self._answer(stream, [{"text": SCRIPT.get("fallback_text", "Nothing left to do.")}])
            return
        delay = float(turn.get("delay_s", 0))
        if delay > 0 and not self._think(delay):
            if not turn.get("once"):
                unuse(i)
            log({"n": n, "event": "hung up while thinking", "turn": i})
            return
        try:
            self._answer(stream, turn.get("parts", []))
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

    def _answer(self, stream, parts):
        if not parts:
            parts = [{"text": ""}]
        if not stream:
            self._json(200, chunk(parts, True))
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        # One event per part, the last one carrying the finish reason.
        for k, p in enumerate(parts):
            data = json.dumps(chunk([p], k == len(parts) - 1))
            self.wfile.write(("data: %s\r\n\r\n" % data).encode())
            self.wfile.flush()


def main():
    global SCRIPT, LOG_PATH
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    with open(sys.argv[1], encoding="utf-8") as f:
        SCRIPT = json.load(f)
    LOG_PATH = sys.argv[2]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print("PORT %d" % server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
