//! kaas-core: the broker as actors and state machines. Every effect on the world goes through
//! the `env` seams, so the same code runs in production and inside the simulator.

/// True when the named simulation mutant (`sim::Mutant`) is on. Always false without the
/// `sim` feature: production builds carry no mutant code.
#[macro_export]
macro_rules! mutant {
    ($name:ident) => {{
        #[cfg(feature = "sim")]
        {
            $crate::sim::active($crate::sim::Mutant::$name)
        }
        #[cfg(not(feature = "sim"))]
        {
            false
        }
    }};
}

/// True when the BUGGIFY site named by the string fires on this visit (`sim::buggify`): a
/// simulation widening a race window. Always false without the `sim` feature.
#[macro_export]
macro_rules! buggify {
    ($site:literal) => {{
        #[cfg(feature = "sim")]
        {
            $crate::sim::buggify($site)
        }
        #[cfg(not(feature = "sim"))]
        {
            false
        }
    }};
}

/// True when the simulator armed this crash point and this is its visit (`sim::crash_point`):
/// the caller parks, and the simulator crashes the host. Always false without the `sim` feature.
#[macro_export]
macro_rules! crash_point {
    ($site:literal) => {{
        #[cfg(feature = "sim")]
        {
            $crate::sim::crash_point($site)
        }
        #[cfg(not(feature = "sim"))]
        {
            false
        }
    }};
}

/// Where an armed crash point parks its caller: the simulator crashes the host at the end of
/// the step, so nothing after the point runs.
pub(crate) async fn park_for_crash() {
    std::future::pending::<()>().await
}

/// Whether this build carries the simulator's hooks (mutants, BUGGIFY, crash points): true only
/// when kaas-core's `sim` feature is on, as in `kaas-sim` or a `--workspace` build that unifies
/// features. A production binary must say false.
pub const SIM_HOOKS: bool = cfg!(feature = "sim");

pub mod acl;
pub mod broker;
pub mod cluster;
pub mod config;
pub mod env;
pub mod error;
pub mod group;
pub mod hex;
pub mod metrics;
pub mod participant;
pub mod partition;
pub mod quota;
#[cfg(feature = "sim")]
pub mod sim;
pub mod topics;
pub mod txn;

/// Counts a visit of a cell of the simulator's corner-case matrix (`kaas-sim coverage`); a
/// production build counts nothing.
pub fn reach(cell: &str) {
    #[cfg(feature = "sim")]
    sim::reach(cell);
    #[cfg(not(feature = "sim"))]
    let _ = cell;
}

pub use broker::Broker;
pub use config::BrokerConfig;
pub use error::{CoreError, CoreResult};
