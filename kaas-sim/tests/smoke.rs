//! The simulator end to end: a few seeds of every scenario pass against the production broker,
//! a seed replays to the same trace, a seed file holds its whole world and replays it, and a
//! run over its wall-clock budget is cut short as a hang. (The mutant hunt runs once per CI
//! run, in ci/sim.sh, not here.)

use kaas_sim::scenarios;

fn seeds_pass(name: &str, seeds: std::ops::Range<u64>) {
    let scenario = scenarios::find(name).expect("a scenario");
    for seed in seeds {
        let world = (scenario.draw)(seed);
        let result = (scenario.run)(seed, &world).expect("a world this build can run");
        assert!(result.pass, "{name} seed {seed}: {:?}", result.violations);
        assert!(result.sim_seconds > 0.0);
    }
}

#[test]
fn smoke_seeds_pass() {
    seeds_pass("smoke", 0..10);
    seeds_pass("cluster-smoke", 0..4);
}

#[test]
fn groups_seeds_pass() {
    seeds_pass("groups", 0..6);
}

#[test]
fn idempotence_seeds_pass() {
    seeds_pass("idempotence", 0..6);
}

#[test]
fn transaction_seeds_pass() {
    for name in ["txn-crash", "txn-zombie", "txn-timeout", "txn-copier"] {
        seeds_pass(name, 0..3);
    }
}

#[test]
fn topic_churn_seeds_pass() {
    seeds_pass("topic-churn", 0..6);
}

fn kaas_sim(args: &[&str]) -> (bool, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_kaas-sim")).args(args).output().expect("run kaas-sim");
    (output.status.success(), String::from_utf8_lossy(&output.stdout).into_owned())
}

#[test]
fn every_scenario_is_listed_with_its_name_first() {
    let (ok, out) = kaas_sim(&["list"]);
    assert!(ok);
    let names: Vec<&str> = out.lines().filter_map(|l| l.split_whitespace().next()).collect();
    let all: Vec<&str> = scenarios::ALL.iter().map(|s| s.name).collect();
    assert_eq!(names, all);
    assert!(names.contains(&"cluster-smoke") && names.contains(&"topic-churn"));
}

/// The trace of each line, without the wall time.
fn traces(stdout: &str) -> Vec<String> {
    stdout.lines().filter(|l| l.starts_with("seed=")).map(|l| l.split(" sim_s=").next().unwrap().to_string()).collect()
}

#[test]
fn a_seed_replays_to_the_same_trace() {
    let (ok, batch) =
        kaas_sim(&["run", "--scenario", "smoke", "--seeds", "0..6", "--check-determinism", "--jobs", "2"]);
    assert!(ok, "{batch}");
    let batch = traces(&batch);
    assert_eq!(batch.len(), 6);
    let (_, alone) = kaas_sim(&["run", "--scenario", "smoke", "--seed", "5"]);
    assert_eq!(traces(&alone), vec![batch[5].clone()], "a seed run alone matches the same seed in a batch");
    assert_ne!(batch[1], batch[2], "different seeds explore different runs");
}

#[test]
fn a_seed_file_holds_its_world_and_replays_it_exactly() {
    // A deliberate bug makes seed 0 of txn-zombie fail: its seed file goes to target/sim-mutants.
    let (ok, out) = kaas_sim(&["run", "--scenario", "txn-zombie", "--seed", "0", "--mutant", "lso-not-clamped"]);
    assert!(!ok, "the mutant fails the seed:\n{out}");
    let path = out.lines().find_map(|l| l.trim().strip_prefix("reproduce: kaas-sim replay ")).expect("a seed file");
    let file: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(file["format_version"], 2);
    let drawn = (scenarios::find("txn-zombie").unwrap().draw)(0);
    assert_eq!(file["world"], drawn, "the whole drawn world, not only the seed");
    assert!(file["world"]["common"]["plan"].is_array() && file["world"]["common"].get("buggify").is_some());
    let (ok, replayed) = kaas_sim(&["replay", path]);
    assert!(ok, "{replayed}");
    assert!(replayed.contains("reproduced"), "{replayed}");

    // The replay runs the file's world, not the seed's: a changed knob changes the run.
    let mut edited = file.clone();
    edited["world"]["txns_per_producer"] = serde_json::json!(2);
    edited["world"]["takeover_after"] = serde_json::json!(1);
    let edited_path = format!("{path}.edited.json");
    std::fs::write(&edited_path, serde_json::to_string(&edited).unwrap()).unwrap();
    let (_, replayed) = kaas_sim(&["replay", &edited_path]);
    assert!(replayed.contains("DIFFERS"), "{replayed}");
}

#[test]
fn a_run_past_its_wall_clock_budget_is_a_hang() {
    let (ok, out) = kaas_sim(&["run", "--scenario", "txn-copier", "--seed", "1", "--wall-limit-s", "0"]);
    assert!(!ok);
    assert!(out.lines().any(|l| l.trim().starts_with("violation: hang:")), "{out}");
    assert!(out.contains("history: "), "a hang keeps its history: {out}");
}
