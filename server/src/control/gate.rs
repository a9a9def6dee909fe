//! The gate for irreversible commands an agent that acts directly (ACP) runs in its own
//! process once Rein approved them. Rein cannot hold such a command itself, so it holds the
//! stops: a pause, abort or take over asked while one runs is answered at once as queued
//! behind it (`queuedStop`), nothing is frozen, cancelled or ended, and the stops land, in
//! order, the moment its tool call reports its end, or its turn or the agent process ends.
//! Rein's own gated commands are `Phase::Command { gated }`; both say the same.

use super::{Engine, Envelope, Level, Request, Responder};
use crate::agent::{Move, ToolProgress, Words};
use crate::exec::Verdict;
use crate::state;

/// Irreversible commands an agent runs itself once approved: no stop lands until their tool
/// calls are over.
#[derive(Default)]
pub(super) struct Gate {
    /// Each tool call's id, with its command line as approved.
    tools: Vec<(String, String)>,
    /// The stops asked meanwhile, in order, to land once all are over (each already told).
    held: Vec<Envelope>,
}

impl Gate {
    /// The ids of the tool calls it holds open.
    pub(super) fn ids(&self) -> Vec<String> {
        self.tools.iter().map(|(id, _)| id.clone()).collect()
    }
}

impl Engine {
    /// Called when `mv`, a permission the agent asked before using a tool of its own, is
    /// allowed: a command the policy classes irreversible is then run by the agent, and the
    /// gate holds its tool call open until it is over. (The policy never lets such a command
    /// through unasked, so this follows the person's approval.)
    pub(super) fn guard(&mut self, mv: &Move, words: &Words) {
        let Move::Permission {
            kind,
            command: Some(cmd),
            ..
        } = mv
        else {
            return;
        };
        let irreversible = matches!(
            self.cfg.policy.classify(cmd),
            Verdict::Ask {
                irreversible: true,
                ..
            }
        );
        let Some(tool) = words
            .tool
            .as_ref()
            .filter(|_| kind == "execute" && irreversible)
        else {
            return;
        };
        if !self.gate.tools.iter().any(|(id, _)| *id == tool.id) {
            self.gate.tools.push((tool.id.clone(), cmd.clone()));
        }
    }

    /// Queues `req` behind the gate when it is a stop (or the answer "take over" to the open
    /// decision) and an approved irreversible command of the agent's runs: answered at once
    /// with the state saying so. Gives the request back otherwise.
    pub(super) fn hold_stop(
        &mut self,
        req: Request,
        reply: Option<Responder>,
    ) -> Result<(), (Request, Option<Responder>)> {
        let Some((_, cmd)) = self.gate.tools.first() else {
            return Err((req, reply));
        };
        let cmd = cmd.clone();
        let (intent, req) = match req {
            Request::Decide {
                decision_id,
                choice,
            } if self.chooses_takeover(&decision_id, &choice) => (
                "take over",
                Request::Takeover {
                    reason: Some(format!("chosen in decision {decision_id}")),
                },
            ),
            req => match req.stop_intent() {
                Some(intent) => (intent, req),
                None => return Err((req, reply)),
            },
        };
        // A stop that waited behind Rein's own gated command was told already; it now waits
        // here, and the state says behind what.
        let told = reply.is_none() && self.state().queued_stop.is_some();
        self.queue_stop(intent, cmd, reply, !told);
        self.gate.held.push(Envelope { req, reply: None });
        Ok(())
    }

    /// Whether `choice` answers the open decision `id` with its "take over" option.
    fn chooses_takeover(&self, id: &str, choice: &str) -> bool {
        self.pending.as_ref().is_some_and(|p| {
            p.decision.id == id
                && choice.trim().eq_ignore_ascii_case("take over")
                && p.decision.options.iter().any(|o| o == "take over")
        })
    }

    /// Records a stop queued behind the approved command `behind` and answers it with the
    /// state; with `tell`, says so (the editor shows it).
    pub(super) fn queue_stop(
        &mut self,
        intent: &str,
        behind: String,
        reply: Option<Responder>,
        tell: bool,
    ) {
        if tell {
            self.say(
                Level::Info,
                format!("{intent} queued: `{behind}` was approved and runs to its end first; the {intent} lands the moment it ends"),
            );
        }
        self.commit(|s| {
            s.queued_stop = Some(state::QueuedStop {
                intent: intent.to_owned(),
                behind,
                since: state::now(),
            });
        });
        if let Some(reply) = reply {
            let _ = reply.send(Ok(super::Reply::State(self.boxed_state())));
        }
    }

    /// Called when the agent's tool call `id` reported its end and was taken as its step.
    pub(super) fn tool_ended(&mut self, id: &str) {
        if self.gate.tools.iter().any(|(t, _)| t == id) {
            self.gate.tools.retain(|(t, _)| t != id);
            self.let_go(None);
        }
    }

    /// Lets go of the tool calls that are over without Rein having taken their end (their
    /// turn or the agent process ended, or the task did); the stops land once none is left.
    pub(super) fn check_gate(&mut self) {
        if self.gate.tools.is_empty() {
            return;
        }
        let live = !self.state().status.is_terminal();
        let mut cut = None;
        let agent = self.agent.as_ref().filter(|_| live);
        self.gate.tools.retain(|(id, cmd)| {
            match agent.map_or(ToolProgress::Cut, |a| a.tool_progress(id)) {
                ToolProgress::Running(_) => true,
                ToolProgress::Reported => false,
                ToolProgress::Cut => {
                    cut = Some(cmd.clone());
                    false
                }
            }
        });
        self.let_go(cut.filter(|_| live));
    }

    /// What resolves once the end of a gated tool call has arrived from the agent (not yet
    /// taken): its id, and whether the tool reported it. For when the engine is not reading
    /// the agent (a decision is open); `None` when nothing is gated.
    pub(super) fn gate_arrival(
        &self,
    ) -> Option<impl std::future::Future<Output = (String, bool)> + Send + 'static> {
        let agent = self.agent.as_ref()?;
        let waits: Vec<_> = self
            .gate
            .tools
            .iter()
            .filter_map(|(id, _)| match agent.tool_progress(id) {
                ToolProgress::Running(w) => {
                    let id = id.clone();
                    Some(Box::pin(async move { (id, w.await) }))
                }
                _ => None,
            })
            .collect();
        (!waits.is_empty()).then_some(async move { futures::future::select_all(waits).await.0 })
    }

    /// The end of gated tool call `id` has arrived; the engine takes it as the agent's step
    /// when it next reads the agent (a decision may be open meanwhile), and the stops may
    /// land now.
    pub(super) fn tool_arrived(&mut self, id: &str, reported: bool) {
        let Some(i) = self.gate.tools.iter().position(|(t, _)| t == id) else {
            return;
        };
        let (_, cmd) = self.gate.tools.remove(i);
        self.let_go((!reported).then_some(cmd));
    }

    /// Once no gated tool call is left, the held stops land next, in order, ahead of
    /// anything asked later. `cut` names a command whose tool call never reported its end.
    fn let_go(&mut self, cut: Option<String>) {
        if !self.gate.tools.is_empty() || self.gate.held.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.gate.held);
        if let Some(cmd) = cut {
            let intent = held
                .first()
                .and_then(|e| e.req.stop_intent())
                .unwrap_or("stop");
            self.say(
                Level::Warning,
                format!("`{cmd}` never reported its end: the agent's turn or its process ended first; your queued {intent} lands now"),
            );
        }
        for env in held.into_iter().rev() {
            self.deferred.push_front(env);
        }
    }
}
