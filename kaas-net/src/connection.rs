//! One client connection. The reader decodes each frame and hands it to its API handler in
//! arrival order; a handler either answers at once or returns a future (produce waiting for its
//! fsync, fetch long-polling), so later requests are not held behind it. The writer sends the
//! answers in request order, as Kafka's protocol requires.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use kaas_core::Broker;
use kaas_core::env::{Clock, Env, Spawner};
use kaas_core::metrics::BrokerMetrics;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::Instrument;

use crate::api;
use crate::frame::{self, FrameError};
use crate::sasl::{Auth, Mechanisms, Verdict};
use crate::server::ShutdownSignal;

/// Requests accepted on one connection and not yet answered.
pub const IN_FLIGHT_MAX: usize = 64;

/// What goes back for one request.
pub enum Response {
    /// A response body (header included, size prefix not), and the error codes it carries
    /// (none but the non-zero ones), for the operators' counts.
    Frame(Bytes, Vec<i16>),
    /// No answer at all: acks=0 produce.
    Nothing,
    /// The broker cannot answer this request correctly: close rather than send garbage.
    Close,
}
pub type Deferred = Pin<Box<dyn Future<Output = Response> + Send>>;

/// What a handler gives back.
pub enum Answer {
    Now(Response),
    Later(Deferred),
}

/// What the handlers may know of the connection.
pub struct Context<E: Env> {
    pub broker: Broker<E>,
    pub peer: String,
    /// The listener the connection came in on: clients are told the brokers' addresses on it.
    pub listener: Arc<str>,
    /// Who the client is (`User:NAME` once SASL authenticated it, else `User:ANONYMOUS`).
    pub principal: String,
    /// This connection's number on its broker: its share sessions are tied to it.
    pub connection_id: u64,
    /// A broker of this cluster calls (it proved it knows the cluster's secret, KAAS-BROKER):
    /// a broker's own calls (markers, verification) are its, and the ACLs do not apply.
    pub from_broker: bool,
    /// Until when the connection is muted for its client's quotas (`throttle.rs`).
    pub mute: crate::throttle::Mute,
}

impl<E: Env> Context<E> {
    /// Who asks, for the authorizer: the principal and the client's address without its port.
    pub fn requester(&self) -> kaas_core::acl::authorizer::Requester<'_> {
        kaas_core::acl::authorizer::Requester { principal: &self.principal, host: host_of(&self.peer) }
    }

    /// Whether the client may do `operation` on `resource`.
    pub fn authorized(&self, operation: kaas_core::acl::Operation, resource: kaas_core::acl::Resource) -> bool {
        self.from_broker || self.broker.authorized(self.requester(), operation, resource)
    }
}

/// A peer's address without its port (`10.0.0.1` of `10.0.0.1:5000`, `::1` of `[::1]:5000`).
pub fn host_of(peer: &str) -> &str {
    let host = match peer.parse::<std::net::SocketAddr>() {
        Ok(_) => peer.rsplit_once(':').map_or(peer, |(h, _)| h),
        Err(_) => peer,
    };
    host.trim_start_matches('[').trim_end_matches(']')
}

/// A request's id in the logs: the connection's number and the request's correlation id.
struct RequestId(u64, i32);

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.0, self.1)
    }
}

