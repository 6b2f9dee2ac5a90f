//! kaas-core: the broker as actors and state machines. Every effect on the world goes through
//! the `env` seams, so the same code runs in production and inside the simulator.

pub mod broker;
pub mod config;
pub mod env;
pub mod error;
pub mod group;
pub mod log;
pub mod partition;
pub mod topics;

pub use broker::Broker;
pub use config::BrokerConfig;
pub use error::{CoreError, CoreResult};
