//! `kaas-sim`: run scenarios by seed, replay seed files, hunt mutants, list scenarios.
//!
//! ```text
//! kaas-sim list
//! kaas-sim run [--scenario NAME | --skip NAME[,NAME...]] (--seed N | --seeds A..B) [--check-determinism] [--mutant NAME]
//!              [--jobs N] [--wall-limit-s S]
//! kaas-sim replay sim-seeds/FILE.json [FILE...]
//! kaas-sim mutants [--seeds A..B] [--only NAME[,NAME...]] [--jobs N]
//! kaas-sim coverage FILE [FILE...]
//! kaas-sim help
//! ```
//!
//! Every world runs in a process of its own (`run-one`), several at once (`--jobs`, by default
//! the machine's cores): a run must be a pure function of its world, but tokio spreads a
//! runtime's tasks over shards by a process-wide task id and drops a crashed host's tasks shard
//! by shard, so which sockets of a crashed broker close first would depend on every run before
//! it in the same process. A process of its own also bounds each run: one past its wall-clock
//! budget is cut short as a `hang` (by itself, with its history; or, if it stops answering
//! altogether, killed a little later).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::process::{ExitCode, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kaas_core::sim::Mutant;
use kaas_sim::mutants::{self, MutantSpec};
use kaas_sim::scenarios::{self, RunResult, Scenario, class};
use kaas_sim::seedfile::{self, SeedFile};

/// Prints a line of output; a reader that went away (`kaas-sim run | head`) ends the program
/// quietly instead of with a panic.
macro_rules! say {
    ($($arg:tt)*) => {{
        if writeln!(std::io::stdout(), $($arg)*).is_err() {
            std::process::exit(0);
        }
    }};
}

/// Violations printed per failing seed; the rest are counted.
const VIOLATIONS_SHOWN: usize = 20;
/// A run's wall-clock budget unless `--wall-limit-s` says otherwise.
const WALL_LIMIT_S: u64 = 300;
/// How long past its budget a run that stopped answering is given before it is killed.
const KILL_MARGIN: Duration = Duration::from_secs(30);

const USAGE: &str = "usage:
  kaas-sim list                 the scenarios, one a line
  kaas-sim run [--scenario NAME | --skip NAME[,NAME...]] (--seed N | --seeds A..B) [--check-determinism] [--mutant NAME]
               [--jobs N] [--wall-limit-s S] [--coverage FILE]
                                run worlds by seed; --coverage appends each world's reached cells to FILE
  kaas-sim replay sim-seeds/FILE.json [FILE...]
                                run the worlds seed files hold
  kaas-sim mutants [--seeds A..B] [--only NAME[,NAME...]] [--jobs N]
                                hunt each deliberate bug until a world catches it
  kaas-sim coverage FILE [FILE...]
                                the corner-case matrix over runs' --coverage files: each crash point,
                                BUGGIFY site, fault kind, KIP-1289 case and placement, with its worlds
  kaas-sim help                 this
A failing seed writes sim-seeds/<scenario>-<seed>.json (the whole world it drew) and its
history (every client call and outcome, JSONL) under target/sim-history/; KAAS_SIM_HISTORY=1
writes histories of passing seeds too.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match dispatch(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("kaas-sim: {e}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn dispatch(args: &[String]) -> Result<bool, String> {
    match args.first().map(String::as_str) {
        Some("list") => {
            for s in scenarios::ALL {
                say!("{} {}", s.name, s.about);
            }
            Ok(true)
        }
        Some("run") => run_seeds(&args[1..]),
        Some("replay") => replay(&args[1..]),
        Some("mutants") => hunt_mutants(&args[1..]),
        Some("coverage") => coverage(&args[1..]),
        Some("help" | "--help" | "-h") => {
            say!("{USAGE}");
            Ok(true)
        }
        Some("run-one") => run_one(),
        _ => Err("unknown command".into()),
    }
}

fn parse_range(text: &str) -> Result<std::ops::Range<u64>, String> {
    let (a, b) = text.split_once("..").ok_or("--seeds needs A..B")?;
    let a: u64 = a.parse().map_err(|_| "--seeds: bad start")?;
    let b: u64 = b.parse().map_err(|_| "--seeds: bad end")?;
    Ok(a..b)
}

fn mutant_named(name: &str) -> Result<Mutant, String> {
    Mutant::from_name(name).ok_or_else(|| format!("unknown mutant {name}"))
}

fn scenario_named(name: &str) -> Result<&'static Scenario, String> {
    scenarios::find(name).ok_or_else(|| format!("unknown scenario {name}"))
}

fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// One world to run.
#[derive(Clone)]
struct Job {
    scenario: &'static Scenario,
    seed: u64,
    world: serde_json::Value,
    mutant: Option<Mutant>,
}

impl Job {
    fn drawn(scenario: &'static Scenario, seed: u64, mutant: Option<Mutant>) -> Job {
        Job { scenario, seed, world: (scenario.draw)(seed), mutant }
    }
}

/// What one run came to, and the wall time it took.
struct Ran {
    result: RunResult,
    wall_s: f64,
}

/// Runs `job` in a child process within `wall_limit`.
fn run_child(job: &Job, wall_limit: Duration) -> Ran {
    let started = Instant::now();
    let failed = |why: String| RunResult { violations: vec![why], ..RunResult::default() };
    let request = serde_json::json!({
        "scenario": job.scenario.name,
        "seed": job.seed,
        "world": job.world,
        "mutant": job.mutant.map(Mutant::name),
        "wall_limit_ms": wall_limit.as_millis() as u64,
    });
    let exe = std::env::current_exe().expect("own path");
    let spawned = std::process::Command::new(exe)
        .arg("run-one")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(if std::env::var_os("KAAS_SIM_LOG").is_some() { Stdio::inherit() } else { Stdio::piped() })
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            return Ran { result: failed(format!("harness-panic: cannot start the run's process: {e}")), wall_s: 0.0 };
        }
    };
    let mut stdin = child.stdin.take().expect("piped");
    let _ = stdin.write_all(request.to_string().as_bytes());
    drop(stdin);
    let mut stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take();
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut stderr) = stderr {
            let _ = stderr.read_to_string(&mut text);
        }
        text
    });
    let kill_at = started + wall_limit + KILL_MARGIN;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() > kill_at => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => break None,
        }
    };
    let (out, err) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
    let wall_s = started.elapsed().as_secs_f64();
    let result = match status {
        None => {
            failed(format!("hang: killed after {:.0} s of wall time (no history: the run stopped answering)", wall_s))
        }
        Some(status) if !status.success() => {
            let last = err.lines().rfind(|l| l.contains("panicked") || l.contains("error")).unwrap_or("");
            failed(format!("harness-panic: the run's process failed ({status}): {last}"))
        }
        Some(_) => {
            serde_json::from_str(&out).unwrap_or_else(|e| failed(format!("harness-panic: unreadable result: {e}")))
        }
    };
    Ran { result, wall_s }
}

/// `run-one`: the child side of `run_child`. Reads its job from standard input, prints the
/// result as JSON.
fn run_one() -> Result<bool, String> {
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text).map_err(|e| e.to_string())?;
    let request: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let scenario = scenario_named(request["scenario"].as_str().ok_or("run-one needs a scenario")?)?;
    let seed = request["seed"].as_u64().ok_or("run-one needs a seed")?;
    let mutant = request["mutant"].as_str().map(mutant_named).transpose()?;
    let wall_limit = Duration::from_millis(request["wall_limit_ms"].as_u64().unwrap_or(WALL_LIMIT_S * 1000));
    kaas_sim::runner::install_panic_hook();
    kaas_sim::runner::install_logging();
    let result = kaas_sim::runner::run_world(scenario, seed, &request["world"], mutant, wall_limit)?;
    say!("{}", serde_json::to_string(&result).expect("json"));
    Ok(true)
}

