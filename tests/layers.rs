//! The layers of the library (`docs/architecture.md`, "Layers"), checked from its source: every
//! `use crate::…` or `use super::…` path and every inline `crate::…` path of a module (its unit
//! tests left out) is an import of the module it names. The test fails when a ground-floor module
//! (the error type, the statistics, the FFI, the device and engine names, the vocabulary, the
//! record of a rehearsal's stand-ins, the results contract) imports a layer above it, or when an import circle spans more than one
//! folder.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The binary's own modules: `crate::` there is the binary, not the library.
const BINARY: [&str; 3] = ["main", "cli", "commands"];

/// Modules at the ground floor and the modules each may import (an entry ending in `::` covers a
/// folder).
const GROUND_FLOOR: [(&str, &[&str]); 8] = [
    ("error", &[]),
    ("stats", &[]),
    ("ffi", &["error"]),
    ("device", &["error"]),
    ("engine", &["error"]),
    ("vocabulary::", &["error", "vocabulary::"]),
    ("standin", &["error", "ffi", "vocabulary::"]),
    ("results::", &["error", "stats", "engine", "device", "vocabulary::", "results::"]),
];

/// The library's modules by path (`bench::plan`; `""` for the crate root), each with its file.
fn modules() -> BTreeMap<String, PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = BTreeMap::new();
    let mut folders = vec![src.clone()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(&src).unwrap().with_extension("");
                let mut segments: Vec<String> =
                    relative.iter().map(|s| s.to_string_lossy().into_owned()).collect();
                if segments.last().is_some_and(|s| s == "mod" || s == "lib") {
                    segments.pop();
                }
                if !segments.first().is_some_and(|s| BINARY.contains(&s.as_str())) {
                    modules.insert(segments.join("::"), path);
                }
            }
        }
    }
    modules
}

/// The source of a module without its comments and its unit tests.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap();
    text.lines().map(|line| line.split("//").next().unwrap()).collect::<Vec<_>>().join("\n")
}

/// The paths a `use` tree names: `a::{b, c::{d, e}}` gives `a::b`, `a::c::d` and `a::c::e`
/// (`self` the prefix itself).
fn expand(tree: &str) -> Vec<String> {
    let Some(open) = tree.find('{') else { return vec![tree.to_owned()] };
    let (prefix, inner) = (&tree[..open], &tree[open + 1..tree.rfind('}').unwrap()]);
    let (mut parts, mut depth, mut part) = (Vec::new(), 0, String::new());
    for c in inner.chars() {
        match c {
            ',' if depth == 0 => parts.push(std::mem::take(&mut part)),
            '{' | '}' => {
                depth += if c == '{' { 1 } else { -1 };
                part.push(c);
            }
            _ => part.push(c),
        }
    }
    parts.push(part);
    let parts = parts.into_iter().filter(|p| !p.is_empty());
    parts
        .flat_map(|p| expand(&p))
        .map(|p| if p == "self" { prefix.trim_end_matches("::").to_owned() } else { format!("{prefix}{p}") })
        .collect()
}

/// The module a path names from `module`: its longest prefix that is a module, after resolving
/// `crate::` and `super::`.
fn target(module: &str, path: &str, modules: &BTreeMap<String, PathBuf>) -> Option<String> {
    let mut segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut resolved: Vec<&str> = Vec::new();
    if segments.first() == Some(&"super") {
        resolved = module.split("::").filter(|s| !s.is_empty()).collect();
        while segments.first() == Some(&"super") {
            resolved.pop();
            segments.remove(0);
        }
    } else if segments.first() == Some(&"crate") {
        segments.remove(0);
    } else {
        return None;
    }
    resolved.extend(segments);
    (1..=resolved.len()).rev().map(|n| resolved[..n].join("::")).find(|m| modules.contains_key(m))
}

