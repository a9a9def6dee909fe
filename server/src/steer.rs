//! Inline steer comments: `// rein: …`, `# rein: …` and their kin, found by a per-line scan.
//!
//! The scan knows no language grammar. It looks for any common comment opener (`//`, `#`,
//! `--`, `;`, `/*`, `<!--`) that begins a line or follows whitespace, so it works in every
//! language at the price of heuristics, each documented where it lives. Lines are split on
//! `\n`, `\r\n` and `\r`, the same breaks as LSP and `documents`, so line numbers agree.
//!
//! Nothing the scan looks at spans lines: a `/*` or `<!--` whose closer is not on its line
//! steers to the line end, and quotes pair up within a line. So a line's steer depends on
//! that line alone, and after an edit only the lines it replaced need scanning again
//! (`rescan`); the rest keep their steers and move by the number of lines added or removed.

/// A steer to the agent, written as a comment and anchored at its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SteerComment {
    /// 0-based line index.
    pub line: usize,
    /// Byte offset in the line where the comment marker starts.
    pub start: usize,
    /// Byte offset in the line where the comment ends: the line end, or after `*/` / `-->`.
    pub end: usize,
    /// The steer text after `rein:`, trimmed; never empty.
    pub text: String,
}

/// A comment opener and what may follow it.
struct Marker {
    open: &'static str,
    /// Bytes that may repeat right after the opener, so doc-comment and banner variants
    /// (`///`, `//!`, `/**`, `##`, `;;`, `---`) steer too.
    repeat: &'static [u8],
    /// The closer of a block comment; `None` for comments that run to the line end.
    close: Option<&'static str>,
}

const MARKERS: [Marker; 6] = [
    Marker {
        open: "<!--",
        repeat: b"-",
        close: Some("-->"),
    },
    Marker {
        open: "/*",
        repeat: b"*!",
        close: Some("*/"),
    },
    Marker {
        open: "//",
        repeat: b"/!",
        close: None,
    },
    Marker {
        open: "--",
        repeat: b"-",
        close: None,
    },
    Marker {
        open: "#",
        repeat: b"#",
        close: None,
    },
    Marker {
        open: ";",
        repeat: b";",
        close: None,
    },
];

const KEYWORD: &[u8] = b"rein:";

/// Every steer comment in `text`, in line order, at most one per line (the first).
pub fn scan(text: &str) -> Vec<SteerComment> {
    scan_lines(0, split_lines(text))
}

/// Which lines an edit replaced: lines `first..first + removed` of the text before it became
/// lines `first..first + inserted` of the text after; every other line kept its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineSplice {
    /// The first line replaced, the same in both texts.
    pub first: usize,
    /// How many lines of the text before were replaced.
    pub removed: usize,
    /// How many lines of the text after replaced them.
    pub inserted: usize,
}

/// Brings `comments`, the steers of the text before an edit, up to date with the text after
/// it, given the lines the edit replaced and the lines from the first replacement on
/// (contents without terminators, in order; those past `inserted` are not read). The result
/// equals a `scan` of the text after the edit, at the cost of the replaced lines only.
pub fn rescan<S: AsRef<str>>(
    comments: &mut Vec<SteerComment>,
    splice: LineSplice,
    replacements: impl IntoIterator<Item = S>,
) {
    let end = splice.first + splice.removed;
    let from = comments.partition_point(|c| c.line < splice.first);
    let to = comments.partition_point(|c| c.line < end);
    for c in &mut comments[to..] {
        // `c.line >= end >= removed`, so this cannot underflow.
        c.line = c.line - splice.removed + splice.inserted;
    }
    let fresh = scan_lines(splice.first, replacements.into_iter().take(splice.inserted));
    comments.splice(from..to, fresh);
}

/// The steers of consecutive lines (contents without terminators), numbered from `first`.
fn scan_lines<S: AsRef<str>>(
    first: usize,
    lines: impl IntoIterator<Item = S>,
) -> Vec<SteerComment> {
    lines
        .into_iter()
        .enumerate()
        .filter_map(|(i, content)| {
            scan_line(content.as_ref()).map(|(start, end, text)| SteerComment {
                line: first + i,
                start,
                end,
                text: text.to_owned(),
            })
        })
        .collect()
}

