//! The history of a run: every client call, its outcome (ok, failed, or indefinite: it may
//! have taken effect) and its simulated time, in the order the clients saw them. It is written
//! as JSONL for a failing seed, and its digest is part of the run's trace.

use crate::client::Outcome;
use crate::scenarios::Digest;

#[derive(Default)]
pub struct History {
    events: Vec<serde_json::Value>,
    /// Everything observable, for the trace hash.
    pub digest: Digest,
}

impl History {
    /// Appends one event; returns its sequence number, which orders events across clients.
    pub fn record(&mut self, client: &str, op: &str, outcome: &str, detail: serde_json::Value) -> u64 {
        let t_ms = turmoil::sim_elapsed().unwrap_or_default().as_millis() as u64;
        let seq = self.events.len() as u64;
        self.digest.feed(client.as_bytes());
        self.digest.feed(op.as_bytes());
        self.digest.feed(outcome.as_bytes());
        self.digest.feed(detail.to_string().as_bytes());
        self.events.push(serde_json::json!({
            "seq": seq, "t_ms": t_ms, "client": client, "op": op, "outcome": outcome, "detail": detail
        }));
        seq
    }

    /// The sequence number the next event will get.
    pub fn next_seq(&self) -> u64 {
        self.events.len() as u64
    }

    /// Writes the history of a failing run, or of any run with `KAAS_SIM_HISTORY=1` set;
    /// returns the file's path.
    pub fn keep(&self, violations: &[String], scenario: &str, seed: u64, options: &str) -> Option<String> {
        let wanted = !violations.is_empty() || std::env::var_os("KAAS_SIM_HISTORY").is_some_and(|v| v == "1");
        if wanted { self.write(scenario, seed, options) } else { None }
    }

    /// Writes the history as JSONL under target/sim-history/, headed by the seed's options;
    /// returns the file's path.
    pub fn write(&self, scenario: &str, seed: u64, options: &str) -> Option<String> {
        let dir = std::path::Path::new("target/sim-history");
        std::fs::create_dir_all(dir).ok()?;
        let path = dir.join(format!("{scenario}-{seed}.jsonl"));
        let mut text = serde_json::json!({ "scenario": scenario, "seed": seed, "options": options }).to_string();
        text.push('\n');
        for event in &self.events {
            text.push_str(&event.to_string());
            text.push('\n');
        }
        std::fs::write(&path, text).ok()?;
        Some(path.display().to_string())
    }
}

pub fn outcome_name<T>(outcome: &Outcome<T>) -> String {
    match outcome {
        Outcome::Ok(_) => "ok".into(),
        Outcome::Failed(code) => format!("failed:{code}"),
        Outcome::Indefinite => "indefinite".into(),
    }
}
