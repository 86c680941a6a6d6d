//! The shape of the product's source, kept by tests (ARCHITECTURE.md "Code map"):
//! no file of `policy`, `config`, `control`, `gateway` or `cli` holds more than 700
//! lines of code, and no two files of a crate name each other in a circle — a file
//! either uses another or is used by it, so a newcomer can read the rooms from the top
//! down.
//!
//! A file's *lines of code* are its non-blank lines outside comments, strings' contents
//! kept, `#[cfg(test)]` items left out. A file *names* another when its code (not its
//! comments, not a `mod x;` line, not a `pub use` re-export in a `mod.rs`/`lib.rs`)
//! holds a path that resolves into it: `crate::a::b::Item`, `super::Item`,
//! `super::*`, `self::child::…` or `child::…`. `lib.rs` and `main.rs` are the crates'
//! roots and binaries' entry points: they declare and use everything and are used by
//! nothing, so they are left out of the graph.
//!
//! The documents are kept the same way: every relative link of the Markdown pages leads
//! to a file and a heading that exist, and every section the code, the scripts and the
//! example configuration send a reader to (`docs/hosts.md "More than one host"`) is a
//! heading of that page.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const CRATES: [&str; 5] = ["policy", "config", "control", "gateway", "cli"];
const MAX_LINES_OF_CODE: usize = 700;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the harness sits in the workspace")
        .to_path_buf()
}

/// One source file of a crate's library: where it is and which module it is.
struct SourceFile {
    path: PathBuf,
    /// The module path from the crate root (`["proxy", "terminal"]` for `proxy/terminal/mod.rs`).
    module: Vec<String>,
    /// The file is a crate root or a binary's entry point.
    root: bool,
    code: String,
    /// Lines of code: non-blank, outside comments and test items, strings' lines counted.
    lines: usize,
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            // Test-only directories (`store/tests/`) are the tests' own shape.
            if path.file_name().is_some_and(|n| n != "tests") {
                rust_files(&path, into);
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            into.push(path);
        }
    }
}

fn sources(krate: &str) -> Vec<SourceFile> {
    let src = workspace().join(krate).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    paths
        .into_iter()
        .map(|path| {
            let relative = path.strip_prefix(&src).expect("under src").to_path_buf();
            let mut module: Vec<String> = relative
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let last = module.last().cloned().unwrap_or_default();
            let root = module.first().is_some_and(|m| m == "bin")
                || (module.len() == 1 && (last == "lib" || last == "main"));
            if last == "mod" || last == "lib" || last == "main" {
                module.pop();
            }
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            let blanked = blank_comments_and_strings(&text);
            let tests = test_lines(&blanked);
            // Lines of code count what strings hold (a page in one string is code).
            let lines = blank_comments(&text)
                .lines()
                .enumerate()
                .filter(|(n, l)| !l.trim().is_empty() && !tests.contains(n))
                .count();
            SourceFile {
                code: without_tests(&blanked),
                lines,
                path,
                module,
                root,
            }
        })
        .collect()
}

/// The text with comments and the contents of string and char literals turned to
/// spaces, newlines kept, so that lines still count and no word in prose is a path.
fn blank_comments_and_strings(text: &str) -> String {
    blank(text, true)
}

/// The text with comments turned to spaces, strings kept: what lines of code count.
fn blank_comments(text: &str) -> String {
    blank(text, false)
}

fn blank(text: &str, strings: bool) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let in_string = |c: char| if strings { blank(c) } else { c };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('#') || next == Some('"'))
            && (!ident_before(&chars, i) || (chars[i - 1] == 'b' && !ident_before(&chars, i - 1)))
        {
            // A raw string: r"…", r#"…"#.
            let mut hashes = 0;
            let mut j = i + 1;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            out.push('"');
            i = j + 1;
            while i < chars.len() {
                if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
                    out.push('"');
                    i += 1 + hashes;
                    break;
                }
                out.push(in_string(chars[i]));
                i += 1;
            }
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(in_string('\\'));
                    i += 1;
                }
                if i < chars.len() {
                    out.push(in_string(chars[i]));
                    i += 1;
                }
            }
            out.push('"');
            i += 1;
        } else if c == '\'' && is_char_literal(&chars, i) {
            let end = (i + 1..chars.len())
                .find(|&k| chars[k] == '\'' && (chars[k - 1] != '\\' || chars[k - 2] == '\\'))
                .unwrap_or(i);
            out.push_str("' '");
            for _ in i + 3..=end {
                out.push(' ');
            }
            i = end + 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// `'a'`, `'\n'`, `'\u{1F600}'` — not a lifetime `'a`.
fn is_char_literal(chars: &[char], i: usize) -> bool {
    matches!(
        (chars.get(i + 1), chars.get(i + 2)),
        (Some('\\'), _) | (Some(_), Some('\''))
    )
}

/// The `#[cfg(test)]` items of `code`, as char index ranges (inclusive).
fn test_items(code: &str) -> Vec<(usize, usize)> {
    let chars: Vec<char> = code.chars().collect();
    let marker: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut items = Vec::new();
    let mut i = 0;
    while i + marker.len() <= chars.len() {
        if chars[i..i + marker.len()] != marker[..] {
            i += 1;
            continue;
        }
        // The item runs to its first `;` at depth 0 or the end of its first `{…}`.
        let mut j = i + marker.len();
        let mut depth = 0usize;
        while j < chars.len() {
            match chars[j] {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        break;
                    }
                }
                ';' if depth == 0 => break,
                _ => {}
            }
            j += 1;
        }
        items.push((i, j.min(chars.len().saturating_sub(1))));
        i = j + 1;
    }
    items
}

