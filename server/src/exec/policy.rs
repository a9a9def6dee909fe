//! `Policy`: which shell commands may run unattended and which wait for a person.
//!
//! A rule is a word prefix: `"git diff"` matches `git diff --stat` but not `git difftool`
//! or `/usr/bin/git diff`. A command line runs only if every simple command in it,
//! including those inside `$(...)` and backticks, matches an allow rule, matches no
//! irreversible rule, sets no environment variables and writes no file it names (a
//! redirection, `tee`, an in-place edit): an allow rule vouches for a program, not for what
//! its line may overwrite, so `printf x > m.py` asks like any write the person did not agree
//! to. Whatever the shell reader cannot follow is asked about. A rule allowing a shell
//! (`sh`) lets the script it is given run unread: the line is judged, not the script.
//!
//! "Irreversible" marks commands whose effects may reach past what Rein (or git) can undo:
//! other machines, the rest of the filesystem, history git cannot restore. The person sees
//! that flag when deciding; it never makes a command run.

use super::confine::SandboxMode;
use super::sandbox::normalize;
use super::shell::{self, RedirectKind, SimpleCommand, Word};

/// Classifies commands: allow-listed ones run, others wait for a human decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Word prefixes of commands that run without asking (program matched exactly).
    pub allow: Vec<String>,
    /// Word prefixes of commands that cannot be undone (program matched by basename); these
    /// always ask, even when an allow rule also matches.
    pub irreversible: Vec<String>,
    /// How confined commands run (`sandbox`).
    pub sandbox: SandboxMode,
    /// Word prefixes of commands the sandbox lets reach the network (`policy.network`).
    pub network: Vec<String>,
}

/// What to do with a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Run it now.
    Run,
    /// Wait for a person to decide.
    Ask {
        /// Why the command was not allowed, for the person deciding.
        reason: String,
        /// Whether its effects may be impossible to undo.
        irreversible: bool,
    },
}

/// Read-only or local commands an agent runs all the time: inspecting files, building and
/// testing, each with what it is for (`rein policy` prints them). Build and test commands run
/// project code by design; their effects stay in the tree. None of them may write a file its
/// line names (a redirection, `tee`, an in-place edit): that always asks (`write_problem`).
const DEFAULT_ALLOW: &[(&str, &str)] = &[
    ("ls", "lists files"),
    ("cat", "prints files"),
    ("echo", "prints its arguments"),
    ("true", "does nothing, successfully"),
    ("false", "does nothing, unsuccessfully"),
    ("sleep", "waits"),
    ("grep", "searches files"),
    ("rg", "searches files (ripgrep; not with --pre)"),
    (
        "find",
        "lists files by name or kind (not with -exec, -delete, -fprint…)",
    ),
    ("wc", "counts lines, words and bytes"),
    ("head", "prints the start of files"),
    ("tail", "prints the end of files"),
    ("diff", "compares files"),
    ("test", "checks a file or a string"),
    ("[", "checks a file or a string"),
    ("pwd", "prints the working directory"),
    ("printf", "prints formatted text"),
    ("cargo build", "builds a Rust project (into target/)"),
    ("cargo test", "builds and runs a Rust project's tests"),
    ("cargo check", "type-checks a Rust project"),
    ("cargo fmt", "formats a Rust project's sources in place"),
    ("cargo clippy", "lints a Rust project"),
    ("npm test", "runs a Node project's tests"),
    ("npm run test", "runs a Node project's tests"),
    (
        "make",
        "builds the project's Makefile targets (not install, deploy or publish)",
    ),
    ("pytest", "runs Python tests"),
    ("python -m pytest", "runs Python tests"),
    ("python3 -m pytest", "runs Python tests"),
    ("go test", "builds and runs a Go module's tests"),
    ("go build", "builds a Go module"),
    ("go vet", "checks a Go module"),
    ("git status", "shows what changed (reads the repository)"),
    (
        "git diff",
        "shows changes (reads; not with --output or --ext-diff)",
    ),
    ("git log", "shows history (reads)"),
    ("git show", "shows a commit or a file at one (reads)"),
    ("git --no-pager status", "as git status"),
    ("git --no-pager diff", "as git diff"),
    ("git --no-pager log", "as git log"),
    ("git --no-pager show", "as git show"),
];

