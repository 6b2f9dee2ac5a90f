//! `kaas-sim`: run scenarios by seed, replay a seed file, list scenarios.
//!
//! ```text
//! kaas-sim list
//! kaas-sim run [--scenario NAME] (--seed N | --seeds A..B) [--check-determinism] [--mutant NAME]
//! kaas-sim replay sim-seeds/FILE.json
//! kaas-sim mutants [--seeds A..B]
//! ```

use std::process::ExitCode;
use std::time::Instant;

use kaas_core::sim::{Mutant, set_mutant};
use kaas_sim::scenarios::{self, RunResult, Scenario};

/// Violations printed per failing seed; the rest are counted.
const VIOLATIONS_SHOWN: usize = 20;

const USAGE: &str = "usage:
  kaas-sim list
  kaas-sim run [--scenario NAME] (--seed N | --seeds A..B) [--check-determinism] [--mutant NAME]
  kaas-sim replay sim-seeds/FILE.json
  kaas-sim mutants [--seeds A..B]      (each deliberate bug must be caught by some seed)
A failing seed writes its history (every client call and outcome, JSONL) under
target/sim-history/; KAAS_SIM_HISTORY=1 writes it for passing seeds too.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("kaas-sim: {e}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> Result<bool, String> {
    match args.first().map(String::as_str) {
        Some("list") => {
            for s in scenarios::ALL {
                println!("{} {}", s.name, s.about);
            }
            Ok(true)
        }
        Some("run") => run_seeds(&args[1..]),
        Some("mutants") => mutants(&args[1..]),
        Some("run-one") => run_one(&args[1..]),
        Some("replay") => {
            let path = args.get(1).ok_or("replay needs a seed file")?;
            let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
            let file: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
            let name = file["scenario"].as_str().ok_or("seed file without scenario")?;
            let seed = file["seed"].as_u64().ok_or("seed file without seed")?;
            let scenario = scenarios::find(name).ok_or_else(|| format!("unknown scenario {name}"))?;
            if let Some(m) = file["mutant"].as_str() {
                set_mutant(Some(Mutant::from_name(m).ok_or_else(|| format!("unknown mutant {m}"))?));
            }
            Ok(one(scenario, seed, false, false).pass)
        }
        _ => Err("unknown command".into()),
    }
}

fn run_seeds(args: &[String]) -> Result<bool, String> {
    let mut scenario: Option<&Scenario> = None;
    let mut seeds: Option<std::ops::Range<u64>> = None;
    let mut check_determinism = false;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--scenario" => {
                let name = it.next().ok_or("--scenario needs a name")?;
                scenario = Some(scenarios::find(name).ok_or_else(|| format!("unknown scenario {name}"))?);
            }
            "--seed" => {
                let n: u64 = it.next().and_then(|s| s.parse().ok()).ok_or("--seed needs a number")?;
                seeds = Some(n..n + 1);
            }
            "--seeds" => {
                let range = it.next().ok_or("--seeds needs A..B")?;
                let (a, b) = range.split_once("..").ok_or("--seeds needs A..B")?;
                let a: u64 = a.parse().map_err(|_| "--seeds: bad start")?;
                let b: u64 = b.parse().map_err(|_| "--seeds: bad end")?;
                seeds = Some(a..b);
            }
            "--check-determinism" => check_determinism = true,
            "--mutant" => {
                let name = it.next().ok_or("--mutant needs a name")?;
                let mutant = Mutant::from_name(name).ok_or_else(|| format!("unknown mutant {name}"))?;
                set_mutant(Some(mutant));
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    let seeds = seeds.ok_or("give --seed N or --seeds A..B")?;
    let chosen: Vec<&Scenario> = match scenario {
        Some(s) => vec![s],
        None => scenarios::ALL.iter().collect(),
    };
    let mut all_passed = true;
    for s in chosen {
        let (mut passed, mut sim_s, mut wall_s) = (0, 0.0, 0.0);
        for seed in seeds.clone() {
            let run = one(s, seed, check_determinism, true);
            passed += usize::from(run.pass);
            sim_s += run.sim_seconds;
            wall_s += run.wall_seconds;
        }
        all_passed &= passed == seeds.clone().count();
        if seeds.end - seeds.start > 1 {
            // Simulated seconds per wall second, the simulator's speed (aim: 100x or more).
            let ratio = sim_s / wall_s.max(1e-9);
            println!(
                "summary scenario={} seeds={} passed={passed} sim_s={sim_s:.1} wall_s={wall_s:.1} speed={ratio:.0}x",
                s.name,
                seeds.end - seeds.start
            );
        }
    }
    Ok(all_passed)
}