/// Whether `a` and `b` differ only in steer comments: equal once every steer comment, every
/// comment that is still being typed into one (`#`, `// re`, `/* rein:`), trailing blanks,
/// and every line that is blank (or left blank by that) is taken out of both. Typing a steer comment, or deleting
/// one, is a message to the agent, not an edit of the file: it must not make the file the
/// human's. Costs one pass over both texts, stopping at the first other difference.
pub fn differ_only_in_steers(a: &str, b: &str) -> bool {
    split_lines(a)
        .filter_map(without_steer)
        .eq(split_lines(b).filter_map(without_steer))
}

/// A line with its steer comment (or the start of one) cut out, or `None` when nothing but
/// whitespace is left.
fn without_steer(line: &str) -> Option<std::borrow::Cow<'_, str>> {
    let kept = match scan_line(line) {
        Some((start, end, _)) => {
            std::borrow::Cow::Owned(format!("{}{}", line[..start].trim_end(), &line[end..]))
        }
        None => match steer_being_typed(line) {
            Some(i) => std::borrow::Cow::Borrowed(line[..i].trim_end()),
            // Trailing blanks too: the space typed before a comment opener.
            None => std::borrow::Cow::Borrowed(line.trim_end()),
        },
    };
    (!kept.trim().is_empty()).then_some(kept)
}

/// Where a comment starts that can still become a steer as more is typed: from a comment
/// opener (or the start of one) at the line end, through `rein:` with or without its text.
fn steer_being_typed(line: &str) -> Option<usize> {
    let bytes = line.as_bytes();
    (0..bytes.len()).find(|&i| {
        matches!(bytes[i], b'/' | b'#' | b'-' | b';' | b'<')
            && line.is_char_boundary(i)
            && follows_whitespace(line, i)
            && MARKERS.iter().any(|m| {
                let rest = &bytes[i..];
                if rest.len() < m.open.len() {
                    return m.open.as_bytes().starts_with(rest);
                }
                if !rest.starts_with(m.open.as_bytes()) {
                    return false;
                }
                let mut j = m.open.len();
                while rest.get(j).is_some_and(|c| m.repeat.contains(c)) {
                    j += 1;
                }
                let after = line[i + j..].trim_start().as_bytes();
                let n = after.len().min(KEYWORD.len());
                after[..n].eq_ignore_ascii_case(&KEYWORD[..n])
            })
    })
}

/// Splits on `\n`, `\r\n` and lone `\r`; a trailing break yields a last, empty line.
fn split_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let current = rest?;
        let Some(i) = current.find(['\n', '\r']) else {
            rest = None;
            return Some(current);
        };
        let width = if current[i..].starts_with("\r\n") {
            2
        } else {
            1
        };
        rest = Some(&current[i + width..]);
        Some(&current[..i])
    })
}

/// The first steer on one line, as `(start, end, text)`.
fn scan_line(line: &str) -> Option<(usize, usize, &str)> {
    let bytes = line.as_bytes();
    // Most lines hold no candidate marker, so strings are only located once one turns up.
    let mut strings: Option<Vec<(usize, usize)>> = None;
    for (i, &b) in bytes.iter().enumerate() {
        if !matches!(b, b'/' | b'#' | b'-' | b';' | b'<') {
            continue;
        }
        let Some(marker) = MARKERS
            .iter()
            .find(|m| bytes[i..].starts_with(m.open.as_bytes()))
        else {
            continue;
        };
        if !follows_whitespace(line, i) {
            continue;
        }
        let mut j = i + marker.open.len();
        while bytes.get(j).is_some_and(|c| marker.repeat.contains(c)) {
            j += 1;
        }
        // `j` sits after ASCII bytes only, so it is a char boundary.
        let after = line[j..].trim_start();
        let is_steer = after
            .as_bytes()
            .get(..KEYWORD.len())
            .is_some_and(|w| w.eq_ignore_ascii_case(KEYWORD));
        if !is_steer {
            continue;
        }
        if inside_string(strings.get_or_insert_with(|| string_spans(bytes)), i) {
            continue;
        }
        let body_start = line.len() - after.len() + KEYWORD.len();
        let body = &line[body_start..];
        let (body, end) = match marker
            .close
            .and_then(|c| body.find(c).map(|k| (k, c.len())))
        {
            Some((k, close_len)) => (&body[..k], body_start + k + close_len),
            None => (body, line.len()),
        };
        let text = body.trim();
        if !text.is_empty() {
            return Some((i, end, text));
        }
    }
    None
}

