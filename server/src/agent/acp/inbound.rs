//! What the agent sends, turned into moves: its requests of the client (a permission, a
//! file read or write, a terminal) each become one move, answered with the engine's outcome;
//! its session updates (words, thoughts, tool calls, plans) are gathered into the words of
//! the move that follows; a tool it ran on its own becomes an `Observe` move, and the end of
//! its turn `Finish`.
//!
//! Must never: touch a file or start a command (Rein does, after the engine decides), or
//! answer a request the engine has not seen.

use std::path::Path;

use agent_client_protocol::v1::schema::{
    ContentBlock, CreateTerminalRequest, KillTerminalResponse, PermissionOptionKind,
    ReleaseTerminalResponse, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SelectedPermissionOutcome, SessionNotification, SessionUpdate,
    StopReason, TerminalOutputResponse, ToolCallContent, ToolCallLocation, ToolCallStatus,
    ToolKind, WaitForTerminalExitResponse,
};

use super::link::{error, Event, Failure, Incoming, Picked, TurnError};
use super::{
    exit_status, last_bytes, last_words, log_answer, quote, terminal_error, AcpAgent, Tool,
    EARLIER_KEPT, SUMMARY_CHARS, WORDS_KEPT,
};
use crate::agent::{AgentError, Intended, ItemStatus, Move, PlanEntry, Proposal, Words};

impl AcpAgent {
    pub(super) fn handle(&mut self, ev: Event) -> Option<Result<Proposal, AgentError>> {
        match ev {
            Event::Ready(opened) => {
                self.conversation = Some(opened.session.0.to_string());
                self.session = Some((opened.session, opened.steering));
                self.quirks = opened.quirks;
                self.login = opened.login;
                match opened.picked {
                    Picked::New => {}
                    Picked::Resumed(how) => {
                        tracing::info!("picked up the agent's session with {how}");
                        // The session knows the task: it is told only what is new.
                        self.introduced = true;
                        if let Some(why) = self.restarted.take() {
                            self.queued.insert(0, format!(
                                "Your agent process ended ({why}) and was started again in this same session; everything done so far is in the working tree."
                            ));
                        } else if self.follow.is_none() {
                            self.queued.insert(0, "Rein was restarted while you worked on this task, and this session was picked up as it was; everything done so far is in the working tree.".into());
                        }
                    }
                    Picked::Lost(why) => {
                        self.note = Some(format!(
                            "The agent `{}` could not pick up its earlier session ({why}): it works in a new session, opened with {}.",
                            self.name(),
                            if self.handover.is_some() {
                                "the handover (the goal, what was done, the plan, its last words and your changes)"
                            } else {
                                "the goal, the plan and what it was asked and said before"
                            }
                        ));
                    }
                }
                None
            }
            Event::Failed(Failure {
                why,
                status,
                stderr,
            }) => {
                self.disconnect();
                let mut msg = format!("the agent `{}` could not start: {why}", self.command());
                if let Some(status) = status {
                    msg.push_str(&format!(" ({status})"));
                }
                msg.push_str(&last_words(&stderr));
                // A place of its own under home the sandbox denied: the person may allow it.
                Some(Err(match self.domain.wanted(self.sandbox, &stderr) {
                    Some((path, shown)) => AgentError::NeedsPlace {
                        why: msg,
                        command: self.key.clone(),
                        path,
                        shown,
                    },
                    None => AgentError::Peer(msg),
                }))
            }
            Event::Request(inc) => self.request(*inc),
            Event::Update(n) => self.update(*n),
            Event::Stray(text) => {
                self.note.get_or_insert(text);
                None
            }
            Event::PromptDone { turn, result } => self.prompt_done(turn, result),
            Event::Steered { text, injected } => {
                self.steers_pending = self.steers_pending.saturating_sub(1);
                let reason = self.reasons_steered.iter().position(|r| *r == text);
                if let Some(i) = reason {
                    self.reasons_steered.remove(i);
                }
                let requeued = self.reasons_requeued.iter().position(|r| *r == text);
                if let Some(i) = requeued {
                    // Already passed on with the prompt that followed the cancelled turn.
                    self.reasons_requeued.remove(i);
                } else if !injected && reason.is_some() {
                    // Only why a tool was refused: it waits for the next prompt, if any,
                    // and never cancels a turn (an agent whose "no" ended its turn has
                    // already been prompted again).
                    self.refusals.push(text);
                } else if !injected {
                    // Not taken into the turn: it goes with the next prompt, at once.
                    self.queued.push(text);
                    if self.turn.is_some() && !self.cancel_sent {
                        if let Err(e) = self.cancel_for_news() {
                            return Some(Err(e));
                        }
                    }
                }
                if self.steers_pending > 0 {
                    return None;
                }
                // The turn already ended: finish if the agent took everything, else prompt.
                let summary = self.ended.take()?;
                if !self.queued.is_empty() {
                    return None;
                }
                self.disconnect();
                Some(Ok(self.finish(summary)))
            }
            Event::Exited {
                status,
                stderr,
                killed,
            } => {
                let cancelling = self.cancel_sent;
                self.link = None;
                self.session = None;
                self.turn = None;
                self.cancel_sent = false;
                match killed {
                    // It ignored a cancel Rein sent: start afresh, with what was queued.
                    Some(why) if cancelling => {
                        self.restarted = Some(format!("Rein ended it because {why}"));
                        None
                    }
                    killed => {
                        let how = match killed {
                            Some(why) => format!("was ended by Rein because {why}"),
                            None => format!("exited unexpectedly ({status})"),
                        };
                        self.restarted = Some(format!("the agent process {how}"));
                        let mut msg = format!("the agent process `{}` {how}", self.name());
                        msg.push_str(&last_words(&stderr));
                        msg.push_str("\nResume to start it again (in the same session when it can pick it up).");
                        Some(Err(AgentError::Peer(msg)))
                    }
                }
            }
        }
    }

