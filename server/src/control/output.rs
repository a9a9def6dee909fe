//! Live output of the commands the agent runs. Each command's `Tap` is followed by a task
//! that sends what came as a `Notice::Output` at most every `EVERY` (coalescing what came in
//! between); a pause, a resume and the end are sent at once by whoever sees them first. A
//! terminal's output, once it ended, waits here for the engine to keep it with its step.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Notice, Notify};
use crate::exec::{Exit, Tap};

/// The shortest time between two notifications of one command's output.
pub const EVERY: Duration = Duration::from_millis(100);

/// Where a command stands, as `rein/output` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputState {
    /// It runs (or just started).
    Running,
    /// It is frozen by a pause.
    Paused,
    /// It ended; nothing more comes.
    Ended,
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputExit {
    /// Its exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that killed it, when one did.
    pub signal: Option<i32>,
}

impl From<Exit> for OutputExit {
    fn from(e: Exit) -> Self {
        OutputExit {
            code: e.code,
            signal: e.signal,
        }
    }
}

/// One `rein/output` notification: what a command printed since the last one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputChunk {
    /// The task.
    pub task_id: String,
    /// The command, within the task.
    pub id: String,
    /// The number of the command's step.
    pub step: u32,
    /// The command line.
    pub command: String,
    /// The ACP terminal it runs in, if it does.
    pub terminal: Option<String>,
    /// Counts this command's notifications from 1.
    pub seq: u64,
    /// The output since the last notification.
    pub chunk: String,
    /// Bytes before `chunk` that were not sent (over the cap of one notification).
    pub skipped: u64,
    /// Where the command stands.
    pub state: OutputState,
    /// How it ended, with `Ended`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit: Option<OutputExit>,
}

/// A terminal's command that ended, for the engine to keep with its step.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    /// The step that started it.
    pub step: u32,
    /// The command line.
    pub command: String,
    /// Its terminal.
    pub terminal: String,
    /// The last `TAIL_CAP` bytes of its output.
    pub text: String,
    /// Whether output before `text` was left out.
    pub truncated: bool,
    /// How it ended.
    pub exit: Exit,
}

/// What one command's stream has sent so far.
#[derive(Debug)]
struct Sent {
    seq: u64,
    state: Option<OutputState>,
    step: u32,
}

