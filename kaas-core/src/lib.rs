//! kaas-core: the broker as actors and state machines. Every effect on the world goes through
//! the `env` seams, so the same code runs in production and inside the simulator.

pub mod env;
pub mod log;
