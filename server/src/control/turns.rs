//! Follow-up turns: a task is a conversation. Once the agent finished (or the task was
//! aborted or failed), the person's next instruction begins a new turn of the same task:
//! the same checkpoint chain, transcript and plan, and the same agent conversation
//! (`Agent::follow_up`). What the person changed since the agent's last step is recorded and
//! reported to the agent first, as at a handback, so it never works from a stale view.
//!
//! Must never: begin a turn while the task is still live (that is a steer or a resume), or
//! leave the task changed when the agent refuses the turn.

use super::advice::{Advice, UserAction};
use super::{ControlError, Engine, Level, Reply};
use crate::state::{self, Control, Holder, Status, Turn};

impl Engine {
    /// `Request::Continue`: the person's follow-up `text` begins the next turn.
    pub(super) fn follow_up(&mut self, text: &str) -> Result<Reply, ControlError> {
        let text = text.trim();
        // Whether a turn can begin is said before the words are looked at: an editor sends a
        // bare follow-up to a task it sees cannot take one (still live, or its agent out of
        // turns), so the person hears what to do instead of typing words to be thrown away.
        let status = self.state().status;
        if !status.is_terminal() {
            return Err(ControlError::NotNow(
                Advice::text(format!(
                    "the task is still {}, so its turn is not over: give the agent your words with ",
                    status.as_str()
                ))
                .action(UserAction::Steer)
                .then(" (it takes them at its next step)")
                .then(if status == Status::Paused {
                    ", then resume"
                } else {
                    ""
                }),
            ));
        }
        let Some(agent) = self.agent.as_ref() else {
            let why = self
                .agent_error
                .clone()
                .unwrap_or_else(|| "no agent".into());
            return Err(ControlError::NotNow(
                Advice::text(format!(
                    "the agent cannot be started again ({why}); start a new task with "
                ))
                .action(UserAction::Start),
            ));
        };
        if !agent.can_continue() {
            return Err(ControlError::NotNow(
                Advice::text("this task's agent cannot take a further turn (a scripted agent plays only the turns its plan holds); start a new task with ")
                    .action(UserAction::Start),
            ));
        }
        if text.is_empty() {
            return Err(ControlError::BadArgument(
                "the follow-up is empty: say what the agent should do next".into(),
            ));
        }
        // The tree was let go of when the task ended: follow it again, then take what the
        // person did since, saved or typed, as theirs.
        self.ckpt.watch();
        self.released = false;
        let mut report = self
            .absorb(false, "your changes since the agent's last turn")?
            .unwrap_or_default();
        self.take_unsaved(&mut report)?;
        report.head_moved = self.check_head();
        let told = (!report.is_empty()).then(|| report.markdown());
        let accepted = self
            .agent
            .as_mut()
            .map(|a| a.follow_up(text, told.as_deref()));
        if let Some(Err(e)) = accepted {
            return Err(ControlError::NotNow(
                Advice::text(format!(
                    "the agent did not take the follow-up: {e}; start a new task with "
                ))
                .action(UserAction::Start),
            ));
        }
        let n = self.state().turns.last().map_or(2, |t| t.n + 1);
        let from_step = self.next_n();
        let checkpoint = self.tip.clone();
        let turn = Turn {
            n,
            text: text.to_owned(),
            at: state::now(),
            from_step,
            checkpoint: checkpoint.clone(),
            moves_before: self.state().agent_moves,
        };
        super::journal(
            &self.store,
            "continued",
            serde_json::json!({ "turn": n, "text": text, "checkpoint": checkpoint, "step": from_step, "report": told }),
        );
        self.last_result = None;
        self.ignored_hold_begins();
        self.commit(|s| {
            s.turns.push(turn);
            s.status = Status::Running;
            s.stop_reason = None;
            s.summary = None;
            s.kept_agent_lines.clear();
            s.control = Control {
                holder: Holder::Agent,
                since: state::now(),
                reason: format!("turn {n}: the person's follow-up"),
            };
        });
        self.say(
            Level::Info,
            format!("turn {n} began: the agent continues the same conversation"),
        );
        Ok(Reply::State(self.boxed_state()))
    }

    /// The turn under way: its number and the checkpoint it began from (`None` during the
    /// first turn, which began with the task).
    pub(super) fn current_turn(&self) -> Option<(u32, u32, String)> {
        let t = self.state().turns.last()?;
        Some((t.n, t.from_step, t.checkpoint.clone()?))
    }
}
