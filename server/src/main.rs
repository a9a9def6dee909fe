//! The `rein` binary: the language server, the demo, and a few commands for use without an
//! editor (run a task, status, log, restore). The command line itself is in `cli`.

mod cli;
mod demo;

use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{CommandFactory, Parser};
use rein::control::{
    Advice, ControlError, Notice, OutputChunk, OutputState, Reply, Request, UserAction,
};
use rein::engine::{Heard, Place, Remote};
use rein::state::{Status, TaskState};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;

use cli::{Cli, Cmd};

/// The longest unfinished output line `rein run` holds back before showing it.
const PARTIAL_LINE: usize = 4096;

/// `rein run`'s status when the task stopped for the human and nobody answered.
const STOPPED_FOR_HUMAN: i32 = 3;

fn filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"))
}

fn main() {
    one_malloc_arena();
    bound_object_cache();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and errors alike; a closed pipe while printing them is not worth a panic.
            let _ = e.print();
            std::process::exit(e.exit_code());
        }
    };
    let code = match run(cli) {
        Ok(code) => code,
        // The reader went away (`rein log | head -3`): nothing left to say, and no one to say it to.
        Err(e) if closed_pipe(&e) => 0,
        Err(e) => {
            eprintln!("rein: {e:#}");
            2
        }
    };
    std::process::exit(code);
}

/// Makes every thread allocate from glibc's one main arena, before any thread starts. By
/// default each thread that allocates (the first scan's, the runtime's workers, the blocking
/// pool's) gets an arena of its own, and a few live objects left in one pin the pages freed
/// around them: `malloc_trim` then gives little back, and after 15 tasks on a 50k-file tree
/// the server held 11 MiB of such pages (3.9 MiB of heap in all with one arena). Rein's
/// threads seldom allocate at the same time, so sharing one arena costs nothing measurable.
/// `MALLOC_ARENA_MAX` in the environment still wins.
fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt takes no pointers and is called before any other thread exists.
        unsafe {
            nix::libc::mallopt(nix::libc::M_ARENA_MAX, 1);
        }
    }
}

/// Caps libgit2's object cache (per repository; 256 MiB by default). Every step's commit
/// and trees are looked up once and then stay cached, never needed again: 6.3 MB after
/// 10,000 steps, growing with the task. The trees a snapshot reads again (the tip's, along
/// the changed paths) fit well within the cap. The cap counts objects' raw sizes; parsed,
/// they take about 2.7 times as much heap (heaptrack: 11 MB under a 4 MiB cap at 10,000
/// steps), so it is 1 MiB.
fn bound_object_cache() {
    const CACHE_BYTES: nix::libc::ssize_t = 1 << 20;
    // SAFETY: sets one of libgit2's global options before any repository is opened.
    if let Err(e) = unsafe { git2::opts::set_cache_max_size(CACHE_BYTES) } {
        eprintln!("rein: could not cap libgit2's object cache: {e}");
    }
}

/// True when the error is a write to a closed standard output.
fn closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Writes one line to standard output, reporting a closed pipe as an error (never a panic).
macro_rules! out {
    ($($arg:tt)*) => {
        writeln!(std::io::stdout().lock(), $($arg)*)
    };
}

// After `out!`, which it uses.
mod tasks;

/// The directory a command works on. Where `GIT_DIR`/`GIT_WORK_TREE` are set they name its
/// repository, as for git run there: taken now, so every later look-up finds that layout
/// (a lone argument that is no directory is `rein log`'s task id, and names no tree).
fn dir_or_here(dir: Option<PathBuf>) -> Result<PathBuf> {
    let dir = match dir {
        Some(d) => d,
        None => std::env::current_dir()?,
    };
    if dir.is_dir() {
        rein::checkpoint::layout::adopt_env(&dir)?;
    }
    Ok(dir)
}

