//! The simulator's Kafka client: `kaas-client` over turmoil's network, recording into the
//! run's history. Brokers are reached by host name on `BROKER_PORT`, the port every simulated
//! broker listens on.

use std::sync::Arc;

pub use kaas_client::*;

use crate::history::History;
use crate::hosts::BROKER_PORT;

/// turmoil's TCP: an address is a host's name.
pub struct SimNet;

impl Connector for SimNet {
    fn address(&self, host: &str, _port: i32) -> String {
        host.to_string()
    }

    fn connect<'a>(&'a self, address: &'a str) -> Connecting<'a> {
        Box::pin(async move {
            let stream = turmoil::net::TcpStream::connect((address, BROKER_PORT)).await?;
            Ok(Box::new(stream) as BoxStream)
        })
    }

    fn now_ms(&self) -> i64 {
        crate::scenarios::common::now_ms()
    }
}

impl Recorder for History {
    fn record(&self, client: &str, op: &str, outcome: &str, detail: serde_json::Value) {
        History::record(self, client, op, outcome, detail);
    }
}

/// A client named `name` of the simulated brokers `bootstrap`, recording into `history`.
pub fn new(name: &str, bootstrap: &[String], history: &History) -> Client {
    Client::new(name, bootstrap, Arc::new(SimNet), Arc::new(history.clone()))
}

/// One connection to the simulated broker `host`.
pub async fn connect(host: &str) -> std::io::Result<WireClient> {
    let stream = SimNet.connect(host).await?;
    Ok(WireClient::new(stream, "kaas-sim"))
}
