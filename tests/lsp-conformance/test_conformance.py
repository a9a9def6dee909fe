"""Rein's `rein lsp` driven by pytest-lsp (pygls, lsprotocol types): a client nobody on the
team wrote, which parses every frame as JSON-RPC 2.0 and checks results against the LSP
types and the client's declared capabilities. Each test runs the real binary in a fresh git
repository with the built-in scripted agent."""

import asyncio
import copy
import json
import os
import pathlib
import subprocess
import tempfile

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.protocol import default_converter
from pytest_lsp import LanguageClient, LanguageClientProtocol, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

HERE = pathlib.Path(__file__).parent
REIN = os.environ.get("REIN_BIN") or str(HERE.parent.parent / "target/debug/rein")
PATIENCE = 60


class RecordingProtocol(LanguageClientProtocol):
    """Keeps every frame the server wrote, as parsed JSON, before pygls structures it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.frames = []
        self._last = None

    def structure_message(self, data):
        # json's object_hook sees nested objects first: the last one is the whole frame.
        self._last = copy.deepcopy(data)
        return super().structure_message(data)

    def handle_message(self, message):
        self.frames.append(self._last)
        return super().handle_message(message)


def capability_sets():
    helix = json.loads((HERE / "helix_v25.07.json").read_text())
    return {
        "vscode": client_capabilities("visual-studio-code"),
        "neovim-0.11": client_capabilities("neovim@v0.11.0"),
        "helix": default_converter().structure(helix["capabilities"], types.ClientCapabilities),
        "emacs-eglot": client_capabilities("emacs"),
    }


CAPS = capability_sets()


def make_repo(files, steps):
    d = tempfile.mkdtemp(prefix="rein-conf-")
    root = pathlib.Path(d)
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    (root / ".rein").mkdir()
    (root / ".rein/plan.json").write_text(json.dumps({"steps": steps}))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=root, check=True)
    return root


class Session:
    """A pytest-lsp client connected to `rein lsp` in a repository."""

    def __init__(self, root, caps, choice=None, refuse_progress=False, delay_progress=0):
        self.root = root
        self.caps = caps
        self.asked = []
        self.created = []
        # For each accepted progress token, how many frames the server had written when the
        # client answered its window/workDoneProgress/create.
        self.accepted = {}
        self.states = []
        self.choice = choice
        self.client = LanguageClient(protocol_cls=RecordingProtocol, converter_factory=default_converter)
        features = dict(DEFAULT_CLIENT_FEATURES)
        if refuse_progress or delay_progress:
            del features[types.WINDOW_WORK_DONE_PROGRESS_CREATE]
        register_lsp_features(self.client, features)
        c = self.client

        @c.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)
        def ask(params: types.ShowMessageRequestParams):
            self.asked.append(params)
            if self.choice is None:
                return None
            return types.MessageActionItem(title=self.choice)

        if refuse_progress:
            @c.feature(types.WINDOW_WORK_DONE_PROGRESS_CREATE)
            def refuse(params):
                self.created.append(params.token)
                raise RuntimeError("this client refuses progress")

        if delay_progress:
            @c.feature(types.WINDOW_WORK_DONE_PROGRESS_CREATE)
            async def accept_late(params):
                # A slow client: the server runs on meanwhile, and must hold the token's
                # progress until this answer.
                self.created.append(params.token)
                await asyncio.sleep(delay_progress)
                self.accepted[params.token] = len(self.client.protocol.frames)
                return None

        @c.feature("rein/stateChanged")
        def state(params):
            self.states.append(params)

        @c.feature("rein/filesChanged")
        def files(params):
            pass

    async def start(self, init_options=None):
        await self.client.start_io(REIN, "lsp", cwd=self.root)
        uri = self.root.as_uri()
        return await self.client.initialize_session(
            types.InitializeParams(
                capabilities=self.caps,
                root_uri=uri,
                workspace_folders=[types.WorkspaceFolder(uri=uri, name="ws")],
                initialization_options=init_options,
            )
        )

    def summary(self):
        """The latest `rein/stateChanged`: none of these clients declares state deltas, so
        each carries the bounded summary, never the state."""
        for f in reversed(self.client.protocol.frames):
            if f.get("method") == "rein/stateChanged":
                p = f["params"]
                assert "state" not in p and "summary" in p, p
                return p["summary"]
        return None

    async def wait(self, what, pred):
        """Waits as a client without deltas does: on each new summary, fetch `rein.state`."""
        seen = None
        full = None
        for _ in range(PATIENCE * 20):
            s = self.summary()
            if s is not None and s["version"] != seen:
                seen = s["version"]
                full = (await self.command("rein.state", {}))["state"]
                if full is not None and pred(full):
                    return full
            await asyncio.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}; summary: {self.summary()}, state: {full}")

    async def command(self, name, *args, raw=False):
        params = types.ExecuteCommandParams(command=name, arguments=list(args) if not raw else args[0])
        return await self.client.workspace_execute_command_async(params)

    async def close(self):
        await self.client.shutdown_session()
        code = self.client._server.returncode
        await self.client.stop()
        return code

    def check_frames(self):
        frames = self.client.protocol.frames
        assert frames, "the server wrote frames"
        bad = [f for f in frames if not isinstance(f, dict) or f.get("jsonrpc") != "2.0"]
        assert not bad, f"frames without jsonrpc 2.0: {bad[:3]}"
        return len(frames)


def status(s):
    return s["status"]


def agent_steps(s):
    return sum(1 for st in s["steps"] if st["author"] == "agent")


@pytest.mark.parametrize("name", list(CAPS))
async def test_a_task_with_progress_and_a_decision_for_each_client(name):
    root = make_repo(
        {"a.txt": "a\n"},
        [
            {"read": "a.txt", "think_ms": 100},
            {"run": {"cmd": "echo one > one.txt", "irreversible": True}},
            {"read": "a.txt", "think_ms": 100},
            {"finish": "f"},
        ],
    )
    s = Session(root, CAPS[name], choice="approve")
    init = await s.start({"agent": {"kind": "script", "plan": ".rein/plan.json"}})
    offered = s.caps.general and s.caps.general.position_encodings or []
    assert init.capabilities.position_encoding == ("utf-8" if "utf-8" in offered else "utf-16")
    assert "rein.pause" in init.capabilities.execute_command_provider.commands
    await s.command("rein.start", {"goal": "g"})
    await s.wait("done", lambda st: status(st) == "done")
    # The decision reached the client whether or not it declared window.showMessage.
    assert any("echo one" in a.message for a in s.asked), s.asked
    assert (root / "one.txt").read_text() == "one\n"
    if s.caps.window and s.caps.window.work_done_progress:
        # The end follows the state that says done: let it arrive.
        for _ in range(PATIENCE * 20):
            reports = [r for rs in s.client.progress_reports.values() for r in rs]
            if reports and isinstance(reports[-1], types.WorkDoneProgressEnd):
                break
            await asyncio.sleep(0.05)
        assert reports and isinstance(reports[0], types.WorkDoneProgressBegin), reports
        assert isinstance(reports[-1], types.WorkDoneProgressEnd), reports
    else:
        assert not s.client.progress_reports
    assert await s.close() == 0
    s.check_frames()


async def test_progress_never_uses_a_refused_token():
    root = make_repo({"a.txt": "a\n"}, [{"read": "a.txt", "think_ms": 50}, {"read": "a.txt", "think_ms": 50}, {"finish": "f"}])
    s = Session(root, CAPS["vscode"], refuse_progress=True)
    await s.start({"agent": {"kind": "script", "plan": ".rein/plan.json"}})
    await s.command("rein.start", {"goal": "g"})
    await s.wait("done", lambda st: status(st) == "done")
    assert len(s.created) == 1, s.created
    sent = [f for f in s.client.protocol.frames if f.get("method") == "$/progress"]
    assert not sent, sent
    await s.close()
    s.check_frames()


async def test_no_progress_before_the_client_accepts_the_token():
    steps = [{"read": "a.txt", "think_ms": 100} for _ in range(12)] + [{"finish": "f"}]
    root = make_repo({"a.txt": "a\n"}, steps)
    s = Session(root, CAPS["vscode"], delay_progress=1.0)
    await s.start({"agent": {"kind": "script", "plan": ".rein/plan.json"}})
    await s.command("rein.start", {"goal": "g"})
    await s.wait("done", lambda st: status(st) == "done")
    await s.close()
    frames = s.client.protocol.frames
    assert s.created and set(s.created) == set(s.accepted), (s.created, s.accepted)
    for token, answered in s.accepted.items():
        used = [i for i, f in enumerate(frames) if f.get("method") == "$/progress" and f["params"]["token"] == token]
        early = [frames[i] for i in used if i < answered]
        assert not early, f"progress on {token} before the client accepted it: {early}"
    first = s.created[0]
    assert any(f.get("method") == "$/progress" and f["params"]["token"] == first for f in frames), "progress once accepted"
    s.check_frames()


@pytest.mark.parametrize("args", [[None], [], None, [{}]], ids=["[null]", "[]", "missing", "[{}]"])
async def test_empty_arguments_in_every_spelling_are_an_empty_object(args):
    root = make_repo({"a.txt": "a\n"}, [{"read": "a.txt", "think_ms": 600000}])
    s = Session(root, CAPS["emacs-eglot"])
    await s.start({"agent": {"kind": "script", "plan": ".rein/plan.json"}})
    await s.command("rein.start", {"goal": "g"})
    r = await s.client.workspace_execute_command_async(types.ExecuteCommandParams(command="rein.pause", arguments=args))
    assert r["state"]["status"] == "paused"
    r = await s.client.workspace_execute_command_async(types.ExecuteCommandParams(command="rein.state", arguments=args))
    assert r["state"]["status"] == "paused"
    with pytest.raises(JsonRpcException) as e:
        await s.client.workspace_execute_command_async(types.ExecuteCommandParams(command="rein.steer", arguments=args))
    assert e.value.code == -32602
    await s.close()
    s.check_frames()


async def test_code_actions_are_commands_without_literal_support_and_steer_selection_needs_declaring():
    for caps, literal in [(types.ClientCapabilities(window=types.WindowClientCapabilities(show_message=None)), False), (CAPS["helix"], True)]:
        root = make_repo({"a.txt": "a\nb\n"}, [{"read": "a.txt", "think_ms": 600000}])
        s = Session(root, caps)
        await s.start({"agent": {"kind": "script", "plan": ".rein/plan.json"}})
        await s.command("rein.start", {"goal": "g"})
        uri = (root / "a.txt").as_uri()
        s.client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(uri=uri, language_id="text", version=1, text="a\nb\n")))
        await s.wait("running", lambda st: status(st) == "running")
        sel = types.Range(start=types.Position(line=0, character=0), end=types.Position(line=1, character=1))
        got = await s.client.text_document_code_action_async(types.CodeActionParams(text_document=types.TextDocumentIdentifier(uri=uri), range=sel, context=types.CodeActionContext(diagnostics=[])))
        assert got, "controls offered"
        raw = next(f["result"] for f in reversed(s.client.protocol.frames) if isinstance(f.get("result"), list))
        # A CodeAction literal's command is an object; a bare Command's is a string.
        kinds = {type(a["command"]).__name__ for a in raw}
        assert kinds == ({"dict"} if literal else {"str"}), raw
        titles = [a.title for a in got]
        assert titles[0] == "Rein: pause the agent", titles
        assert not any("selection" in t for t in titles), titles
        await s.close()
        s.check_frames()


@pytest.mark.parametrize("enc", ["utf-8", "utf-16"])
async def test_document_sync_with_non_ascii_edits(enc):
    root = make_repo({"s.txt": "x\n"}, [])
    caps = types.ClientCapabilities(general=types.GeneralClientCapabilities(position_encodings=[enc]))
    s = Session(root, caps)
    init = await s.start()
    assert init.capabilities.position_encoding == enc
    uri = (root / "s.txt").as_uri()
    s.client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(uri=uri, language_id="text", version=1, text="é😀 ß\n")))
    at = len("é😀".encode("utf-8")) if enc == "utf-8" else len("é😀".encode("utf-16-le")) // 2
    s.client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=types.Position(line=0, character=at), end=types.Position(line=0, character=at)), text=" # rein: ünï 🦀")],
    ))
    for _ in range(PATIENCE * 20):
        d = s.client.diagnostics.get(uri)
        if d:
            break
        await asyncio.sleep(0.05)
    assert d and "ünï 🦀 ß" in d[0].message, d
    assert d[0].range.start.character == at + 1
    await s.close()
    s.check_frames()


async def test_every_command_valid_and_invalid():
    notes = "notes\n# rein: keep it tiny\n# rein: and quick\n"
    root = make_repo(
        {"a.txt": "a\n", "notes.txt": notes},
        [{"run": {"cmd": "echo one > one.txt", "irreversible": True}}, {"read": "a.txt", "think_ms": 600000}],
    )
    s = Session(root, CAPS["neovim-0.11"])
    await s.start({"agent": {"kind": "script", "plan": ".rein/plan.json"}})
    uri = (root / "a.txt").as_uri()
    notes_uri = (root / "notes.txt").as_uri()

    async def fails(code, name, *args):
        with pytest.raises(JsonRpcException) as e:
            await s.command(name, *args)
        assert e.value.code == code, (name, e.value)

    await fails(-32803, "rein.pause", {})
    assert (await s.command("rein.state", {}))["state"] is None
    pre = await s.command("rein.preflight", {})
    assert pre["problem"] is None, pre
    assert pathlib.Path(pre["repository"]).resolve() == root.resolve(), pre
    assert pre["agent"]["kind"] == "script", pre
    await fails(-32602, "rein.start", {"goal": 5})
    r = await s.command("rein.start", {"goal": "g"})
    assert r["taskId"]
    await fails(-32803, "rein.start", {"goal": "again"})
    assert (await s.command("rein.preflight", {}))["problem"]["kind"] == "task_active"
    st = await s.wait("the decision", lambda st: status(st) == "awaiting_decision")
    decided = await s.command("rein.decide", {"decisionId": st["decisions"][0]["id"], "choice": "approve"})
    assert not decided["state"]["decisions"], decided
    await s.wait("the approved run", lambda st: status(st) == "running" and (root / "one.txt").exists())
    s.client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(uri=notes_uri, language_id="text", version=1, text=notes)))
    sent = await s.command("rein.sendSteerComment", {"uri": notes_uri, "line": 1})
    assert sent["constraintId"] and any("keep it tiny" in c["text"] for c in sent["state"]["constraints"]), sent
    assert await s.command("rein.dismissSteerComment", {"uri": notes_uri, "line": 2}) == {}
    s.client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(uri=uri, language_id="text", version=1, text="a\n")))
    s.client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text="a, mine\n")],
    ))
    await s.wait("a.txt held", lambda st: st["heldFiles"])
    released = await s.command("rein.release", {"uri": uri})
    assert not released["state"]["heldFiles"], released
    await fails(-32602, "rein.steer", {})
    assert (await s.command("rein.steer", {"text": "keep it small"}))["constraintId"]
    assert (await s.command("rein.pause", {}))["state"]["status"] == "paused"
    await fails(-32803, "rein.handback", {})
    assert (await s.command("rein.resume", {}))["state"]["status"] == "running"
    await fails(-32602, "rein.decide", {"decisionId": 1})
    await fails(-32803, "rein.decide", {"decisionId": "d9", "choice": "approve"})
    await fails(-32602, "rein.release", {})
    await fails(-32602, "rein.rewind", {})
    await fails(-32602, "rein.sendSteerComment", {"uri": uri})
    await fails(-32602, "rein.dismissSteerComment", {"uri": uri, "line": 0})
    await fails(-32602, "rein.keepAgentChange", {"uri": uri})
    assert await s.command("rein.keepAgentChange", {"uri": uri, "step": 1, "line": 0}) == {}
    await fails(-32602, "rein.steerSelection", {})
    await fails(-32602, "rein.transcript", {"since": "all"})
    t = await s.command("rein.transcript", {})
    assert t["taskId"] == r["taskId"] and t["entries"][0]["kind"] == "goal", t
    assert (await s.command("rein.transcript", {"since": t["next"]}))["entries"] == []
    await fails(-32602, "rein.nope", {})
    await fails(-32602, "rein.pause", "not an object")
    r = await s.command("rein.takeover", {"reason": "mine"})
    assert r["handover"] and r["markdown"]
    assert (await s.command("rein.handback", {"note": "yours"}))["state"]["control"]["holder"] == "agent"
    await fails(-32803, "rein.rewind", {"checkpoint": "step:0"})
    await s.command("rein.pause", {})
    assert (await s.command("rein.rewind", {"checkpoint": "step:0"}))["state"]
    assert (await s.command("rein.abort", {}))["state"]["status"] == "aborted"
    await fails(-32803, "rein.resume", {})
    await s.close()
    s.check_frames()


async def test_lifecycle_unknown_methods_cancel_and_exit_codes():
    root = make_repo({"a.txt": "a\n"}, [])
    s = Session(root, CAPS["vscode"])
    await s.start()
    with pytest.raises(JsonRpcException) as e:
        await s.client.protocol.send_request_async("rein/unknown", None)
    assert e.value.code == -32601
    s.client.protocol.notify("$/unknownNotification", None)
    # A cancelled request is still answered (here, with its result).
    fut = s.client.protocol.send_request("workspace/executeCommand", types.ExecuteCommandParams(command="rein.state", arguments=[]), msg_id="to-cancel")
    s.client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="to-cancel"))
    r = await asyncio.wrap_future(fut)
    assert r["state"] is None
    assert await s.close() == 0, "shutdown then exit ends with status 0"
    s.check_frames()


async def test_live_output_goes_to_a_client_that_declared_it_and_the_transcript_follows():
    root = make_repo(
        {"a.txt": "a\n"},
        [{"run": {"cmd": "echo one; echo two"}, "say": "Echoing."}, {"finish": "f"}],
    )
    caps = copy.deepcopy(CAPS["vscode"])
    caps.experimental = {"rein": {"output": True}}
    s = Session(root, caps)
    chunks = []

    @s.client.feature("rein/output")
    def output(params):
        chunks.append(params)

    await s.start({"agent": {"kind": "script", "plan": ".rein/plan.json"}})
    started = await s.command("rein.start", {"goal": "g"})
    await s.wait("done", lambda st: status(st) == "done")
    for _ in range(PATIENCE * 20):
        if any(f.get("method") == "rein/output" and f["params"]["state"] == "ended" for f in s.client.protocol.frames):
            break
        await asyncio.sleep(0.05)
    sent = [f for f in s.client.protocol.frames if f.get("method") == "rein/output"]
    assert sent and all("id" not in f for f in sent), "notifications, not requests"
    p = [f["params"] for f in sent]
    assert {tuple(sorted(x)) for x in p} <= {
        tuple(sorted(["taskId", "id", "step", "command", "terminal", "seq", "chunk", "skipped", "state"])),
        tuple(sorted(["taskId", "id", "step", "command", "terminal", "seq", "chunk", "skipped", "state", "exit"])),
    }, p
    assert [x["seq"] for x in p] == list(range(1, len(p) + 1)), p
    assert "".join(x["chunk"] for x in p) == "one\ntwo\n"
    assert p[-1]["state"] == "ended" and p[-1]["exit"] == {"code": 0, "signal": None}
    assert all(x["taskId"] == started["taskId"] and x["step"] == 1 for x in p), p
    t = await s.command("rein.transcript", {})
    kinds = [e["kind"] for e in t["entries"]]
    assert kinds[:2] == ["goal", "message"] and "output" in kinds and kinds[-1] == "end", kinds
    await s.close()
    s.check_frames()

    # A client that did not declare it gets none.
    root = make_repo({"a.txt": "a\n"}, [{"run": {"cmd": "echo one"}}, {"finish": "f"}])
    s = Session(root, CAPS["emacs-eglot"])
    await s.start({"agent": {"kind": "script", "plan": ".rein/plan.json"}})
    await s.command("rein.start", {"goal": "g"})
    await s.wait("done", lambda st: status(st) == "done")
    assert not [f for f in s.client.protocol.frames if f.get("method") == "rein/output"]
    await s.close()
    s.check_frames()