/// Whether byte `i` (a char boundary) starts the line or follows whitespace; a BOM counts
/// as whitespace so a steer on a file's first line is not lost to it.
fn follows_whitespace(line: &str, i: usize) -> bool {
    line[..i]
        .chars()
        .next_back()
        .is_none_or(|c| c.is_whitespace() || c == '\u{feff}')
}

/// Whether byte `i` lies strictly inside one of the sorted, disjoint `spans`.
fn inside_string(spans: &[(usize, usize)], i: usize) -> bool {
    let after = spans.partition_point(|&(open, _)| open < i);
    after > 0 && spans[after - 1].1 > i
}

/// Byte spans `(open, close)` of the quoted strings on a line: a cheap heuristic, not a lexer.
///
/// A `"` or `'` opens a string that ends at the next unescaped same quote on the line. A
/// quote that never closes on the line opens nothing, so Rust lifetimes (`&'a`), prose
/// apostrophes and multi-line strings do not hide a steer later on the line. A `'` right
/// after a word character (`don't`) is an apostrophe, not an opener, and a `'` right before
/// one is not a closer; the price is that prefixed literals like Python's `b'…'` are missed.
fn string_spans(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    // Whether a closer exists depends only on the bytes after the opener, so once a search
    // for one quote kind fails no later one can succeed; remembering that keeps this linear.
    let mut exhausted = [false; 2];
    let mut i = 0;
    while i < bytes.len() {
        let quote = bytes[i];
        let kind = match quote {
            b'"' => 0,
            b'\'' if i == 0 || !is_word(bytes[i - 1]) => 1,
            _ => {
                i += 1;
                continue;
            }
        };
        if exhausted[kind] {
            i += 1;
            continue;
        }
        match find_closer(bytes, i + 1, quote) {
            Some(close) => {
                spans.push((i, close));
                i = close + 1;
            }
            None => {
                exhausted[kind] = true;
                i += 1;
            }
        }
    }
    spans
}

/// The index of the quote closing a string whose body starts at `from`.
fn find_closer(bytes: &[u8], from: usize, quote: u8) -> Option<usize> {
    let mut j = from;
    while j < bytes.len() {
        match bytes[j] {
            b'\\' => j += 2,
            b if b == quote
                && !(quote == b'\'' && bytes.get(j + 1).is_some_and(|&n| is_word(n))) =>
            {
                return Some(j)
            }
            _ => j += 1,
        }
    }
    None
}

