//! The first proof that the seams are real: the production broker in a turmoil host serves a
//! simulated wire client, survives a crash with torn writes, and a seed replays bit for bit.

use kaas_sim::scenarios::{copier, groups, idempotence, smoke, transactions};

#[test]
fn smoke_seeds_pass() {
    for seed in 0..20 {
        let result = smoke::run(seed);
        assert!(result.pass, "seed {seed}: {:?}", result.violations);
        assert!(result.sim_seconds > 0.0);
    }
}

#[test]
fn groups_seeds_pass() {
    for seed in 0..8 {
        let result = groups::run(seed);
        assert!(result.pass, "seed {seed}: {:?}", result.violations);
    }
}

#[test]
fn idempotence_seeds_pass() {
    for seed in 0..8 {
        let result = idempotence::run(seed);
        assert!(result.pass, "seed {seed}: {:?}", result.violations);
    }
}

#[test]
fn transaction_seeds_pass() {
    for seed in 0..4 {
        for result in [
            transactions::run_crash(seed),
            transactions::run_zombie(seed),
            transactions::run_timeout(seed),
            copier::run(seed),
        ] {
            assert!(result.pass, "seed {seed}: {:?}", result.violations);
        }
    }
}

#[test]
fn every_scenario_is_listed_with_its_name_first() {
    let (ok, out) = kaas_sim(&["list"]);
    assert!(ok);
    let names: Vec<&str> = out.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(names, vec!["smoke", "groups", "idempotence", "txn-crash", "txn-zombie", "txn-timeout", "txn-copier"]);
}

fn kaas_sim(args: &[&str]) -> (bool, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_kaas-sim")).args(args).output().expect("run kaas-sim");
    (output.status.success(), String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The trace of each line, without the wall time.
fn traces(stdout: &str) -> Vec<String> {
    stdout.lines().filter(|l| l.starts_with("seed=")).map(|l| l.split(" sim_s=").next().unwrap().to_string()).collect()
}

#[test]
fn a_seed_replays_to_the_same_trace() {
    let (ok, batch) = kaas_sim(&["run", "--scenario", "smoke", "--seeds", "0..8", "--check-determinism"]);
    assert!(ok, "{batch}");
    let batch = traces(&batch);
    assert_eq!(batch.len(), 8);
    let (_, alone) = kaas_sim(&["run", "--scenario", "smoke", "--seed", "5"]);
    assert_eq!(traces(&alone), vec![batch[5].clone()], "a seed run alone matches the same seed in a batch");
    assert_ne!(batch[1], batch[2], "different seeds explore different runs");
}

#[test]
fn every_mutant_is_caught() {
    let (ok, out) = kaas_sim(&["mutants", "--seeds", "0..2000"]);
    assert!(ok, "a mutant survived:\n{out}");
    assert_eq!(out.lines().filter(|l| l.contains("caught_by_seed=")).count(), 15, "{out}");
}