/// Commands whose effects leave the tree or destroy what git could restore, each with why.
/// `git commit` is deliberately absent: it is local and undone with `git reset`, so it merely
/// asks.
const DEFAULT_IRREVERSIBLE: &[(&str, &str)] = &[
    ("git push", PUBLISHES),
    ("git send-email", PUBLISHES),
    ("npm publish", PUBLISHES),
    ("yarn publish", PUBLISHES),
    ("pnpm publish", PUBLISHES),
    ("cargo publish", PUBLISHES),
    ("cargo yank", PUBLISHES),
    ("twine upload", PUBLISHES),
    ("gem push", PUBLISHES),
    ("docker push", PUBLISHES),
    ("podman push", PUBLISHES),
    ("gh pr create", PUBLISHES),
    ("gh pr merge", PUBLISHES),
    ("gh release create", PUBLISHES),
    ("gh repo delete", PUBLISHES),
    ("ssh", ELSEWHERE),
    ("scp", ELSEWHERE),
    ("sftp", ELSEWHERE),
    ("rsync", ELSEWHERE),
    ("kubectl apply", ELSEWHERE),
    ("kubectl delete", ELSEWHERE),
    ("kubectl create", ELSEWHERE),
    ("kubectl replace", ELSEWHERE),
    ("kubectl patch", ELSEWHERE),
    ("kubectl scale", ELSEWHERE),
    ("kubectl drain", ELSEWHERE),
    ("helm install", ELSEWHERE),
    ("helm upgrade", ELSEWHERE),
    ("helm uninstall", ELSEWHERE),
    ("terraform apply", ELSEWHERE),
    ("terraform destroy", ELSEWHERE),
    ("tofu apply", ELSEWHERE),
    ("tofu destroy", ELSEWHERE),
    ("pulumi up", ELSEWHERE),
    ("pulumi destroy", ELSEWHERE),
    ("git clean", UNKEPT),
    ("git reset --hard", UNKEPT),
    ("git branch -D", UNKEPT),
    ("git stash drop", UNKEPT),
    ("git stash clear", UNKEPT),
    ("git reflog expire", UNKEPT),
    ("make install", MACHINE),
    ("sudo", MACHINE),
    ("doas", MACHINE),
    ("su", MACHINE),
    ("dd", MACHINE),
    ("mkfs", MACHINE),
    ("shutdown", MACHINE),
    ("reboot", MACHINE),
];

const PUBLISHES: &str = "publishes: once others have it, it cannot be taken back";
const ELSEWHERE: &str = "acts on other machines or infrastructure";
const UNKEPT: &str = "destroys work git keeps no copy of (untracked files, changes, refs)";
const MACHINE: &str = "acts on the rest of the machine";

/// What always asks whatever the allow-list says, for `rein policy` and the docs.
const ALWAYS_ASKED: &[&str] = &[
    "a command line that writes a file it names inside the working tree: a redirection (`> f`, `>> f`, `&> f`, `<> f`), `tee f`, an in-place edit (`sed -i`, `perl -i`, `ruby -i`), `dd of=f`, `sort -o f`; also inside `$(…)`, after a pipe, and when the program is allow-listed (`printf x > m.py` asks). Output to /dev/null, /dev/stdout or /dev/stderr and descriptor copies (`2>&1`, `>&2`) are no writes",
    "the same writing to a path outside the tree (`/tmp/x`, `~/x`, `../x`) or into `.git`, flagged as impossible to undo",
    "a write whose file is only known at run time (`> $OUT`)",
    "a command that sets an environment variable (`FOO=1 ls`) or whose program is only known at run time (`$CMD`)",
    "what Rein cannot follow: subshells, `if`/`for`/`while`, here-documents, `$((…))`, process substitution",
    "`rm` of a path outside the tree or only known at run time, `curl`/`wget` sending data, a program or task named like a deployment (flagged as impossible to undo)",
];

/// Flags that make an otherwise harmless program run other programs or write files.
const DANGEROUS_FLAGS: &[(&str, &[&str])] = &[
    (
        "find",
        &[
            "-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf",
            "-fls",
        ],
    ),
    ("rg", &["--pre"]),
    ("git", &["--output", "--ext-diff"]),
];

/// Programs that run project tasks by name; a task named like a deployment is irreversible.
const TASK_RUNNERS: &[&str] = &[
    "make", "just", "npm", "yarn", "pnpm", "bun", "mvn", "gradle", "gradlew", "rake",
];

/// Shells: an allow rule naming one lets the scripts it is given run unread.
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "fish"];

/// Output redirection targets that are not files.
const DEVICE_TARGETS: &[&str] = &["/dev/null", "/dev/stdout", "/dev/stderr"];

impl Default for Policy {
    fn default() -> Self {
        let own = |rules: &[(&str, &str)]| -> Vec<String> {
            rules.iter().map(|(r, _)| (*r).to_owned()).collect()
        };
        Self {
            allow: own(DEFAULT_ALLOW),
            irreversible: own(DEFAULT_IRREVERSIBLE),
            sandbox: SandboxMode::default(),
            network: Vec::new(),
        }
    }
}

impl Policy {
    /// Whether the sandbox lets `cmd` reach the network: every simple command in it matches
    /// a `network` rule.
    pub fn network_for(&self, cmd: &str) -> bool {
        let Ok(commands) = shell::parse(cmd) else {
            return false;
        };
        !commands.is_empty()
            && commands.iter().all(|c| {
                self.network
                    .iter()
                    .any(|rule| matches_rule(rule, &c.words, false))
            })
    }

