//! The `rein` binary: the language server, the demo, and a few commands for use without an
//! editor (run a scripted task, status, log, restore).

mod demo;

use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

const HELP: &str = "rein — keep a person in charge of a coding agent

USAGE:
    rein lsp                         run the language server on stdio (editors start this)
    rein demo [DIR]                  the guided demo: an editor session over the real protocol
    rein run (--plan FILE | --agent JSON) [--goal TEXT] [DIR]
                                     run a task without an editor: a scripted plan, or
                                     any agent spec, e.g. '{\"kind\": \"openai\", ...}'
    rein status [DIR]                the current task's state
    rein log [DIR]                   the current task's checkpoints, newest first
    rein restore CHECKPOINT [DIR]    put the tree back to a checkpoint (the present is
                                     checkpointed first, so nothing is lost)
    rein schema                      the JSON Schema of the task state file
    rein --version

DIR defaults to the current directory. RUST_LOG sets the log level (default: info).";

fn filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rein: {e:#}");
            2
        }
    };
    std::process::exit(code);
}

fn dir_arg(rest: &[String]) -> Result<PathBuf> {
    match rest {
        [] => Ok(std::env::current_dir()?),
        [d] => Ok(PathBuf::from(d)),
        _ => bail!("too many arguments; see `rein help`"),
    }
}

fn run(args: &[String]) -> Result<i32> {
    let Some((cmd, rest)) = args.split_first() else {
        println!("{HELP}");
        return Ok(0);
    };
    match cmd.as_str() {
        "lsp" => {
            let (layer, logs) = rein::lsp::log::channel();
            tracing_subscriber::registry()
                .with(filter())
                .with(
                    tracing_subscriber::fmt::layer()
                        .with_writer(std::io::stderr)
                        .with_ansi(false),
                )
                .with(layer)
                .init();
            // Only protocol goes to stdout in this mode.
            Ok(rein::lsp::run(
                BufReader::new(std::io::stdin()),
                std::io::stdout(),
                Some(logs),
            ))
        }
        "demo" => {
            init_stderr_log();
            demo::run(rest.first().map(PathBuf::from))
        }
        "run" => {
            init_stderr_log();
            run_task(rest)
        }
        "status" => {
            let dir = dir_arg(rest)?;
            match rein::control::load(&dir)? {
                Some(s) => println!("{}", serde_json::to_string_pretty(&s)?),
                None => println!("no Rein task in this repository"),
            }
            Ok(0)
        }
        "log" => {
            let dir = dir_arg(rest)?;
            for c in rein::control::log(&dir)? {
                println!(
                    "{}  step {:>3}  {:<5}  {}",
                    &c.id[..12.min(c.id.len())],
                    c.step,
                    c.author.as_str(),
                    c.action
                );
            }
            Ok(0)
        }
        "restore" => {
            let Some((spec, rest)) = rest.split_first() else {
                bail!("rein restore needs a checkpoint (an id, an abbreviation or step:N); see `rein log`");
            };
            let dir = dir_arg(rest)?;
            let (before, target) = rein::control::restore(&dir, spec)?;
            println!("the tree as it was is checkpoint {before}");
            println!("restored checkpoint {target}");
            Ok(0)
        }
        "schema" => {
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&rein::state::schema())?
            )?;
            Ok(0)
        }
        "--version" | "-V" | "version" => {
            println!("rein {}", env!("CARGO_PKG_VERSION"));
            Ok(0)
        }
        "help" | "--help" | "-h" => {
            println!("{HELP}");
            Ok(0)
        }
        other => bail!("unknown command {other:?}; see `rein help`"),
    }
}

fn init_stderr_log() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .try_init();
}

/// `rein run`: a scripted task in the terminal, one line per step, until it stops.
fn run_task(args: &[String]) -> Result<i32> {
    let mut plan = None;
    let mut agent = None;
    let mut goal = "run the scripted plan".to_owned();
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--plan" => plan = Some(it.next().context("--plan needs a file")?.clone()),
            "--agent" => {
                let text = it.next().context("--agent needs a JSON agent spec")?;
                agent = Some(
                    serde_json::from_str::<serde_json::Value>(text)
                        .context("--agent is not JSON")?,
                );
            }
            "--goal" => goal = it.next().context("--goal needs a text")?.clone(),
            _ => rest.push(a.clone()),
        }
    }
    let spec = match (plan, agent) {
        (Some(plan), None) => {
            let plan = std::fs::canonicalize(&plan).with_context(|| format!("cannot find the plan {plan}"))?;
            serde_json::json!({"kind": "script", "plan": plan})
        }
        (None, Some(agent)) => agent,
        _ => bail!("rein run needs exactly one of --plan FILE (a JSON {{\"steps\": [...]}}) or --agent JSON"),
    };
    let dir = dir_arg(&rest)?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let notify: rein::control::Notify = std::sync::Arc::new(move |n| {
            let _ = tx.send(n);
        });
        let (handle, state) = rein::control::start(
            &dir,
            &goal,
            spec,
            rein::control::EngineConfig::default(),
            notify,
        )?;
        println!(
            "task {} started in {}",
            state.task.id,
            Path::new(&dir).display()
        );
        let mut seen = state.steps.len();
        while let Some(n) = rx.recv().await {
            match n {
                rein::control::Notice::State(s) => {
                    for st in s.steps.iter().skip(seen) {
                        println!(
                            "step {:>3} ({}) {} — {:?}",
                            st.n,
                            st.author.as_str(),
                            st.action,
                            st.status
                        );
                    }
                    seen = s.steps.len();
                    if s.status.is_terminal() {
                        println!(
                            "{}: {}",
                            s.status.as_str(),
                            s.stop_reason.unwrap_or_default()
                        );
                        return Ok(if s.status == rein::state::Status::Done {
                            0
                        } else {
                            1
                        });
                    }
                    if s.status == rein::state::Status::AwaitingDecision {
                        println!(
                            "waiting for a decision: {}",
                            s.stop_reason.unwrap_or_default()
                        );
                        println!(
                            "(rein run cannot answer it; use an editor, or rein status to inspect)"
                        );
                        return Ok(3);
                    }
                }
                rein::control::Notice::Message { text, .. } => eprintln!("{text}"),
                rein::control::Notice::Wrote { .. } => {}
            }
        }
        drop(handle);
        Ok(1)
    })
}