/// Runs every mutant against seeds until one catches it; fails if a mutant survives them all.
fn mutants(args: &[String]) -> Result<bool, String> {
    let seeds = match args {
        [] => 0..200,
        [flag, range] if flag == "--seeds" => {
            let (a, b) = range.split_once("..").ok_or("--seeds needs A..B")?;
            a.parse().map_err(|_| "--seeds: bad start")?..b.parse().map_err(|_| "--seeds: bad end")?
        }
        _ => return Err("mutants takes only --seeds A..B".into()),
    };
    let mut all_caught = true;
    for mutant in Mutant::ALL {
        set_mutant(Some(mutant));
        let started = Instant::now();
        let mut caught = None;
        'seeds: for seed in seeds.clone() {
            for s in scenarios::ALL {
                let result = isolated(s, seed);
                if !result.pass {
                    caught = Some((seed, s.name, result.violations.first().cloned().unwrap_or_default()));
                    break 'seeds;
                }
            }
        }
        let wall = started.elapsed().as_secs_f64();
        match caught {
            Some((seed, scenario, violation)) => {
                println!(
                    "mutant={} caught_by_seed={seed} scenario={scenario} wall_s={wall:.3} violation={violation:?}",
                    mutant.name()
                )
            }
            None => {
                all_caught = false;
                println!("mutant={} survived seeds {}..{} wall_s={wall:.3}", mutant.name(), seeds.start, seeds.end);
            }
        }
    }
    set_mutant(None);
    Ok(all_caught)
}

/// Runs one seed in a process of its own and reads back its result. A run must be a pure
/// function of (seed, scenario, build), but tokio spreads a runtime's tasks over shards by a
/// process-wide task id and drops a crashed host's tasks shard by shard: which sockets of the
/// crashed broker close first would depend on every run before it in the same process.
fn isolated(scenario: &'static Scenario, seed: u64) -> RunResult {
    let mut cmd = std::process::Command::new(std::env::current_exe().expect("own path"));
    cmd.args(["run-one", scenario.name, &seed.to_string()]);
    if let Some(m) = kaas_core::sim::current() {
        cmd.arg(m.name());
    }
    let failed = |why: String| RunResult { violations: vec![why], ..RunResult::default() };
    let output = match cmd.output() {
        Ok(output) => output,
        Err(e) => return failed(format!("cannot run the seed's process: {e}")),
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().rfind(|l| l.contains("panicked") || l.contains("error")).unwrap_or("");
        return failed(format!("the seed's process failed ({}): {last}", output.status));
    }
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| failed(format!("unreadable result: {e}")))
}

/// `run-one SCENARIO SEED [MUTANT]`: the child side of `isolated`, printing the result as JSON.
fn run_one(args: &[String]) -> Result<bool, String> {
    let name = args.first().ok_or("run-one needs a scenario")?;
    let seed: u64 = args.get(1).and_then(|s| s.parse().ok()).ok_or("run-one needs a seed")?;
    if let Some(m) = args.get(2) {
        set_mutant(Some(Mutant::from_name(m).ok_or_else(|| format!("unknown mutant {m}"))?));
    }
    let scenario = scenarios::find(name).ok_or_else(|| format!("unknown scenario {name}"))?;
    let result = (scenario.run)(seed);
    println!("{}", serde_json::to_string(&result).expect("json"));
    Ok(true)
}

/// What one seed came to, as `run` adds it up.
struct Ran {
    pass: bool,
    sim_seconds: f64,
    wall_seconds: f64,
}

/// Runs one seed, prints its line, and on a failure writes the seed file.
fn one(scenario: &'static Scenario, seed: u64, check_determinism: bool, write_seed_file: bool) -> Ran {
    let started = Instant::now();
    let mut result: RunResult = isolated(scenario, seed);
    if check_determinism {
        let again = isolated(scenario, seed);
        if again.trace != result.trace || again.pass != result.pass {
            result.pass = false;
            result.violations.push(format!("nondeterminism: trace {:016x} then {:016x}", result.trace, again.trace));
        }
    }
    let wall = started.elapsed().as_secs_f64();
    println!(
        "seed={seed} scenario={} result={} trace={:016x} sim_s={:.3} wall_s={:.3}",
        scenario.name,
        if result.pass { "pass" } else { "fail" },
        result.trace,
        result.sim_seconds,
        wall
    );
    for v in result.violations.iter().take(VIOLATIONS_SHOWN) {
        println!("  violation: {v}");
    }
    if result.violations.len() > VIOLATIONS_SHOWN {
        println!("  ... and {} more violations", result.violations.len() - VIOLATIONS_SHOWN);
    }
    if let Some(history) = &result.history {
        println!("  history: {history}");
    }
    if !result.pass && write_seed_file {
        // A failure under a deliberate bug is expected: its seed file stays out of sim-seeds/.
        let mutant = kaas_core::sim::current();
        let dir = if mutant.is_some() { "target/sim-mutants" } else { "sim-seeds" };
        let prefix = mutant.map(|m| format!("{}-", m.name())).unwrap_or_default();
        let path = format!("{dir}/{prefix}{}-{seed}.json", scenario.name);
        let file = serde_json::json!({
            "seed": seed,
            "scenario": scenario.name,
            "mutant": mutant.map(Mutant::name),
            "options": result.options,
            "violations": result.violations.iter().take(VIOLATIONS_SHOWN).collect::<Vec<_>>(),
            "violations_total": result.violations.len(),
            "history": result.history,
            "trace": format!("{:016x}", result.trace),
        });
        let _ = std::fs::create_dir_all(dir);
        match std::fs::write(&path, serde_json::to_string_pretty(&file).expect("json")) {
            Ok(()) => println!("  reproduce: kaas-sim replay {path}"),
            Err(e) => println!("  cannot write {path}: {e}"),
        }
    }
    Ran { pass: result.pass, sim_seconds: result.sim_seconds, wall_seconds: wall }
}
