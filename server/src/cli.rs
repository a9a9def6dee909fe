//! The command line: every subcommand and flag of `rein`, parsed by clap (derive), so each
//! has `--help`, a wrong argument is named in the error, and shells get completions.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Keep a person in charge of a coding agent.
#[derive(Debug, Parser)]
#[command(
    name = "rein",
    version,
    about = "rein — keep a person in charge of a coding agent",
    after_help = "DIR defaults to the current directory. RUST_LOG sets the log level (default: warn; `rein lsp` also sends info lines to the editor as window/logMessage)."
)]
pub struct Cli {
    /// What to do (none: this help).
    #[command(subcommand)]
    pub command: Option<Cmd>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Run the language server on stdio (editors start this).
    Lsp,
    /// The guided demo: an editor session over the real protocol, in a throwaway repository.
    Demo {
        /// Where to make the demo repository (default: a new temporary directory).
        dir: Option<PathBuf>,
    },
    /// Run a task without an editor: a scripted plan or any agent spec, one line per step.
    #[command(
        after_help = "Exit status: 0 done; 1 the task failed or was aborted; 2 a usage or \
        start-up error; 3 the task stopped for the human (paused or waiting for a decision) \
        and --wait was not given, or the input ended while waiting.\n\n\
        With --wait, a paused task or an open decision is answered on standard input: \
        `resume`, `abort`, `steer TEXT`, or one of the decision's options (free text for a \
        question)."
    )]
    Run {
        /// A scripted plan, a JSON file {"steps": [...]} (see docs/agents.md).
        #[arg(
            long,
            value_name = "FILE",
            conflicts_with = "agent",
            required_unless_present = "agent"
        )]
        plan: Option<PathBuf>,
        /// Any agent spec as JSON, e.g. '{"kind": "openai", "baseUrl": ..., "model": ...}'.
        #[arg(long, value_name = "JSON", value_parser = parse_json)]
        agent: Option<serde_json::Value>,
        /// What the agent should achieve.
        #[arg(long, value_name = "TEXT", default_value = "run the scripted plan")]
        goal: String,
        /// When the task stops for the human, wait for answers on standard input instead of
        /// ending.
        #[arg(long)]
        wait: bool,
        /// Run it in a worktree of its own (branch rein/<task>), beside any other task;
        /// `rein land` brings its work here.
        #[arg(long)]
        worktree: bool,
        /// With --worktree: the worktree starts from your uncommitted changes too.
        #[arg(long, requires = "worktree")]
        carry: bool,
        /// The repository.
        dir: Option<PathBuf>,
    },
    /// The current task's state, as JSON; with --follow, its changes and its commands'
    /// output as they come, from the engine.
    Status {
        /// Stream the task from the working tree's engine (started if none runs) until it
        /// ends or the engine stops.
        #[arg(long)]
        follow: bool,
        /// The repository.
        dir: Option<PathBuf>,
    },
    /// Pause the running task (every editor and terminal sees it).
    #[command(after_help = CONTROL_HELP)]
    Pause {
        /// The task: its id, or its number as `rein tasks` lists it (default: the task here,
        /// else the only one).
        #[arg(long, value_name = "TASK")]
        task: Option<String>,
        /// Every task of the working tree at once.
        #[arg(long, conflicts_with = "task")]
        all: bool,
        /// The repository.
        #[arg(long, short = 'C', value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Resume a paused task.
    #[command(after_help = CONTROL_HELP)]
    Resume {
        /// The task: its id, or its number as `rein tasks` lists it (default: the task here,
        /// else the only one).
        #[arg(long, value_name = "TASK")]
        task: Option<String>,
        /// Every task of the working tree at once.
        #[arg(long, conflicts_with = "task")]
        all: bool,
        /// The repository.
        #[arg(long, short = 'C', value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Steer the agent: a correction it gets before its next move.
    #[command(after_help = CONTROL_HELP)]
    Steer {
        /// The correction.
        text: String,
        /// Cut the step in flight first (it is rolled back to the last checkpoint).
        #[arg(long)]
        urgent: bool,
        /// The task: its id, or its number as `rein tasks` lists it (default: the task here,
        /// else the only one).
        #[arg(long, value_name = "TASK")]
        task: Option<String>,
        /// Every task of the working tree at once.
        #[arg(long, conflicts_with = "task")]
        all: bool,
        /// The repository.
        #[arg(long, short = 'C', value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Abort the task: the agent's changes are taken back (kept with --keep-changes).
    #[command(after_help = CONTROL_HELP)]
    Abort {
        /// Leave the working tree as it is.
        #[arg(long)]
        keep_changes: bool,
        /// The task: its id, or its number as `rein tasks` lists it (default: the task here,
        /// else the only one).
        #[arg(long, value_name = "TASK")]
        task: Option<String>,
        /// The repository.
        #[arg(long, short = 'C', value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Take control from the agent; prints the handover.
    #[command(after_help = CONTROL_HELP)]
    Takeover {
        /// Why, for the record.
        #[arg(long)]
        reason: Option<String>,
        /// The task: its id, or its number as `rein tasks` lists it (default: the task here,
        /// else the only one).
        #[arg(long, value_name = "TASK")]
        task: Option<String>,
        /// The repository.
        #[arg(long, short = 'C', value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Give control back to the agent, which reads what you changed first.
    #[command(after_help = CONTROL_HELP)]
    Handback {
        /// A note for the agent.
        #[arg(long)]
        note: Option<String>,
        /// The task: its id, or its number as `rein tasks` lists it (default: the task here,
        /// else the only one).
        #[arg(long, value_name = "TASK")]
        task: Option<String>,
        /// The repository.
        #[arg(long, short = 'C', value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Answer an open decision (its id and options are in `rein status`).
    #[command(after_help = CONTROL_HELP)]
    Decide {
        /// The decision's id.
        id: String,
        /// One of its options (free text for a question).
        choice: String,
        /// The task: its id, or its number as `rein tasks` lists it (default: the task here,
        /// else the only one).
        #[arg(long, value_name = "TASK")]
        task: Option<String>,
        /// The repository.
        #[arg(long, short = 'C', value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Put the working tree back to a checkpoint of the running task (the present is
    /// checkpointed first).
    #[command(after_help = CONTROL_HELP)]
    Rewind {
        /// A checkpoint id, an abbreviation or step:N (see `rein log`).
        checkpoint: String,
        /// The task: its id, or its number as `rein tasks` lists it (default: the task here,
        /// else the only one).
        #[arg(long, value_name = "TASK")]
        task: Option<String>,
        /// The repository.
        #[arg(long, short = 'C', value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// The working tree's tasks (here and in worktrees) and the decisions waiting across
    /// them, oldest first.
    Tasks {
        /// Print the JSON the engine answers.
        #[arg(long)]
        json: bool,
        /// The repository.
        #[arg(long, short = 'C', value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Bring a worktree task's work into this working tree: merged with your changes, never
    /// over them (overlaps keep your side and ask); then its worktree and branch go.
    Land {
        /// The task: its id, or its number as `rein tasks` lists it.
        task: String,
        /// Commit what landed on the current branch (default: uncommitted changes).
        #[arg(long)]
        commit: bool,
        /// Keep the worktree and its branch.
        #[arg(long)]
        keep: bool,
        /// The repository.
        #[arg(long, short = 'C', value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// End a worktree task (aborted if it runs) and remove its worktree and branch.
    Discard {
        /// The task: its id, or its number as `rein tasks` lists it.
        task: String,
        /// Remove the worktree even if it holds your work (your changes there, unsaved text).
        #[arg(long)]
        force: bool,
        /// The tags, branches or other shared refs its commands made in your repository:
        /// keep them, or remove them (asked when there are some).
        #[arg(long, value_enum)]
        refs: Option<RefsArg>,
        /// The repository.
        #[arg(long, short = 'C', value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Stop the working tree's engine; a running task is paused first and kept.
    Stop {
        /// The repository.
        dir: Option<PathBuf>,
    },
    /// Be the working tree's engine (editors and commands start this themselves).
    #[command(hide = true)]
    Engine {
        /// The working tree.
        dir: Option<PathBuf>,
    },
    /// The current task's checkpoints, newest first; with --transcript, the task as a
    /// conversation. `rein tasks` lists the others.
    Log {
        /// Print the task as a conversation instead: the goal, the agent's words, each step
        /// with its status and files, command output, your steers, takeover and handback,
        /// decisions and answers, each follow-up turn.
        #[arg(long)]
        transcript: bool,
        /// Another task of the repository: its id (see `rein tasks`).
        #[arg(long, value_name = "TASK")]
        task: Option<String>,
        /// The repository (or, when it is no directory, a task id: `rein log TASK`).
        dir: Option<PathBuf>,
    },
    /// Continue a task that finished (or was aborted or failed): your next instruction
    /// begins a new turn of the same conversation, with the same agent, checkpoints and
    /// transcript, followed here as `rein run` follows a task. The agent is told first what
    /// you changed since its last turn.
    #[command(after_help = CONTINUE_HELP)]
    Continue {
        /// What the agent should do next.
        text: String,
        /// When the turn stops for you, wait for answers on standard input (as `rein run
        /// --wait`).
        #[arg(long)]
        wait: bool,
        /// The task: its id, or its number as `rein tasks` lists it (default: the task here,
        /// else the only one). An older task of this working tree becomes the task here.
        #[arg(long, value_name = "TASK")]
        task: Option<String>,
        /// The repository.
        #[arg(long, short = 'C', value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Put the tree back to a checkpoint (the present is checkpointed first, so nothing is
    /// lost).
    Restore {
        /// A checkpoint id, an abbreviation or step:N (see `rein log`).
        checkpoint: String,
        /// The repository.
        dir: Option<PathBuf>,
    },
    /// Remove finished tasks retention does not keep: their state, journal and refs
    /// (refs/rein/<task>/…), so the next `git gc` can prune their checkpoints.
    #[command(
        after_help = "Kept: the current task, any task that has not ended, the last \
        --keep-tasks started, and any touched within --keep-days. The defaults come from \
        rein.toml ([gc] keepTasks, keepDays), else 20 tasks and 14 days. Rein also sweeps \
        this way whenever a task starts."
    )]
    Gc {
        /// Keep this many most recently started tasks.
        #[arg(long, value_name = "N")]
        keep_tasks: Option<u64>,
        /// Keep tasks touched within this many days.
        #[arg(long, value_name = "DAYS")]
        keep_days: Option<u64>,
        /// Say what would be removed, remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// The repository.
        dir: Option<PathBuf>,
    },
    /// The command policy in force: what runs without asking, what always asks, and why.
    Policy {
        /// The repository whose rein.toml adds rules (default: the current directory).
        dir: Option<PathBuf>,
    },
    /// The JSON Schema of the task state file.
    Schema,
    /// A shell completion script, on standard output.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// The version (same as --version).
    #[command(hide = true)]
    Version,
}

/// What the control subcommands share.
const CONTROL_HELP: &str = "Acts on the task of the working tree's engine, the one every editor and terminal on it shares (started if none runs, recovering an interrupted task). Exit status: 0 done; 1 there is no task or the action does not apply now (the message says what does); 2 the engine could not be reached.";

const CONTINUE_HELP: &str = "Exit status as `rein run`: 0 the turn is done; 1 the task failed or was aborted, or cannot be continued now (the message says why and what does); 2 the engine could not be reached; 3 the turn stopped for you and --wait was not given.";

fn parse_json(text: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_needs_exactly_one_agent_source() {
        let err = Cli::try_parse_from(["rein", "run"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--plan"), "{err}");
        let err = Cli::try_parse_from(["rein", "run", "--plan", "p", "--agent", "{}"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--agent") && err.contains("--plan"), "{err}");
        let err = Cli::try_parse_from(["rein", "run", "--agent", "{nope"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--agent") && err.contains("not JSON"), "{err}");
    }

    #[test]
    fn a_wrong_argument_is_named() {
        let err = Cli::try_parse_from(["rein", "log", "--colour"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--colour"), "{err}");
        let err = Cli::try_parse_from(["rein", "status", "a", "b"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("'b'"), "{err}");
    }
}

/// `rein discard --refs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RefsArg {
    /// They stay in your repository.
    Keep,
    /// Those made since the task began are deleted, those moved put back.
    Remove,
}