/// Every module `module` imports (itself left out).
fn imports(module: &str, code: &str, modules: &BTreeMap<String, PathBuf>) -> BTreeSet<String> {
    let flat: String = code.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut paths: Vec<String> = Vec::new();
    for statement in flat.split("use ").skip(1) {
        let tree = statement.split(';').next().unwrap().replace(' ', "");
        if tree.starts_with("crate::") || tree.starts_with("super::") {
            paths.extend(expand(&tree));
        }
    }
    for (at, _) in flat.match_indices("crate::") {
        let rest = &flat[at..];
        let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).unwrap_or(rest.len());
        paths.push(rest[..end].trim_end_matches(':').to_owned());
    }
    paths.iter().filter_map(|p| target(module, p, modules)).filter(|m| m != module).collect()
}

/// The import graph of the library.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules();
    modules.iter().map(|(module, path)| (module.clone(), imports(module, &code(path), &modules))).collect()
}

/// The folder a module is in: its first segment (a file at the top is a folder of its own).
fn folder(module: &str) -> &str {
    module.split("::").next().unwrap()
}

/// Whether `module` is `entry`, or inside it where `entry` ends in `::`.
fn covers(entry: &str, module: &str) -> bool {
    match entry.strip_suffix("::") {
        Some(folder) => module == folder || module.starts_with(entry),
        None => module == entry,
    }
}

/// The strongly connected components of `graph` (Tarjan's algorithm, iterative over the stack
/// of modules being explored).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct State<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        components: Vec<BTreeSet<String>>,
    }
    fn visit<'g>(state: &mut State<'g>, v: &'g str) {
        let n = state.index.len();
        state.index.insert(v, n);
        state.low.insert(v, n);
        state.stack.push(v);
        for w in &state.graph[v] {
            let w = w.as_str();
            if !state.index.contains_key(w) {
                visit(state, w);
                let low = state.low[v].min(state.low[w]);
                state.low.insert(v, low);
            } else if state.stack.contains(&w) {
                let low = state.low[v].min(state.index[w]);
                state.low.insert(v, low);
            }
        }
        if state.low[v] == state.index[v] {
            let at = state.stack.iter().rposition(|&m| m == v).unwrap();
            state.components.push(state.stack.split_off(at).into_iter().map(str::to_owned).collect());
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        components: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v.as_str()) {
            visit(&mut state, v);
        }
    }
    state.components.into_iter().filter(|c| c.len() > 1).collect()
}

#[test]
fn the_ground_floor_imports_nothing_above_it() {
    let graph = graph();
    assert!(graph.len() > 80 && graph["bench::plan"].contains("tricks"), "the scan finds the modules");
    let mut upward = BTreeSet::new();
    for (module, imported) in &graph {
        let Some((_, allowed)) = GROUND_FLOOR.iter().find(|(entry, _)| covers(entry, module)) else {
            continue;
        };
        for target in imported {
            if !allowed.iter().any(|entry| covers(entry, target)) {
                upward.insert((module.clone(), target.clone()));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports of the ground floor that no layer allows: {upward:?} (docs/architecture.md, \"Layers\")"
    );
}

#[test]
fn no_import_circle_spans_more_than_one_folder() {
    let across: Vec<BTreeSet<String>> = circles(&graph())
        .into_iter()
        .filter(|c| c.iter().map(|m| folder(m)).collect::<BTreeSet<_>>().len() > 1)
        .collect();
    assert!(
        across.is_empty(),
        "import circles across folders (docs/architecture.md, \"Layers\"): {across:?}"
    );
}

#[test]
fn use_trees_and_super_paths_name_the_modules_they_import() {
    let modules: BTreeMap<String, PathBuf> =
        ["a", "a::b", "a::b::c", "d"].into_iter().map(|m| (m.to_owned(), PathBuf::new())).collect();
    let code =
        "use crate::a::{b::{self, c::Thing}, Other};\nuse super::super::d::f;\nlet x = crate::d::g(1);";
    let found = imports("a::b::c", code, &modules);
    assert_eq!(found.into_iter().collect::<Vec<_>>(), ["a", "a::b", "d"]);
    let graph: BTreeMap<String, BTreeSet<String>> = [("a", &["b"][..]), ("b", &["a", "c"]), ("c", &[])]
        .into_iter()
        .map(|(m, to)| (m.to_owned(), to.iter().map(|t| (*t).to_owned()).collect()))
        .collect();
    let found = circles(&graph);
    assert_eq!(found, [BTreeSet::from(["a".to_owned(), "b".to_owned()])]);
}