/// ASCII alphanumerics, `_`, and any byte of a non-ASCII char (most are letters).
fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || !b.is_ascii()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn typing_or_deleting_a_steer_comment_changes_nothing_else() {
        let disk = "def f(x):\n    return x\n";
        // Every keystroke of a new comment line, and of one at the end of a code line.
        let line = "    # rein: keep f pure";
        for k in 0..=line.len() {
            let typed = format!("def f(x):\n{}\n    return x\n", &line[..k]);
            assert!(differ_only_in_steers(disk, &typed), "{typed:?}");
        }
        let tail = "  // rein: no unwrap";
        for k in 0..=tail.len() {
            let typed = format!("def f(x):{}\n    return x\n", &tail[..k]);
            assert!(differ_only_in_steers(disk, &typed), "{typed:?}");
        }
        // Deleting one again, and a block comment with code after it.
        assert!(differ_only_in_steers("a\n# rein: x\nb\n", "a\nb\n"));
        assert!(differ_only_in_steers(
            "int x; int y;",
            "int x; /* rein: mid */ int y;"
        ));
        // Anything else is an edit.
        for other in [
            "def f(x):\n    return x + 1\n",
            "def f(x):\n    # really\n    return x\n",
            "def f(x):\n    return x # note\n",
            "def g(x):\n    return x\n",
        ] {
            assert!(!differ_only_in_steers(disk, other), "{other:?}");
        }
    }

    /// The steer a fixture line should yield, as `(start, end, text)`.
    type Expected = Option<(usize, usize, &'static str)>;

    /// One line of source each, with the steer it should yield.
    const FIXTURES: &[(&str, Expected)] = &[
        // Positive, one per comment style and language.
        (
            "// rein: keep this API stable",
            Some((0, 29, "keep this API stable")),
        ),
        (
            "# rein: use the logging module",
            Some((0, 30, "use the logging module")),
        ),
        (
            "-- rein: no full table scans",
            Some((0, 28, "no full table scans")),
        ),
        (
            "; rein: keep it tail-recursive",
            Some((0, 30, "keep it tail-recursive")),
        ),
        (
            "/* rein: no allocations */",
            Some((0, 26, "no allocations")),
        ),
        (
            "<!-- rein: keep it accessible -->",
            Some((0, 33, "keep it accessible")),
        ),
        ("    // rein: indented", Some((4, 21, "indented"))),
        ("\t\t# rein: tabbed", Some((2, 16, "tabbed"))),
        ("let x = 1; // rein: trailing", Some((11, 28, "trailing"))),
        ("int x; /* rein: mid */ int y;", Some((7, 22, "mid"))),
        ("<p>hi</p> <!-- rein: html -->", Some((10, 29, "html"))),
        ("//rein: no space", Some((0, 16, "no space"))),
        ("// REIN: shouting", Some((0, 17, "shouting"))),
        ("// Rein:   padded   ", Some((0, 20, "padded"))),
        ("/// rein: doc comment", Some((0, 21, "doc comment"))),
        ("//! rein: inner doc", Some((0, 19, "inner doc"))),
        (";; rein: lisp style", Some((0, 19, "lisp style"))),
        ("/* rein: never closed", Some((0, 21, "never closed"))),
        (
            "// rein: garçon, straße, 日本語 😀",
            Some((0, 41, "garçon, straße, 日本語 😀")),
        ),
        ("SELECT 1; -- rein: sql", Some((10, 22, "sql"))),
        (
            "fn f<'a>(x: &'a str) // rein: don't",
            Some((21, 35, "don't")),
        ),
        (
            "print(\"hi\") # rein: after a string",
            Some((12, 34, "after a string")),
        ),
        (
            "#include <x.h> // rein: not the include",
            Some((15, 39, "not the include")),
        ),
        ("\u{feff}// rein: after a BOM", Some((3, 23, "after a BOM"))),
        (
            "// note // rein: second marker",
            Some((8, 30, "second marker")),
        ),
        // Negative.
        ("see http://rein:8080/x", None),
        ("a--rein: glued", None),
        ("x;rein: glued", None),
        ("// rein:", None),
        ("// rein:    ", None),
        ("/* rein: */", None),
        ("<!-- rein:   -->", None),
        ("// reins: plural", None),
        ("// rein keep", None),
        ("// TODO rein: not first", None),
        ("rein: no marker", None),
        ("s = \"// rein: in a string\"", None),
        ("s = '# rein: in a string'", None),
        ("s = \"a \\\" // rein: escaped quote\"", None),
        ("#[derive(Debug)]", None),
        ("", None),
    ];

    #[test]
    fn fixtures() {
        for (line, expected) in FIXTURES {
            let got = scan(line);
            let want: Vec<SteerComment> = expected
                .iter()
                .map(|&(start, end, text)| SteerComment {
                    line: 0,
                    start,
                    end,
                    text: text.to_owned(),
                })
                .collect();
            assert_eq!(got, want, "line {line:?}");
            for steer in &got {
                assert!(
                    line[steer.start..].starts_with(['/', '#', '-', ';', '<']),
                    "start points at the marker in {line:?}"
                );
            }
        }
    }

    #[test]
    fn line_numbers_follow_lf_crlf_and_cr() {
        let text = "// rein: a\r\ncode\r// rein: b\n\n  # rein: c\r\n";
        let got: Vec<_> = scan(text)
            .into_iter()
            .map(|s| (s.line, s.start, s.end, s.text))
            .collect();
        assert_eq!(
            got,
            [
                (0, 0, 10, "a".to_owned()),
                (2, 0, 10, "b".to_owned()),
                (4, 2, 11, "c".to_owned()),
            ]
        );
        assert_eq!(split_lines("a\r\n").collect::<Vec<_>>(), ["a", ""]);
        assert_eq!(
            split_lines("\r\r\n\n").collect::<Vec<_>>(),
            ["", "", "", ""]
        );
        assert_eq!(split_lines("").collect::<Vec<_>>(), [""]);
    }

    #[test]
    fn one_steer_per_line() {
        let got = scan("/* rein: one */ /* rein: two */");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].text, "one");
    }

    #[test]
    fn string_heuristic() {
        // A quote that never closes is no string: lifetimes, apostrophes, multi-line strings.
        assert_eq!(string_spans(b"&'a str"), []);
        assert_eq!(string_spans(b"it's"), []);
        assert_eq!(string_spans(b"'a' \"b\""), [(0, 2), (4, 6)]);
        assert_eq!(string_spans(br#"'"' "'""#), [(0, 2), (4, 6)]);
        assert_eq!(string_spans(br#""\\" x""#), [(0, 3)]);
        assert!(inside_string(&[(2, 5)], 3));
        assert!(!inside_string(&[(2, 5)], 5));
        assert!(!inside_string(&[(2, 5)], 1));
        assert!(!inside_string(&[], 0));
    }

    #[test]
    fn very_long_lines_stay_linear() {
        // Each shape would make a naive scan quadratic; 200k-byte lines finish instantly here.
        let shapes = ["'a ", "\" /* rein: a ", " # rein:", "\\", "# ", "/*"];
        for shape in shapes {
            let line = shape.repeat(200_000 / shape.len());
            let _ = scan(&line);
        }
        let long_text = "x".repeat(100_000);
        let got = scan(&format!("{}  // rein: {long_text}", "y".repeat(100_000)));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].text.len(), 100_000);
    }

    /// Source-like text rich in markers, keywords, quotes, escapes and line breaks.
    fn sourcey() -> impl Strategy<Value = String> {
        let piece = prop::sample::select(vec![
            "//", "#", "--", ";", "/*", "*/", "<!--", "-->", "rein:", "REIN:", " ", "\t", "\r",
            "\n", "\r\n", "\"", "'", "\\", "a", "é", "😀", "\u{feff}", "\u{a0}",
        ]);
        prop::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
    }

    /// Lines as an independent splitter sees them: normalise breaks to `\n`, then split.
    fn reference_lines(text: &str) -> Vec<String> {
        text.replace("\r\n", "\n")
            .replace('\r', "\n")
            .split('\n')
            .map(str::to_owned)
            .collect()
    }

    fn check_invariants(text: &str) -> Result<(), TestCaseError> {
        let lines = reference_lines(text);
        let steers = scan(text);
        let mut previous = None;
        for steer in &steers {
            prop_assert!(steer.line < lines.len());
            prop_assert!(previous < Some(steer.line), "one per line, in order");
            previous = Some(steer.line);
            let line = &lines[steer.line];
            prop_assert!(steer.start < steer.end && steer.end <= line.len());
            prop_assert!(line.is_char_boundary(steer.start) && line.is_char_boundary(steer.end));
            prop_assert!(!steer.text.is_empty() && steer.text.trim() == steer.text);
            prop_assert!(line[steer.start..steer.end].contains(steer.text.as_str()));
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn scan_upholds_invariants_on_sourcey_text(text in sourcey()) {
            check_invariants(&text)?;
        }

        #[test]
        fn scan_upholds_invariants_on_any_text(text in any::<String>()) {
            check_invariants(&text)?;
        }

        #[test]
        fn a_steer_line_is_found_wherever_it_sits(
            before in prop::collection::vec("[a-z ]{0,10}", 0..5),
            steer in "[a-zA-Z][a-zA-Z0-9 ,.é]{0,30}",
            break_kind in prop::sample::select(vec!["\n", "\r\n", "\r"]),
        ) {
            let mut text = before.join(break_kind);
            if !before.is_empty() {
                text.push_str(break_kind);
            }
            text.push_str("  // rein: ");
            text.push_str(&steer);
            let got = scan(&text);
            prop_assert_eq!(got.len(), 1);
            prop_assert_eq!(got[0].line, before.len());
            prop_assert_eq!(got[0].start, 2);
            prop_assert_eq!(got[0].text.as_str(), steer.trim());
        }
    }
}