    /// Turns a request into a move (parking it until the engine has carried it out), or
    /// answers it at once when it needs none.
    pub(super) fn request(&mut self, inc: Incoming) -> Option<Result<Proposal, AgentError>> {
        let ours = self.session.as_ref().map(|(s, _)| s);
        if ours != Some(inc.session()) {
            inc.refuse("unknown session");
            return None;
        }
        let mv = match inc {
            Incoming::Permission(q, r) => {
                let proposal = self.permission_move(&q);
                self.park(Incoming::Permission(q, r));
                return Some(Ok(proposal));
            }
            Incoming::Read(q, r) => {
                let mv = Move::Read {
                    path: self.relative(&q.path),
                };
                self.park(Incoming::Read(q, r));
                mv
            }
            Incoming::Write(mut q, r) => {
                let mv = Move::Write {
                    path: self.relative(&q.path),
                    content: std::mem::take(&mut q.content),
                };
                self.park(Incoming::Write(q, r));
                mv
            }
            Incoming::Create(q, r) => match self.command_line(&q) {
                Ok(cmd) => {
                    let approved = self.take_approval(&q, &cmd);
                    let limit = q.output_byte_limit.and_then(|l| usize::try_from(l).ok());
                    self.park(Incoming::Create(q, r));
                    Move::Terminal {
                        cmd,
                        approved,
                        limit,
                    }
                }
                Err(why) => {
                    Incoming::Create(q, r).refuse(&why);
                    return None;
                }
            },
            Incoming::Output(q, r) => {
                let sent = match self.terminals.output(&q.terminal_id.0) {
                    Ok(t) => r.respond(
                        TerminalOutputResponse::new(t.output, t.truncated)
                            .exit_status(t.exit.map(exit_status)),
                    ),
                    Err(e) => r.respond_with_error(terminal_error(e)),
                };
                log_answer(sent);
                return None;
            }
            Incoming::Wait(q, r) => {
                match self.terminals.exited(&q.terminal_id.0) {
                    // Answered when the command ends, without holding up anything else the
                    // agent asks meanwhile.
                    Ok(exited) => {
                        tokio::spawn(async move {
                            let sent = match exited.await {
                                Some(exit) => {
                                    r.respond(WaitForTerminalExitResponse::new(exit_status(exit)))
                                }
                                None => r.respond_with_error(error(
                                    "Rein stopped before the command ended",
                                )),
                            };
                            log_answer(sent);
                        });
                    }
                    Err(e) => log_answer(r.respond_with_error(terminal_error(e))),
                }
                return None;
            }
            Incoming::Release(q, r) => {
                let sent = match self.terminals.release(&q.terminal_id.0) {
                    Ok(()) => r.respond(ReleaseTerminalResponse::new()),
                    Err(e) => r.respond_with_error(terminal_error(e)),
                };
                log_answer(sent);
                return None;
            }
            Incoming::Kill(q, r) => {
                let sent = match self.terminals.kill(&q.terminal_id.0) {
                    Ok(()) => r.respond(KillTerminalResponse::new()),
                    Err(e) => r.respond_with_error(terminal_error(e)),
                };
                log_answer(sent);
                return None;
            }
        };
        // What the agent said since its last tool call led to this request.
        Some(Ok(Proposal {
            mv,
            words: self.take_words(),
        }))
    }

