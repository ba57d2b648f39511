//! The layers of the library (`docs/architecture.md`, "Layers"), checked from its source.
//!
//! A module imports every module a path of its code names, its unit tests left out: the paths of
//! its `use` trees and its inline paths, from the crate's root (`crate::`), its ancestors
//! (`super::`), itself (`self::`) or its child modules (`html::render` in `report`). A path to an
//! item that a module only re-exports (`crate::report::Effect`, which `report` has from
//! `report::model` by a `use`) is an import of the module it comes from.
//!
//! The tests fail when:
//! - a module imports a layer above its own ([`LAYERS`], bottom first; [`UPWARD`] lists the one
//!   import the architecture allows upward), or a module of the library is in no layer;
//! - a ground-floor module (the error type, the statistics, the FFI, the device and engine names,
//!   the vocabulary, the record of a rehearsal's stand-ins, the results contract, the terminal's
//!   width) imports more of the ground floor than [`GROUND_FLOOR`] allows it;
//! - an import circle spans more than one folder (a folder is a top-level module: `summary.rs`
//!   and the modules in `summary/` are one).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The binary's own modules: `crate::` there is the binary, not the library.
const BINARY: [&str; 3] = ["main", "cli", "commands"];

/// The layers, bottom first, each a name and its modules (an entry ending in `::` covers a
/// folder). A module imports only from its own layer and the layers below it.
const LAYERS: [(&str, &[&str]); 5] = [
    (
        "the ground floor",
        &["error", "stats", "ffi", "device", "engine", "vocabulary::", "standin", "results::", "terminal"],
    ),
    (
        "facts and measurements",
        &["hardware", "measure::", "tricks::", "analysis", "diagnosis::", "factorial::"],
    ),
    ("models, training and data", &["workloads::", "train::", "optim::", "data::", "distributed::"]),
    ("the benchmark", &["bench::", "parity::", "crosscheck::", "environment"]),
    ("output", &["report::", "summary::"]),
];

/// The imports that go up a layer: the module and the entry it may import.
const UPWARD: [(&str, &str); 1] = [("hardware", "distributed::")];

