//! Seed files (`sim-seeds/<scenario>-<seed>.json`): the whole world a failing run drew, so that
//! a replay rebuilds that world from the file, whatever the drawing code has become since. At
//! the commit that wrote it a replay must reproduce its trace exactly; at a later commit it
//! must pass (the bug it found stays fixed).

use serde::{Deserialize, Serialize};

/// The format of seed files this build reads and writes.
pub const FORMAT_VERSION: u32 = 2;

/// The commit this build was made from; with `-dirty-<digest of the sources>` if the tree had
/// changes.
pub const COMMIT: &str = env!("KAAS_SIM_COMMIT");

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SeedFile {
    pub format_version: u32,
    pub scenario: String,
    pub seed: u64,
    #[serde(default)]
    pub mutant: Option<String>,
    /// The scenario's world, whole: every knob, the fault plan, the BUGGIFY sites.
    pub world: serde_json::Value,
    /// The build that ran it, and the trace it printed.
    pub commit: String,
    pub trace: String,
    pub violations: Vec<String>,
    pub violations_total: usize,
    #[serde(default)]
    pub history: Option<String>,
    /// What the file found, in words, once someone has looked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<String>,
}

impl SeedFile {
    pub fn read(path: &str) -> Result<SeedFile, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        let raw: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
        match raw["format_version"].as_u64() {
            Some(v) if v == u64::from(FORMAT_VERSION) => {}
            Some(v) => return Err(format!("{path}: seed file format {v}, this build reads {FORMAT_VERSION}")),
            None => {
                return Err(format!(
                    "{path}: a seed file without a world (format 1, seed and options only): it cannot be replayed"
                ));
            }
        }
        serde_json::from_value(raw).map_err(|e| format!("{path}: {e}"))
    }

    pub fn write(&self, path: &str) -> Result<(), String> {
        if let Some(dir) = std::path::Path::new(path).parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let text = serde_json::to_string_pretty(self).expect("a seed file serialises");
        std::fs::write(path, text + "\n").map_err(|e| format!("{path}: {e}"))
    }

    /// Whether this build is made of the same code as the build that wrote the file.
    pub fn same_commit(&self) -> bool {
        self.commit == COMMIT
    }
}
