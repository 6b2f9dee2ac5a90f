//! The corner-case matrix, made visible (`kaas-sim coverage`): every cell a world can reach
//! (each crash point and BUGGIFY site, each fault kind, each KIP-1289 case, each placement of
//! a transaction's coordinator, outputs and share partitions, each way of KIP-1191's dead
//! letters) and how many worlds of a run
//! reached it, so that a cell no world reaches shows as zero instead of passing unnoticed.
//!
//! A run (`kaas-sim run --coverage FILE`) writes one line per world: its scenario, seed and the
//! cells it reached (`kaas_core::sim::reach`). `kaas-sim coverage FILE...` adds them up.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::faults::Fault;
use crate::workloads::share_copier::{self, Case};

/// One world's line of a coverage file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorldCells {
    pub scenario: String,
    pub seed: u64,
    pub reached: BTreeMap<String, u64>,
}

/// Every cell, grouped as printed.
pub fn universe() -> Vec<(&'static str, Vec<String>)> {
    let crash_points = crate::scenarios::common::crash_point_sites().map(|s| format!("crash-point {s}")).collect();
    let buggify = kaas_core::sim::BUGGIFY_SITES.iter().map(|s| format!("buggify {s}")).collect();
    let faults = Fault::KINDS.iter().map(|k| format!("fault {k}")).collect();
    let mut cases = Vec::new();
    for case in Case::ALL {
        match case {
            Case::Zombie => {
                for how in [
                    "before staging, fenced by a successor",
                    "before staging, no successor",
                    "staged, fenced by a successor",
                    "staged, no successor",
                    "joined again, staged at its old epoch",
                ] {
                    cases.push(format!("kip1289 {} ({how})", case.name()));
                }
            }
            _ => cases.push(format!("kip1289 {}", case.name())),
        }
    }
    let compaction = [
        "compaction: pass done",
        "compaction: pass abandoned",
        "compaction: cleaned copy swapped in",
        "compaction: cleaned copy discarded, a newer owner may read the log",
        "compaction: copy started midway through a segment",
        "compaction: pass waits for a cleaner thread",
        "compaction: cleaner checkpoint read at open",
    ]
    .map(String::from)
    .to_vec();
    vec![
        ("crash points", crash_points),
        ("BUGGIFY sites", buggify),
        ("faults", faults),
        ("KIP-1289 cases", cases),
        ("placements (KIP-1289 transactions staged)", share_copier::placement_cells()),
        (
            "KIP-1191 dead letters",
            [
                "dead-letter written (queue partition here)",
                "dead-letter written (at the queue partition's owner)",
                "dead-letter sent again by a later owner",
                "dead-letter source moved before the queue was written",
            ]
            .map(String::from)
            .to_vec(),
        ),
        ("log compaction", compaction),
        (
            "consumer groups (KIP-848) across a coordinator's take-over",
            [
                "groups: consumer group carried on by a new coordinator",
                "groups: consumer member went on at its epoch after a take-over",
            ]
            .map(String::from)
            .to_vec(),
        ),
    ]
}

/// Worlds per cell, over every world given.
#[derive(Debug, Default)]
pub struct Tally {
    pub worlds: usize,
    pub cells: BTreeMap<String, usize>,
}

impl Tally {
    pub fn add(&mut self, world: &WorldCells) {
        self.worlds += 1;
        for (cell, &visits) in &world.reached {
            if visits > 0 {
                *self.cells.entry(cell.clone()).or_default() += 1;
            }
        }
    }

    /// The table: each cell of the universe with its worlds (`never` when none), then any cell
    /// reached that the universe does not list. With the cells nobody reached counted.
    pub fn render(&self) -> (String, usize) {
        let mut out = format!("coverage over {} worlds (worlds that reached each cell)\n", self.worlds);
        let mut never = 0;
        let mut listed = std::collections::BTreeSet::new();
        for (group, cells) in universe() {
            out.push_str(&format!("{group}:\n"));
            for cell in cells {
                let n = self.cells.get(&cell).copied().unwrap_or(0);
                if n == 0 {
                    never += 1;
                    out.push_str(&format!("  {:>7}  {cell}\n", "never"));
                } else {
                    out.push_str(&format!("  {n:>7}  {cell}\n"));
                }
                listed.insert(cell);
            }
        }
        let unlisted: Vec<_> = self.cells.iter().filter(|(c, _)| !listed.contains(*c)).collect();
        if !unlisted.is_empty() {
            out.push_str("reached, not listed:\n");
            for (cell, n) in unlisted {
                out.push_str(&format!("  {n:>7}  {cell}\n"));
            }
        }
        out.push_str(&format!("{never} cells never reached\n"));
        (out, never)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_nobody_reached_shows_as_never() {
        let mut tally = Tally::default();
        let reached = BTreeMap::from([("fault crash".to_string(), 3), ("kip1289 abort".to_string(), 0)]);
        tally.add(&WorldCells { scenario: "share".into(), seed: 1, reached });
        tally.add(&WorldCells {
            scenario: "share".into(),
            seed: 2,
            reached: BTreeMap::from([("fault crash".to_string(), 1)]),
        });
        let (table, never) = tally.render();
        assert!(table.contains("        2  fault crash\n"), "{table}");
        assert!(table.contains("    never  kip1289 abort\n"), "visits of 0 do not count: {table}");
        let cells: usize = universe().iter().map(|(_, c)| c.len()).sum();
        assert_eq!(never, cells - 1);
    }
}