/// The code with every `#[cfg(test)]` item blanked (lines kept).
fn without_tests(code: &str) -> String {
    let mut out: Vec<char> = code.chars().collect();
    for (i, j) in test_items(code) {
        for c in &mut out[i..=j] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    }
    out.into_iter().collect()
}

/// The line numbers (from 0) that `#[cfg(test)]` items of `code` (comments and strings
/// blanked) span, strings' lines among them.
fn test_lines(code: &str) -> BTreeSet<usize> {
    let chars: Vec<char> = code.chars().collect();
    let mut line_of = Vec::with_capacity(chars.len());
    let mut line = 0;
    for c in &chars {
        line_of.push(line);
        if *c == '\n' {
            line += 1;
        }
    }
    test_items(code)
        .into_iter()
        .flat_map(|(i, j)| line_of[i]..=line_of[j])
        .collect()
}

fn lines_of_code(code: &str) -> usize {
    code.lines().filter(|l| !l.trim().is_empty()).count()
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Star,
    Semi,
    Other,
}

fn tokens(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
            continue;
        }
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        out.push(match c {
            ':' if chars.get(i + 1) == Some(&':') => {
                i += 1;
                Token::PathSep
            }
            '{' => Token::Open,
            '}' => Token::Close,
            ',' => Token::Comma,
            '*' => Token::Star,
            ';' => Token::Semi,
            _ => Token::Other,
        });
        i += 1;
    }
    out
}

/// Every path the tokens spell (use trees expanded), `mod x;` lines and, in a module
/// root, `pub use` re-exports left out. `*` stands for the module itself.
fn paths(tokens: &[Token], module_root: bool) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let ident = |k: usize| match tokens.get(k) {
            Some(Token::Ident(s)) => Some(s.as_str()),
            _ => None,
        };
        // `mod x;` and a root's `pub use …;` / `pub(crate) use …;` declare, not use.
        if ident(i) == Some("mod") && tokens.get(i + 2) == Some(&Token::Semi) {
            i += 3;
            continue;
        }
        if module_root && ident(i) == Some("pub") {
            let mut k = i + 1;
            if tokens.get(k) == Some(&Token::Other) {
                // `pub(crate)`: skip to the closing parenthesis's `use`.
                while k < tokens.len() && ident(k) != Some("use") && k < i + 6 {
                    k += 1;
                }
            }
            if ident(k) == Some("use") {
                while k < tokens.len() && tokens[k] != Token::Semi {
                    k += 1;
                }
                i = k + 1;
                continue;
            }
        }
        let starts_path = matches!(tokens.get(i), Some(Token::Ident(_)))
            && (i == 0 || tokens[i - 1] != Token::PathSep);
        if starts_path && tokens.get(i + 1) == Some(&Token::PathSep) {
            i = path_tree(tokens, i, Vec::new(), &mut out);
            continue;
        }
        i += 1;
    }
    out
}

/// Reads `a::b::{c, d::e}` from `i`, adding each full path; returns the index after it.
fn path_tree(
    tokens: &[Token],
    mut i: usize,
    mut prefix: Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    loop {
        match tokens.get(i) {
            Some(Token::Ident(s)) => {
                prefix.push(s.clone());
                i += 1;
            }
            Some(Token::Star) => {
                out.push(prefix.clone());
                return i + 1;
            }
            Some(Token::Open) => {
                i += 1;
                loop {
                    match tokens.get(i) {
                        Some(Token::Close) => return i + 1,
                        Some(Token::Comma) => i += 1,
                        None => return i,
                        _ => i = path_tree(tokens, i, prefix.clone(), out),
                    }
                }
            }
            _ => {
                out.push(prefix);
                return i;
            }
        }
        if tokens.get(i) == Some(&Token::PathSep) {
            i += 1;
        } else {
            out.push(prefix);
            return i;
        }
    }
}

struct Graph {
    files: Vec<PathBuf>,
    edges: Vec<BTreeSet<usize>>,
}

