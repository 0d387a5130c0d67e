//! The source tree keeps its shape: layers reach only downwards, the runtime's modules import
//! each other without cycles, and no function in `src/` runs past 80 lines.
//!
//! These read `src/` as text: `crate::layer::module` paths on lines that are not comments.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first: each may use the ones before it, never the ones after.
const LAYERS: &[&str] = &[
    "sys",
    "model",
    "runtime",
    "permission",
    "agent",
    "providers",
    "builtins",
    "claude",
    "nats",
    "service",
    "benchmark",
];

/// Longest function body allowed, in lines.
const MAX_FN_LINES: usize = 80;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The code of a file: lines with comments and string contents blanked, so that only real
/// paths and braces are seen.
fn code_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_block_comment = false;
    let mut in_string = false;
    for line in text.lines() {
        let mut code = String::new();
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            let next = chars.get(i + 1).copied();
            if in_block_comment {
                if c == '*' && next == Some('/') {
                    in_block_comment = false;
                    i += 1;
                }
            } else if in_string {
                if c == '\\' {
                    i += 1;
                } else if c == '"' {
                    in_string = false;
                    code.push('"');
                }
            } else if c == '/' && next == Some('/') {
                break;
            } else if c == '/' && next == Some('*') {
                in_block_comment = true;
                i += 1;
            } else if c == '"' {
                in_string = true;
                code.push('"');
            } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
                // A char literal such as '{'.
                i += 2;
            } else if c == '\'' && next == Some('\\') {
                while i < chars.len() && !(chars[i] == '\'' && i > 0 && chars[i - 1] != '\\') {
                    i += 1;
                }
                i += 1;
                continue;
            } else {
                code.push(c);
            }
            i += 1;
        }
        out.push(code);
    }
    out
}

/// The layer and module a file belongs to, e.g. `src/runtime/dispatch.rs` → (`runtime`,
/// `dispatch`).
fn place(path: &Path) -> (String, String) {
    let rel = path.strip_prefix(src()).expect("under src");
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    let layer = parts[0].clone();
    let module = parts.get(1).cloned().unwrap_or_default();
    (layer, module)
}

/// Every `crate::a::b` a line names, as (a, b).
fn crate_paths(line: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let mut segments = rest.split("::").map(|s| {
            s.chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect::<String>()
        });
        let first = segments.next().unwrap_or_default();
        let second = segments.next().unwrap_or_default();
        found.push((first, second));
    }
    found
}

fn sources() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("readable");
            (p, text)
        })
        .collect()
}

#[test]
fn layers_reach_only_downwards() {
    let rank = |layer: &str| LAYERS.iter().position(|l| *l == layer);
    let mut offenders = Vec::new();
    for (path, text) in sources() {
        let (layer, _) = place(&path);
        let Some(own) = rank(&layer) else { continue };
        for (n, line) in code_lines(&text).iter().enumerate() {
            for (used, _) in crate_paths(line) {
                if let Some(theirs) = rank(&used) {
                    if theirs > own {
                        offenders.push(format!(
                            "{}:{}: `{layer}` uses `{used}`, a higher layer",
                            path.display(),
                            n + 1
                        ));
                    }
                }
            }
        }
    }
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}

#[test]
fn the_runtime_modules_import_each_other_without_cycles() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, text) in sources() {
        let (layer, module) = place(&path);
        if layer != "runtime" || module == "mod" {
            continue;
        }
        let edges = graph.entry(module.clone()).or_default();
        for line in code_lines(&text) {
            for (l, m) in crate_paths(&line) {
                if l == "runtime" && !m.is_empty() && m != module {
                    edges.insert(m);
                }
            }
        }
    }
    assert!(graph.len() > 10, "the runtime's modules were found");
    // Depth-first search for a back edge; report the cycle it closes.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        cycles: &mut Vec<String>,
    ) {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            cycles.push(cycle.join(" → "));
            return;
        }
        if !done.insert(node.to_owned()) {
            return;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            visit(next, graph, path, done, cycles);
        }
        path.pop();
    }
    let mut cycles = Vec::new();
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        visit(node, &graph, &mut Vec::new(), &mut done, &mut cycles);
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn no_function_in_src_runs_past_80_lines() {
    let mut offenders = Vec::new();
    for (path, text) in sources() {
        let lines = code_lines(&text);
        let mut i = 0;
        while i < lines.len() {
            let line = lines[i].trim_start();
            let is_fn = line.split_whitespace().take(6).any(|w| w == "fn")
                && !line.starts_with("//")
                && !line.contains("fn(");
            if !is_fn {
                i += 1;
                continue;
            }
            // Find the body's opening brace (the signature may span lines) and its match.
            let start = i;
            let mut depth = 0i32;
            let mut opened = false;
            let mut j = i;
            'scan: while j < lines.len() {
                for c in lines[j].chars() {
                    match c {
                        '{' => {
                            depth += 1;
                            opened = true;
                        }
                        '}' => depth -= 1,
                        ';' if !opened && depth == 0 => break 'scan,
                        _ => {}
                    }
                    if opened && depth == 0 {
                        break 'scan;
                    }
                }
                j += 1;
            }
            let length = j.saturating_sub(start) + 1;
            if opened && length > MAX_FN_LINES {
                offenders.push(format!(
                    "{}:{}: {} lines: {}",
                    path.display(),
                    start + 1,
                    length,
                    line.trim()
                ));
            }
            // Functions nested in this one are inside its length already.
            i = if opened { j + 1 } else { i + 1 };
        }
    }
    assert!(
        offenders.is_empty(),
        "functions over {MAX_FN_LINES} lines:\n{}",
        offenders.join("\n")
    );
}