    /// The rules in force and what each means, for `rein policy`: the allow-list (the
    /// defaults with their meanings, then the rules added by configuration), the irreversible
    /// list, what asks whatever the allow-list says, the network rules and the sandbox.
    pub fn explain(&self) -> String {
        fn section<'a>(
            out: &mut String,
            title: &str,
            rules: &'a [String],
            defaults: &[(&str, &'a str)],
        ) {
            out.push_str(title);
            out.push('\n');
            let width = rules.iter().map(|r| r.chars().count()).max().unwrap_or(0);
            for rule in rules.iter().filter(|r| !r.trim().is_empty()) {
                let meaning = defaults
                    .iter()
                    .find(|(d, _)| d == rule)
                    .map_or("added by rein.toml or the editor's settings", |(_, m)| *m);
                out.push_str(&format!("  {rule:<width$}  {meaning}\n"));
            }
            out.push('\n');
        }
        let mut out = String::new();
        section(
            &mut out,
            "Run without asking (allow-list; a rule is a word prefix: `git diff` allows `git diff --stat`, not `git difftool` or `/usr/bin/git diff`; every command of a line, pipes and `$(…)` included, must match one):",
            &self.allow,
            DEFAULT_ALLOW,
        );
        section(
            &mut out,
            "Always asked, flagged as impossible to undo (irreversible; matched by the program's basename, before the allow-list):",
            &self.irreversible,
            DEFAULT_IRREVERSIBLE,
        );
        out.push_str("Asked whatever the allow-list says:\n");
        for rule in ALWAYS_ASKED {
            out.push_str(&format!("  - {rule}\n"));
        }
        if let Some(shell) = self.allow.iter().find(|r| {
            r.split_whitespace()
                .next()
                .is_some_and(|p| SHELLS.contains(&basename(p)))
        }) {
            out.push_str(&format!("  (but the rule `{shell}` lets the script a shell is given, `sh -c '…'`, run unread: Rein judges the line, not the script)\n"));
        }
        out.push('\n');
        if self.network.is_empty() {
            out.push_str("Network: no command may reach it from the sandbox.\n");
        } else {
            out.push_str("Network: the sandbox lets these reach it (every command of the line must match one):\n");
            for rule in &self.network {
                out.push_str(&format!("  {rule}\n"));
            }
        }
        out.push_str(&format!(
            "Sandbox: {} (docs/agents.md, \"Sandbox\").\n",
            self.sandbox.as_str()
        ));
        out
    }

    /// Decides whether `cmd` (a `sh -c` command line) may run without asking.
    pub fn classify(&self, cmd: &str) -> Verdict {
        let commands = match shell::parse(cmd) {
            Ok(commands) => commands,
            Err(why) => {
                return ask(
                    format!(
                        "Rein cannot follow this command line ({why}), so a person must read it"
                    ),
                    false,
                )
            }
        };
        if commands.is_empty() {
            return ask("the command line is empty".into(), false);
        }
        let mut first = None;
        for command in &commands {
            match self.judge(command) {
                Some((reason, true)) => return ask(reason, true),
                Some(found) if first.is_none() => first = Some(found),
                _ => {}
            }
        }
        match first {
            Some((reason, irreversible)) => ask(reason, irreversible),
            None => Verdict::Run,
        }
    }

    /// Why one simple command must be asked about (and whether it is irreversible), if it must.
    fn judge(&self, command: &SimpleCommand) -> Option<(String, bool)> {
        let words = &command.words;
        if let Some(rule) = self
            .irreversible
            .iter()
            .find(|rule| matches_rule(rule, words, true))
        {
            return Some((format!("`{rule}` cannot be undone"), true));
        }
        if let Some(reason) = irreversible_by_arguments(words) {
            return Some((reason, true));
        }
        if let Some(found) = write_problem(command) {
            return Some(found);
        }
        if let Some(name) = command.assignments.first() {
            return Some((
                format!("it sets the environment variable `{name}`, which can change what a program does"),
                false,
            ));
        }
        let program = words.first()?;
        if program.dynamic {
            return Some(("the program to run is only known at run time".into(), false));
        }
        if !self
            .allow
            .iter()
            .any(|rule| matches_rule(rule, words, false))
        {
            return Some((
                format!("`{}` is not on the allow-list", describe(words)),
                false,
            ));
        }
        dangerous_flag(words).map(|reason| (reason, false))
    }
}

fn ask(reason: String, irreversible: bool) -> Verdict {
    Verdict::Ask {
        reason,
        irreversible,
    }
}

/// Whether the command's words start with the rule's words. Words known only at run time
/// never match, so they can neither satisfy an allow rule nor dodge one by accident.
fn matches_rule(rule: &str, words: &[Word], program_by_basename: bool) -> bool {
    let mut matched_any = false;
    for (i, expected) in rule.split_whitespace().enumerate() {
        let Some(word) = words.get(i) else {
            return false;
        };
        if word.dynamic {
            return false;
        }
        let text = if i == 0 && program_by_basename {
            basename(&word.text)
        } else {
            &word.text
        };
        if text != expected {
            return false;
        }
        matched_any = true;
    }
    matched_any
}

fn basename(program: &str) -> &str {
    program.rsplit('/').next().unwrap_or(program)
}

/// The program and its first argument, for messages.
fn describe(words: &[Word]) -> String {
    let shown: Vec<&str> = words.iter().take(2).map(|w| w.text.as_str()).collect();
    shown.join(" ")
}

/// What in `cmd` writes git's state that every worktree of a repository shares (tags,
/// branches, config, remotes, notes, the stash, fetched refs), said for a person: a command
/// run in a task's worktree writes the person's repository too. `None` when nothing does, or
/// when the line cannot be read (it is asked about anyway).
pub fn shared_git_write(cmd: &str) -> Option<String> {
    let commands = super::shell::parse(cmd).ok()?;
    let said: Vec<String> = commands
        .iter()
        .filter_map(|c| git_shared_write(&c.words))
        .collect();
    (!said.is_empty()).then(|| said.join("; "))
}

/// One git invocation's write of shared state, if it makes one.
fn git_shared_write(words: &[Word]) -> Option<String> {
    if words.first().map(|w| basename(&w.text)) != Some("git") {
        return None;
    }
    // Global options before the subcommand; those with a separate value skip it too.
    let mut rest = words[1..].iter().map(|w| w.text.as_str()).peekable();
    while let Some(w) = rest.next_if(|w| w.starts_with('-')) {
        if matches!(w, "-C" | "-c" | "--git-dir" | "--work-tree" | "--namespace") {
            rest.next();
        }
    }
    let sub = rest.next()?;
    let args: Vec<&str> = rest.collect();
    let first = args.first().copied();
    let has = |flags: &[&str]| args.iter().any(|a| flags.contains(a));
    let what = match sub {
        "tag" if first.is_some() && !has(&["-l", "--list", "-v", "--verify"]) => {
            "makes, moves or deletes a tag"
        }
        "branch"
            if first.is_some_and(|a| {
                !matches!(
                    a,
                    "-l" | "--list"
                        | "-a"
                        | "--all"
                        | "-r"
                        | "--remotes"
                        | "-v"
                        | "-vv"
                        | "--show-current"
                        | "--contains"
                        | "--merged"
                        | "--no-merged"
                        | "--format"
                )
            }) =>
        {
            "makes, moves or deletes a branch"
        }
        "checkout" | "switch" if has(&["-b", "-B", "-c", "-C", "--orphan"]) => "makes a branch",
        "config"
            if !has(&[
                "--get",
                "--get-all",
                "--get-regexp",
                "-l",
                "--list",
                "--worktree",
            ]) && args.iter().filter(|a| !a.starts_with('-')).count() >= 2
                || has(&["--unset", "--unset-all", "--add", "--replace-all"]) =>
        {
            "changes the repository's config"
        }
        "remote"
            if first.is_some_and(|a| {
                matches!(
                    a,
                    "add"
                        | "remove"
                        | "rm"
                        | "rename"
                        | "set-url"
                        | "set-head"
                        | "set-branches"
                        | "prune"
                        | "update"
                )
            }) =>
        {
            "changes a remote"
        }
        "fetch" | "pull" => "updates the remote-tracking branches",
        "update-ref" | "replace" => "writes a ref",
        "notes" if first.is_some_and(|a| !matches!(a, "list" | "show")) => "writes notes",
        "stash" if !first.is_some_and(|a| matches!(a, "list" | "show")) => {
            "writes the stash, which every worktree shares"
        }
        "gc" | "prune" | "repack" | "reflog" => "rewrites the shared object store or reflogs",
        _ => return None,
    };
    Some(format!("`git {sub}` {what}"))
}

/// Arguments that make an otherwise ordinary command irreversible.
fn irreversible_by_arguments(words: &[Word]) -> Option<String> {
    let program = basename(&words.first()?.text);
    let args = &words[1..];
    if program.contains("deploy") {
        return Some(format!("`{program}` looks like a deployment"));
    }
    if TASK_RUNNERS.contains(&program) {
        let task = args.iter().find(|w| {
            !w.text.starts_with('-') && (w.text.contains("deploy") || w.text.contains("publish"))
        });
        if let Some(task) = task {
            return Some(format!("`{program} {}` looks like a deployment", task.text));
        }
    }
    match program {
        "rm" => rm_outside(args),
        "curl" => args
            .iter()
            .any(|w| is_curl_upload(&w.text))
            .then(|| "`curl` would send data to another machine".to_owned()),
        "wget" => args
            .iter()
            .any(|w| {
                [
                    "--post-data",
                    "--post-file",
                    "--method",
                    "--body-data",
                    "--body-file",
                ]
                .iter()
                .any(|flag| is_flag(&w.text, flag))
            })
            .then(|| "`wget` would send data to another machine".to_owned()),
        _ => None,
    }
}

/// An `rm` whose targets may lie outside the tree (or be `.git`) cannot be undone by Rein.
fn rm_outside(args: &[Word]) -> Option<String> {
    let mut options_done = false;
    for arg in args {
        if !options_done && arg.text == "--" && !arg.dynamic {
            options_done = true;
            continue;
        }
        if !options_done && arg.text.starts_with('-') && !arg.dynamic {
            continue;
        }
        if arg.dynamic {
            return Some("`rm` of a path only known at run time may delete anything".to_owned());
        }
        if let Err(why) = normalize(&arg.text) {
            return Some(format!(
                "`rm {}` reaches outside what Rein can restore: {why}",
                arg.text
            ));
        }
    }
    None
}

fn is_curl_upload(arg: &str) -> bool {
    if arg.starts_with("--") {
        return ["--upload-file", "--data", "--form", "--json", "--request"]
            .iter()
            .any(|flag| {
                arg == *flag
                    || arg.starts_with(&format!("{flag}-"))
                    || arg.starts_with(&format!("{flag}="))
            });
    }
    // Short options cluster (`-sSd`); any of these takes the rest as an upload or a method.
    arg.starts_with('-') && arg[1..].chars().any(|c| matches!(c, 'd' | 'F' | 'T' | 'X'))
}

fn is_flag(arg: &str, flag: &str) -> bool {
    arg == flag
        || arg
            .strip_prefix(flag)
            .is_some_and(|rest| rest.starts_with('='))
}

/// A file the command line names as one it writes: into the tree it asks (Rein would record
/// the write, but the person never agreed to it; an allow rule names a program, not what it
/// may overwrite), outside the tree or into `.git` it is irreversible (no checkpoint holds
/// it), and a name known only at run time asks.
fn write_problem(command: &SimpleCommand) -> Option<(String, bool)> {
    for (target, how) in written_files(command) {
        if target.dynamic {
            return Some((
                format!("it writes to a file whose name is only known at run time ({how})"),
                false,
            ));
        }
        if DEVICE_TARGETS.contains(&target.text.as_str()) {
            continue;
        }
        if let Err(why) = normalize(&target.text) {
            return Some((
                format!(
                    "it writes to `{}` ({how}), which the agent may not write: {why}",
                    target.text
                ),
                true,
            ));
        }
        return Some((format!("it writes `{}` {how}", target.text), false));
    }
    None
}

/// The files one simple command says it writes, each with how (for the question): output
/// redirections, and the files of writers that are not redirections (`tee`, in-place
/// editors, `dd of=`, `sort -o`), whatever their program's allow rule.
fn written_files(command: &SimpleCommand) -> Vec<(Word, &'static str)> {
    let mut files: Vec<(Word, &'static str)> = command
        .redirects
        .iter()
        .filter(|r| r.kind == RedirectKind::Output)
        .map(|r| (r.target.clone(), "through a redirection"))
        .collect();
    let Some((program, args)) = command.words.split_first() else {
        return files;
    };
    if program.dynamic {
        return files;
    }
    // The value of `-oFILE`, `--output=FILE`, `of=FILE`, as the word it is.
    let value = |w: &Word, after: usize| Word {
        text: w.text[after..].to_owned(),
        dynamic: w.dynamic,
    };
    let named = |words: Vec<&Word>, how: &'static str| -> Vec<(Word, &'static str)> {
        words.into_iter().map(|w| (w.clone(), how)).collect()
    };
    match basename(&program.text) {
        "tee" => files.extend(named(operands(args, &[]), "through `tee`")),
        "sed" => files.extend(named(
            in_place(args, "ef", "l", &["expression", "file"]),
            "through `sed -i`",
        )),
        "perl" => files.extend(named(in_place(args, "eE", "", &[]), "through `perl -i`")),
        "ruby" => files.extend(named(in_place(args, "e", "Ir", &[]), "through `ruby -i`")),
        "dd" => files.extend(
            args.iter()
                .filter(|w| w.text.starts_with("of="))
                .map(|w| (value(w, 3), "through `dd of=`")),
        ),
        "sort" => {
            let mut rest = args.iter();
            while let Some(w) = rest.next() {
                let how = "through `sort -o`";
                if w.text == "-o" || w.text == "--output" {
                    files.extend(rest.next().map(|f| (f.clone(), how)));
                } else if w.text.starts_with("--output=") {
                    files.push((value(w, "--output=".len()), how));
                } else if w.text.starts_with("-o") {
                    files.push((value(w, 2), how));
                }
            }
        }
        _ => {}
    }
    files
}

/// A program's operands: its words that are not options (all of them after `--`; `-` is
/// standard input or output, no file), less the values of the options in `valued`.
fn operands<'a>(args: &'a [Word], valued: &[&str]) -> Vec<&'a Word> {
    let mut found = Vec::new();
    let mut options_done = false;
    let mut skip_next = false;
    for w in args {
        if std::mem::take(&mut skip_next) || w.text == "-" {
            continue;
        }
        if options_done || !w.text.starts_with('-') {
            found.push(w);
        } else if w.text == "--" {
            options_done = true;
        } else if valued.contains(&w.text.as_str()) {
            skip_next = true;
        }
    }
    found
}