/// Runs `jobs` on `workers` threads (each driving one child at a time); `done` sees each
/// result in job order, as soon as it and every one before it are in.
fn run_pool(
    jobs: &[Job],
    workers: usize,
    runs_per_job: usize,
    wall_limit: Duration,
    mut done: impl FnMut(usize, Vec<Ran>),
) {
    let next = Mutex::new(0usize);
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Vec<Ran>)>();
    std::thread::scope(|scope| {
        for _ in 0..workers.max(1) {
            let tx = tx.clone();
            let next = &next;
            scope.spawn(move || {
                loop {
                    let i = {
                        let mut n = next.lock().unwrap();
                        let i = *n;
                        *n += 1;
                        i
                    };
                    let Some(job) = jobs.get(i) else { return };
                    let runs = (0..runs_per_job).map(|_| run_child(job, wall_limit)).collect();
                    if tx.send((i, runs)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(tx);
        let mut waiting: BTreeMap<usize, Vec<Ran>> = BTreeMap::new();
        let mut next_out = 0;
        for (i, runs) in rx {
            waiting.insert(i, runs);
            while let Some(runs) = waiting.remove(&next_out) {
                done(next_out, runs);
                next_out += 1;
            }
        }
    });
}

fn run_seeds(args: &[String]) -> Result<bool, String> {
    let mut scenario: Option<&'static Scenario> = None;
    let mut skip: Vec<&'static Scenario> = Vec::new();
    let mut seeds: Option<std::ops::Range<u64>> = None;
    let mut check_determinism = false;
    let mut mutant = None;
    let mut jobs = default_jobs();
    let mut wall_limit = Duration::from_secs(WALL_LIMIT_S);
    let mut coverage: Option<std::fs::File> = None;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--coverage" => {
                let path = value()?;
                let file = std::fs::OpenOptions::new().create(true).append(true).open(path);
                coverage = Some(file.map_err(|e| format!("--coverage {path}: {e}"))?);
            }
            "--scenario" => scenario = Some(scenario_named(value()?)?),
            "--skip" => {
                for name in value()?.split(',') {
                    skip.push(scenario_named(name)?);
                }
            }
            "--seed" => {
                let n: u64 = value()?.parse().map_err(|_| "--seed needs a number")?;
                seeds = Some(n..n + 1);
            }
            "--seeds" => seeds = Some(parse_range(value()?)?),
            "--check-determinism" => check_determinism = true,
            "--mutant" => mutant = Some(mutant_named(value()?)?),
            "--jobs" => jobs = value()?.parse().map_err(|_| "--jobs needs a number")?,
            "--wall-limit-s" => {
                wall_limit = Duration::from_secs(value()?.parse().map_err(|_| "--wall-limit-s needs a number")?)
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    let seeds = seeds.ok_or("give --seed N or --seeds A..B")?;
    let chosen: Vec<&'static Scenario> = match scenario {
        Some(s) => vec![s],
        None => scenarios::ALL.iter().filter(|s| !skip.iter().any(|k| k.name == s.name)).collect(),
    };
    let work: Vec<Job> =
        chosen.iter().flat_map(|s| seeds.clone().map(move |seed| Job::drawn(s, seed, mutant))).collect();
    let started = Instant::now();
    // Per scenario: (seeds, passed, simulated s, wall s of the runs).
    let mut totals: BTreeMap<&str, (usize, usize, f64, f64)> = BTreeMap::new();
    let runs_per_job = if check_determinism { 2 } else { 1 };
    run_pool(&work, jobs, runs_per_job, wall_limit, |i, runs| {
        let job = &work[i];
        let mut result = runs[0].result.clone();
        if let Some(again) = runs.get(1)
            && (again.result.trace != result.trace || again.result.pass != result.pass)
        {
            result.pass = false;
            result
                .violations
                .push(format!("nondeterminism: trace {:016x} then {:016x}", result.trace, again.result.trace));
        }
        report(job, &result, runs[0].wall_s, true);
        if let Some(file) = coverage.as_mut() {
            let cells = kaas_sim::coverage::WorldCells {
                scenario: job.scenario.name.to_string(),
                seed: job.seed,
                reached: result.reached.clone(),
            };
            let line = serde_json::to_string(&cells).expect("cells serialize");
            if let Err(e) = writeln!(file, "{line}") {
                say!("cannot write the coverage file: {e}");
            }
        }
        let t = totals.entry(job.scenario.name).or_default();
        t.0 += 1;
        t.1 += usize::from(result.pass);
        t.2 += result.sim_seconds * runs.len() as f64;
        t.3 += runs.iter().map(|r| r.result.wall_seconds).sum::<f64>();
    });
    let mut all_passed = true;
    for s in &chosen {
        let (n, passed, sim_s, wall_s) = totals.get(s.name).copied().unwrap_or_default();
        all_passed &= passed == n;
        if seeds.end - seeds.start > 1 {
            // Simulated seconds per wall second of one run (its process's start not counted),
            // the simulator's speed (aim: 100x).
            say!(
                "summary scenario={} seeds={n} passed={passed} sim_s={sim_s:.1} wall_s={wall_s:.1} speed={:.0}x",
                s.name,
                sim_s / wall_s.max(1e-9)
            );
        }
    }
    if work.len() > 1 {
        say!("batch runs={} jobs={jobs} wall_s={:.1}", work.len() * runs_per_job, started.elapsed().as_secs_f64());
    }
    Ok(all_passed)
}

/// Adds up coverage files (`run --coverage`) and prints the matrix. Cells nobody reached are
/// shown, not failed: a run explores what its seeds drew.
fn coverage(paths: &[String]) -> Result<bool, String> {
    if paths.is_empty() {
        return Err("coverage needs a file written by run --coverage".into());
    }
    let mut tally = kaas_sim::coverage::Tally::default();
    for path in paths {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let world: kaas_sim::coverage::WorldCells =
                serde_json::from_str(line).map_err(|e| format!("{path}:{}: {e}", n + 1))?;
            tally.add(&world);
        }
    }
    let (table, _) = tally.render();
    say!("{}", table.trim_end());
    Ok(true)
}

/// Prints one run's line (and violations); writes its seed file if it failed and `keep` says so.
fn report(job: &Job, result: &RunResult, wall_s: f64, keep: bool) {
    say!(
        "seed={} scenario={} result={} trace={:016x} sim_s={:.3} wall_s={:.3}",
        job.seed,
        job.scenario.name,
        if result.pass { "pass" } else { "fail" },
        result.trace,
        result.sim_seconds,
        wall_s
    );
    for v in result.violations.iter().take(VIOLATIONS_SHOWN) {
        say!("  violation: {v}");
    }
    if result.violations.len() > VIOLATIONS_SHOWN {
        say!("  ... and {} more violations", result.violations.len() - VIOLATIONS_SHOWN);
    }
    if let Some(history) = &result.history {
        say!("  history: {history}");
    }
    if !result.pass && keep {
        // A failure under a deliberate bug is expected: its seed file stays out of sim-seeds/.
        let dir = if job.mutant.is_some() { "target/sim-mutants" } else { "sim-seeds" };
        let prefix = job.mutant.map(|m| format!("{}-", m.name())).unwrap_or_default();
        let path = format!("{dir}/{prefix}{}-{}.json", job.scenario.name, job.seed);
        match seed_file(job, result).write(&path) {
            Ok(()) => say!("  reproduce: kaas-sim replay {path}"),
            Err(e) => say!("  cannot write {path}: {e}"),
        }
    }
}

fn seed_file(job: &Job, result: &RunResult) -> SeedFile {
    SeedFile {
        format_version: seedfile::FORMAT_VERSION,
        scenario: job.scenario.name.to_string(),
        seed: job.seed,
        mutant: job.mutant.map(|m| m.name().to_string()),
        world: job.world.clone(),
        commit: seedfile::COMMIT.to_string(),
        trace: format!("{:016x}", result.trace),
        violations: result.violations.iter().take(VIOLATIONS_SHOWN).cloned().collect(),
        violations_total: result.violations.len(),
        history: result.history.clone(),
        found: None,
    }
}

/// Replays seed files: at the commit that wrote one, its trace must come back exactly; at a
/// later commit, a file of a real finding must pass (the bug stays fixed).
fn replay(paths: &[String]) -> Result<bool, String> {
    if paths.is_empty() {
        return Err("replay needs a seed file".into());
    }
    let mut all_ok = true;
    for path in paths {
        let file = SeedFile::read(path)?;
        let scenario = scenario_named(&file.scenario)?;
        let mutant = file.mutant.as_deref().map(mutant_named).transpose()?;
        let job = Job { scenario, seed: file.seed, world: file.world.clone(), mutant };
        let ran = run_child(&job, Duration::from_secs(WALL_LIMIT_S));
        let trace = format!("{:016x}", ran.result.trace);
        report(&job, &ran.result, ran.wall_s, false);
        let ok = if file.same_commit() {
            let same = trace == file.trace && ran.result.violations.len() == file.violations_total;
            say!(
                "replay {path}: written at this commit; trace {trace} {}",
                if same { "reproduced" } else { "DIFFERS from the file's" }
            );
            same
        } else if mutant.is_some() {
            let caught =
                ran.result.violations.iter().any(|v| mutants::spec(mutant.unwrap()).catches.contains(&class(v)));
            say!(
                "replay {path}: a mutant's world; the mutant is {}",
                if caught { "still caught" } else { "no longer caught" }
            );
            true
        } else {
            say!(
                "replay {path}: written at {}; {}",
                file.commit,
                if ran.result.pass { "passes now (its bug stays fixed)" } else { "FAILS again" }
            );
            ran.result.pass
        };
        all_ok &= ok;
    }
    Ok(all_ok)
}

/// What the hunt for one mutant came to.
enum Hunt {
    Caught {
        seed: u64,
        scenario: &'static str,
        violation: String,
        tried: usize,
    },
    /// A world failed with the mutant off too: a real bug, its seed file written.
    ControlFailed {
        seed: u64,
        scenario: &'static str,
        violation: String,
    },
    Survived {
        tried: usize,
        other: BTreeMap<String, usize>,
    },
}

/// Searches `seeds` of the mutant's scenarios for a world its bug makes fail with one of its
/// classes, then runs that world without the mutant: only if it passes is the mutant caught.
fn hunt(spec: &MutantSpec, seeds: std::ops::Range<u64>, wall_limit: Duration) -> Hunt {
    let mut tried = 0;
    let mut other: BTreeMap<String, usize> = BTreeMap::new();
    for seed in seeds {
        for name in spec.scenarios {
            let scenario = scenarios::find(name).expect("checked by the catalogue's test");
            let job = Job::drawn(scenario, seed, Some(spec.mutant));
            tried += 1;
            let ran = run_child(&job, wall_limit);
            let Some(violation) = ran.result.violations.iter().find(|v| spec.catches.contains(&class(v))).cloned()
            else {
                if let Some(v) = ran.result.violations.first() {
                    *other.entry(class(v).to_string()).or_default() += 1;
                }
                continue;
            };
            let control = run_child(&Job { mutant: None, ..job.clone() }, wall_limit);
            if control.result.pass {
                return Hunt::Caught { seed, scenario: scenario.name, violation, tried };
            }
            let job = Job { mutant: None, ..job };
            report(&job, &control.result, control.wall_s, true);
            let violation = control.result.violations.first().cloned().unwrap_or_default();
            return Hunt::ControlFailed { seed, scenario: scenario.name, violation };
        }
    }
    Hunt::Survived { tried, other }
}

fn hunt_mutants(args: &[String]) -> Result<bool, String> {
    let mut seeds = 0..200;
    let mut only: Option<Vec<Mutant>> = None;
    let mut jobs = default_jobs();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--seeds" => seeds = parse_range(value()?)?,
            "--only" => only = Some(value()?.split(',').map(mutant_named).collect::<Result<_, _>>()?),
            "--jobs" => jobs = value()?.parse().map_err(|_| "--jobs needs a number")?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    let specs: Vec<&MutantSpec> =
        mutants::SPECS.iter().filter(|s| only.as_ref().is_none_or(|o| o.contains(&s.mutant))).collect();
    let wall_limit = Duration::from_secs(WALL_LIMIT_S);
    let next = Mutex::new(0usize);
    let results: Mutex<BTreeMap<usize, (Hunt, f64)>> = Mutex::new(BTreeMap::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let i = {
                        let mut n = next.lock().unwrap();
                        let i = *n;
                        *n += 1;
                        i
                    };
                    let Some(spec) = specs.get(i) else { return };
                    let started = Instant::now();
                    let found = hunt(spec, seeds.clone(), wall_limit);
                    results.lock().unwrap().insert(i, (found, started.elapsed().as_secs_f64()));
                }
            });
        }
    });
    let mut all_caught = true;
    for (i, (found, wall_s)) in results.into_inner().unwrap() {
        let spec = specs[i];
        let name = spec.mutant.name();
        match found {
            Hunt::Caught { seed, scenario, violation, tried } => say!(
                "mutant={name} caught seed={seed} scenario={scenario} class={} passes-without-the-mutant=yes runs={tried} wall_s={wall_s:.1}\n  violation: {violation}",
                class(&violation)
            ),
            Hunt::ControlFailed { seed, scenario, violation } => {
                all_caught = false;
                say!(
                    "mutant={name} NOT CAUGHT: seed={seed} scenario={scenario} fails without the mutant too (a real bug; seed file written)\n  violation: {violation}"
                );
            }
            Hunt::Survived { tried, other } => {
                all_caught = false;
                say!(
                    "mutant={name} SURVIVED seeds {}..{} ({tried} runs; wanted one of {:?}; other verdicts: {other:?}) wall_s={wall_s:.1}",
                    seeds.start,
                    seeds.end,
                    spec.catches
                );
            }
        }
    }
    Ok(all_caught)
}