fn run(cli: Cli) -> Result<i32> {
    let Some(cmd) = cli.command else {
        let mut help = Cli::command().render_help().to_string();
        help.push('\n');
        std::io::stdout().lock().write_all(help.as_bytes())?;
        return Ok(0);
    };
    match cmd {
        Cmd::Lsp => {
            let (layer, logs) = rein::lsp::log::channel();
            // The editor gets the log as `window/logMessage`, each line at its level. Editors
            // record a server's stderr as errors (Neovim tags every line [ERROR] in lsp.log,
            // a warning too), so stderr carries nothing unless RUST_LOG asks for it.
            let stderr_filter =
                EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("off"));
            tracing_subscriber::registry()
                .with(
                    tracing_subscriber::fmt::layer()
                        .with_writer(std::io::stderr)
                        .with_ansi(false)
                        .with_filter(stderr_filter),
                )
                .with(layer.with_filter(filter()))
                .init();
            // Only protocol goes to stdout in this mode.
            Ok(rein::lsp::run(
                BufReader::new(std::io::stdin()),
                std::io::stdout(),
                Some(logs),
            ))
        }
        Cmd::Demo { dir } => {
            init_stderr_log();
            // The transcript is printed from many places; a closed pipe ends the demo the
            // conventional way (SIGPIPE, quietly), and its `rein lsp` child ends on EOF.
            // SAFETY: setting a signal to its default disposition runs no handler code.
            unsafe {
                let _ = nix::sys::signal::signal(
                    nix::sys::signal::Signal::SIGPIPE,
                    nix::sys::signal::SigHandler::SigDfl,
                );
            }
            demo::run(dir)
        }
        Cmd::Run {
            plan,
            agent,
            goal,
            wait,
            worktree,
            carry,
            dir,
        } => {
            init_stderr_log();
            let spec = match (plan, agent) {
                (Some(plan), _) => {
                    let plan = std::fs::canonicalize(&plan)
                        .with_context(|| format!("cannot find the plan {}", plan.display()))?;
                    serde_json::json!({"kind": "script", "plan": plan})
                }
                (None, Some(agent)) => agent,
                // clap requires one of the two.
                (None, None) => anyhow::bail!("rein run needs --plan FILE or --agent JSON"),
            };
            let isolation = match worktree {
                true => rein::engine::wire::Isolation::Worktree,
                false => rein::engine::wire::Isolation::None,
            };
            run_task(spec, &goal, wait, &dir_or_here(dir)?, isolation, carry)
        }
        Cmd::Status { follow: true, dir } => {
            init_stderr_log();
            follow_status(&dir_or_here(dir)?)
        }
        Cmd::Status { follow: false, dir } => {
            match rein::control::load(&dir_or_here(dir)?)? {
                Some(s) => out!("{}", serde_json::to_string_pretty(&s)?)?,
                None => out!("no Rein task in this repository")?,
            }
            Ok(0)
        }
        Cmd::Log {
            dir,
            task,
            transcript: true,
        } => {
            let (dir, task) = log_target(dir, task)?;
            let t = rein::control::transcript(&dir, task.as_deref(), 0)?;
            if t.task_id.is_none() {
                out!("no Rein task in this repository")?;
            }
            std::io::stdout().lock().write_all(t.to_text().as_bytes())?;
            Ok(0)
        }
        Cmd::Log { dir, task, .. } => {
            let (dir, task) = log_target(dir, task)?;
            for c in rein::control::log(&dir, task.as_deref())? {
                out!(
                    "{}  step {:>3}  {:<5}  {}",
                    &c.id[..12.min(c.id.len())],
                    c.step,
                    c.author.as_str(),
                    c.action
                )?;
            }
            Ok(0)
        }
        Cmd::Restore { checkpoint, dir } => {
            let (before, target) = rein::control::restore(&dir_or_here(dir)?, &checkpoint)?;
            out!("the tree as it was is checkpoint {before}")?;
            out!("restored checkpoint {target}")?;
            Ok(0)
        }
        Cmd::Gc {
            keep_tasks,
            keep_days,
            dry_run,
            dir,
        } => gc(&dir_or_here(dir)?, keep_tasks, keep_days, dry_run),
        Cmd::Policy { dir } => {
            let file = match rein::checkpoint::workdir_root(&dir_or_here(dir)?) {
                Ok(root) => rein::lsp::config::read_file(&root).map_err(anyhow::Error::msg)?,
                Err(_) => None,
            };
            let cfg = file_config(file);
            std::io::stdout()
                .lock()
                .write_all(cfg.engine().policy.explain().as_bytes())?;
            Ok(0)
        }
        Cmd::Pause { task, all, dir } => act(dir, Request::Pause, tasks::Target { task, all }),
        Cmd::Resume { task, all, dir } => act(dir, Request::Resume, tasks::Target { task, all }),
        Cmd::Steer {
            text,
            urgent,
            task,
            all,
            dir,
        } => act(
            dir,
            Request::Steer {
                text,
                location: None,
                source: rein::state::ConstraintSource::Command,
                urgent,
            },
            tasks::Target { task, all },
        ),
        Cmd::Abort {
            keep_changes,
            task,
            dir,
        } => act(
            dir,
            Request::Abort { keep_changes },
            tasks::Target::of(task),
        ),
        Cmd::Takeover { reason, task, dir } => {
            act(dir, Request::Takeover { reason }, tasks::Target::of(task))
        }
        Cmd::Continue {
            text,
            task,
            wait,
            dir,
        } => {
            init_stderr_log();
            continue_task(&dir_or_here(dir)?, text, task, wait)
        }
        Cmd::Handback { note, task, dir } => {
            act(dir, Request::Handback { note }, tasks::Target::of(task))
        }
        Cmd::Decide {
            id,
            choice,
            task,
            dir,
        } => act(
            dir,
            Request::Decide {
                decision_id: id,
                choice,
            },
            tasks::Target::of(task),
        ),
        Cmd::Rewind {
            checkpoint,
            task,
            dir,
        } => act(dir, Request::Rewind { checkpoint }, tasks::Target::of(task)),
        Cmd::Tasks { json, dir } => tasks::list(&dir_or_here(dir)?, json),
        Cmd::Land {
            task,
            commit,
            keep,
            dir,
        } => tasks::land(&dir_or_here(dir)?, task, commit, keep),
        Cmd::Discard {
            task,
            force,
            refs,
            dir,
        } => tasks::discard(
            &dir_or_here(dir)?,
            task,
            force,
            refs.map(|r| match r {
                cli::RefsArg::Keep => rein::engine::wire::RefsChoice::Keep,
                cli::RefsArg::Remove => rein::engine::wire::RefsChoice::Remove,
            }),
        ),
        Cmd::Stop { dir } => stop(&dir_or_here(dir)?),
        Cmd::Engine { dir } => {
            init_stderr_log();
            let dir = dir_or_here(dir)?;
            // Its own session: no terminal's hangup or Ctrl-C reaches the task.
            let _ = nix::unistd::setsid();
            match rein::engine::serve(&dir)? {
                rein::engine::Served::Ended => {}
                rein::engine::Served::AlreadyRunning => {
                    tracing::info!("another process is this working tree's engine");
                }
            }
            Ok(0)
        }
        Cmd::Schema => {
            out!("{}", serde_json::to_string_pretty(&rein::state::schema())?)?;
            Ok(0)
        }
        Cmd::Completions { shell } => {
            // Generated into memory first: clap_complete panics on a failed write.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "rein", &mut script);
            std::io::stdout().lock().write_all(&script)?;
            Ok(0)
        }
        Cmd::Version => {
            out!("rein {}", env!("CARGO_PKG_VERSION"))?;
            Ok(0)
        }
    }
}

