//! Stamps the build with the commit it was built from, so a seed file can say which build found
//! it and a replay can tell whether it must reproduce the same trace (the same code) or only
//! pass (later code). A tree with changes is stamped `<commit>-dirty-<digest of the sources>`:
//! two dirty builds of the same sources share the stamp, any edit changes it.

use std::path::Path;
use std::process::Command;

const SOURCES: [&str; 4] = ["../kaas-core/src", "../kaas-net/src", "src", "../Cargo.lock"];

fn git(args: &[&str]) -> Option<String> {
    // --no-optional-locks: a status must not rewrite .git/index, which would make the next
    // build of another profile (or target directory) run this script and rebuild kaas-sim.
    let out = Command::new("git").arg("--no-optional-locks").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// FNV-1a over every file below `path`, in name order.
fn digest(path: &Path, hash: &mut u64) {
    if path.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(path).into_iter().flatten().flatten().map(|e| e.path()).collect();
        entries.sort();
        for entry in entries {
            digest(&entry, hash);
        }
    } else if let Ok(bytes) = std::fs::read(path) {
        for b in path.to_string_lossy().bytes().chain(bytes) {
            *hash ^= u64::from(b);
            *hash = hash.wrapping_mul(0x100_0000_01b3);
        }
    }
}

fn main() {
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_none_or(|s| !s.is_empty());
    let stamp = if dirty {
        let mut hash = 0xcbf2_9ce4_8422_2325u64;
        for source in SOURCES {
            digest(Path::new(source), &mut hash);
        }
        format!("{commit}-dirty-{hash:016x}")
    } else {
        commit
    };
    println!("cargo:rustc-env=KAAS_SIM_COMMIT={stamp}");
    for path in ["../.git/HEAD", "../.git/index"].into_iter().chain(SOURCES) {
        println!("cargo:rerun-if-changed={path}");
    }
}