/// The absolute module path `path`, spelled in `module`, names (`None`: outside the
/// crate, or a path that starts at no module of it).
fn absolute(
    module: &[String],
    path: &[String],
    by_module: &BTreeMap<&[String], usize>,
) -> Option<Vec<String>> {
    match path.first().map(String::as_str) {
        Some("crate") => Some(path[1..].to_vec()),
        Some("super") => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            let keep = module.len().saturating_sub(ups);
            Some(module[..keep].iter().chain(&path[ups..]).cloned().collect())
        }
        Some("self") => Some(module.iter().chain(&path[1..]).cloned().collect()),
        Some(first) => {
            let child: Vec<String> = module.iter().cloned().chain([first.to_string()]).collect();
            by_module
                .contains_key(child.as_slice())
                .then(|| module.iter().chain(path).cloned().collect())
        }
        None => None,
    }
}

/// A module root's (`lib.rs`, `mod.rs`) `pub use` re-exports: the name each one makes
/// in the root's module, and the absolute path it stands for.
fn reexports(
    sources: &[SourceFile],
    by_module: &BTreeMap<&[String], usize>,
) -> BTreeMap<Vec<String>, Vec<String>> {
    let mut out = BTreeMap::new();
    for source in sources {
        let is_module_root = source
            .path
            .file_name()
            .is_some_and(|n| n == "mod.rs" || n == "lib.rs")
            || source.path.with_extension("").is_dir();
        if !is_module_root {
            continue;
        }
        let all = paths(&tokens(&source.code), false);
        let kept: BTreeSet<Vec<String>> = paths(&tokens(&source.code), true).into_iter().collect();
        for path in all.into_iter().filter(|p| !kept.contains(p)) {
            let (Some(name), Some(target)) =
                (path.last(), absolute(&source.module, &path, by_module))
            else {
                continue;
            };
            let mut at = source.module.clone();
            at.push(name.clone());
            if at != target {
                out.insert(at, target);
            }
        }
    }
    out
}

fn graph(krate: &str) -> Graph {
    let sources = sources(krate);
    let by_module: BTreeMap<&[String], usize> = sources
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.root)
        .map(|(i, s)| (s.module.as_slice(), i))
        .collect();
    let reexported = reexports(&sources, &by_module);
    let mut edges = vec![BTreeSet::new(); sources.len()];
    for (from, source) in sources.iter().enumerate() {
        if source.root {
            continue;
        }
        let is_module_root = source.path.file_name().is_some_and(|n| n == "mod.rs")
            || source.path.with_extension("").is_dir();
        for path in paths(&tokens(&source.code), is_module_root) {
            let Some(mut absolute) = absolute(&source.module, &path, &by_module) else {
                continue;
            };
            // A name a module root re-exports stands for the file that defines it
            // (a few hops at most: a re-export of a re-export).
            for _ in 0..4 {
                let Some((n, target)) = (1..=absolute.len())
                    .rev()
                    .find_map(|n| reexported.get(&absolute[..n]).map(|t| (n, t)))
                else {
                    break;
                };
                absolute = target.iter().chain(&absolute[n..]).cloned().collect();
            }
            let target = (0..=absolute.len())
                .rev()
                .find_map(|n| by_module.get(&absolute[..n]).copied());
            if let Some(to) = target.filter(|&to| to != from) {
                edges[from].insert(to);
            }
        }
    }
    Graph {
        files: sources.into_iter().map(|s| s.path).collect(),
        edges,
    }
}

/// The strongly connected components with more than one file (Tarjan).
fn circles(graph: &Graph) -> Vec<Vec<usize>> {
    struct Walk<'a> {
        edges: &'a [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        next: usize,
        found: Vec<Vec<usize>>,
    }
    fn visit(w: &mut Walk, v: usize) {
        w.index[v] = Some(w.next);
        w.low[v] = w.next;
        w.next += 1;
        w.stack.push(v);
        w.on_stack[v] = true;
        for &to in w.edges[v].clone().iter() {
            match w.index[to] {
                None => {
                    visit(w, to);
                    w.low[v] = w.low[v].min(w.low[to]);
                }
                Some(i) if w.on_stack[to] => w.low[v] = w.low[v].min(i),
                Some(_) => {}
            }
        }
        if Some(w.low[v]) == w.index[v] {
            let mut component = Vec::new();
            while let Some(top) = w.stack.pop() {
                w.on_stack[top] = false;
                component.push(top);
                if top == v {
                    break;
                }
            }
            if component.len() > 1 {
                w.found.push(component);
            }
        }
    }
    let n = graph.files.len();
    let mut walk = Walk {
        edges: &graph.edges,
        index: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on_stack: vec![false; n],
        next: 0,
        found: Vec::new(),
    };
    for v in 0..n {
        if walk.index[v].is_none() {
            visit(&mut walk, v);
        }
    }
    walk.found
}