/// The settings a repository's `rein.toml` gives (its problems said on stderr).
fn file_config(file: Option<serde_json::Value>) -> rein::lsp::config::Config {
    let (cfg, problems) = rein::lsp::config::Sources {
        file,
        ..Default::default()
    }
    .resolve();
    for p in problems {
        eprintln!("rein.toml: {p}");
    }
    cfg
}

/// `rein gc`: the sweep, with rein.toml's retention unless overridden, one line a task.
fn gc(dir: &Path, keep_tasks: Option<u64>, keep_days: Option<u64>, dry_run: bool) -> Result<i32> {
    let root = rein::checkpoint::workdir_root(dir)?;
    let mut retention = match rein::lsp::config::read_file(&root) {
        Ok(file) => file_config(file).retention,
        Err(e) => {
            eprintln!("{e}; using the default retention");
            rein::gc::Retention::default()
        }
    };
    retention.keep_tasks = keep_tasks.unwrap_or(retention.keep_tasks);
    retention.keep_days = keep_days.unwrap_or(retention.keep_days);
    // A worktree task whose worktree was removed by hand: its branch and record go first, so
    // the sweep below finds its refs orphaned like any removed worktree's.
    if !dry_run {
        for reg in rein::worktree::sweep(&root)? {
            out!(
                "{} ({}): its worktree {} is gone; removed its branch {} and its record",
                reg.name(),
                reg.task_id,
                reg.path.display(),
                reg.branch
            )?;
        }
    }
    let sweep = rein::gc::sweep(&root, retention, std::time::SystemTime::now(), dry_run)?;
    if sweep.tasks.is_empty() && sweep.missing.is_empty() {
        out!("no Rein task in this repository")?;
        return Ok(0);
    }
    let mut freed = 0;
    for t in &sweep.tasks {
        let status = match &t.worktree {
            Some(_) => "worktree removed",
            None => t.status.map_or("unreadable", |s| s.as_str()),
        };
        let verb = if dry_run { "would remove" } else { "removed" };
        let what = match t.kept {
            Some(rein::gc::Kept::Current) => "kept (the current task)".to_owned(),
            Some(rein::gc::Kept::Live) => "kept (not ended)".to_owned(),
            Some(rein::gc::Kept::Recent) => {
                format!("kept (among the last {})", retention.keep_tasks)
            }
            Some(rein::gc::Kept::Young) => {
                format!("kept (touched within {} days)", retention.keep_days)
            }
            None => match &t.worktree {
                Some(w) => format!(
                    "{verb} ({} refs; git no longer lists its worktree {w})",
                    t.refs.len()
                ),
                None => {
                    freed += t.bytes;
                    format!(
                        "{verb} ({} refs, {} KiB)",
                        t.refs.len(),
                        t.bytes.div_ceil(1024)
                    )
                }
            },
        };
        out!("{}  {:<17}  {what}", t.id, status)?;
    }
    for w in &sweep.missing {
        let (name, path, n) = (&w.name, w.path.display(), w.tasks);
        if w.locked {
            out!("worktree {name} ({path}) is missing and locked: its {n} task(s) stay while it is locked")?;
        } else {
            out!("worktree {name} ({path}) is missing: its {n} task(s) stay while git lists it; `git worktree repair` if you moved it, else `git worktree prune` then `rein gc` removes them")?;
        }
    }
    let n = sweep.removed().count();
    let verb = if dry_run { "would remove" } else { "removed" };
    out!(
        "{verb} {n} task(s), {} KiB; `git gc --prune=now` then frees their checkpoints' objects",
        freed.div_ceil(1024)
    )?;
    Ok(0)
}