/// The span a request is served in: whatever is logged while serving it names the request and
/// who sent it.
fn request_span(connection_id: u64, principal: &str, frame: &Bytes) -> tracing::Span {
    if frame.len() < 8 {
        return tracing::Span::none();
    }
    let api = i16::from_be_bytes([frame[0], frame[1]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    tracing::info_span!("request", id = %RequestId(connection_id, correlation_id), api, principal)
}

enum Slot {
    Ready(Response),
    Waiting(oneshot::Receiver<Response>),
}

pub async fn serve<E: Env, S>(
    broker: Broker<E>,
    stream: S,
    peer: String,
    listener: Arc<str>,
    certified: Option<String>,
    sasl: Option<Arc<dyn Mechanisms>>,
    mut shutdown: ShutdownSignal,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let max_bytes = broker.config.socket_request_max_bytes;
    let max_unauthenticated = broker.config.sasl_server_max_receive_size.min(max_bytes);
    let spawner = broker.env.spawner().clone();
    let connection_id = broker.next_connection_id();
    // Peers call on the inter-broker listener, and prove there that they are brokers.
    let peers: Option<Arc<dyn Mechanisms>> = (*listener == *broker.config.inter_broker_listener_name).then(|| {
        Arc::new(crate::broker_auth::BrokerMechanism { env: broker.env.clone(), secret: broker.broker_secret.clone() })
            as Arc<dyn Mechanisms>
    });
    let mut auth = Auth::new(sasl, peers).with_max_reauth_ms(broker.config.connections_max_reauth_ms);
    // A client certificate names the principal of an SSL listener's connection; SASL's, once
    // authenticated, wins on SASL_SSL, as in Apache.
    let principal_of = |auth: &Auth| match (&certified, auth.is_authenticated()) {
        (Some(user), false) => format!("User:{user}"),
        _ => auth.principal(),
    };
    let principal = principal_of(&auth);
    let metrics = broker.metrics.clone();
    BrokerMetrics::add(&metrics.connections_accepted, 1);
    metrics.connections_open.fetch_add(1, Ordering::Relaxed);
    let mut ctx =
        Context { broker, peer, listener, principal, connection_id, from_broker: false, mute: Default::default() };
    let clock = ctx.broker.env.clock().clone();
    let (mut reader, writer) = tokio::io::split(stream);
    let (slots, slots_rx) = mpsc::channel(IN_FLIGHT_MAX);
    let (written, all_written) = oneshot::channel::<()>();
    let writer_metrics = metrics.clone();
    spawner.spawn("connection-writer", async move {
        write_responses(writer, slots_rx, &writer_metrics).await;
        drop(written);
    });
    loop {
        let frame = tokio::select! {
            biased;
            _ = shutdown.wait_for(|stop| *stop) => break,
            // Before authenticating, a client may send only small requests
            // (`sasl.server.max.receive.size`), so an unknown one cannot make the broker
            // hold 100 MiB for it.
            frame = frame::read_frame(&mut reader, if auth.pending() { max_unauthenticated } else { max_bytes }) => frame,
        };
        let frame = match frame {
            Ok(frame) => {
                BrokerMetrics::add(&metrics.bytes_in, frame.len() as u64 + 4);
                frame
            }
            Err(FrameError::Closed) => break,
            Err(FrameError::TooLarge(size)) => {
                tracing::warn!(peer = %ctx.peer, size, "request size out of bounds: closing the connection");
                break;
            }
            Err(FrameError::Io(e)) => {
                tracing::debug!(peer = %ctx.peer, error = %e, "connection read failed");
                break;
            }
        };
        // A throttled client's next request waits out its mute (KIP-219).
        let muted_ms = ctx.mute.remaining_ms(clock.now_ms());
        if muted_ms > 0 {
            tokio::select! {
                biased;
                _ = shutdown.wait_for(|stop| *stop) => break,
                _ = clock.sleep_ms(muted_ms) => {}
            }
        }
        let mut closing = false;
        // What the answer is timed and counted under (a frame too short has no header: it
        // closes the connection before anything is answered).
        let api = (frame.len() >= 4).then(|| {
            (i16::from_be_bytes([frame[0], frame[1]]), i16::from_be_bytes([frame[2], frame[3]]), clock.monotonic())
        });
        let verdict = auth.check(&frame, clock.now_ms());
        let span = request_span(ctx.connection_id, &ctx.principal, &frame);
        let dispatched = match verdict {
            Verdict::Serve => api::dispatch(&ctx, frame).instrument(span.clone()).await,
            Verdict::Answer(response) => {
                ctx.principal = principal_of(&auth);
                ctx.from_broker = auth.is_broker();
                Ok(Answer::Now(response))
            }
            Verdict::Refuse(response, why) => {
                // Answered late (connection.failed.authentication.delay.ms), so that guessing
                // is slow; then the connection closes.
                tracing::info!(peer = %ctx.peer, listener = %ctx.listener, why = %why, "SASL authentication failed");
                BrokerMetrics::add(&metrics.authentication_failures, 1);
                closing = true;
                let clock = clock.clone();
                let delay_ms = ctx.broker.config.connection_failed_authentication_delay_ms;
                Ok(Answer::Later(Box::pin(async move {
                    clock.sleep_ms(delay_ms).await;
                    response
                })))
            }
            Verdict::Close(why) => {
                tracing::info!(peer = %ctx.peer, listener = %ctx.listener, why = %why, "closing the connection");
                break;
            }
        };
        let slot = match dispatched {
            Ok(Answer::Now(response)) => {
                account(&metrics, &clock, api, &response);
                Slot::Ready(response)
            }
            Ok(Answer::Later(deferred)) => {
                let (tx, rx) = oneshot::channel();
                let (metrics, clock) = (metrics.clone(), clock.clone());
                spawner.spawn("deferred-response", async move {
                    let response = deferred.instrument(span).await;
                    account(&metrics, &clock, api, &response);
                    let _ = tx.send(response);
                });
                Slot::Waiting(rx)
            }
            Err(why) => {
                tracing::warn!(peer = %ctx.peer, why = %why, "undecodable request: closing the connection");
                break;
            }
        };
        if slots.send(slot).await.is_err() || closing {
            break; // the writer failed (the peer is gone), or authentication did
        }
    }
    // The connection is over when the writer has answered everything read before the end.
    drop(slots);
    let _ = all_written.await;
    // Its share sessions end with it, and what their members acquired is let go.
    ctx.broker.share_connection_closed(ctx.connection_id).await;
    metrics.connections_open.fetch_sub(1, Ordering::Relaxed);
}

/// Counts an answer for the operators: its time since the request was read, by API and
/// version, and its error codes.
fn account<C: Clock>(metrics: &BrokerMetrics, clock: &C, api: Option<(i16, i16, Instant)>, response: &Response) {
    let Some((key, version, read_at)) = api else { return };
    let micros = clock.monotonic().saturating_duration_since(read_at).as_micros();
    metrics.request_duration(key, version, u64::try_from(micros).unwrap_or(u64::MAX));
    if let Response::Frame(_, errors) = response {
        metrics.errors(key, errors.iter().copied());
    }
}

async fn write_responses<W: AsyncWrite + Unpin>(writer: W, mut slots: mpsc::Receiver<Slot>, metrics: &BrokerMetrics) {
    let mut writer = BufWriter::new(writer);
    while let Some(slot) = slots.recv().await {
        let response = match slot {
            Slot::Ready(response) => response,
            Slot::Waiting(rx) => match rx.await {
                Ok(response) => response,
                Err(_) => break, // a handler died: the connection cannot answer in order any more
            },
        };
        let body = match response {
            Response::Frame(body, _) => body,
            Response::Nothing => continue,
            Response::Close => break,
        };
        if writer.write_all(&frame::frame(&body)).await.is_err() {
            return;
        }
        BrokerMetrics::add(&metrics.bytes_out, body.len() as u64 + 4);
        // Flush when nothing else is ready, so pipelined answers share a write.
        if slots.is_empty() && writer.flush().await.is_err() {
            return;
        }
    }
    let _ = writer.flush().await;
    let _ = writer.shutdown().await;
}