fn shown(path: &Path) -> String {
    path.strip_prefix(workspace())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn no_source_file_of_the_product_holds_more_than_700_lines_of_code() {
    let mut counted = 0;
    let mut over = Vec::new();
    for krate in CRATES {
        for source in sources(krate) {
            counted += 1;
            let n = source.lines;
            if n > MAX_LINES_OF_CODE {
                over.push(format!("{} has {n} lines of code", shown(&source.path)));
            }
        }
    }
    assert!(counted > 100, "only {counted} source files found");
    assert!(
        over.is_empty(),
        "over {MAX_LINES_OF_CODE}:\n{}",
        over.join("\n")
    );
}

#[test]
fn no_two_files_of_a_crate_name_each_other_in_a_circle() {
    let mut report = Vec::new();
    let mut edges = 0;
    for krate in CRATES {
        let graph = graph(krate);
        edges += graph.edges.iter().map(BTreeSet::len).sum::<usize>();
        for circle in circles(&graph) {
            let mut lines = vec![format!("a circle in {krate}:")];
            for &file in &circle {
                let names: Vec<String> = graph.edges[file]
                    .iter()
                    .filter(|to| circle.contains(to))
                    .map(|&to| shown(&graph.files[to]))
                    .collect();
                lines.push(format!(
                    "  {} names {}",
                    shown(&graph.files[file]),
                    names.join(", ")
                ));
            }
            report.push(lines.join("\n"));
        }
    }
    // The reader sees real paths: hundreds of edges across the crates.
    assert!(
        edges > 150,
        "only {edges} edges found: the path reader is broken"
    );
    assert!(report.is_empty(), "{}", report.join("\n"));
}

/// The paths of `code`, in `module` of a crate whose modules are `by_module`, that
/// name something under the crate's module `into` (`pub use` re-exports included).
fn paths_into(
    module: &[String],
    code: &str,
    by_module: &BTreeMap<&[String], usize>,
    into: &str,
) -> Vec<String> {
    paths(&tokens(code), false)
        .into_iter()
        .filter(|path| {
            absolute(module, path, by_module).is_some_and(|a| a.first().is_some_and(|m| m == into))
        })
        .map(|path| path.join("::"))
        .collect()
}

/// control's `service` is the layer under `api`: it takes and returns its own types (or
/// `policy`'s) and `api` converts to and from the wire, so no file of
/// `control/src/service/` (nor `service.rs`) names anything of `crate::api` — else the
/// two folders would be knotted together, whatever the file-level graph says.
#[test]
fn controls_service_layer_names_nothing_of_its_api() {
    let sources = sources("control");
    let by_module: BTreeMap<&[String], usize> = sources
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.root)
        .map(|(i, s)| (s.module.as_slice(), i))
        .collect();
    // The check itself, on small pieces of code: one that finds nothing would pass.
    let create: Vec<String> = ["service", "create"].map(String::from).to_vec();
    let knotted = blank_comments_and_strings(
        "use crate::api::wire::CreateRequest;\nsuper::super::api::http::json();\n\
         pub use crate::api::wire::{A, B};\n// crate::api::in_a_comment\nuse crate::model::Session;\n",
    );
    assert_eq!(
        paths_into(&create, &knotted, &by_module, "api"),
        [
            "crate::api::wire::CreateRequest",
            "super::super::api::http::json",
            "crate::api::wire::A",
            "crate::api::wire::B"
        ]
    );
    let mut files = 0;
    let mut knots = Vec::new();
    for source in sources
        .iter()
        .filter(|s| s.module.first().is_some_and(|m| m == "service"))
    {
        files += 1;
        for path in paths_into(&source.module, &source.code, &by_module, "api") {
            knots.push(format!("{} names {path}", shown(&source.path)));
        }
    }
    assert!(files > 10, "only {files} files of control's service found");
    assert!(
        knots.is_empty(),
        "control's service names its api:\n{}",
        knots.join("\n")
    );
}

/// control's service types: `Control` itself, and the resources it assembles.
const CONTROL_SERVICE_TYPES: [&str; 10] = [
    "Control",
    "Sessions",
    "SignIns",
    "Shares",
    "Peers",
    "RecordingLinks",
    "Targets",
    "Users",
    "Workspaces",
    "Grants",
];

/// The type names `tokens` gives an `impl` block to: `impl Name`, `impl Trait for Name`.
fn implemented(tokens: &[Token]) -> Vec<String> {
    let ident = |k: usize| match tokens.get(k) {
        Some(Token::Ident(s)) => Some(s.as_str()),
        _ => None,
    };
    let mut out = Vec::new();
    for i in 0..tokens.len() {
        if ident(i) != Some("impl") {
            continue;
        }
        // The type is the path after `impl`, or after the `for` before the block opens;
        // a path (`crate::service::Grants`) names its last segment.
        let path_end = |mut k: usize| {
            while tokens.get(k + 1) == Some(&Token::PathSep) && ident(k + 2).is_some() {
                k += 2;
            }
            ident(k)
        };
        let mut k = i + 1;
        let mut name = path_end(k);
        while k < tokens.len() && tokens[k] != Token::Open && tokens[k] != Token::Semi {
            if ident(k) == Some("for") {
                name = path_end(k + 1);
            }
            k += 1;
        }
        if let Some(name) = name {
            out.push(name.to_string());
        }
    }
    out
}

