//! A reader for the subset of `sh` syntax Rein can judge: which programs a command line
//! runs, with which words, and where it redirects output.
//!
//! It understands quoting, `&&`, `||`, `;`, `|`, `&`, newlines, redirections, `$(...)`,
//! backticks and simple parameter expansions. Anything else (subshells, control flow,
//! here-documents, arithmetic, complex `${...}`) is an error, so `Policy` asks a human
//! rather than guessing.

/// Deepest nesting of `$(...)` and backticks accepted; keeps hostile input from
/// exhausting the stack.
const MAX_DEPTH: usize = 16;

/// Words that start shell control structures, which this reader does not follow.
const KEYWORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac",
    "function", "select", "{", "}", "!", "[[", "]]", "time", "coproc",
];

/// One word after quote removal; `dynamic` when part of it is only known at run time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Word {
    /// The literal text (expansions contribute nothing).
    pub text: String,
    /// Whether the word contains an expansion, substitution or glob. A leading `~` stays
    /// literal text: callers treat `~/x` as the outside path it expands to.
    pub dynamic: bool,
}

/// Which way a redirection moves data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RedirectKind {
    /// Reads a file (`<`).
    Input,
    /// Writes or creates a file (`>`, `>>`, `>|`, `<>`, `&>`, `>&file`).
    Output,
    /// Duplicates or closes a descriptor (`2>&1`, `>&-`).
    Duplicate,
}

/// A redirection and its target word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Redirect {
    /// Which way data moves.
    pub kind: RedirectKind,
    /// The file (or descriptor) named.
    pub target: Word,
}

/// One program invocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SimpleCommand {
    /// Names of `NAME=value` assignments before the program.
    pub assignments: Vec<String>,
    /// The program and its arguments.
    pub words: Vec<Word>,
    /// Redirections anywhere in the command.
    pub redirects: Vec<Redirect>,
}

impl SimpleCommand {
    fn is_empty(&self) -> bool {
        self.assignments.is_empty() && self.words.is_empty() && self.redirects.is_empty()
    }
}

/// Every simple command `src` would run, including those inside substitutions, or why it
/// cannot be judged.
pub(crate) fn parse(src: &str) -> Result<Vec<SimpleCommand>, String> {
    let mut parser = Parser {
        chars: src.chars().collect(),
        pos: 0,
        depth: 0,
        commands: Vec::new(),
    };
    parser.list(false)?;
    Ok(parser.commands)
}

/// Programs that only read the files they are given: their words are no evidence of a write.
const READERS: &[&str] = &[
    "cat",
    "less",
    "more",
    "head",
    "tail",
    "wc",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "ag",
    "ls",
    "echo",
    "printf",
    "pwd",
    "which",
    "type",
    "test",
    "[",
    "stat",
    "file",
    "diff",
    "cmp",
    "du",
    "df",
    "tree",
    "true",
    "false",
    "sleep",
    "cd",
    "nl",
    "sort",
    "uniq",
    "cut",
    "od",
    "xxd",
    "hexdump",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "realpath",
    "readlink",
    "basename",
    "dirname",
];

/// `git` subcommands that write the working tree (the rest only read it, for this purpose).
const GIT_WRITERS: &[&str] = &[
    "checkout",
    "restore",
    "rm",
    "mv",
    "apply",
    "reset",
    "stash",
    "clean",
    "switch",
    "merge",
    "rebase",
    "pull",
    "cherry-pick",
    "revert",
    "am",
];

