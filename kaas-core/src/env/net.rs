//! The network seam: a listener that yields byte streams, and outgoing connections to peer
//! brokers. tokio::net in production, turmoil::net in the simulator.

use std::future::Future;
use std::io;

use tokio::io::{AsyncRead, AsyncWrite};

pub trait Listener: Send + Sync + 'static {
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// The next accepted connection and its peer's address as text.
    fn accept(&self) -> impl Future<Output = io::Result<(Self::Stream, String)>> + Send;
    /// The bound address, with the port the OS chose if it was 0.
    fn local_addr(&self) -> io::Result<String>;
}

pub trait Net: Clone + Send + Sync + 'static {
    type Listener: Listener;
    fn bind(&self, addr: &str) -> impl Future<Output = io::Result<Self::Listener>> + Send;
    /// A connection to a peer broker's advertised endpoint.
    fn connect(
        &self,
        host: &str,
        port: u16,
    ) -> impl Future<Output = io::Result<<Self::Listener as Listener>::Stream>> + Send;
}