/// control's service is one type per resource (`Sessions`, `SignIns`, `Grants`, …), each
/// beside the operations it holds, and `Control` only assembles them
/// (`service/handle.rs`): no other file adds methods to `Control`, no file outside
/// `service/` adds methods to a service type (`api/authz.rs` calls `Grants`), and the
/// background passes — the reconciler, the culler, the volume pass — are handed the
/// resources they use, never the whole service.
#[test]
fn controls_service_is_split_per_resource_and_its_passes_take_only_their_handles() {
    // The check itself, on small pieces of code: one that finds nothing would pass.
    let code = blank_comments_and_strings(
        "impl Control {\n}\n// impl Sessions\nlet s = \"impl Grants\";\n\
         impl<'a> Display for Shown<'a> {}\nimpl Clone for Users {}\nfor x in y {}\n\
         impl crate::service::Grants {}\n",
    );
    assert_eq!(
        implemented(&tokens(&code)),
        ["Control", "Shown", "Users", "Grants"]
    );

    let src = workspace().join("control").join("src");
    let mut in_handle = 0;
    let mut passes = 0;
    let mut wrong = Vec::new();
    for source in sources("control") {
        let relative = source.path.strip_prefix(&src).expect("under src");
        let relative = relative.to_string_lossy().replace('\\', "/");
        let toks = tokens(&source.code);
        for name in implemented(&toks) {
            if relative == "service/handle.rs" && name == "Control" {
                in_handle += 1;
            } else if name == "Control"
                || (!relative.starts_with("service")
                    && CONTROL_SERVICE_TYPES.contains(&name.as_str()))
            {
                wrong.push(format!(
                    "{} has an `impl {name}` block",
                    shown(&source.path)
                ));
            }
        }
        if ["reconcile.rs", "cull.rs", "volumes.rs"].contains(&relative.as_str()) {
            passes += 1;
            if toks.contains(&Token::Ident("Control".to_string())) {
                wrong.push(format!("{} names `Control`", shown(&source.path)));
            }
        }
    }
    assert_eq!(
        in_handle, 1,
        "`Control` is assembled in control/src/service/handle.rs"
    );
    assert_eq!(
        passes, 3,
        "reconcile.rs, cull.rs and volumes.rs not all found"
    );
    assert!(
        wrong.is_empty(),
        "control's service is one type per resource, assembled in service/handle.rs:\n{}",
        wrong.join("\n")
    );
}

/// The reader of paths itself, on small pieces of code: a checker that finds nothing
/// would pass the tests above.
#[test]
fn the_path_reader_sees_use_trees_super_and_child_paths_but_not_comments_or_strings() {
    let code = blank_comments_and_strings(
        "use crate::a::{b::C, d};\n// crate::ignored::x\nlet s = \"crate::no::path\";\nsuper::e::f();\n\
         #[cfg(test)]\nmod tests { use crate::only_tests::X; }\nmod decl;\nlet c = '{';\nchild::g();\n",
    );
    let code = without_tests(&code);
    let found = paths(&tokens(&code), false);
    let want: Vec<Vec<String>> = [
        vec!["crate", "a", "b", "C"],
        vec!["crate", "a", "d"],
        vec!["super", "e", "f"],
        vec!["child", "g"],
    ]
    .iter()
    .map(|p| p.iter().map(|s| s.to_string()).collect())
    .collect();
    assert_eq!(found, want);
    assert_eq!(lines_of_code(&code), 6, "{code:?}");
    let root = paths(
        &tokens("pub use self::x::Y;\npub(crate) use super::z;\nuse a::b;"),
        true,
    );
    assert_eq!(root, vec![vec!["a".to_string(), "b".to_string()]]);
    // Lines of a string are lines of code; a comment's are not; a test item's neither,
    // its strings' lines included.
    let text = "let page = \"<p>\n<p>\n<p>\";\n// prose\n#[cfg(test)]\nmod t { const S: &str = \"a\nb\"; }\n";
    let tests = test_lines(&blank_comments_and_strings(text));
    let counted = blank_comments(text)
        .lines()
        .enumerate()
        .filter(|(n, l)| !l.trim().is_empty() && !tests.contains(n))
        .count();
    assert_eq!(counted, 3, "{tests:?}");
}