/// Modules at the ground floor and the modules each may import (an entry ending in `::` covers a
/// folder).
const GROUND_FLOOR: [(&str, &[&str]); 9] = [
    ("error", &[]),
    ("stats", &[]),
    ("terminal", &[]),
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
/// (`self` the prefix itself); a renamed path keeps its new name after an `@` (`a::b@c`).
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

/// Every path a module's `use` declarations name, with the name each binds (its last segment, or
/// the one `as` gives it; `*` for a glob).
fn uses(code: &str) -> Vec<(String, String)> {
    let flat: String = code.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut found = Vec::new();
    for (at, _) in flat.match_indices("use ") {
        if flat[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let tree = flat[at + 4..].split(';').next().unwrap().replace(" as ", "@").replace(' ', "");
        if !tree.chars().all(|c| c.is_alphanumeric() || "_:{},*@".contains(c))
            || tree.matches('{').count() != tree.matches('}').count()
        {
            continue;
        }
        for leaf in expand(&tree) {
            let (path, alias) = leaf.split_once('@').map_or((leaf.as_str(), None), |(p, a)| (p, Some(a)));
            let path = path.strip_suffix("::self").unwrap_or(path);
            let name = alias.unwrap_or_else(|| path.rsplit("::").next().unwrap());
            found.push((path.to_owned(), name.to_owned()));
        }
    }
    found
}

/// What the scan knows of the library: its modules, and what each one's `use`s bind.
struct Library {
    modules: BTreeSet<String>,
    uses: BTreeMap<String, Vec<(String, String)>>,
}

impl Library {
    /// The library whose modules have the code `code`.
    fn of(code: &BTreeMap<String, String>) -> Library {
        let uses = code.iter().map(|(m, text)| (m.clone(), uses(text))).collect();
        Library { modules: code.keys().cloned().collect(), uses }
    }

    /// The segments of `path` from the crate's root, as `module` reads it: `crate::`, `super::`,
    /// `self::` and a child module's name resolved; `None` for a path outside the crate.
    fn absolute<'p>(&self, module: &'p str, path: &'p str) -> Option<Vec<&'p str>> {
        let mut segments: Vec<&str> = path.split("::").collect();
        let mut resolved: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
        match segments[0] {
            "crate" => {
                resolved.clear();
                segments.remove(0);
            }
            "self" => {
                segments.remove(0);
            }
            "super" => {
                while segments.first() == Some(&"super") {
                    resolved.pop();
                    segments.remove(0);
                }
            }
            child if !child.is_empty() && self.modules.contains(&child_of(module, child)) => {}
            _ => return None,
        }
        resolved.extend(segments.into_iter().filter(|s| !s.is_empty()));
        Some(resolved)
    }

    /// The module `path` names from `module`: its longest prefix that is a module (the crate's root
    /// left out: it only declares the modules) or, where that module only re-exports the item the
    /// path goes on to, the module the item comes from.
    fn target(&self, module: &str, path: &str) -> Option<String> {
        self.target_within(module, path, 8)
    }

    /// [`Library::target`], following at most `hops` re-exports.
    fn target_within(&self, module: &str, path: &str, hops: usize) -> Option<String> {
        let resolved = self.absolute(module, path)?;
        let n = (1..=resolved.len()).rev().find(|&n| self.modules.contains(&resolved[..n].join("::")))?;
        let found = resolved[..n].join("::");
        let Some(&item) = resolved.get(n) else { return Some(found) };
        let reexport = self.uses[&found].iter().find(|(p, name)| name == item && p != path);
        match reexport {
            Some((from, _)) if hops > 0 => self.target_within(&found, from, hops - 1).or(Some(found)),
            _ => Some(found),
        }
    }

    /// Every module `module` imports (itself left out): what its `use`s and its inline paths name.
    fn imports(&self, module: &str, code: &str) -> BTreeSet<String> {
        let mut paths: Vec<String> = uses(code).into_iter().map(|(path, _)| path).collect();
        let path_char = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
        let mut rest = code;
        while let Some(start) = rest.find(path_char) {
            let end = rest[start..].find(|c: char| !path_char(c)).map_or(rest.len(), |e| start + e);
            let token = &rest[start..end];
            let group = rest[end..].starts_with(['{', '*']);
            if token.contains("::") && !token.starts_with(':') && !group {
                paths.push(token.trim_end_matches(':').to_owned());
            }
            rest = &rest[end..];
        }
        paths.iter().filter_map(|p| self.target(module, p)).filter(|m| m != module).collect()
    }
}

/// The path of `module`'s child `name`.
fn child_of(module: &str, name: &str) -> String {
    if module.is_empty() {
        name.to_owned()
    } else {
        format!("{module}::{name}")
    }
}

/// The import graph of the library.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let code: BTreeMap<String, String> = modules().into_iter().map(|(m, path)| (m, code(&path))).collect();
    let library = Library::of(&code);
    code.iter().map(|(module, text)| (module.clone(), library.imports(module, text))).collect()
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

/// The layer of `module` (its index in [`LAYERS`]), if it has one.
fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, entries)| entries.iter().any(|entry| covers(entry, module)))
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

/// The shortest way round `circle` through an import from one folder into another, as
/// `a -> b -> … -> a`.
fn way_round(graph: &BTreeMap<String, BTreeSet<String>>, circle: &BTreeSet<String>) -> String {
    let inside = |m: &String| graph[m].iter().filter(|t| circle.contains(*t)).cloned().collect::<Vec<_>>();
    let mut shortest: Option<Vec<String>> = None;
    for from in circle {
        for to in inside(from).into_iter().filter(|t| folder(t) != folder(from)) {
            let mut came_from: BTreeMap<String, String> = BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([to.clone()]);
            while let Some(m) = queue.pop_front().filter(|m| m != from) {
                for next in inside(&m) {
                    if next != to && !came_from.contains_key(&next) {
                        came_from.insert(next.clone(), m.clone());
                        queue.push_back(next);
                    }
                }
            }
            let mut way = vec![from.clone()];
            while way.last() != Some(&to) {
                way.push(came_from[way.last().unwrap()].clone());
            }
            way.push(from.clone());
            way.reverse();
            if shortest.as_ref().is_none_or(|s| way.len() < s.len()) {
                shortest = Some(way);
            }
        }
    }
    shortest.unwrap().join(" -> ")
}

