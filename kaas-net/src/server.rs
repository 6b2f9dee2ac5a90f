//! The accept loop: one connection actor per client, bounded in number, all stopped by one
//! shutdown signal.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use kaas_core::Broker;
use kaas_core::env::{Clock, Env, Listener, Net, Spawner};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Semaphore, watch};

use crate::connection;
use crate::sasl::Mechanisms;

/// Connections served at once; further clients wait in the listen backlog.
pub const CONNECTIONS_MAX: usize = 10_000;
/// On shutdown, how long open connections get to answer what they have already read.
const DRAIN_MS_MAX: u64 = 10_000;
const ACCEPT_BACKOFF_MS_MAX: u64 = 1000;

/// How long a connection may take over its listener's handshake (TLS) before it is closed.
const HANDSHAKE_MS_MAX: u64 = 10_000;

/// Flipped to true once to stop accepting and close every connection between requests.
pub type ShutdownSignal = watch::Receiver<bool>;

/// A connection's byte stream, once its listener's handshake is done.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// A connection as the env's network accepts it.
pub type Accepted<E> = <<<E as Env>::Net as Net>::Listener as Listener>::Stream;

/// Makes an accepted connection the stream requests are read from: a TLS handshake, and the
/// name the client's certificate gives it, if it presented one. It runs on the connection's
/// own task, so a slow client holds up no other.
pub type Handshake<S> = Arc<dyn Fn(S) -> Pin<Box<dyn Future<Output = io::Result<Handshaken>> + Send>> + Send + Sync>;

/// A connection after its listener's handshake: its stream, and the user its certificate names.
pub type Handshaken = (Box<dyn Stream>, Option<String>);

/// The client side of the inter-broker listener's handshake, for this broker's calls to its
/// peers (TLS on an SSL or SASL_SSL inter-broker listener): the connected stream and the peer's
/// advertised host, which its certificate must name.
pub type PeerHandshake<S> =
    Arc<dyn Fn(S, String) -> Pin<Box<dyn Future<Output = io::Result<Box<dyn Stream>>> + Send>> + Send + Sync>;

/// One listener as the server serves it: its name (clients are told the addresses on it) and
/// its handshake, if it is not PLAINTEXT.
pub struct ListenerSpec<S> {
    pub name: Arc<str>,
    pub handshake: Option<Handshake<S>>,
    /// The SASL mechanisms clients must authenticate by first, on a SASL listener.
    pub sasl: Option<Arc<dyn Mechanisms>>,
    /// On the inter-broker listener, how this broker's calls to its peers are secured as the
    /// listener's own connections are (None: PLAINTEXT).
    pub peer_handshake: Option<PeerHandshake<S>>,
}

impl<S> ListenerSpec<S> {
    pub fn plaintext(name: &str) -> Self {
        ListenerSpec { name: Arc::from(name), handshake: None, sasl: None, peer_handshake: None }
    }
}

pub struct Server<E: Env> {
    broker: Broker<E>,
    listener: <E::Net as Net>::Listener,
    spec: ListenerSpec<Accepted<E>>,
    /// Whether this server also serves the peers' calls (one server per broker does).
    peers: bool,
}

impl<E: Env> Server<E> {
    /// The server of the broker's one PLAINTEXT listener.
    pub fn new(broker: Broker<E>, listener: <E::Net as Net>::Listener) -> Self {
        Server { broker, listener, spec: ListenerSpec::plaintext("PLAINTEXT"), peers: true }
    }

    /// The server of one of the broker's listeners; `peers`: the one that also serves peers'
    /// calls.
    pub fn listener(
        broker: Broker<E>,
        listener: <E::Net as Net>::Listener,
        spec: ListenerSpec<Accepted<E>>,
        peers: bool,
    ) -> Self {
        Server { broker, listener, spec, peers }
    }

    /// Accepts until `shutdown` turns true, then waits (a bounded time) for every connection
    /// to answer the requests it has read and close.
    pub async fn run(self, mut shutdown: ShutdownSignal) {
        if let Some(calls) = self.peers.then(|| self.broker.peers.attach()).flatten() {
            let env = self.broker.env.clone();
            let me = crate::peers::Me::new(self.broker.config.broker_id, self.broker.broker_secret.clone());
            let peers = crate::peers::serve(env, me, self.spec.peer_handshake.clone(), calls, shutdown.clone());
            self.broker.env.spawner().spawn("peers", peers);
        }
        let limit = Arc::new(Semaphore::new(CONNECTIONS_MAX));
        let mut backoff_ms = 1;
        let config = self.broker.config.clone();
        // The inter-broker listener's connections do not count towards `max.connections`,
        // unless it is the broker's only listener (as Apache protects it).
        let clients = *self.spec.name != *config.inter_broker_listener_name || config.advertised_listeners.len() <= 1;
        let open = self.broker.open_connections.clone();
        loop {
            let permit = limit.clone().acquire_owned().await.expect("semaphore is never closed");
            let accepted = tokio::select! {
                biased;
                _ = shutdown.wait_for(|stop| *stop) => break,
                // Beyond `max.connections`, clients wait in the listen backlog, as in Apache.
                accepted = async {
                    if clients {
                        open.room(&config).await;
                    }
                    self.listener.accept().await
                } => accepted,
            };
            match accepted {
                Ok((stream, peer)) => {
                    backoff_ms = 1;
                    let slot = match open.open(&config, connection::host_of(&peer), clients) {
                        Ok(slot) => slot,
                        Err(refused) => {
                            kaas_core::metrics::BrokerMetrics::add(&self.broker.metrics.connections_refused, 1);
                            tracing::info!(%peer, listener = %self.spec.name, limit = refused.limit, "too many connections from this address: closed");
                            continue;
                        }
                    };
                    let broker = self.broker.clone();
                    let shutdown = shutdown.clone();
                    let (name, handshake) = (self.spec.name.clone(), self.spec.handshake.clone());
                    let sasl = self.spec.sasl.clone();
                    self.broker.env.spawner().spawn("connection", async move {
                        match handshake {
                            None => connection::serve(broker, stream, peer, name, None, sasl, shutdown).await,
                            Some(handshake) => {
                                let clock = broker.env.clock().clone();
                                let done = tokio::select! {
                                    biased;
                                    done = handshake(stream) => done,
                                    _ = clock.sleep_ms(HANDSHAKE_MS_MAX) => {
                                        Err(io::Error::new(io::ErrorKind::TimedOut, "handshake took too long"))
                                    }
                                };
                                match done {
                                    Ok((stream, user)) => {
                                        connection::serve(broker, stream, peer, name, user, sasl, shutdown).await
                                    }
                                    Err(e) => tracing::info!(%peer, listener = %name, error = %e, "handshake failed: connection closed"),
                                }
                            }
                        }
                        drop((permit, slot));
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
