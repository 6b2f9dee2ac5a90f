//! kaas-sim: the real broker in a simulated world. Broker hosts run the production kaas-core
//! and kaas-net code over turmoil's network and clock and one shared `SimVolume`; simulated
//! clients speak the Kafka wire protocol and route by Metadata and FindCoordinator; every run
//! is a pure function of its world, and a world is a pure function of its seed.

pub mod checkers;
pub mod client;
pub mod coverage;
pub mod env;
pub mod faults;
pub mod history;
pub mod hosts;
pub mod mutants;
pub mod runner;
pub mod scenarios;
pub mod seedfile;
pub mod volume;
pub mod workloads;