#[test]
fn the_ground_floor_imports_nothing_above_it() {
    let graph = graph();
    let plan_imports_tricks = graph["bench::plan"].iter().any(|m| covers("tricks::", m));
    assert!(graph.len() > 80 && plan_imports_tricks, "the scan finds the modules");
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
fn no_module_imports_a_layer_above_its_own() {
    let graph = graph();
    let unplaced: Vec<&String> = graph.keys().filter(|m| !m.is_empty() && layer(m).is_none()).collect();
    assert!(
        unplaced.is_empty(),
        "modules in no layer of LAYERS (docs/architecture.md, \"Layers\"): {unplaced:?}"
    );
    let mut upward = Vec::new();
    for (module, imported) in graph.iter().filter(|(m, _)| !m.is_empty()) {
        let own = layer(module).unwrap();
        for target in imported.iter().filter(|t| layer(t).is_some_and(|l| l > own)) {
            if !UPWARD.iter().any(|(from, to)| from == module && covers(to, target)) {
                let above = LAYERS[layer(target).unwrap()].0;
                upward.push(format!("{module} ({}) imports {target} ({above})", LAYERS[own].0));
            }
        }
    }
    assert!(upward.is_empty(), "imports up a layer (docs/architecture.md, \"Layers\"): {upward:#?}");
}

#[test]
fn no_import_circle_spans_more_than_one_folder() {
    let graph = graph();
    let across: Vec<String> = circles(&graph)
        .into_iter()
        .filter(|c| c.iter().map(|m| folder(m)).collect::<BTreeSet<_>>().len() > 1)
        .map(|c| way_round(&graph, &c))
        .collect();
    assert!(
        across.is_empty(),
        "import circles across folders, each by its shortest way round (docs/architecture.md, \"Layers\"): \
         {across:#?}"
    );
}

#[test]
fn use_trees_inline_paths_and_reexports_name_the_modules_they_import() {
    let modules = [
        ("", ""),
        ("a", "pub(crate) use b::c::k::Item;"),
        ("a::b", ""),
        ("a::b::c", ""),
        ("a::b::c::k", ""),
        ("d", "use crate::e::Thing as Renamed;"),
        ("e", ""),
    ];
    let library = Library::of(&modules.map(|(m, code)| (m.to_owned(), code.to_owned())).into());
    let code = concat!(
        "use crate::a::{b::{self, c::Thing}, Other};\n",
        "use super::super::d::f;\n",
        "let x = crate::d::g(1);\n",
        "let y = k::h(crate::d::Renamed, crate::a::Item, ::k::i);",
    );
    let found = library.imports("a::b::c", code);
    assert_eq!(found.into_iter().collect::<Vec<_>>(), ["a", "a::b", "a::b::c::k", "d", "e"]);
    let graph: BTreeMap<String, BTreeSet<String>> =
        [("x::a", &["x::b"][..]), ("x::b", &["x::a", "y::c"]), ("y::c", &["x::b"]), ("y::d", &[])]
            .into_iter()
            .map(|(m, to)| (m.to_owned(), to.iter().map(|t| (*t).to_owned()).collect()))
            .collect();
    let found = circles(&graph);
    assert_eq!(found, [BTreeSet::from(["x::a", "x::b", "y::c"].map(str::to_owned))]);
    assert_eq!(way_round(&graph, &found[0]), "x::b -> y::c -> x::b");
}