/// A code map that names moved files misleads: every workspace path ARCHITECTURE.md
/// names (`gateway/src/proxy/mod.rs`, `deploy/up`, …) exists.
#[test]
fn every_path_the_architecture_names_exists() {
    let text =
        std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let tops = [
        "policy/", "config/", "control/", "gateway/", "cli/", "tests/", "deploy/", "docs/",
    ];
    let mut named = 0;
    let mut missing = Vec::new();
    for word in text.split(|c: char| c.is_whitespace() || "`()[],;|".contains(c)) {
        // `gateway/src/state.rs::Gateway` names a file and an item in it.
        let path = word.split("::").next().unwrap_or_default();
        let path = path.split('#').next().unwrap_or_default();
        let path = path.trim_end_matches("'s").trim_end_matches(['.', ':']);
        if path.contains(['<', '*', '{']) {
            continue;
        }
        if !tops.iter().any(|t| path.starts_with(t)) {
            // A crate-relative source path (`proxy/flow.rs`, `src/bin/dockgate.rs`):
            // it must be some crate's file.
            if path.ends_with(".rs") && path.contains('/') && !path.starts_with('.') {
                named += 1;
                let found = CRATES.iter().chain(&["tests"]).any(|k| {
                    let krate = workspace().join(k);
                    krate.join(path).exists() || krate.join("src").join(path).exists()
                });
                if !found {
                    missing.push(path.to_string());
                }
            }
            continue;
        }
        named += 1;
        // The harness's row names its tests from its own directory (`tests/authz.rs`).
        if !workspace().join(path).exists() && !workspace().join("tests").join(path).exists() {
            missing.push(path.to_string());
        }
    }
    assert!(named > 40, "only {named} paths found in ARCHITECTURE.md");
    missing.dedup();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}

/// The cells of a Markdown table's rows: every line that starts with `|`, split on the
/// `|`s a renderer splits on (all but `\|`), each cell trimmed, with its line number.
fn table_cells(text: &str) -> Vec<(usize, String)> {
    let mut cells = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let Some(row) = line.trim().strip_prefix('|') else {
            continue;
        };
        let row = row.strip_suffix('|').unwrap_or(row);
        let mut cell = String::new();
        let mut escaped = false;
        for c in row.chars().chain(std::iter::once('|')) {
            if c == '|' && !escaped {
                cells.push((n + 1, cell.trim().to_string()));
                cell.clear();
            } else {
                cell.push(c);
            }
            escaped = c == '\\' && !escaped;
        }
    }
    cells
}

/// A longer cell wraps past two lines of a rendered table, and a reader looking for where
/// a thing lives has to read a paragraph to find it; the detail belongs in the prose
/// above the table.
const MAX_TABLE_CELL_CHARS: usize = 240;

/// ARCHITECTURE.md's tables (the features, the entry points, the red lines) say where
/// to look in a line or two: no cell is longer than 240 characters.
#[test]
fn every_cell_of_the_architecture_tables_fits_in_two_lines() {
    let sample = format!(
        "| a | b \\| c |\n| x | {} |\ntext | not a row",
        "y".repeat(241)
    );
    let cells: Vec<String> = table_cells(&sample).into_iter().map(|(_, c)| c).collect();
    assert_eq!(cells[..3], ["a", "b \\| c", "x"], "{cells:?}");
    assert_eq!((cells.len(), cells[3].len()), (4, 241));

    let text =
        std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let cells = table_cells(&text);
    assert!(cells.len() > 100, "only {} table cells found", cells.len());
    let long: Vec<String> = cells
        .iter()
        .filter(|(_, c)| c.chars().count() > MAX_TABLE_CELL_CHARS)
        .map(|(n, c)| format!("line {n}: {} characters: {c:.60}…", c.chars().count()))
        .collect();
    assert!(
        long.is_empty(),
        "ARCHITECTURE.md has table cells over {MAX_TABLE_CELL_CHARS} characters \
         (move the detail into the prose above the table):\n{}",
        long.join("\n")
    );
}

/// Every file under `dir` (recursively) whose name ends in `suffix`, in order.
fn files_ending(dir: &Path, suffix: &str, into: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files_ending(&path, suffix, into);
        } else if path.to_string_lossy().ends_with(suffix) {
            into.push(path);
        }
    }
}

/// The lines of a Markdown text outside fenced code blocks, with their line numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            lines.push((n + 1, line));
        }
    }
    lines
}

/// A line with its inline code spans (`` `…` ``, ``` ``…`` ```) removed, so that what
/// code shows is not read as a link.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].len() - rest[start..].trim_start_matches('`').len();
        let fence = &rest[start..start + ticks];
        match rest[start + ticks..].find(fence) {
            Some(end) => rest = &rest[start + ticks + end + ticks..],
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The targets of a Markdown line's inline links and images: what `[text](…)` points at,
/// without a title.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut targets = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let end = rest.find([')', ' ']).unwrap_or(rest.len());
        targets.push(rest[..end].to_string());
        rest = &rest[end..];
    }
    targets
}

/// A heading's text as a reader sees it: links reduced to their text, code's backticks
/// and emphasis dropped.
fn heading_text(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading.trim().trim_end_matches('#').trim();
    while let Some(at) = rest.find("](") {
        text.push_str(&rest[..at]);
        rest = &rest[at + 2..];
        rest = &rest[rest.find(')').map_or(rest.len(), |e| e + 1)..];
    }
    text.push_str(rest);
    text.chars().filter(|c| !"[`*".contains(*c)).collect()
}