/// The words of a command line that may name a file it writes, each with whether it is a
/// glob pattern: every file it redirects output into; for a program that may write, its
/// arguments that are not options (and the value of a `--option=value` or `of=`); a program
/// known only to read (`cat`, `grep`, `ls`, `git diff`, `sed` without `-i`, `find` without
/// `-delete` or `-exec`) names nothing; the program's own name never counts. A word known only
/// at run time (an expansion) is left out, and so is `.` (the whole tree is no evidence). A line
/// beyond this reader is split on blanks and shell operators instead, every word counting.
pub fn written_words(src: &str) -> Vec<(String, bool)> {
    let glob = |t: &str| t.contains(['*', '?', '[']);
    let useful = |t: &str| !t.is_empty() && t != "." && t != "./";
    let Ok(commands) = parse(src) else {
        return src
            .split(|c: char| c.is_whitespace() || ";&|<>()`'\"$".contains(c))
            .filter(|w| useful(w) && !w.starts_with('-'))
            .map(|w| (w.to_owned(), glob(w)))
            .collect();
    };
    let mut named = Vec::new();
    for c in &commands {
        for r in &c.redirects {
            if r.kind == RedirectKind::Output && useful(&r.target.text) && !r.target.dynamic {
                named.push((r.target.text.clone(), false));
            }
        }
        let Some((program, args)) = c.words.split_first() else {
            continue;
        };
        let name = program.text.rsplit('/').next().unwrap_or_default();
        // `sh -c SCRIPT`: what the script names.
        if matches!(name, "sh" | "bash" | "dash" | "zsh") {
            let script = args
                .iter()
                .position(|w| w.text.starts_with('-') && w.text.ends_with('c'))
                .and_then(|i| args.get(i + 1));
            if let Some(script) = script.filter(|w| !w.dynamic) {
                named.extend(written_words(&script.text));
                continue;
            }
        }
        let has = |flag: &dyn Fn(&str) -> bool| args.iter().any(|w| flag(&w.text));
        let reads_only = match name {
            "sed" | "perl" => !has(&|w| w.starts_with("-i") || w == "--in-place"),
            "find" => !has(&|w| w == "-delete" || w.starts_with("-exec") || w == "-fprint"),
            "git" => args
                .iter()
                .find(|w| !w.text.starts_with('-'))
                .is_none_or(|sub| !GIT_WRITERS.contains(&sub.text.as_str())),
            _ => READERS.contains(&name),
        };
        if reads_only {
            continue;
        }
        for w in args {
            if w.dynamic && !glob(&w.text) {
                continue;
            }
            let value = match w.text.split_once('=') {
                Some((k, v)) if k.starts_with('-') || (name == "dd" && k == "of") => v,
                _ if w.text.starts_with('-') => continue,
                _ => w.text.as_str(),
            };
            if useful(value) {
                named.push((value.to_owned(), w.dynamic));
            }
        }
    }
    named
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    depth: usize,
    commands: Vec<SimpleCommand>,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.pos + offset).copied()
    }

    /// Skips spaces, tabs and backslash-newline line continuations.
    fn skip_blanks(&mut self) {
        loop {
            match (self.peek(), self.peek_at(1)) {
                (Some(' ' | '\t'), _) => self.pos += 1,
                (Some('\\'), Some('\n')) => self.pos += 2,
                _ => return,
            }
        }
    }

    /// Reads commands and separators until the end, or until `)` when inside `$(`.
    fn list(&mut self, nested: bool) -> Result<(), String> {
        let mut current = SimpleCommand::default();
        // Set after `&&`, `||` and `|`, which need a command on their right.
        let mut needs_command = false;
        loop {
            self.skip_blanks();
            let Some(c) = self.peek() else {
                if nested {
                    return Err("a `$(` is never closed".into());
                }
                break;
            };
            match c {
                '#' => {
                    while !matches!(self.peek(), None | Some('\n')) {
                        self.pos += 1;
                    }
                }
                ')' => {
                    if !nested {
                        return Err("a `)` has no matching `(`".into());
                    }
                    self.pos += 1;
                    break;
                }
                '(' => return Err("subshells and grouping with `(` are not supported".into()),
                '&' if self.peek_at(1) == Some('>') => self.redirect(&mut current, false)?,
                ';' | '\n' | '&' | '|' => {
                    let op = self.operator()?;
                    if current.is_empty() {
                        if needs_command || op != ";" {
                            return Err(format!("`{op}` has no command before it"));
                        }
                    } else {
                        self.commands.push(std::mem::take(&mut current));
                    }
                    needs_command = matches!(op, "&&" | "||" | "|");
                }
                '<' | '>' => self.redirect(&mut current, false)?,
                '0'..='9' if self.fd_redirect_ahead() => self.redirect(&mut current, true)?,
                _ => {
                    let start = self.pos;
                    let word = self.word()?;
                    // Keywords and assignments are recognized only when written without quotes.
                    let raw = self.chars[start..self.pos].iter().collect::<String>();
                    if current.words.is_empty() {
                        if KEYWORDS.contains(&raw.as_str()) {
                            return Err(format!("the shell keyword `{raw}` is not supported"));
                        }
                        if let Some(name) = assignment_name(&raw) {
                            current.assignments.push(name.to_owned());
                            continue;
                        }
                    }
                    current.words.push(word);
                }
            }
        }
        if needs_command && current.is_empty() {
            return Err("the command ends with an operator that needs another command".into());
        }
        if !current.is_empty() {
            self.commands.push(current);
        }
        Ok(())
    }

    /// Consumes a separator or operator at the cursor and names it.
    fn operator(&mut self) -> Result<&'static str, String> {
        let c = self.peek();
        let next = self.peek_at(1);
        let (op, len) = match (c, next) {
            (Some('&'), Some('&')) => ("&&", 2),
            (Some('|'), Some('|')) => ("||", 2),
            (Some('|'), Some('&')) => return Err("`|&` is not supported".into()),
            (Some(';'), Some(';')) => return Err("`;;` outside `case` is a syntax error".into()),
            (Some('&'), _) => ("&", 1),
            (Some('|'), _) => ("|", 1),
            // `;` and newline separate commands alike.
            _ => (";", 1),
        };
        self.pos += len;
        Ok(op)
    }

    /// Whether digits at the cursor are a descriptor number in front of `<` or `>`.
    fn fd_redirect_ahead(&self) -> bool {
        let mut i = self.pos;
        while matches!(self.chars.get(i), Some('0'..='9')) {
            i += 1;
        }
        matches!(self.chars.get(i), Some('<' | '>'))
    }

    /// Reads a redirection operator and its target.
    fn redirect(&mut self, current: &mut SimpleCommand, numbered: bool) -> Result<(), String> {
        if numbered {
            while matches!(self.peek(), Some('0'..='9')) {
                self.pos += 1;
            }
        }
        let rest: String = self.chars[self.pos..].iter().take(3).collect();
        let (op, len) = [
            "<<<", "<<", "&>>", "&>", ">>", ">|", ">&", "<&", "<>", "<(", ">(", "<", ">",
        ]
        .into_iter()
        .find(|op| rest.starts_with(op))
        .map(|op| (op, op.chars().count()))
        .ok_or("a redirection is malformed")?;
        match op {
            "<<" | "<<<" => return Err("here-documents and here-strings are not supported".into()),
            "<(" | ">(" => return Err("process substitution is not supported".into()),
            _ => {}
        }
        self.pos += len;
        self.skip_blanks();
        if matches!(
            self.peek(),
            None | Some(';' | '&' | '|' | '\n' | '<' | '>' | '(' | ')')
        ) {
            return Err(format!("the redirection `{op}` has no target"));
        }
        let target = self.word()?;
        let is_descriptor = !target.dynamic
            && (target.text == "-"
                || (!target.text.is_empty() && target.text.bytes().all(|b| b.is_ascii_digit())));
        let kind = match op {
            "<" => RedirectKind::Input,
            "<&" if is_descriptor => RedirectKind::Duplicate,
            "<&" => return Err("`<&` needs a descriptor number".into()),
            ">&" if is_descriptor => RedirectKind::Duplicate,
            _ => RedirectKind::Output,
        };
        current.redirects.push(Redirect { kind, target });
        Ok(())
    }

    /// Reads one word, removing quotes and noting expansions.
    fn word(&mut self) -> Result<Word, String> {
        let mut word = Word {
            text: String::new(),
            dynamic: false,
        };
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' | '\n' | ';' | '&' | '|' | '<' | '>' | ')' => break,
                '(' => return Err("a `(` inside a word is not supported".into()),
                '\\' => {
                    self.pos += 1;
                    match self.peek() {
                        None => return Err("the command ends with a lone backslash".into()),
                        Some('\n') => {}
                        Some(escaped) => word.text.push(escaped),
                    }
                    self.pos += 1;
                }
                '\'' => {
                    self.pos += 1;
                    loop {
                        match self.peek() {
                            None => return Err("a single quote is never closed".into()),
                            Some('\'') => break,
                            Some(ch) => word.text.push(ch),
                        }
                        self.pos += 1;
                    }
                    self.pos += 1;
                }
                '"' => {
                    self.pos += 1;
                    self.double_quoted(&mut word)?;
                }
                '$' => self.dollar(&mut word, false)?,
                '`' => self.backticks(&mut word)?,
                '*' | '?' | '[' => {
                    word.dynamic = true;
                    word.text.push(c);
                    self.pos += 1;
                }
                _ => {
                    word.text.push(c);
                    self.pos += 1;
                }
            }
        }
        Ok(word)
    }

    /// Reads the inside of `"..."`, the opening quote already consumed.
    fn double_quoted(&mut self, word: &mut Word) -> Result<(), String> {
        loop {
            match self.peek() {
                None => return Err("a double quote is never closed".into()),
                Some('"') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some('\\') => {
                    self.pos += 1;
                    match self.peek() {
                        None => return Err("a double quote is never closed".into()),
                        Some('\n') => {}
                        Some(ch @ ('$' | '`' | '"' | '\\')) => word.text.push(ch),
                        Some(ch) => {
                            word.text.push('\\');
                            word.text.push(ch);
                        }
                    }
                    self.pos += 1;
                }
                Some('$') => self.dollar(word, true)?,
                Some('`') => self.backticks(word)?,
                Some(ch) => {
                    word.text.push(ch);
                    self.pos += 1;
                }
            }
        }
    }

    /// Reads an expansion starting at `$`.
    fn dollar(&mut self, word: &mut Word, quoted: bool) -> Result<(), String> {
        self.pos += 1;
        match self.peek() {
            Some('(') if self.peek_at(1) == Some('(') => {
                Err("arithmetic expansion `$((...))` is not supported".into())
            }
            Some('(') => {
                self.pos += 1;
                self.enter()?;
                self.list(true)?;
                self.depth -= 1;
                word.dynamic = true;
                Ok(())
            }
            Some('{') => {
                self.pos += 1;
                let start = self.pos;
                while self.peek().is_some_and(|c| c != '}') {
                    self.pos += 1;
                }
                if self.peek().is_none() {
                    return Err("a `${` is never closed".into());
                }
                let inner: String = self.chars[start..self.pos].iter().collect();
                self.pos += 1;
                if !is_parameter(&inner) {
                    return Err(format!(
                        "the expansion `${{{inner}}}` is not supported; only `${{NAME}}` is"
                    ));
                }
                word.dynamic = true;
                Ok(())
            }
            Some('\'') => Err("`$'...'` quoting is not supported".into()),
            Some(c) if c == '_' || c.is_ascii_alphabetic() => {
                while self
                    .peek()
                    .is_some_and(|c| c == '_' || c.is_ascii_alphanumeric())
                {
                    self.pos += 1;
                }
                word.dynamic = true;
                Ok(())
            }
            Some(c) if c.is_ascii_digit() || "@*#?-$!".contains(c) => {
                self.pos += 1;
                word.dynamic = true;
                Ok(())
            }
            // Outside quotes `$"..."` is a plain double-quoted string to `sh`.
            Some('"') if !quoted => Ok(()),
            // A `$` before anything else (or at the end) is a literal dollar sign.
            _ => {
                word.text.push('$');
                Ok(())
            }
        }
    }

    /// Reads a backtick substitution and judges its inside as a separate command line.
    fn backticks(&mut self, word: &mut Word) -> Result<(), String> {
        self.pos += 1;
        let mut inner = String::new();
        loop {
            match self.peek() {
                None => return Err("a backtick is never closed".into()),
                Some('`') => break,
                Some('\\') if matches!(self.peek_at(1), Some('`' | '\\' | '$')) => {
                    self.pos += 1;
                    inner.extend(self.peek());
                }
                Some(ch) => inner.push(ch),
            }
            self.pos += 1;
        }
        self.pos += 1;
        self.enter()?;
        let mut nested = Parser {
            chars: inner.chars().collect(),
            pos: 0,
            depth: self.depth,
            commands: Vec::new(),
        };
        nested.list(false)?;
        self.depth -= 1;
        self.commands.append(&mut nested.commands);
        word.dynamic = true;
        Ok(())
    }

    fn enter(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!(
                "command substitutions are nested more than {MAX_DEPTH} deep"
            ));
        }
        Ok(())
    }
}

