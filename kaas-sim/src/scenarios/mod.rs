//! Scenarios: a workload, its faults and its checks, each a pure function of a seed.

mod common;
pub mod copier;
pub mod groups;
pub mod idempotence;
pub mod smoke;
pub mod transactions;

/// What one seed of one scenario came to.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunResult {
    pub pass: bool,
    /// A digest of everything observable: client outcomes and the final volume.
    pub trace: u64,
    pub sim_seconds: f64,
    /// What failed, empty on a pass.
    pub violations: Vec<String>,
    /// Where a failing run's JSONL history (every client call, outcome and time) was written.
    #[serde(default)]
    pub history: Option<String>,
    /// What the seed chose: the scenario's knobs and the BUGGIFY sites it enabled.
    #[serde(default)]
    pub options: String,
}

pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    pub run: fn(u64) -> RunResult,
}

pub const ALL: &[Scenario] = &[
    Scenario {
        name: "smoke",
        about: "one broker, acks=all producer and reader over the wire, crash + restart with torn writes",
        run: smoke::run,
    },
    Scenario {
        name: "groups",
        about: "a consumer group of member hosts over several partitions; broker and member crashes, rebalances",
        run: groups::run,
    },
    Scenario {
        name: "idempotence",
        about: "idempotent producers, five requests in flight, retrying through crashes: no batch written twice",
        run: idempotence::run,
    },
    Scenario {
        name: "txn-crash",
        about: "transactional producers and read_committed readers; the broker crashes at every step of EndTxn",
        run: transactions::run_crash,
    },
    Scenario {
        name: "txn-zombie",
        about: "a second instance fences each transactional.id; the old one's late requests must not take effect",
        run: transactions::run_zombie,
    },
    Scenario {
        name: "txn-timeout",
        about: "producers quiet past their transaction timeout, one gone: the reaper aborts and fences them",
        run: transactions::run_timeout,
    },
    Scenario {
        name: "txn-copier",
        about: "consume-transform-produce copiers committing offsets in their transactions, crashing and coming back as zombies",
        run: copier::run,
    },
];

pub fn find(name: &str) -> Option<&'static Scenario> {
    ALL.iter().find(|s| s.name == name)
}

/// FNV-1a, for trace digests: stable across builds and platforms, unlike std's hasher.
pub struct Digest(u64);

impl Default for Digest {
    fn default() -> Self {
        Digest(0xcbf2_9ce4_8422_2325)
    }
}

impl Digest {
    pub fn feed(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x100_0000_01b3);
        }
    }

    pub fn feed_u64(&mut self, v: u64) {
        self.feed(&v.to_le_bytes());
    }

    pub fn finish(&self) -> u64 {
        self.0
    }
}