/// The anchor GitHub gives a heading: lower case, every character but letters, digits,
/// `-`, `_` and spaces dropped, spaces made `-`.
fn slug(heading: &str) -> String {
    heading_text(heading)
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The headings of a Markdown text (outside code blocks), as written.
fn headings(text: &str) -> Vec<String> {
    prose_lines(text)
        .into_iter()
        .filter_map(|(_, line)| {
            let hashes = line.len() - line.trim_start_matches('#').len();
            let text = line[hashes..].strip_prefix(' ')?;
            (1..=6).contains(&hashes).then(|| heading_text(text))
        })
        .collect()
}

/// The anchors of a Markdown text's headings, a repeated one numbered as GitHub does
/// (`faults`, `faults-1`).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for heading in headings(text) {
        let slug = slug(&heading);
        let count = seen.entry(slug.clone()).or_default();
        anchors.insert(match *count {
            0 => slug,
            n => format!("{slug}-{n}"),
        });
        *count += 1;
    }
    anchors
}

/// Where a relative link of `page` fails to lead: a missing file, or an anchor no heading
/// of the Markdown file it names has. Links with a scheme (`https:`, `mailto:`) are not
/// followed.
fn broken_links(page: &Path, text: &str) -> Vec<String> {
    let mut broken = Vec::new();
    for (n, line) in prose_lines(text) {
        for target in link_targets(line) {
            if target.is_empty()
                || target
                    .split_once(':')
                    .is_some_and(|(s, _)| !s.contains('/'))
            {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if path.is_empty() {
                page.to_path_buf()
            } else {
                page.parent().expect("a page's directory").join(path)
            };
            let at = format!("{}:{n}: {target}", shown(page));
            if !file.exists() {
                broken.push(format!("{at}: no such file"));
            } else if !anchor.is_empty() && file.extension().is_some_and(|e| e == "md") {
                let linked = std::fs::read_to_string(&file).expect("a Markdown file");
                if !anchors(&linked).contains(anchor) {
                    broken.push(format!("{at}: no heading #{anchor} there"));
                }
            }
        }
    }
    broken
}

#[test]
fn the_link_reader_follows_files_and_anchors_and_ignores_code() {
    assert_eq!(
        slug("dockgate: nobody but dockgate holds the Docker socket"),
        "dockgate-nobody-but-dockgate-holds-the-docker-socket"
    );
    assert_eq!(
        slug("Behind a front proxy (nginx, Caddy)"),
        "behind-a-front-proxy-nginx-caddy"
    );
    assert_eq!(slug("`deploy/up`"), "deployup");
    assert_eq!(slug("termgate — design"), "termgate--design");
    assert_eq!(
        link_targets("see [a](x.md#b) and [`c`](../d/ \"t\"), not `[e](f)`"),
        ["x.md#b", "../d/"]
    );
    let text = "# Page\n\n## Faults\n\n```sh\n# not a heading\n[no](link.md)\n```\n\n## Faults\n";
    assert_eq!(
        anchors(text).into_iter().collect::<Vec<_>>(),
        ["faults", "faults-1", "page"]
    );

    let dir = tempfile::tempdir().expect("a temporary directory");
    let page = dir.path().join("page.md");
    std::fs::write(dir.path().join("other.md"), "# Other\n\n## Some part\n").expect("write");
    let text = "[ok](other.md#some-part) [ok](#top) [ok](https://example.com/x#y)\n\
                [gone](missing.md) [bad](other.md#no-such-part) [bad](#nowhere)\n\n# Top\n";
    std::fs::write(&page, text).expect("write");
    let broken = broken_links(&page, text);
    assert_eq!(broken.len(), 3, "{broken:#?}");
    assert!(
        broken[0].ends_with("missing.md: no such file"),
        "{broken:#?}"
    );
    assert!(broken[1].contains("#no-such-part"), "{broken:#?}");
    assert!(broken[2].contains("#nowhere"), "{broken:#?}");
}

/// A moved page or a renamed heading leaves links that lead nowhere: every relative link
/// of README.md, ARCHITECTURE.md and the pages under docs/ and deploy/ names a file that
/// exists, and its `#anchor` into a Markdown file a heading there.
#[test]
fn every_relative_link_of_the_documentation_leads_somewhere() {
    let mut pages = vec![
        workspace().join("README.md"),
        workspace().join("ARCHITECTURE.md"),
    ];
    files_ending(&workspace().join("docs"), ".md", &mut pages);
    files_ending(&workspace().join("deploy"), ".md", &mut pages);
    let mut links = 0;
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("a page");
        links += prose_lines(&text)
            .iter()
            .map(|(_, line)| link_targets(line).len())
            .sum::<usize>();
        broken.extend(broken_links(page, &text));
    }
    assert!(
        links > 100,
        "only {links} links found in {} pages",
        pages.len()
    );
    assert!(
        broken.is_empty(),
        "links that lead nowhere:\n{}",
        broken.join("\n")
    );
}

