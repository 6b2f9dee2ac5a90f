//! The accept loop: one connection actor per client, bounded in number, all stopped by one
//! shutdown signal.

use std::sync::Arc;

use kaas_core::Broker;
use kaas_core::env::{Clock, Env, Listener, Spawner};
use tokio::sync::{Semaphore, watch};

use crate::connection;

/// Connections served at once; further clients wait in the listen backlog.
pub const CONNECTIONS_MAX: usize = 10_000;
/// On shutdown, how long open connections get to answer what they have already read.
const DRAIN_MS_MAX: u64 = 10_000;
const ACCEPT_BACKOFF_MS_MAX: u64 = 1000;

/// Flipped to true once to stop accepting and close every connection between requests.
pub type ShutdownSignal = watch::Receiver<bool>;

pub struct Server<E: Env> {
    broker: Broker<E>,
    listener: <E::Net as kaas_core::env::Net>::Listener,
}

impl<E: Env> Server<E> {
    pub fn new(broker: Broker<E>, listener: <E::Net as kaas_core::env::Net>::Listener) -> Self {
        Server { broker, listener }
    }

    /// Accepts until `shutdown` turns true, then waits (a bounded time) for every connection
    /// to answer the requests it has read and close.
    pub async fn run(self, mut shutdown: ShutdownSignal) {
        if let Some(calls) = self.broker.peers.attach() {
            let env = self.broker.env.clone();
            let peers = crate::peers::serve(env, self.broker.config.broker_id, calls, shutdown.clone());
            self.broker.env.spawner().spawn("peers", peers);
        }
        let limit = Arc::new(Semaphore::new(CONNECTIONS_MAX));
        let mut backoff_ms = 1;
        loop {
            let permit = limit.clone().acquire_owned().await.expect("semaphore is never closed");
            let accepted = tokio::select! {
                biased;
                _ = shutdown.wait_for(|stop| *stop) => break,
                accepted = self.listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, peer)) => {
                    backoff_ms = 1;
                    let broker = self.broker.clone();
                    let shutdown = shutdown.clone();
                    self.broker.env.spawner().spawn("connection", async move {
                        connection::serve(broker, stream, peer, shutdown).await;
                        drop(permit);
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, backoff_ms, "accept failed");
                    self.broker.env.clock().sleep_ms(backoff_ms).await;
                    backoff_ms = (backoff_ms * 2).min(ACCEPT_BACKOFF_MS_MAX);
                }
            }
        }
        // Each connection holds a permit until its last answer is written.
        let all = u32::try_from(CONNECTIONS_MAX).expect("fits");
        tokio::select! {
            biased;
            _ = limit.acquire_many(all) => {}
            _ = self.broker.env.clock().sleep_ms(DRAIN_MS_MAX) => {
                tracing::warn!("connections still open after {DRAIN_MS_MAX} ms of shutdown: dropping them");
            }
        }
    }
}