fn init_stderr_log() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .try_init();
}

/// What a terminal client waits on.
enum Event {
    Engine(Notice),
    /// A worktree task's notice.
    Task(String, Notice),
    /// The engine has the task open (again, after a reconnection).
    Opened(Result<Option<Box<TaskState>>, ControlError>),
    /// The connection to the engine ended.
    Lost(String),
    /// No engine could be reached.
    Unreachable(String),
    /// A line the human typed (None: standard input ended).
    Line(Option<String>),
}

type Events = tokio::sync::mpsc::UnboundedReceiver<Event>;

/// The settings a terminal client gives the engine: `rein.toml`'s.
fn file_settings(root: &Path) -> rein::engine::Settings {
    let file = rein::lsp::config::read_file(root).unwrap_or_else(|e| {
        eprintln!("{e}; using the default settings");
        None
    });
    file_config(file).settings()
}

/// Joins the working tree's engine (starting one if none runs): the handle, what the engine
/// says from now on, and the task it has open. Must run inside the runtime.
async fn join(
    dir: &Path,
    tx: tokio::sync::mpsc::UnboundedSender<Event>,
    rx: &mut Events,
) -> Result<(Remote, Option<Box<TaskState>>)> {
    let place = Place::of(dir)?;
    let settings = file_settings(&place.root);
    let listen: rein::engine::Listener = std::sync::Arc::new(move |h| {
        let event = match h {
            Heard::Opened(r) => Event::Opened(r),
            Heard::Notice(n) => Event::Engine(n),
            Heard::TaskNotice { task_id, notice } => Event::Task(task_id, notice),
            // The terminal asks for the tasks when it wants them.
            Heard::Tasks(_) => return,
            Heard::Lost(why) => Event::Lost(why),
            Heard::Unreachable(why) => Event::Unreachable(why),
            // This client asks with `call` and `ask`, never in order with the notices.
            Heard::Answer { .. } => return,
        };
        let _ = tx.send(event);
    });
    let remote = Remote::open(place, "cli", settings, true, listen);
    loop {
        match rx.recv().await {
            Some(Event::Opened(r)) => return Ok((remote, r?)),
            Some(Event::Lost(why) | Event::Unreachable(why)) => anyhow::bail!("{why}"),
            Some(_) => {}
            None => anyhow::bail!("the link to the Rein engine ended"),
        }
    }
}