    /// What the agent said and thought since its last tool call, taken for one step.
    pub(super) fn take_words(&mut self) -> Words {
        let message = std::mem::take(&mut self.chunks);
        if !message.trim().is_empty() {
            // The summary is what the agent says after its last tool call.
            self.last_text = message.clone();
        }
        Words {
            message,
            thought: std::mem::take(&mut self.thinking),
            ..Words::default()
        }
    }

    /// The proposal with Rein's note on the agent's stdout, if one waits to be told.
    pub(super) fn noted(&mut self, mut p: Proposal) -> Proposal {
        if p.words.note.is_none() {
            p.words.note = self.note.take();
        }
        p
    }

    /// The finish, with the agent's last words.
    pub(super) fn finish(&mut self, summary: String) -> Proposal {
        let asked = self.asked.clone().unwrap_or_default();
        self.earlier.push((asked, summary.clone()));
        if self.earlier.len() > EARLIER_KEPT {
            self.earlier.remove(0);
        }
        Proposal {
            words: Words {
                message: summary.clone(),
                thought: std::mem::take(&mut self.thinking),
                ..Words::default()
            },
            mv: Move::Finish(summary),
        }
    }

    /// The tool call as a step carries it.
    pub(super) fn tool_of(&self, id: &str, tool: &Tool) -> crate::agent::ToolCall {
        crate::agent::ToolCall {
            id: id.to_owned(),
            kind: kind_name(tool.kind),
            locations: tool.locations.clone(),
            diffs: tool.diffs.clone(),
            command: match tool.kind {
                ToolKind::Execute => tool
                    .command
                    .clone()
                    .or_else(|| self.quirks.title_is_command.then(|| tool.title.clone())),
                _ => None,
            },
        }
    }

