//! Connection limits on a real broker: `max.connections.per.ip` closes one connection too many
//! from an address at once, `max.connections` keeps one too many waiting until another
//! closes, and before SASL authentication a request larger than `sasl.server.max.receive.size`
//! closes its connection.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::Kaas;

/// ApiVersions v0 (header: key 18, version 0, correlation id 1, client id "t").
const API_VERSIONS: [u8; 15] = [0, 0, 0, 11, 0, 18, 0, 0, 0, 0, 0, 1, 0, 1, b't'];

fn connect(bootstrap: &str) -> TcpStream {
    let s = TcpStream::connect(bootstrap).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Sends ApiVersions: whether it is answered (false: the broker closed the connection).
fn answered(s: &mut TcpStream) -> bool {
    if s.write_all(&API_VERSIONS).is_err() {
        return false;
    }
    let mut size = [0u8; 4];
    match s.read_exact(&mut size) {
        Ok(()) => {
            let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
            s.read_exact(&mut body).is_ok()
        }
        Err(e) if matches!(e.kind(), ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset) => false,
        Err(e) => panic!("neither answered nor closed: {e}"),
    }
}

#[test]
fn one_connection_too_many_from_an_address_is_closed() {
    let kaas = Kaas::start("limits-per-ip", &["max.connections.per.ip=2"]);
    let mut first = connect(&kaas.bootstrap());
    let mut second = connect(&kaas.bootstrap());
    assert!(answered(&mut first) && answered(&mut second));
    let mut third = connect(&kaas.bootstrap());
    assert!(!answered(&mut third), "a third connection from 127.0.0.1 is closed");
    drop(first);
    // Once one has closed (and the broker has seen it close), there is room again.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !answered(&mut connect(&kaas.bootstrap())) {
        assert!(Instant::now() < deadline, "no room after a connection closed");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(answered(&mut second), "the open ones are served throughout");
}

#[test]
fn a_client_beyond_max_connections_waits_for_one_to_close() {
    let kaas = Kaas::start("limits-total", &["max.connections=1"]);
    // The start-up probe's connection may still be counted for a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut first = loop {
        let mut s = connect(&kaas.bootstrap());
        s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        if s.write_all(&API_VERSIONS).is_ok() && s.read_exact(&mut [0u8; 4]).is_ok() {
            break s;
        }
        assert!(Instant::now() < deadline, "the first connection was never served");
    };
    let mut drain = [0u8; 4096];
    first.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let _ = first.read(&mut drain);
    let mut second = connect(&kaas.bootstrap());
    second.set_read_timeout(Some(Duration::from_millis(1500))).unwrap();
    second.write_all(&API_VERSIONS).unwrap();
    let mut size = [0u8; 4];
    let waited = second.read_exact(&mut size).unwrap_err();
    assert!(matches!(waited.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut), "not kept waiting: {waited}");
    drop(first);
    second.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    second.read_exact(&mut size).expect("served once the first connection closed");
}

#[test]
fn a_large_request_before_authentication_closes_the_connection() {
    let users = r#"listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";"#;
    let kaas = Kaas::with_sasl("limits-sasl", &[users]);
    let mut small = connect(&kaas.sasl_bootstrap());
    assert!(answered(&mut small), "ApiVersions is served before authentication");
    let mut large = connect(&kaas.sasl_bootstrap());
    let mut frame = (600_000i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&API_VERSIONS[4..]);
    let _ = large.write_all(&frame);
    let mut byte = [0u8; 1];
    let closed = match large.read(&mut byte) {
        Ok(0) => true,
        Err(e) => e.kind() == ErrorKind::ConnectionReset,
        Ok(_) => false,
    };
    assert!(closed, "a 600 000-byte request before authentication is refused");
    // The same size is fine on the PLAINTEXT listener, where nobody authenticates: the broker
    // waits for the rest of it rather than closing.
    let mut plain = connect(&kaas.bootstrap());
    plain.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    plain.write_all(&frame).unwrap();
    let waiting = plain.read(&mut byte).unwrap_err();
    assert!(matches!(waiting.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut), "{waiting}");
}