/// The files an in-place editor (`sed -i`, `perl -pi`, `ruby -i`) edits: none unless `-i` is
/// given (alone, in a cluster of short options, with a backup suffix, or `--in-place`); then
/// its operands less the script, which is the first operand unless an option gave it (a short
/// one in `script`, a long one in `script_long`). A short option in `script` or `valued` takes
/// the rest of its cluster or the next word as its value, so `-ei` is no in-place flag.
fn in_place<'a>(
    args: &'a [Word],
    script: &str,
    valued: &str,
    script_long: &[&str],
) -> Vec<&'a Word> {
    let mut editing = false;
    let mut script_given = false;
    let mut takes_next: Vec<&str> = Vec::new();
    for w in args {
        let text = w.text.as_str();
        if text == "--" {
            break;
        }
        if text == "-" || !text.starts_with('-') {
            continue;
        }
        if let Some(long) = text.strip_prefix("--") {
            let (name, has_value) = match long.split_once('=') {
                Some((name, _)) => (name, true),
                None => (long, false),
            };
            if name == "in-place" {
                editing = true;
            } else if script_long.contains(&name) {
                script_given = true;
                if !has_value {
                    takes_next.push(text);
                }
            }
            continue;
        }
        for (i, c) in text.char_indices().skip(1) {
            if c == 'i' {
                editing = true;
                break;
            }
            if script.contains(c) || valued.contains(c) {
                script_given |= script.contains(c);
                if i + c.len_utf8() == text.len() {
                    takes_next.push(text);
                }
                break;
            }
        }
    }
    if !editing {
        return Vec::new();
    }
    operands(args, &takes_next)
        .into_iter()
        .skip(usize::from(!script_given))
        .collect()
}

