//! The history of a run, in the order things happened, each event with its simulated time:
//! - every request a simulated client sent, as the client's router records it (`op` is the
//!   API, e.g. `produce`, `detail.broker` the host it went to, `outcome` ok, `failed:<code>`,
//!   `indefinite` (it may have taken effect) or `unsent` (no broker could be reached or none
//!   leads the partition: nothing was sent));
//! - what the workloads meant and saw, in their own words (`op` e.g. `produce-batch`,
//!   `commit-txn`, with batch ids, offsets and watermarks in `detail`);
//! - faults as the driver applied them are not events: they are in the world file.
//!
//! A failing seed's history is written as JSONL next to its seed file; its digest is part of
//! the run's trace.

use std::sync::{Arc, Mutex};

use crate::scenarios::Digest;

#[derive(Default)]
struct Events {
    events: Vec<serde_json::Value>,
    /// Everything observable, for the trace hash.
    digest: Digest,
}

/// The run's history; clones share it, so every client and workload of a run records into one.
#[derive(Clone, Default)]
pub struct History(Arc<Mutex<Events>>);

impl History {
    fn lock(&self) -> std::sync::MutexGuard<'_, Events> {
        self.0.lock().expect("history lock")
    }

    /// Appends one event; returns its sequence number, which orders events across clients.
    pub fn record(&self, client: &str, op: &str, outcome: &str, detail: serde_json::Value) -> u64 {
        let t_ms = turmoil::sim_elapsed().unwrap_or_default().as_millis() as u64;
        let mut h = self.lock();
        let seq = h.events.len() as u64;
        h.digest.feed(client.as_bytes());
        h.digest.feed(op.as_bytes());
        h.digest.feed(outcome.as_bytes());
        h.digest.feed(detail.to_string().as_bytes());
        h.events.push(serde_json::json!({
            "seq": seq, "t_ms": t_ms, "client": client, "op": op, "outcome": outcome, "detail": detail
        }));
        seq
    }

    /// The sequence number the next event will get: recorded before a request is sent, it
    /// tells which events happened before the request.
    pub fn next_seq(&self) -> u64 {
        self.lock().events.len() as u64
    }

    pub fn digest(&self) -> u64 {
        self.lock().digest.finish()
    }

    pub fn len(&self) -> usize {
        self.lock().events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the history as JSONL to `path`, headed by the scenario and seed; returns the path.
    pub fn write(&self, path: &std::path::Path, scenario: &str, seed: u64) -> Option<String> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).ok()?;
        }
        let mut text = serde_json::json!({ "scenario": scenario, "seed": seed }).to_string();
        text.push('\n');
        for event in &self.lock().events {
            text.push_str(&event.to_string());
            text.push('\n');
        }
        std::fs::write(path, text).ok()?;
        Some(path.display().to_string())
    }
}

pub use kaas_client::outcome_name;
