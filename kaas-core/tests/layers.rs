//! kaas-core's modules are layered (docs/architecture.md, "Layers"): each may use those below
//! it and never one above, so no import runs back up and no two modules need each other. This
//! test reads the sources and fails on any `crate::` path that names a module above its own
//! (unit tests at the end of a file are exempt: they may build a whole broker).
//!
//! It reads the source tree, not a volume: std::fs is the right tool here.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::path::{Path, PathBuf};

/// Bottom to top. A module may use any module of its own rank or below.
const LAYERS: &[&[&str]] = &[
    &["env", "hex", "sim", "error", "acl", "quota", "config", "metrics"],
    &["cluster"],
    &["participant"],
    &["partition"],
    &["topics"],
    &["group"],
    &["txn"],
    &["broker"],
];

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The top-level module a source file belongs to (None: the crate root, `lib.rs`).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).expect("under src");
    let first = relative.components().next()?.as_os_str().to_str()?.to_string();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    (name != "lib").then_some(name)
}

/// The code of a file without its unit tests.
fn code(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests").map_or(text, |at| &text[..at])
}

/// Where `text`, a file of `module`, uses a module above it: (line, module used).
fn upward(module: &str, text: &str) -> Vec<(usize, String)> {
    let own = rank(module).unwrap_or_else(|| panic!("{module}: a module in no layer (add it to LAYERS)"));
    let mut found = Vec::new();
    for (n, line) in code(text).lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let used: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if rank(&used).is_some_and(|r| r > own) {
                found.push((n + 1, used));
            }
        }
    }
    found
}

#[test]
fn no_module_uses_one_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut reported = Vec::new();
    for file in &files {
        let Some(module) = top_module(&src, file) else { continue };
        let text = std::fs::read_to_string(file).expect("readable");
        for (line, used) in upward(&module, &text) {
            reported.push(format!("{}:{line}: {module} uses {used}", file.display()));
        }
    }
    assert!(files.len() > 40, "the sources were found");
    assert!(reported.is_empty(), "imports running up the layers:\n{}", reported.join("\n"));
}

#[test]
fn an_import_running_up_is_found_and_one_in_unit_tests_is_not() {
    let text = "use crate::env::Env;\nfn f() { crate::topics::refresh(); }\n#[cfg(test)]\nmod tests {\n    use crate::broker::Broker;\n}\n";
    assert_eq!(upward("cluster", text), vec![(2, "topics".to_string())]);
    assert_eq!(upward("broker", text), Vec::new(), "the top layer may use anything");
}