/// The variable name of a `NAME=value` word, if it is one.
fn assignment_name(word: &str) -> Option<&str> {
    let (name, _) = word.split_once('=')?;
    let mut chars = name.chars();
    let first = chars.next()?;
    let valid = (first == '_' || first.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric());
    valid.then_some(name)
}

/// Whether the inside of `${...}` is a plain parameter (no operators that could run code).
fn is_parameter(inner: &str) -> bool {
    let mut chars = inner.chars();
    match chars.next() {
        Some(c) if c == '_' || c.is_ascii_alphabetic() => {
            chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        }
        Some(c) if c.is_ascii_digit() => chars.all(|c| c.is_ascii_digit()),
        Some(c) if "@*#?-$!".contains(c) => chars.next().is_none(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn programs(src: &str) -> Vec<Vec<String>> {
        parse(src)
            .unwrap_or_else(|e| panic!("{src:?}: {e}"))
            .into_iter()
            .map(|c| c.words.into_iter().map(|w| w.text).collect())
            .collect()
    }

    #[test]
    fn splits_compound_commands() {
        assert_eq!(
            programs("ls -la && echo 'a b' | wc -l; true\nfalse & pwd"),
            vec![
                vec!["ls", "-la"],
                vec!["echo", "a b"],
                vec!["wc", "-l"],
                vec!["true"],
                vec!["false"],
                vec!["pwd"],
            ]
        );
    }

    #[test]
    fn removes_quotes() {
        assert_eq!(
            programs(r#"echo "a\"b" 'c\d' e\ f "\x" g#h # comment"#),
            vec![vec!["echo", "a\"b", "c\\d", "e f", "\\x", "g#h"]]
        );
    }

    #[test]
    fn finds_commands_inside_substitutions() {
        assert_eq!(
            programs("echo $(git push) \"`rm -rf x`\" $(ls $(pwd))"),
            vec![
                vec!["git", "push"],
                vec!["rm", "-rf", "x"],
                vec!["pwd"],
                vec!["ls", ""],
                vec!["echo", "", "", ""],
            ]
        );
    }

    #[test]
    fn a_line_names_what_it_may_write_not_what_it_reads() {
        let words = |line: &str| -> Vec<(String, bool)> { written_words(line) };
        let w = |t: &str, g: bool| (t.to_owned(), g);
        assert_eq!(
            words("cat notes.txt > out.txt 2>&1 && grep -r x src; ls ."),
            vec![w("out.txt", false)]
        );
        assert_eq!(
            words("sed -i 's/a/b/' src/m.py; sed 's/a/b/' other.py"),
            vec![w("s/a/b/", false), w("src/m.py", false)]
        );
        assert_eq!(
            words("rm -rf build/*.o $HOME/y && ./gen.sh --out=gen.rs out2.txt"),
            vec![
                w("build/*.o", true),
                w("gen.rs", false),
                w("out2.txt", false)
            ]
        );
        assert_eq!(
            words("dd if=a of=b.bin"),
            vec![w("if=a", false), w("b.bin", false)]
        );
        assert_eq!(words("git diff a.txt && git status"), vec![]);
        assert_eq!(
            words("git checkout -- a.txt"),
            vec![w("checkout", false), w("a.txt", false)]
        );
        assert_eq!(words("find . -name '*.o' -delete"), vec![w("*.o", false)]);
        assert_eq!(words("sh -c 'printf x > m.py'"), vec![w("m.py", false)]);
        assert_eq!(words("bash -lc \"rm -f a.txt\""), vec![w("a.txt", false)]);
        // Beyond the reader (a subshell): every word but options.
        assert!(words("(cd sub && touch new.txt)").contains(&w("new.txt", false)));
    }

    #[test]
    fn marks_dynamic_words() {
        let commands = parse("cat $HOME/x ${A} ~/y *.rs plain \"$1\"").expect("parse");
        let dynamic: Vec<bool> = commands[0].words.iter().map(|w| w.dynamic).collect();
        assert_eq!(dynamic, vec![false, true, true, false, true, false, true]);
    }

    #[test]
    fn reads_redirections_and_assignments() {
        let commands = parse("FOO=1 echo hi >out.txt 2>&1 <in >&2 &>both 3>>log").expect("parse");
        let c = &commands[0];
        assert_eq!(c.assignments, vec!["FOO"]);
        let kinds: Vec<(RedirectKind, &str)> = c
            .redirects
            .iter()
            .map(|r| (r.kind, r.target.text.as_str()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (RedirectKind::Output, "out.txt"),
                (RedirectKind::Duplicate, "1"),
                (RedirectKind::Input, "in"),
                (RedirectKind::Duplicate, "2"),
                (RedirectKind::Output, "both"),
                (RedirectKind::Output, "log"),
            ]
        );
    }

    #[test]
    fn refuses_what_it_cannot_judge() {
        let deep = format!(
            "{}x{}",
            "$(echo ".repeat(MAX_DEPTH + 1),
            ")".repeat(MAX_DEPTH + 1)
        );
        for src in [
            "(cd /; rm x)",
            "{ ls; }",
            "if true; then ls; fi",
            "for f in *; do rm $f; done",
            "cat <<EOF\nx\nEOF",
            "echo $((1+2))",
            "echo ${x:-$(rm -rf ~)}",
            "echo 'unterminated",
            "echo \"unterminated",
            "echo `unterminated",
            "echo $(unterminated",
            "ls &&",
            "&& ls",
            "ls | | wc",
            "ls )",
            "diff <(ls) <(ls)",
            "echo $'\\x41'",
            "ls >",
            "trailing\\",
            &deep,
        ] {
            assert!(parse(src).is_err(), "{src:?} parsed");
        }
    }

    #[test]
    fn accepts_empty_separators() {
        assert_eq!(programs(""), Vec::<Vec<String>>::new());
        assert_eq!(programs("\n\nls;\n"), vec![vec!["ls"]]);
        assert_eq!(programs("ls \\\n -l"), vec![vec!["ls", "-l"]]);
    }
}