/// `rein log`'s repository and task: a lone argument that is no directory but has a task
/// id's shape names the task (`rein log TASK`).
fn log_target(dir: Option<PathBuf>, task: Option<String>) -> Result<(PathBuf, Option<String>)> {
    match (dir, task) {
        (Some(d), None) if !d.is_dir() && d.to_str().is_some_and(rein::control::is_task_id) => {
            Ok((dir_or_here(None)?, d.to_str().map(str::to_owned)))
        }
        (dir, task) => Ok((dir_or_here(dir)?, task)),
    }
}

/// An engine's advice, its actions named as commands of this terminal.
fn for_terminal(advice: &Advice) -> String {
    advice.render(|a| match a {
        UserAction::Start => "`rein run`".to_owned(),
        UserAction::Release => "rein.release (from an editor)".to_owned(),
        UserAction::Continue => "`rein continue TEXT`".to_owned(),
        other => format!("`rein {}`", other.name()),
    })
}

/// `rein pause | resume | steer | abort | takeover | handback | decide | rewind`: one
/// request to the working tree's engine, on the task every client shares.
fn act(dir: Option<PathBuf>, req: Request, target: tasks::Target) -> Result<i32> {
    init_stderr_log();
    let dir = dir_or_here(dir)?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let (remote, state) = join(&dir, tx, &mut rx).await?;
        if target.all {
            return tasks::all(&remote, req).await;
        }
        if state.is_none() && target.task.is_none() && !tasks::any(&remote).await? {
            eprintln!("rein: there is no Rein task in this repository; start one with `rein run` or from an editor");
            return Ok(1);
        }
        match remote.call_task(target.task.as_deref(), req).await {
            Ok(reply) => {
                let s = reply.state();
                match &reply {
                    Reply::Steered { constraint_id, .. } => {
                        out!("steer {constraint_id} queued: the agent gets it before its next move")?
                    }
                    Reply::Handover { handover, .. } => out!("{}", handover.markdown)?,
                    Reply::Handback { report, .. } => out!("{}", report.markdown())?,
                    _ => {}
                }
                let why = s.stop_reason.as_deref().map_or(String::new(), |r| format!(": {r}"));
                out!("task {} is {}{why}", s.task.id, s.status.as_str())?;
                Ok(0)
            }
            Err(ControlError::NotNow(advice)) => {
                eprintln!("rein: {}", for_terminal(&advice));
                Ok(1)
            }
            Err(ControlError::BadArgument(why)) => {
                eprintln!("rein: {why}");
                Ok(1)
            }
            Err(e) => Err(e.into()),
        }
    })
}

/// `rein stop`: the engine pauses a running task and ends.
fn stop(dir: &Path) -> Result<i32> {
    init_stderr_log();
    let place = Place::of(dir)?;
    if std::os::unix::net::UnixStream::connect(&place.socket).is_err() {
        eprintln!("rein: no Rein engine runs on {}", place.root.display());
        return Ok(1);
    }
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let (remote, _) = join(dir, tx, &mut rx).await?;
        match remote.ask(rein::engine::wire::Ask::Stop).await {
            Ok(Ok(rein::engine::wire::Answer::Stopping { state })) => {
                match state {
                    Some(s) => out!(
                        "the Rein engine stopped; task {} is {}",
                        s.task.id,
                        s.status.as_str()
                    )?,
                    None => out!("the Rein engine stopped")?,
                }
                Ok(0)
            }
            Ok(Ok(other)) => anyhow::bail!("the Rein engine answered stop with {other:?}"),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => anyhow::bail!("the Rein engine did not answer"),
        }
    })
}

/// `rein status --follow`: the task's steps, stops and command output as they come, until
/// it ends (a task started meanwhile is followed from its start).
fn follow_status(dir: &Path) -> Result<i32> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let (remote, state) = join(dir, tx, &mut rx).await?;
        let state = match state {
            Some(s) => *s,
            None => {
                out!("no Rein task in this repository yet; waiting for one to start")?;
                loop {
                    match rx.recv().await {
                        Some(Event::Engine(Notice::State { state, .. })) => break *state,
                        Some(Event::Opened(Ok(Some(s)))) => break *s,
                        Some(_) => {}
                        None => return Ok(0),
                    }
                }
            }
        };
        let mut run = Run {
            handle: &remote,
            task: None,
            seen: 0,
            state: Box::new(state),
            asked: None,
            wait: false,
            follow: true,
            partial: std::collections::HashMap::new(),
        };
        out!("task {}: {}", run.state.task.id, run.state.task.goal)?;
        if let Some(code) = run.on_state()? {
            return Ok(code);
        }
        run.follow(&mut rx).await
    })
}

