//! Running one world in this process and telling what it came to, whatever happens inside:
//! - a panic whose location is in kaas-core or kaas-net is a broker assertion, a named
//!   verdict (`assertion: ...`); any other panic is the harness's (`harness-panic: ...`),
//!   which never counts as catching a mutant;
//! - a run past its wall-clock budget is cut short as a `hang`;
//! - the history of a failed run is written to `target/sim-history/` either way.

use std::cell::{Cell, RefCell};
use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kaas_core::sim::Mutant;

use crate::history::History;
use crate::scenarios::{RunResult, Scenario};

/// Where the histories of failed runs go.
pub const HISTORY_DIR: &str = "target/sim-history";

/// The first panic of this process: (message, file, line).
static FIRST_PANIC: Mutex<Option<(String, String, u32)>> = Mutex::new(None);

thread_local! {
    static WALL_DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    static HISTORY: RefCell<Option<History>> = const { RefCell::new(None) };
}

/// With `KAAS_SIM_LOG` set (an env-filter, e.g. `kaas_core=debug`), the broker's logs go to
/// standard error, stamped with simulated time, never wall time.
pub fn install_logging() {
    struct SimTime;
    impl tracing_subscriber::fmt::time::FormatTime for SimTime {
        fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
            write!(w, "{:>10.3}s", crate::env::world_elapsed().as_secs_f64())
        }
    }
    let Ok(filter) = std::env::var("KAAS_SIM_LOG") else { return };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_timer(SimTime)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

/// Records the first panic (the broker's assertion, if it is one) for `run_world`, then lets
/// the default hook print it.
pub fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        let (file, line) = info.location().map_or((String::new(), 0), |l| (l.file().to_string(), l.line()));
        let mut first = FIRST_PANIC.lock().unwrap_or_else(|e| e.into_inner());
        if first.is_none() {
            *first = Some((message, file, line));
        }
        drop(first);
        default(info);
    }));
}

fn in_broker(file: &str) -> bool {
    ["kaas-core/", "kaas-net/"].iter().any(|crate_dir| file.contains(crate_dir))
}

/// The broker assertion that failed in this process, if one did, as a violation.
pub fn broker_assertion() -> Option<String> {
    let first = FIRST_PANIC.lock().unwrap_or_else(|e| e.into_inner());
    let (message, file, line) = first.as_ref()?;
    in_broker(file).then(|| format!("assertion: {message} (at {file}:{line})"))
}

/// When the running world must give up as a hang.
pub fn wall_deadline() -> Instant {
    WALL_DEADLINE.with(|d| d.get()).unwrap_or_else(|| Instant::now() + Duration::from_secs(3600))
}

/// The history of the world now running, so that a panic does not lose it.
pub fn watch_history(history: &History) {
    HISTORY.with(|h| *h.borrow_mut() = Some(history.clone()));
}

/// Writes the history of a failed run (or of any run with `KAAS_SIM_HISTORY=1`); its path.
pub fn keep_history(history: &History, violations: &[String], scenario: &str, seed: u64) -> Option<String> {
    let wanted = !violations.is_empty() || std::env::var_os("KAAS_SIM_HISTORY").is_some_and(|v| v == "1");
    if !wanted {
        return None;
    }
    let prefix = kaas_core::sim::current().map(|m| format!("{}-", m.name())).unwrap_or_default();
    let path = std::path::Path::new(HISTORY_DIR).join(format!("{prefix}{scenario}-{seed}.jsonl"));
    history.write(&path, scenario, seed)
}

/// Runs `world` of `scenario` with `mutant` switched on, within `wall_limit`.
pub fn run_world(
    scenario: &Scenario,
    seed: u64,
    world: &serde_json::Value,
    mutant: Option<Mutant>,
    wall_limit: Duration,
) -> Result<RunResult, String> {
    kaas_core::sim::set_mutant(mutant);
    WALL_DEADLINE.with(|d| d.set(Some(Instant::now() + wall_limit)));
    HISTORY.with(|h| *h.borrow_mut() = None);
    let started = Instant::now();
    kaas_core::sim::take_reached();
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| (scenario.run)(seed, world)));
    let result: RunResult = match outcome {
        Ok(result) => result?,
        Err(_) => {
            let violation = broker_assertion().unwrap_or_else(|| {
                let first = FIRST_PANIC.lock().unwrap_or_else(|e| e.into_inner());
                let (message, file, line) = first.clone().unwrap_or_default();
                format!("harness-panic: {message} (at {file}:{line})")
            });
            let violations = vec![violation];
            let history = HISTORY.with(|h| h.borrow().clone()).unwrap_or_default();
            let kept = keep_history(&history, &violations, scenario.name, seed);
            RunResult { pass: false, violations, history: kept, ..RunResult::default() }
        }
    };
    kaas_core::sim::set_mutant(None);
    let reached = kaas_core::sim::take_reached();
    Ok(RunResult { wall_seconds: started.elapsed().as_secs_f64(), reached, ..result })
}