/// A reference to a page's section, as code, scripts and configuration make it:
/// `docs/hosts.md "More than one host"`, `README "Two commands"`.
struct SectionReference {
    /// The file and line it is on.
    at: String,
    /// The page as written (`README` or `docs/….md`).
    page: String,
    /// The section's name, a comment's line breaks (and `//!`, `///`, `#`, `--` at their
    /// starts) joined into one line.
    name: String,
}

/// The section references of a file's text.
fn section_references(file: &Path, text: &str) -> Vec<SectionReference> {
    let mut found = Vec::new();
    let mut rest = text;
    let mut offset = 0;
    while let Some(at) = rest.find('"') {
        let before = &rest[..at];
        let quote_at = offset + at;
        rest = &rest[at + 1..];
        offset = quote_at + 1;
        // `<page> "…"`, `<page>, "…"`, `<page>: "…"`, or with an escaped quote in a string.
        let before = before.strip_suffix('\\').unwrap_or(before);
        let Some(before) = before.strip_suffix(' ') else {
            continue;
        };
        let before = before.trim_end_matches([',', ':']);
        let page = before
            .rsplit(|c: char| c.is_whitespace() || "(`[".contains(c))
            .next()
            .unwrap_or_default();
        if page != "README" && !(page.starts_with("docs/") && page.ends_with(".md")) {
            continue;
        }
        let Some(end) = rest.find('"') else {
            continue;
        };
        let name = rest[..end].trim_end_matches('\\');
        let name: Vec<&str> = name
            .lines()
            .map(|l| l.trim().trim_start_matches(['/', '!', '#', '-']).trim())
            .collect();
        let line = text[..quote_at].lines().count();
        found.push(SectionReference {
            at: format!("{}:{line}", shown(file)),
            page: page.to_string(),
            name: name.join(" "),
        });
        rest = &rest[end + 1..];
        offset += end + 1;
    }
    found
}

/// Whether `name` names one of `headings`: the heading itself, or its title before a
/// colon or a parenthesis (`dockgate` for "dockgate: nobody but dockgate holds …").
fn names_heading(headings: &[String], name: &str) -> bool {
    headings.iter().any(|h| {
        h == name
            || h.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(':') || rest.starts_with(" ("))
    })
}

#[test]
fn the_reference_reader_joins_wrapped_comments_and_escaped_quotes() {
    let text = "//! keys (docs/hosts.md \"More than one\n//! host\"): x\n\
                # (README, \"Two commands\") and \"not a reference\"\n\
                die \"… again (docs/operators.md \\\"Sessions under gVisor\\\")\"\n";
    let found = section_references(Path::new("x.rs"), text);
    let found: Vec<(&str, &str)> = found
        .iter()
        .map(|r| (r.page.as_str(), r.name.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            ("docs/hosts.md", "More than one host"),
            ("README", "Two commands"),
            ("docs/operators.md", "Sessions under gVisor"),
        ]
    );
    let headings = [
        "dockgate: nobody holds it".to_string(),
        "Behind a proxy (nginx)".to_string(),
    ];
    assert!(names_heading(&headings, "dockgate"));
    assert!(names_heading(&headings, "Behind a proxy"));
    assert!(!names_heading(&headings, "Behind"));
    assert!(!names_heading(&headings, "dock"));
}

/// Code, scripts and configuration send readers to a section by name
/// (`docs/hosts.md "More than one host"`): every such reference in the crates' Rust
/// files, deploy/ and the example configuration names a heading of that page.
#[test]
fn every_section_the_code_and_scripts_name_exists() {
    let mut files = Vec::new();
    for dir in CRATES.iter().chain(&["tests"]) {
        files_ending(&workspace().join(dir), ".rs", &mut files);
    }
    files_ending(&workspace().join("deploy"), "", &mut files);
    files.push(workspace().join("config/termgate.example.toml"));
    let mut references = 0;
    let mut missing = Vec::new();
    for file in &files {
        // This file's own samples of references are not references.
        if file.ends_with("tests/tests/structure.rs") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(file) else {
            continue; // not text
        };
        for SectionReference { at, page, name } in section_references(file, &text) {
            references += 1;
            let path = if page == "README" { "README.md" } else { &page };
            let headings = std::fs::read_to_string(workspace().join(path))
                .map(|t| headings(&t))
                .unwrap_or_default();
            if !names_heading(&headings, &name) {
                missing.push(format!("{at}: {page} \"{name}\""));
            }
        }
    }
    assert!(
        references > 30,
        "only {references} section references found"
    );
    assert!(
        missing.is_empty(),
        "references to sections that do not exist:\n{}",
        missing.join("\n")
    );
}
