//! `kaas-sim`: run scenarios by seed, replay a seed file, list scenarios.
//!
//! ```text
//! kaas-sim list
//! kaas-sim run [--scenario NAME] (--seed N | --seeds A..B) [--check-determinism]
//! kaas-sim replay sim-seeds/FILE.json
//! ```

use std::process::ExitCode;
use std::time::Instant;

use kaas_sim::scenarios::{self, RunResult, Scenario};

const USAGE: &str = "usage:
  kaas-sim list
  kaas-sim run [--scenario NAME] (--seed N | --seeds A..B) [--check-determinism]
  kaas-sim replay sim-seeds/FILE.json";

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
        Some("replay") => {
            let path = args.get(1).ok_or("replay needs a seed file")?;
            let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
            let file: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
            let name = file["scenario"].as_str().ok_or("seed file without scenario")?;
            let seed = file["seed"].as_u64().ok_or("seed file without seed")?;
            let scenario = scenarios::find(name).ok_or_else(|| format!("unknown scenario {name}"))?;
            Ok(one(scenario, seed, false, false))
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
        for seed in seeds.clone() {
            all_passed &= one(s, seed, check_determinism, true);
        }
    }
    Ok(all_passed)
}

/// Runs one seed, prints its line, and on a failure writes the seed file.
fn one(scenario: &Scenario, seed: u64, check_determinism: bool, write_seed_file: bool) -> bool {
    let started = Instant::now();
    let mut result: RunResult = (scenario.run)(seed);
    if check_determinism {
        let again = (scenario.run)(seed);
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
    for v in &result.violations {
        println!("  violation: {v}");
    }
    if !result.pass && write_seed_file {
        let path = format!("sim-seeds/{}-{seed}.json", scenario.name);
        let file = serde_json::json!({
            "seed": seed,
            "scenario": scenario.name,
            "violations": result.violations,
            "trace": format!("{:016x}", result.trace),
        });
        let _ = std::fs::create_dir_all("sim-seeds");
        match std::fs::write(&path, serde_json::to_string_pretty(&file).expect("json")) {
            Ok(()) => println!("  reproduce: kaas-sim replay {path}"),
            Err(e) => println!("  cannot write {path}: {e}"),
        }
    }
    result.pass
}