/// `rein run`: a task in the terminal, one line per step, until it ends or stops for the
/// human (then, with `wait`, the human answers on standard input). The task runs in the
/// working tree's engine, which every editor on it shares.
fn run_task(
    spec: serde_json::Value,
    goal: &str,
    wait: bool,
    dir: &Path,
    isolation: rein::engine::wire::Isolation,
    carry: bool,
) -> Result<i32> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let (remote, _) = join(dir, tx.clone(), &mut rx).await?;
        let settings = file_settings(&rein::checkpoint::workdir_root(dir)?);
        let started = remote
            .ask(rein::engine::wire::Ask::Start {
                goal: goal.to_owned(),
                agent: spec,
                settings,
                isolation,
                carry,
                task_id: None,
            })
            .await
            .unwrap_or(Err(ControlError::Gone));
        let state = match started {
            Ok(rein::engine::wire::Answer::Started { state }) => state,
            Ok(other) => anyhow::bail!("the Rein engine answered a start with {other:?}"),
            Err(ControlError::NotNow(advice)) => anyhow::bail!("{}", for_terminal(&advice)),
            Err(e) => return Err(e.into()),
        };
        let worktree = isolation == rein::engine::wire::Isolation::Worktree;
        let said = match worktree {
            true => format!(
                "task {} started in a worktree of its own (branch rein/{}); `rein land {}` brings its work here",
                state.task.id, state.task.id, state.task.id
            ),
            false => format!("task {} started in {}", state.task.id, dir.display()),
        };
        let task = worktree.then(|| state.task.id.clone());
        follow_task(&remote, tx, rx, state, task, wait, &said).await
    })
}

/// `rein continue`: the next turn of the task, followed as `rein run` follows a task.
fn continue_task(dir: &Path, text: String, task: Option<String>, wait: bool) -> Result<i32> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let (remote, _) = join(dir, tx.clone(), &mut rx).await?;
        let state = match remote
            .call_task(task.as_deref(), Request::Continue { text })
            .await
        {
            Ok(reply) => Box::new(reply.state().clone()),
            Err(ControlError::NotNow(advice)) => {
                eprintln!("rein: {}", for_terminal(&advice));
                return Ok(1);
            }
            Err(ControlError::BadArgument(why)) => {
                eprintln!("rein: {why}");
                return Ok(1);
            }
            Err(e) => return Err(e.into()),
        };
        let turn = state.turns.last().map_or(2, |t| t.n);
        let said = format!("task {}: turn {turn} began", state.task.id);
        // A worktree task's notices come named by it; an old task continued is the one here.
        let here = remote.call(Request::State).await.ok();
        let followed = match here {
            Some(r) if r.state().task.id == state.task.id => None,
            _ => Some(state.task.id.clone()),
        };
        follow_task(&remote, tx, rx, state, followed, wait, &said).await
    })
}

/// Follows a task just started or continued until it ends or stops for the person (with
/// `wait`, their answers read from standard input), printing a line per step.
async fn follow_task(
    remote: &Remote,
    tx: tokio::sync::mpsc::UnboundedSender<Event>,
    mut rx: Events,
    state: Box<TaskState>,
    task: Option<String>,
    wait: bool,
    said: &str,
) -> Result<i32> {
    {
        if wait {
            // Blocking reads belong on their own thread; it ends with the process.
            std::thread::spawn(move || {
                for line in std::io::stdin().lines() {
                    let Ok(line) = line else { break };
                    if tx.send(Event::Line(Some(line))).is_err() {
                        return;
                    }
                }
                let _ = tx.send(Event::Line(None));
            });
        }
        let mut run = Run {
            handle: remote,
            task,
            seen: state.steps.len(),
            state,
            asked: None,
            wait,
            follow: false,
            partial: std::collections::HashMap::new(),
        };
        let started = out!("{said}");
        let result = match started {
            Ok(()) => run.follow(&mut rx).await,
            Err(e) => Err(e.into()),
        };
        if result.as_ref().is_ok_and(|code| *code == 0 || *code == 1) {
            // The engine answers once it has finished with the ended task (its private
            // index released): what `rein run` leaves is settled when it returns.
            let _ = remote.call_task(run.task.as_deref(), Request::State).await;
        }
        if result
            .as_ref()
            .map_or(true, |code| *code != 0 && *code != 1)
            && run.state.status == Status::Running
        {
            // Leave the task paused, not half-done (also when the output was closed): this
            // terminal was following it.
            let _ = remote.call_task(run.task.as_deref(), Request::Pause).await;
        }
        match result {
            Err(e) if closed_pipe(&e) => {
                eprintln!(
                    "rein run: the output was closed; the task is left paused (see rein status)"
                );
                Ok(STOPPED_FOR_HUMAN)
            }
            other => other,
        }
    }
}