/// A flag that turns an allowed program into one that runs commands or writes files.
fn dangerous_flag(words: &[Word]) -> Option<String> {
    let program = words.first()?.text.as_str();
    let (_, flags) = DANGEROUS_FLAGS.iter().find(|(p, _)| *p == program)?;
    for arg in &words[1..] {
        if arg.dynamic {
            return Some(format!(
                "an argument to `{program}` is only known at run time and could be one of {}",
                flags.join(", ")
            ));
        }
        if let Some(flag) = flags.iter().find(|flag| is_flag(&arg.text, flag)) {
            return Some(format!(
                "`{program} {flag}` can run programs or write files"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_of_the_repositorys_shared_state_are_named_and_reads_are_not() {
        for cmd in [
            "git tag v0.4.0",
            "git -C . tag -d v1",
            "git branch feature",
            "git checkout -b x",
            "git config user.name me",
            "git config --unset core.x",
            "git remote add up https://x",
            "git fetch",
            "git stash",
            "make && git tag v1",
        ] {
            assert!(shared_git_write(cmd).is_some(), "{cmd}");
        }
        for cmd in [
            "git tag",
            "git tag -l",
            "git branch",
            "git branch --show-current",
            "git config user.name",
            "git config --get user.name",
            "git config --worktree x.y z",
            "git remote -v",
            "git stash list",
            "git status",
            "git commit -m x",
            "ls",
        ] {
            assert_eq!(shared_git_write(cmd), None, "{cmd}");
        }
        assert_eq!(
            shared_git_write("git tag v0.4.0").as_deref(),
            Some("`git tag` makes, moves or deletes a tag")
        );
    }

    #[derive(Debug, PartialEq, Eq)]
    enum Want {
        Run,
        Ask,
        Irreversible,
    }

    fn verdict(cmd: &str) -> Want {
        match Policy::default().classify(cmd) {
            Verdict::Run => Want::Run,
            Verdict::Ask {
                irreversible: false,
                ..
            } => Want::Ask,
            Verdict::Ask {
                irreversible: true, ..
            } => Want::Irreversible,
        }
    }

    #[test]
    fn classifies_a_table_of_commands() {
        use Want::*;
        let table = [
            ("ls -la", Run),
            ("cat src/main.rs | grep fn | wc -l", Run),
            ("cargo test -p rein --lib exec", Run),
            (
                "cargo build && cargo clippy --all-targets -- -D warnings",
                Run,
            ),
            ("git status; git diff --stat", Run),
            ("git --no-pager log -5", Run),
            ("echo hello > notes/out.txt 2>&1", Ask),
            ("grep -r foo . 2>/dev/null", Run),
            ("find . -name '*.rs'", Run),
            ("python -m pytest -x tests/", Run),
            ("make -j2", Run),
            ("echo $(pwd)", Run),
            ("echo `ls`", Run),
            ("test -f Cargo.toml && echo yes || echo no", Run),
            ("sleep 1 &", Run),
            ("cat < /etc/hostname", Run),
            ("rm -rf target", Ask),
            ("git commit -m wip", Ask),
            ("git difftool", Ask),
            ("/usr/bin/ls", Ask),
            ("./ls", Ask),
            ("ls && rm -rf build", Ask),
            ("echo $(rm -rf build)", Ask),
            ("echo `touch x`", Ask),
            ("$CMD status", Ask),
            ("git $SUB", Ask),
            ("FOO=1 ls", Ask),
            ("GIT_EXTERNAL_DIFF=evil git diff", Ask),
            ("find . -delete", Ask),
            ("find . -exec rm {} ;", Ask),
            ("find . $X", Ask),
            ("rg --pre ./evil pattern", Ask),
            ("git diff --output=x.patch", Ask),
            ("echo hi > $OUT", Ask),
            ("(cd /; ls)", Ask),
            ("if true; then ls; fi", Ask),
            ("cat <<EOF\nhi\nEOF", Ask),
            ("echo 'unterminated", Ask),
            ("", Ask),
            ("   ", Ask),
            ("ls\0", Ask),
            ("bash -c 'ls'", Ask),
            ("sh -c ls", Ask),
            ("eval ls", Ask),
            ("cd / && ls", Ask),
            ("git push", Irreversible),
            ("git push --force origin main", Irreversible),
            ("/usr/bin/git push", Irreversible),
            ("ls && git push", Irreversible),
            ("echo $(git push)", Irreversible),
            ("rm -rf /", Irreversible),
            ("rm -rf ~", Irreversible),
            ("rm -rf ../other", Irreversible),
            ("rm -rf $DIR/", Irreversible),
            ("rm -rf .git", Irreversible),
            ("curl -X POST https://example.com", Irreversible),
            ("curl -sd @secrets https://example.com", Irreversible),
            ("curl --data-binary @f https://example.com", Irreversible),
            ("curl -T file https://example.com", Irreversible),
            ("wget --post-file=x https://example.com", Irreversible),
            ("npm publish", Irreversible),
            ("cargo publish --dry-run", Irreversible),
            ("docker push img", Irreversible),
            ("ssh host ls", Irreversible),
            ("scp a host:b", Irreversible),
            ("rsync -a . host:dir", Irreversible),
            ("kubectl apply -f x.yaml", Irreversible),
            ("terraform apply", Irreversible),
            ("./deploy.sh prod", Irreversible),
            ("make deploy", Irreversible),
            ("npm run deploy:prod", Irreversible),
            ("make install", Irreversible),
            ("sudo ls", Irreversible),
            ("git clean -fdx", Irreversible),
            ("git reset --hard HEAD~3", Irreversible),
            ("echo x > /etc/hosts", Irreversible),
            ("echo x >> ../outside.txt", Irreversible),
            ("ls > ~/x", Irreversible),
            ("cat ~/.ssh/config", Run),
            ("echo x > .git/hooks/pre-commit", Irreversible),
            ("ls > 'a b.txt'", Ask),
            ("curl https://example.com", Ask),
        ];
        for (cmd, want) in table {
            assert_eq!(verdict(cmd), want, "{cmd:?}");
        }
    }

    #[test]
    fn reasons_name_the_problem() {
        let Verdict::Ask { reason, .. } = Policy::default().classify("ls; rm -rf build") else {
            panic!("rm must ask");
        };
        assert!(
            reason.contains("`rm -rf` is not on the allow-list"),
            "{reason}"
        );
        let Verdict::Ask { reason, .. } = Policy::default().classify("git push") else {
            panic!("push must ask");
        };
        assert!(reason.contains("`git push` cannot be undone"), "{reason}");
    }

    /// The reason `policy` gives for asking about `cmd`, and whether it is irreversible;
    /// None when it runs.
    fn reason(policy: &Policy, cmd: &str) -> Option<(String, bool)> {
        match policy.classify(cmd) {
            Verdict::Run => None,
            Verdict::Ask {
                reason,
                irreversible,
            } => Some((reason, irreversible)),
        }
    }

    #[test]
    fn a_line_that_writes_a_file_it_names_asks_whatever_the_allow_list_says() {
        // A user who allow-listed the writers themselves: the rule names a program, not
        // what its line may overwrite.
        let policy = Policy {
            allow: [
                "printf", "echo", "cat", "tee", "sed", "perl", "ruby", "dd", "sort",
            ]
            .iter()
            .map(|r| (*r).to_owned())
            .chain(Policy::default().allow)
            .collect(),
            irreversible: Vec::new(),
            ..Policy::default()
        };
        let asks = |cmd: &str, why: &str| {
            let Some((reason, irreversible)) = reason(&policy, cmd) else {
                panic!("{cmd:?} ran unasked");
            };
            assert!(!irreversible, "{cmd:?}: {reason}");
            assert_eq!(reason, why, "{cmd:?}");
        };
        asks(
            "printf 'x' > m.py",
            "it writes `m.py` through a redirection",
        );
        asks(
            "echo x >> notes.txt",
            "it writes `notes.txt` through a redirection",
        );
        asks("echo x 1>m.py", "it writes `m.py` through a redirection");
        asks("echo x &> m.py", "it writes `m.py` through a redirection");
        asks("echo x &>> m.py", "it writes `m.py` through a redirection");
        asks("echo x >| m.py", "it writes `m.py` through a redirection");
        asks("echo x >& m.py", "it writes `m.py` through a redirection");
        asks("cat <> m.py", "it writes `m.py` through a redirection");
        asks(
            "echo x 2> err.log",
            "it writes `err.log` through a redirection",
        );
        asks(
            "cargo test 2>&1 > log.txt",
            "it writes `log.txt` through a redirection",
        );
        asks(
            "cargo test 2>&1 | tee log.txt",
            "it writes `log.txt` through `tee`",
        );
        asks("echo x | tee -a a.txt", "it writes `a.txt` through `tee`");
        asks(
            "echo x | tee - -- -b.txt",
            "it writes `-b.txt` through `tee`",
        );
        asks(
            "echo $(printf x > m.py)",
            "it writes `m.py` through a redirection",
        );
        asks(
            "ls && echo x > m.py; ls",
            "it writes `m.py` through a redirection",
        );
        asks("sed -i 's/a/b/' m.py", "it writes `m.py` through `sed -i`");
        asks(
            "sed -i.bak -e 's/a/b/' m.py",
            "it writes `m.py` through `sed -i`",
        );
        asks("sed -Ei 's/a/b/' m.py", "it writes `m.py` through `sed -i`");
        asks(
            "sed --in-place --expression=s/a/b/ m.py",
            "it writes `m.py` through `sed -i`",
        );
        asks(
            "sed -n -i -e p -e p m.py",
            "it writes `m.py` through `sed -i`",
        );
        asks(
            "perl -pi -e 's/a/b/' m.py",
            "it writes `m.py` through `perl -i`",
        );
        asks(
            "perl -i.orig -pe 's/a/b/' m.py",
            "it writes `m.py` through `perl -i`",
        );
        asks("ruby -i -pe 'x' m.py", "it writes `m.py` through `ruby -i`");
        asks(
            "dd if=/dev/zero of=m.bin count=1",
            "it writes `m.bin` through `dd of=`",
        );
        asks("sort -o m.txt m.txt", "it writes `m.txt` through `sort -o`");
        asks(
            "sort --output=m.txt m.txt",
            "it writes `m.txt` through `sort -o`",
        );
        asks("sort -om.txt m.txt", "it writes `m.txt` through `sort -o`");
        asks(
            "echo x > $OUT",
            "it writes to a file whose name is only known at run time (through a redirection)",
        );
        asks(
            "echo x | tee \"$F\"",
            "it writes to a file whose name is only known at run time (through `tee`)",
        );
        // Outside the tree or into `.git`: no checkpoint holds it.
        for cmd in [
            "echo x > /tmp/x",
            "cargo test > /tmp/log 2>&1",
            "echo x | tee ~/x",
            "sed -i s/a/b/ ../other/m.py",
            "echo x > .git/config",
            "dd if=a of=/dev/sda",
        ] {
            let Some((reason, irreversible)) = reason(&policy, cmd) else {
                panic!("{cmd:?} ran unasked");
            };
            assert!(irreversible, "{cmd:?}: {reason}");
            assert!(reason.contains("which the agent may not write"), "{reason}");
        }
        // No write: pipes, descriptor copies, devices, reading, editors not in place.
        for cmd in [
            "cargo test 2>&1 | tail -n 20",
            "cargo test 2>&1",
            "cargo build >&2",
            "echo hi > /dev/null",
            "grep -r x . 2>/dev/null",
            "cargo test &>/dev/null",
            "echo x 1>&2 2>&-",
            "echo x | tee",
            "echo x | tee -a -",
            "echo x | tee /dev/null",
            "echo x > /dev/stderr",
            "cat < m.py",
            "sed 's/a/b/' m.py",
            "sed -n -e p m.py",
            "sed -e 's/i/j/' m.py",
            "perl -ne 'print if /i/' m.py",
            "perl -e 'print 1' m.py",
            "dd if=m.bin",
            "sort -r m.txt",
            "printf '%s\\n' '> m.py'",
            "echo 'a > b'",
        ] {
            assert_eq!(reason(&policy, cmd), None, "{cmd:?}");
        }
    }

    #[test]
    fn the_default_allow_list_lets_no_write_through() {
        for (cmd, why) in [
            (
                "printf 'x' > m.py",
                "it writes `m.py` through a redirection",
            ),
            ("echo x > m.py", "it writes `m.py` through a redirection"),
            (
                "cat a.txt > b.txt",
                "it writes `b.txt` through a redirection",
            ),
            (
                "git diff > fix.patch",
                "it writes `fix.patch` through a redirection",
            ),
            (
                "cargo test 2>&1 | tee out.log",
                "it writes `out.log` through `tee`",
            ),
            ("sed -i 's/a/b/' m.py", "it writes `m.py` through `sed -i`"),
        ] {
            assert_eq!(
                reason(&Policy::default(), cmd),
                Some((why.into(), false)),
                "{cmd:?}"
            );
        }
        for cmd in [
            "cargo test 2>&1 | tail",
            "echo hi > /dev/null",
            "git --no-pager diff 2>/dev/null | head",
        ] {
            assert_eq!(Policy::default().classify(cmd), Verdict::Run, "{cmd:?}");
        }
    }

    #[test]
    fn explain_gives_every_rule_its_meaning_and_marks_added_ones() {
        let policy = Policy {
            allow: Policy::default()
                .allow
                .into_iter()
                .chain(["npm install".to_owned()])
                .collect(),
            network: vec!["npm install".into()],
            ..Policy::default()
        };
        let text = policy.explain();
        for (rule, meaning) in DEFAULT_ALLOW.iter().chain(DEFAULT_IRREVERSIBLE) {
            assert!(
                text.lines().any(
                    |l| l.trim_start().starts_with(&format!("{rule} ")) && l.ends_with(meaning)
                ),
                "{rule}: {text}"
            );
        }
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with("npm install ")
                    && l.ends_with("added by rein.toml or the editor's settings")),
            "{text}"
        );
        assert!(text.contains("a redirection (`> f`"), "{text}");
        assert!(text.contains("Sandbox: workspace-write"), "{text}");
        assert!(!text.contains("run unread"), "{text}");
        let shell = Policy {
            allow: vec!["bash -c".into()],
            ..Policy::default()
        };
        assert!(shell
            .explain()
            .contains("the rule `bash -c` lets the script"));
    }

    #[test]
    fn the_docs_list_the_default_rules() {
        let docs =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/agents.md"))
                .expect("docs/agents.md");
        for (rule, _) in DEFAULT_ALLOW.iter().chain(DEFAULT_IRREVERSIBLE) {
            assert!(
                docs.contains(&format!("`{rule}`")),
                "docs/agents.md does not list `{rule}`"
            );
        }
    }

    #[test]
    fn network_is_for_command_lines_whose_every_command_has_a_network_rule() {
        let policy = Policy {
            network: vec!["cargo fetch".into(), "npm install".into()],
            ..Policy::default()
        };
        assert!(policy.network_for("cargo fetch --locked"));
        assert!(policy.network_for("npm install && cargo fetch"));
        assert!(!policy.network_for("npm install && curl http://x"));
        assert!(!policy.network_for("cargo build"));
        assert!(!Policy::default().network_for("cargo fetch"));
    }

    #[test]
    fn irreversible_beats_allow() {
        let policy = Policy {
            allow: vec!["git".into()],
            irreversible: vec!["git push".into()],
            ..Policy::default()
        };
        assert_eq!(policy.classify("git log"), Verdict::Run);
        assert!(matches!(
            policy.classify("git push"),
            Verdict::Ask {
                irreversible: true,
                ..
            }
        ));
    }

    #[test]
    fn empty_rules_match_nothing() {
        let policy = Policy {
            allow: vec![String::new(), "  ".into()],
            irreversible: vec![String::new()],
            network: vec![String::new()],
            ..Policy::default()
        };
        assert!(matches!(
            policy.classify("ls"),
            Verdict::Ask {
                irreversible: false,
                ..
            }
        ));
        assert!(!policy.network_for("ls"));
    }
}
