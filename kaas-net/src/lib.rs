//! kaas-net: the Kafka wire protocol in front of kaas-core. Framing, one module per API under
//! `api/`, connection handling and the accept loop. Kafka wire types stop here: handlers
//! translate them into kaas-core commands and core errors back into Kafka error codes.

pub mod api;
pub mod broker_auth;
pub mod connection;
pub mod error;
pub mod frame;
pub mod fuzz;
pub mod peers;
pub mod sasl;
pub mod server;
pub mod throttle;

pub use server::{Server, ShutdownSignal};