    /// Takes in a tool call's locations and content (each replaces what was known).
    pub(super) fn tool_details(
        &self,
        tool: &mut Tool,
        locations: Option<&[agent_client_protocol::v1::schema::ToolCallLocation]>,
        content: Option<&[ToolCallContent]>,
    ) {
        if let Some(locations) = locations {
            tool.locations = locations
                .iter()
                .map(|l| (self.relative(&l.path), l.line))
                .collect();
        }
        if let Some(content) = content {
            tool.diffs.clear();
            tool.output.clear();
            for c in content {
                match c {
                    ToolCallContent::Diff(d) => tool.diffs.push((
                        self.relative(&d.path),
                        d.old_text.clone(),
                        d.new_text.clone(),
                    )),
                    ToolCallContent::Content(c) => {
                        if let ContentBlock::Text(t) = &c.content {
                            tool.output.push_str(&t.text);
                            last_bytes(&mut tool.output, WORDS_KEPT);
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    pub(super) fn park(&self, inc: Incoming) {
        match &self.link {
            Some(link) => link.shared.park(inc),
            None => inc.refuse("the agent connection is gone"),
        }
    }

    pub(super) fn permission_move(&mut self, q: &RequestPermissionRequest) -> Proposal {
        let id = q.tool_call.tool_call_id.0.to_string();
        let f = &q.tool_call.fields;
        let known = self.tools.get(&id);
        let title = f
            .title
            .clone()
            .or_else(|| known.map(|t| t.title.clone()))
            .unwrap_or_else(|| "use a tool".into());
        let kind = f.kind.or(known.map(|t| t.kind)).unwrap_or(ToolKind::Other);
        let mut paths: Vec<String> = Vec::new();
        for l in f.locations.iter().flatten() {
            let p = self.relative(&l.path);
            if !paths.contains(&p) {
                paths.push(p);
            }
        }
        let command = match kind {
            ToolKind::Execute => f.raw_input.as_ref().and_then(command_of).or_else(|| {
                self.quirks
                    .title_is_command
                    .then(|| f.title.clone())
                    .flatten()
            }),
            _ => None,
        };
        self.asked_command = command.clone();
        let mut writes = intended(f.raw_input.as_ref(), f.content.as_deref());
        if writes.is_empty() {
            // Announced with the tool call before the request, when the request has none.
            writes = known.map(|t| t.writes.clone()).unwrap_or_default();
        }
        let writes = writes
            .into_iter()
            .map(|w| match w {
                Intended::Write { path, content } => Intended::Write {
                    path: self.relative(Path::new(&path)),
                    content,
                },
                Intended::Edit { path, old, new } => Intended::Edit {
                    path: self.relative(Path::new(&path)),
                    old,
                    new,
                },
            })
            .collect::<Vec<_>>();
        for w in &writes {
            if !paths.iter().any(|p| p == w.path()) {
                paths.push(w.path().to_owned());
            }
        }
        let started = self.tools_started + 1;
        let mut tool = self
            .tools
            .remove(&id)
            .unwrap_or_else(|| Tool::new(title.clone(), kind, started));
        if tool.started == started {
            self.tools_started = started;
        }
        tool.title = title.clone();
        tool.kind = kind;
        if command.is_some() {
            tool.command = command.clone();
        }
        self.tool_details(&mut tool, f.locations.as_deref(), f.content.as_deref());
        // Its words: those it said before the tool call started, else those since.
        let mut words = tool.words.take().unwrap_or_else(|| self.take_words());
        words.tool = Some(self.tool_of(&id, &tool));
        self.tools.insert(id, tool);
        Proposal {
            mv: Move::Permission {
                title: titled(kind, &title),
                kind: kind_name(kind),
                paths,
                command,
                writes,
            },
            words,
        }
    }

    pub(super) fn update(
        &mut self,
        n: SessionNotification,
    ) -> Option<Result<Proposal, AgentError>> {
        // Nothing before the session is open: a loaded session's replay of its history
        // comes then, and what it did was recorded when it did it.
        if self.session.as_ref().map(|(s, _)| s) != Some(&n.session_id) {
            return None;
        }
        let (id, title, kind, status, locations, content, named, writes, command) = match n.update {
            SessionUpdate::AgentMessageChunk(c) => {
                if let ContentBlock::Text(t) = c.content {
                    self.chunks.push_str(&t.text);
                    last_bytes(&mut self.chunks, WORDS_KEPT);
                }
                return None;
            }
            SessionUpdate::AgentThoughtChunk(c) => {
                if let ContentBlock::Text(t) = c.content {
                    self.thinking.push_str(&t.text);
                    last_bytes(&mut self.thinking, WORDS_KEPT);
                }
                return None;
            }
            // The plan replaces the task's plan, as a step of its own.
            SessionUpdate::Plan(plan) => {
                let entries = plan.entries.iter().map(plan_entry).collect();
                return Some(Ok(Move::Plan(entries).into()));
            }
            SessionUpdate::ToolCall(tc) => {
                let id = tc.tool_call_id.0.to_string();
                let named = self.untitled(&id, Some(tc.kind), tc.raw_input.as_ref(), &tc.locations);
                let writes = intended(tc.raw_input.as_ref(), Some(&tc.content));
                let command = tc.raw_input.as_ref().and_then(command_of);
                (
                    id,
                    Some(tc.title),
                    Some(tc.kind),
                    Some(tc.status),
                    Some(tc.locations),
                    Some(tc.content),
                    named,
                    writes,
                    command,
                )
            }
            SessionUpdate::ToolCallUpdate(u) => {
                let id = u.tool_call_id.0.to_string();
                let f = u.fields;
                let named = self.untitled(
                    &id,
                    f.kind,
                    f.raw_input.as_ref(),
                    f.locations.as_deref().unwrap_or_default(),
                );
                let writes = intended(f.raw_input.as_ref(), f.content.as_deref());
                let command = f.raw_input.as_ref().and_then(command_of);
                (
                    id,
                    f.title,
                    f.kind,
                    f.status,
                    f.locations,
                    f.content,
                    named,
                    writes,
                    command,
                )
            }
            _ => return None,
        };
        let mut tool = match self.tools.remove(&id) {
            Some(t) => t,
            None => {
                // A new tool call: what the agent said since its last one led to it. One first
                // heard of by its update (a harness that never announced it, or whose
                // announcement Rein has forgotten) is named by what the update says of it.
                self.tools_started += 1;
                let mut t = Tool::new(named, ToolKind::Other, self.tools_started);
                let words = self.take_words();
                t.words = Some(words);
                t
            }
        };
        if let Some(t) = title.filter(|t| !t.trim().is_empty()) {
            tool.title = t;
        }
        if !writes.is_empty() {
            tool.writes = writes;
        }
        if command.is_some() {
            tool.command = command;
        }
        if let Some(k) = kind {
            tool.kind = k;
        }
        self.tool_details(&mut tool, locations.as_deref(), content.as_deref());
        let ended = matches!(
            status,
            Some(ToolCallStatus::Completed | ToolCallStatus::Failed)
        );
        if !ended || tool.done {
            self.tools.insert(id, tool);
            return None;
        }
        tool.done = true;
        let failed = status == Some(ToolCallStatus::Failed);
        // A tool that may have changed the tree ran on its own: checkpoint what it did, so
        // its changes are the agent's, not taken for the human's at the next boundary.
        let changes_tree = !matches!(
            tool.kind,
            ToolKind::Read
                | ToolKind::Search
                | ToolKind::Think
                | ToolKind::Fetch
                | ToolKind::SwitchMode
        );
        let title = titled(tool.kind, &tool.title);
        let action = if failed {
            format!("{title} (failed)")
        } else {
            title
        };
        let proposal = changes_tree.then(|| {
            let mut words = tool.words.take().unwrap_or_default();
            words.tool = Some(self.tool_of(&id, &tool));
            words.output = tool.output.clone();
            Proposal {
                mv: Move::Observe { action, failed },
                words,
            }
        });
        self.tools.insert(id, tool);
        proposal.map(Ok)
    }

    pub(super) fn prompt_done(
        &mut self,
        turn: u64,
        result: Result<StopReason, TurnError>,
    ) -> Option<Result<Proposal, AgentError>> {
        if self.turn != Some(turn) {
            return None;
        }
        self.turn = None;
        let expected = std::mem::take(&mut self.cancel_sent);
        let why = match result {
            Ok(StopReason::EndTurn) if !self.queued.is_empty() => return None,
            Ok(StopReason::EndTurn) => {
                let text = if self.chunks.trim().is_empty() {
                    std::mem::take(&mut self.last_text)
                } else {
                    std::mem::take(&mut self.chunks)
                };
                let text = text.trim();
                let summary = if text.is_empty() {
                    "the agent ended its turn".to_owned()
                } else if text.chars().count() > SUMMARY_CHARS {
                    format!("{}…", text.chars().take(SUMMARY_CHARS).collect::<String>())
                } else {
                    text.to_owned()
                };
                if self.steers_pending > 0 {
                    // A correction may not have reached the agent: wait for its fate.
                    self.ended = Some(summary);
                    return None;
                }
                // The task is over: the process goes (a later move would start a new one).
                self.disconnect();
                return Some(Ok(self.finish(summary)));
            }
            Ok(StopReason::Cancelled) if expected => return None,
            Ok(StopReason::Cancelled) if self.rejected => {
                // Its way of taking a "no": prompt again, with the reason, in the same session.
                // Reasons still on their way by steering cannot join a turn that is over.
                let reasons = std::mem::take(&mut self.reasons_steered);
                self.queued.extend(reasons.iter().cloned());
                self.reasons_requeued.extend(reasons);
                if self.queued.is_empty() {
                    self.queued.push(
                        "The person supervising you (through Rein) declined your last tool call. Do not retry it as it was; continue the task another way, or end your turn and say what you need."
                            .into(),
                    );
                }
                return None;
            }
            Ok(StopReason::Cancelled) => "it cancelled its own turn (stopReason cancelled) although Rein did not ask it to".to_owned(),
            Ok(StopReason::MaxTokens) => "it reached its output token limit (stopReason max_tokens); resume to let it go on, or steer it to a smaller step".to_owned(),
            Ok(StopReason::MaxTurnRequests) => "it reached its limit of model requests for one turn (stopReason max_turn_requests); resume to let it go on".to_owned(),
            Ok(StopReason::Refusal) => "it refused to go on (stopReason refusal); steer it or take over, then resume".to_owned(),
            Ok(other) => format!("it ended its turn for a reason Rein does not know ({other:?}); resume to prompt it again"),
            Err(TurnError { auth_required: true, text }) => {
                let offers = if self.login.is_empty() {
                    String::new()
                } else {
                    format!(" It says to log in with: {}.", self.login.join("; "))
                };
                format!("it needs you to log in (auth_required: {text}).{offers} Log in with the agent's own CLI or set its API key in the environment Rein runs in, then resume")
            }
            Err(TurnError { text, .. }) => {
                format!("its turn failed: {text}; resume to prompt it again")
            }
        };
        Some(Err(AgentError::Peer(format!(
            "the agent `{}` stopped: {why}",
            self.name()
        ))))
    }

    /// A title for a tool call whose own title Rein does not have: its command line, else
    /// its kind and the files it names, else its kind and id.
    pub(super) fn untitled(
        &self,
        id: &str,
        kind: Option<ToolKind>,
        raw: Option<&serde_json::Value>,
        locations: &[ToolCallLocation],
    ) -> String {
        if let Some(cmd) = raw.and_then(command_of) {
            return format!("run {cmd}");
        }
        let kind = kind.map_or_else(|| "tool".to_owned(), kind_name);
        let paths: Vec<String> = locations.iter().map(|l| self.relative(&l.path)).collect();
        if paths.is_empty() {
            format!("{kind} (tool call {id})")
        } else {
            format!("{kind} {}", paths.join(", "))
        }
    }

    /// A path as the engine takes it: relative to the working tree when inside it; anything
    /// else is passed on as it is, for the engine to refuse.
    pub(super) fn relative(&self, p: &Path) -> String {
        for base in [&self.launch.root, &self.root_canon] {
            if let Ok(r) = p.strip_prefix(base) {
                return r.to_string_lossy().into_owned();
            }
        }
        p.to_string_lossy().into_owned()
    }

    /// Whether the agent was just allowed this very command through a permission request;
    /// the approval is used up. Matched as the agent spelt it, with or without its cwd and
    /// environment, since agents announce the bare command in the tool call.
    pub(super) fn take_approval(&mut self, q: &CreateTerminalRequest, line: &str) -> bool {
        let mut spelt = vec![line.to_owned(), q.command.clone()];
        if let [flag, script] = q.args.as_slice() {
            let shell = matches!(
                q.command.as_str(),
                "sh" | "bash" | "zsh" | "/bin/sh" | "/bin/bash"
            );
            if shell && matches!(flag.as_str(), "-c" | "-lc") {
                spelt.push(script.clone());
            }
        }
        if !q.args.is_empty() {
            let words =
                std::iter::once(q.command.as_str()).chain(q.args.iter().map(String::as_str));
            spelt.push(words.clone().collect::<Vec<_>>().join(" "));
            spelt.push(words.map(quote).collect::<Vec<_>>().join(" "));
        }
        let found = self
            .approved_commands
            .iter()
            .position(|c| spelt.iter().any(|s| s.trim() == c.trim()));
        match found {
            Some(i) => {
                self.approved_commands.remove(i);
                true
            }
            None => false,
        }
    }

    /// Why a file request was refused, in ACP's terms: its paths are absolute, so one
    /// outside the working tree is named as such rather than as "absolute".
    pub(super) fn refusal(&self, path: &Path, why: &str) -> String {
        if Path::new(&self.relative(path)).is_absolute() {
            return format!(
                "{} is outside the working tree {}; Rein gives agents only the files inside it",
                path.display(),
                self.launch.root.display()
            );
        }
        why.to_owned()
    }

    /// The shell command line for a `terminal/create`: its cwd, env and words, quoted.
    pub(super) fn command_line(&self, q: &CreateTerminalRequest) -> Result<String, String> {
        if q.command.trim().is_empty() {
            return Err("the command is empty".into());
        }
        let mut line = String::new();
        if let Some(cwd) = &q.cwd {
            let rel = self.relative(cwd);
            if Path::new(&rel).is_absolute() {
                return Err(format!(
                    "Rein runs commands only inside the working tree, and {} is outside it",
                    cwd.display()
                ));
            }
            if !rel.is_empty() && rel != "." {
                line.push_str(&format!("cd {} && ", quote(&rel)));
            }
        }
        for v in &q.env {
            let ok = v
                .name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && v.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                return Err(format!("{:?} is not an environment variable name", v.name));
            }
            line.push_str(&format!("{}={} ", v.name, quote(&v.value)));
        }
        if q.args.is_empty() {
            // Agents often put a whole shell line in `command`.
            line.push_str(&q.command);
        } else {
            line.push_str(&quote(&q.command));
            for a in &q.args {
                line.push(' ');
                line.push_str(&quote(a));
            }
        }
        Ok(line)
    }
}

/// The option that says yes once or no once; `cancelled` when the agent offers no such option.
pub(super) fn permission_answer(
    q: &RequestPermissionRequest,
    ok: bool,
) -> RequestPermissionResponse {
    // Never an "always" option: that would let the agent act unasked next time, bypassing
    // the person (and Rein's judgement of each write).
    let wanted = if ok {
        PermissionOptionKind::AllowOnce
    } else {
        PermissionOptionKind::RejectOnce
    };
    let pick = q
        .options
        .iter()
        .find(|o| o.kind == wanted)
        .map(|o| o.option_id.clone());
    RequestPermissionResponse::new(match pick {
        Some(id) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id)),
        None => RequestPermissionOutcome::Cancelled,
    })
}

/// A step's title from a tool call's: a command (harnesses title it by the bare command
/// line) says that it runs, as Rein's own `run …` steps do.
pub(super) fn titled(kind: ToolKind, title: &str) -> String {
    let lower = title.trim_start().to_ascii_lowercase();
    if kind == ToolKind::Execute && !lower.starts_with("run") && !lower.starts_with("bash") {
        format!("run {}", title.trim())
    } else {
        title.to_owned()
    }
}

/// A plan entry as Rein takes it: its content, status and priority (in ACP's words).
pub(super) fn plan_entry(e: &agent_client_protocol::v1::schema::PlanEntry) -> PlanEntry {
    let word = |v: serde_json::Result<serde_json::Value>| {
        v.ok().and_then(|v| v.as_str().map(str::to_owned))
    };
    PlanEntry {
        text: e.content.clone(),
        status: word(serde_json::to_value(&e.status))
            .as_deref()
            .and_then(ItemStatus::parse),
        priority: word(serde_json::to_value(&e.priority)),
    }
}

/// The tool kind as ACP spells it (`switch_mode`, …).
pub(super) fn kind_name(kind: ToolKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "other".into())
}

/// The command line in a tool call's raw input: a string, or words (with `sh -c LINE`
/// unwrapped to LINE, which is what Rein's policy judges).
pub(super) fn command_of(raw: &serde_json::Value) -> Option<String> {
    match raw.get("command").or_else(|| raw.get("cmd"))? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Array(words) => {
            let words: Vec<&str> = words.iter().map(|w| w.as_str()).collect::<Option<_>>()?;
            match words.as_slice() {
                [sh, flag, line]
                    if matches!(*sh, "sh" | "bash" | "zsh" | "/bin/sh" | "/bin/bash")
                        && matches!(*flag, "-c" | "-lc") =>
                {
                    Some((*line).to_owned())
                }
                _ => Some(words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ")),
            }
        }
        _ => None,
    }
}

/// The file changes a tool call announces: from its raw input (Claude Code's `Write
/// {file_path, content}` and `Edit {file_path, old_string, new_string}`), else from its `diff`
/// content (`{path, oldText, newText}`: no old text is a whole-file write, else a replacement).
pub(super) fn intended(
    raw: Option<&serde_json::Value>,
    content: Option<&[ToolCallContent]>,
) -> Vec<Intended> {
    let field =
        |v: &serde_json::Value, k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
    if let Some(raw) = raw {
        if let Some(path) = field(raw, "file_path").or_else(|| field(raw, "path")) {
            if let Some(content) = field(raw, "content") {
                return vec![Intended::Write { path, content }];
            }
            if let (Some(old), Some(new)) = (field(raw, "old_string"), field(raw, "new_string")) {
                if raw.get("replace_all").and_then(|r| r.as_bool()) != Some(true) {
                    return vec![Intended::Edit { path, old, new }];
                }
            }
        }
    }
    content
        .into_iter()
        .flatten()
        .filter_map(|c| match c {
            ToolCallContent::Diff(d) => {
                let path = d.path.to_string_lossy().into_owned();
                Some(match d.old_text.as_deref() {
                    None | Some("") => Intended::Write {
                        path,
                        content: d.new_text.clone(),
                    },
                    Some(old) => Intended::Edit {
                        path,
                        old: old.to_owned(),
                        new: d.new_text.clone(),
                    },
                })
            }
            _ => None,
        })
        .collect()
}

/// Lines `line` (1-based) .. `line + limit` of a file's text.
pub(super) fn lines_of(text: &str, line: Option<u32>, limit: Option<u32>) -> String {
    if line.is_none() && limit.is_none() {
        return text.to_owned();
    }
    let start = line.unwrap_or(1).max(1) as usize - 1;
    let lines = text.split_inclusive('\n').skip(start);
    match limit {
        Some(n) => lines.take(n as usize).collect(),
        None => lines.collect(),
    }
}
