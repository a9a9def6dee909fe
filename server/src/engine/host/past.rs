//! The working tree's past tasks, as the engine serves them: the history in `rein.tasks`,
//! an ended task's state and transcript read from its files, and a follow-up to one, which
//! makes it the working tree's task again (the one engine opens it, as after a restart, and
//! the follow-up goes to it).
//!
//! Must never: replace a task that is still live here, or write an old task's files to read
//! them.

use super::Host;
use crate::control::{self, Advice, ControlError, PastTask, Reply, Request, UserAction};
use crate::engine::wire::{Answer, Settings};

impl Host {
    /// Every task of the working tree, newest first; a failure to list is logged and the
    /// list is empty.
    pub(super) fn history(&self) -> Vec<PastTask> {
        control::history(&self.place.root).unwrap_or_else(|e| {
            tracing::warn!("cannot list the working tree's tasks: {e}");
            Vec::new()
        })
    }

    /// A request for `task`, which is not live here: a past task's state or transcript, or a
    /// follow-up to it; anything else is refused naming what can be done.
    pub(super) fn past_task(&mut self, client: u64, id: Option<u64>, task: String, req: Request) {
        let root = self.place.root.clone();
        let result = match req {
            Request::State => control::load_task(&root, &task).map(|s| Reply::State(Box::new(s))),
            Request::Transcript { since } => control::transcript(&root, Some(&task), since)
                .and_then(|t| {
                    Ok(Reply::Transcript {
                        transcript: Box::new(t),
                        state: Box::new(control::load_task(&root, &task)?),
                    })
                }),
            Request::Continue { .. } => match self.takes_turn(&task) {
                // Refused without replacing the task here: the old one would take no turn.
                Err(e) => Err(e),
                Ok(()) => match self.reopen(&task) {
                    // It is the task here now: the follow-up goes to it as any request does.
                    Ok(()) => return self.control(client, id, req),
                    Err(e) => Err(e),
                },
            },
            _ => match control::load_task(&root, &task) {
                Ok(s) => Err(ControlError::NotNow(
                    Advice::text(format!(
                        "task {task} has ended ({}); continue it with ",
                        s.status.as_str()
                    ))
                    .action(UserAction::Continue)
                    .then(" or start a new one with ")
                    .action(UserAction::Start),
                )),
                Err(_) => Err(ControlError::BadArgument(format!(
                    "no task {task} in this working tree; `rein tasks` lists them"
                ))),
            },
        };
        self.answer(client, id, result.map(Answer::Reply));
    }

    /// Whether the past task `task` can take a follow-up now (as the history says), so
    /// that one which cannot is refused before it replaces the task here.
    fn takes_turn(&self, task: &str) -> Result<(), ControlError> {
        let s = control::load_task(&self.place.root, task).map_err(|_| {
            ControlError::BadArgument(format!(
                "no task {task} in this working tree; `rein tasks` lists them"
            ))
        })?;
        if control::past(&s, &self.place.root, false).can_continue {
            return Ok(());
        }
        Err(ControlError::NotNow(
            Advice::text(format!(
                "task {task} ({}) cannot take a further turn: its agent has none left (a scripted agent plays only the turns its plan holds); start a new task with ",
                s.status.as_str()
            ))
            .action(UserAction::Start),
        ))
    }

    /// Makes the ended task `task` the one here and opens it, as after a restart.
    fn reopen(&mut self, task: &str) -> Result<(), ControlError> {
        if let Some(s) = self.state.as_ref().filter(|s| !s.status.is_terminal()) {
            return Err(control::still_active(&s.task.id, s.status));
        }
        control::make_current(&self.place.root, task)?;
        if let Some(old) = self.task.take() {
            old.tell(Request::Shutdown);
        }
        self.state = None;
        let settings = self.settings.clone().unwrap_or_else(|| {
            Settings::new(&control::EngineConfig::default(), Default::default(), None)
        });
        self.open(&settings)
    }
}