/// The progress of one `rein run`.
struct Run<'a> {
    handle: &'a Remote,
    /// The worktree task followed (None: the task here).
    task: Option<String>,
    state: Box<TaskState>,
    /// Steps already printed.
    seen: usize,
    /// The stop last put to the human, so it is asked once.
    asked: Option<String>,
    wait: bool,
    /// `rein status --follow`: stops are shown, never answered or ended on.
    follow: bool,
    /// Each running command's output line not yet ended, by the command's id.
    partial: std::collections::HashMap<String, String>,
}

impl Run<'_> {
    async fn follow(&mut self, rx: &mut Events) -> Result<i32> {
        while let Some(event) = rx.recv().await {
            // Following a worktree task: its notices are the ones that count here.
            let event = match (event, self.task.as_deref()) {
                (Event::Task(id, n), Some(t)) if id == t => Event::Engine(n),
                (Event::Task(..), _) => continue,
                (Event::Engine(_) | Event::Opened(_), Some(_)) => continue,
                (e, _) => e,
            };
            match event {
                // A reply may have brought a newer state than a notice still queued.
                Event::Engine(Notice::State { state: s, .. })
                    if s.version <= self.state.version => {}
                Event::Engine(Notice::State { state: s, .. }) => {
                    self.state = s;
                    if let Some(code) = self.on_state()? {
                        return Ok(code);
                    }
                }
                Event::Engine(Notice::Message { text, .. }) => eprintln!("{text}"),
                Event::Engine(Notice::Wrote { .. }) => {}
                Event::Engine(Notice::Output(o)) => self.on_output(&o)?,
                Event::Opened(Ok(Some(s))) if s.version > self.state.version => {
                    self.state = s;
                    if let Some(code) = self.on_state()? {
                        return Ok(code);
                    }
                }
                Event::Opened(_) | Event::Task(..) => {}
                Event::Unreachable(why) => anyhow::bail!("{why}"),
                Event::Lost(why) => {
                    eprintln!("rein: {why}");
                    // Asking reconnects (a new engine recovers the task), or says why not.
                    let reply = self
                        .handle
                        .call_task(self.task.as_deref(), Request::State)
                        .await?;
                    if reply.state().version > self.state.version {
                        *self.state = reply.state().clone();
                        if let Some(code) = self.on_state()? {
                            return Ok(code);
                        }
                    }
                }
                Event::Line(Some(line)) => {
                    if let Some(code) = self.on_line(line.trim()).await? {
                        return Ok(code);
                    }
                }
                Event::Line(None) => {
                    if self.stopped() {
                        out!("input ended; the task stays {}", self.state.status.as_str())?;
                        return Ok(STOPPED_FOR_HUMAN);
                    }
                    // Still running: follow it to its end or its next stop.
                    self.wait = false;
                }
            }
        }
        Ok(1)
    }

    /// Prints a command's output as it comes, whole lines under its step.
    fn on_output(&mut self, o: &OutputChunk) -> Result<()> {
        let mut text = self.partial.remove(&o.id).unwrap_or_default();
        if o.skipped > 0 {
            text.push_str(&format!("[… {} bytes not shown]\n", o.skipped));
        }
        text.push_str(&o.chunk);
        let ended = o.state == OutputState::Ended;
        let (whole, rest) = match text.rfind('\n') {
            Some(i) if !ended => (&text[..=i], &text[i + 1..]),
            None if !ended => ("", text.as_str()),
            _ => (text.as_str(), ""),
        };
        for line in whole.lines() {
            out!("    │ {line}")?;
        }
        // A line that never ends (a progress bar) is shown in pieces rather than held.
        if rest.len() > PARTIAL_LINE {
            out!("    │ {rest}")?;
        } else if !rest.is_empty() {
            self.partial.insert(o.id.clone(), rest.to_owned());
        }
        if o.state == OutputState::Paused {
            out!("    │ (paused)")?;
        }
        Ok(())
    }

    fn stopped(&self) -> bool {
        matches!(
            self.state.status,
            Status::Paused | Status::AwaitingDecision | Status::Human
        )
    }

    /// Prints new steps; Some(exit status) once `rein run` should end.
    fn on_state(&mut self) -> Result<Option<i32>> {
        let s = &self.state;
        for st in s.steps.iter().skip(self.seen) {
            out!(
                "step {:>3} ({}) {} — {:?}",
                st.n,
                st.author.as_str(),
                st.action,
                st.status
            )?;
        }
        self.seen = s.steps.len();
        let reason = s.stop_reason.clone().unwrap_or_default();
        if s.status.is_terminal() {
            out!("{}: {reason}", s.status.as_str())?;
            let failed = s.status != Status::Done && !self.follow;
            return Ok(Some(i32::from(failed)));
        }
        if !self.stopped() {
            self.asked = None;
            return Ok(None);
        }
        let key = format!(
            "{}|{reason}|{}",
            s.status.as_str(),
            s.decisions.first().map(|d| d.id.as_str()).unwrap_or("")
        );
        if self.asked.as_deref() == Some(key.as_str()) {
            return Ok(None);
        }
        self.asked = Some(key);
        match (s.status, s.decisions.first()) {
            (Status::AwaitingDecision, Some(d)) => {
                out!("waiting for a decision ({}): {}", d.id, d.question)?;
                if let Some(detail) = &d.detail {
                    out!("  {detail}")?;
                }
                if self.wait {
                    out!(
                        "answer with one of: {}{}; or abort",
                        d.options.join(", "),
                        if d.kind == rein::state::DecisionKind::Question {
                            " (or any text)"
                        } else {
                            ""
                        }
                    )?;
                }
            }
            (status, _) => out!("{}: {reason}", status.as_str())?,
        }
        if self.wait {
            if s.status != Status::AwaitingDecision {
                out!("type resume, abort or steer TEXT")?;
            }
            return Ok(None);
        }
        if self.follow {
            return Ok(None);
        }
        out!("rein run stops here: the task needs you. Answer it in an editor, or run with --wait to answer here; rein status shows the state")?;
        Ok(Some(STOPPED_FOR_HUMAN))
    }

    /// Acts on a line the human typed; Some(exit status) once `rein run` should end.
    async fn on_line(&mut self, line: &str) -> Result<Option<i32>> {
        if line.is_empty() {
            return Ok(None);
        }
        // A line typed as a question shows can come before this client heard of it.
        if self.state.status != Status::AwaitingDecision {
            if let Ok(reply) = self
                .handle
                .call_task(self.task.as_deref(), Request::State)
                .await
            {
                if reply.state().version > self.state.version {
                    *self.state = reply.state().clone();
                }
            }
        }
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        let req = match (word, self.state.decisions.first()) {
            ("resume", _) => Request::Resume,
            ("abort", _) => Request::Abort {
                keep_changes: false,
            },
            ("steer", _) if !rest.trim().is_empty() => Request::Steer {
                text: rest.trim().to_owned(),
                location: None,
                source: rein::state::ConstraintSource::Command,
                urgent: false,
            },
            (_, Some(d)) if self.state.status == Status::AwaitingDecision => Request::Decide {
                decision_id: d.id.clone(),
                choice: line.to_owned(),
            },
            _ => {
                out!("not understood: {line:?}; type resume, abort or steer TEXT")?;
                return Ok(None);
            }
        };
        match self.handle.call_task(self.task.as_deref(), req).await {
            Ok(reply) => {
                if let Reply::Steered { constraint_id, .. } = &reply {
                    out!("steer {constraint_id} queued")?;
                }
                let s = reply.state();
                if s.version > self.state.version {
                    *self.state = s.clone();
                    return self.on_state();
                }
            }
            // Name the actions as typed here where there is a word for them.
            Err(rein::control::ControlError::NotNow(advice)) => out!(
                "refused: {}",
                advice.render(|a| match a {
                    UserAction::Resume | UserAction::Abort | UserAction::Steer => {
                        format!("`{}`", a.name())
                    }
                    UserAction::Decide => "one of its options".to_owned(),
                    other => format!("rein.{} (from an editor)", other.name()),
                })
            )?,
            Err(e) => out!("refused: {e}")?,
        }
        Ok(None)
    }
}