/// One command's live output.
#[derive(Clone)]
pub struct Stream {
    tap: Tap,
    task: String,
    id: String,
    command: String,
    terminal: Option<String>,
    sent: Arc<Mutex<Sent>>,
    notify: Notify,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Stream {
    /// The tap the command's readers push into.
    pub fn tap(&self) -> &Tap {
        &self.tap
    }

    /// Says the step number the command's step got, for the notification of its end.
    pub fn renumber(&self, step: u32) {
        lock(&self.sent).step = step;
    }

    /// Sends what came since the last notification, if anything did or the state changed.
    /// Returns true once the end has been sent.
    pub fn flush(&self) -> bool {
        let mut sent = lock(&self.sent);
        if sent.state == Some(OutputState::Ended) {
            return true;
        }
        let t = self.tap.take();
        let state = match (t.ended, t.paused) {
            (Some(_), _) => OutputState::Ended,
            (None, true) => OutputState::Paused,
            (None, false) => OutputState::Running,
        };
        if t.chunk.is_empty() && t.skipped == 0 && sent.state == Some(state) {
            return false;
        }
        sent.seq += 1;
        sent.state = Some(state);
        (self.notify)(Notice::Output(Box::new(OutputChunk {
            task_id: self.task.clone(),
            id: self.id.clone(),
            step: sent.step,
            command: self.command.clone(),
            terminal: self.terminal.clone(),
            seq: sent.seq,
            chunk: t.chunk,
            skipped: t.skipped,
            state,
            exit: t.ended.map(OutputExit::from),
        })));
        state == OutputState::Ended
    }
}

/// Every command whose output is followed, and the terminals that ended since the engine
/// last looked; clones share them.
#[derive(Clone, Default)]
pub struct Outputs {
    live: Arc<Mutex<Vec<Stream>>>,
    ended: Arc<Mutex<Vec<Ended>>>,
    started: Arc<Mutex<u64>>,
}

impl Outputs {
    /// Starts following a command that runs as step `step` (`terminal`: in that ACP
    /// terminal): says at once that it started, then sends its output until it ends. Must be
    /// called inside a tokio runtime.
    pub fn follow(
        &self,
        task: &str,
        step: u32,
        command: &str,
        terminal: Option<String>,
        tap: Tap,
        notify: Notify,
    ) -> Stream {
        let id = {
            let mut n = lock(&self.started);
            *n += 1;
            format!("{step}-{n}")
        };
        let stream = Stream {
            tap,
            task: task.to_owned(),
            id,
            command: command.to_owned(),
            terminal,
            sent: Arc::new(Mutex::new(Sent {
                seq: 0,
                state: None,
                step,
            })),
            notify,
        };
        lock(&self.live).push(stream.clone());
        stream.flush();
        let (follower, outputs) = (stream.clone(), self.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(EVERY).await;
                if follower.flush() {
                    break;
                }
            }
            outputs.done(&follower);
        });
        stream
    }

    /// A command's stream sent its end: forget it, and keep a terminal's output for its step
    /// (once, whoever sees the end first).
    fn done(&self, stream: &Stream) {
        let mut live = lock(&self.live);
        let before = live.len();
        live.retain(|s| s.id != stream.id);
        if live.len() == before {
            return;
        }
        if let (Some(terminal), Some(exit)) = (&stream.terminal, stream.tap.ended()) {
            let (text, truncated) = stream.tap.tail(crate::exec::TAIL_CAP);
            lock(&self.ended).push(Ended {
                step: lock(&stream.sent).step,
                command: stream.command.clone(),
                terminal: terminal.clone(),
                text,
                truncated,
                exit,
            });
        }
    }

    /// Every command followed was frozen (true) or thawed (false): said at once.
    pub fn pause_all(&self, paused: bool) {
        let live = lock(&self.live).clone();
        for s in live {
            if s.tap.ended().is_none() {
                s.tap.pause(paused);
                s.flush();
            }
        }
    }

    /// The terminals that ended since the last call. A command that ended since its
    /// follower last looked has its end sent now, so it is not missed for want of a tick.
    pub fn take_ended(&self) -> Vec<Ended> {
        let live = lock(&self.live).clone();
        for s in live.iter().filter(|s| s.tap.ended().is_some()) {
            if s.flush() {
                self.done(s);
            }
        }
        std::mem::take(&mut *lock(&self.ended))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect() -> (Notify, Arc<Mutex<Vec<OutputChunk>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let notify: Notify = Arc::new(move |n| {
            if let Notice::Output(o) = n {
                lock(&sink).push(*o);
            }
        });
        (notify, seen)
    }

    #[tokio::test]
    async fn a_command_is_said_to_start_print_pause_resume_and_end_in_order() {
        let (notify, seen) = collect();
        let outputs = Outputs::default();
        let tap = Tap::default();
        let s = outputs.follow("t", 3, "make", None, tap.clone(), notify);
        tap.push(b"building\n");
        outputs.pause_all(true);
        outputs.pause_all(false);
        tap.push(b"done\n");
        tap.end(Exit {
            code: Some(0),
            signal: None,
        });
        s.renumber(4);
        assert!(s.flush());
        assert!(s.flush(), "the end is sent once");
        let got = lock(&seen).clone();
        let states: Vec<(u64, OutputState, &str, u32)> = got
            .iter()
            .map(|o| (o.seq, o.state, o.chunk.as_str(), o.step))
            .collect();
        assert_eq!(
            states,
            vec![
                (1, OutputState::Running, "", 3),
                (2, OutputState::Paused, "building\n", 3),
                (3, OutputState::Running, "", 3),
                (4, OutputState::Ended, "done\n", 4),
            ]
        );
        assert_eq!(
            got[3].exit,
            Some(OutputExit {
                code: Some(0),
                signal: None
            })
        );
        assert!(got.iter().all(|o| o.id == got[0].id && o.task_id == "t"));
    }

    #[tokio::test]
    async fn an_ended_terminal_is_kept_for_its_step_and_forgotten() {
        let (notify, seen) = collect();
        let outputs = Outputs::default();
        let tap = Tap::default();
        outputs.follow(
            "t",
            2,
            "sleep 1",
            Some("rein-term-1".into()),
            tap.clone(),
            notify,
        );
        tap.push(b"z\n");
        let exit = Exit {
            code: None,
            signal: Some(15),
        };
        tap.end(exit);
        for _ in 0..3000 {
            if lock(&outputs.live).is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(lock(&outputs.live).is_empty(), "forgotten once ended");
        let ended = outputs.take_ended();
        assert_eq!(
            ended,
            vec![Ended {
                step: 2,
                command: "sleep 1".into(),
                terminal: "rein-term-1".into(),
                text: "z\n".into(),
                truncated: false,
                exit
            }]
        );
        assert!(outputs.take_ended().is_empty());
        let last = lock(&seen).last().cloned().expect("notified");
        assert_eq!(
            (last.state, last.chunk.as_str()),
            (OutputState::Ended, "z\n")
        );
    }
}
