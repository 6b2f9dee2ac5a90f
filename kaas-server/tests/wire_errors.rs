//! Bad input over the wire: every malformed or unsupported request gets a Kafka error or a
//! closed connection, and nothing else: other connections, the process and the data survive.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::Kaas;

fn connect(kaas: &Kaas) -> TcpStream {
    let s = TcpStream::connect(kaas.bootstrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

/// A non-flexible (v1) request header.
fn header(api_key: i16, version: i16, correlation_id: i32) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&api_key.to_be_bytes());
    h.extend_from_slice(&version.to_be_bytes());
    h.extend_from_slice(&correlation_id.to_be_bytes());
    h.extend_from_slice(&4i16.to_be_bytes());
    h.extend_from_slice(b"test");
    h
}

fn read_response(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut size = [0u8; 4];
    s.read_exact(&mut size)?;
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    s.read_exact(&mut body)?;
    Ok(body)
}

/// True if the broker closed the connection (EOF or reset) rather than answering.
fn closed(s: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match s.read(&mut byte) {
        Ok(0) => true,
        Err(e) => e.kind() == ErrorKind::ConnectionReset,
        Ok(_) => false,
    }
}

fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

fn api_versions_v0_works(kaas: &Kaas) {
    let mut s = connect(kaas);
    s.write_all(&frame(&header(18, 0, 1))).unwrap();
    let body = read_response(&mut s).unwrap();
    assert_eq!(i16_at(&body, 4), 0, "ApiVersions v0 succeeds");
}

#[test]
fn unsupported_versions_get_kafka_errors() {
    let kaas = Kaas::start("wire-versions", &[]);

    // ApiVersions at a version from the future: answered in v0 with UNSUPPORTED_VERSION (35)
    // and the supported ranges, Produce among them from version 0.
    let mut s = connect(&kaas);
    let mut h = header(18, 99, 7);
    h.push(0); // the flexible header's empty tagged fields
    s.write_all(&frame(&h)).unwrap();
    let body = read_response(&mut s).unwrap();
    assert_eq!(i32::from_be_bytes(body[0..4].try_into().unwrap()), 7);
    assert_eq!(i16_at(&body, 4), 35);
    let count = i32::from_be_bytes(body[6..10].try_into().unwrap()) as usize;
    let ranges: Vec<(i16, i16, i16)> =
        (0..count).map(|i| (i16_at(&body, 10 + i * 6), i16_at(&body, 12 + i * 6), i16_at(&body, 14 + i * 6))).collect();
    let produce = ranges.iter().find(|r| r.0 == 0).expect("Produce is advertised");
    assert_eq!(produce.1, 0, "Produce is advertised from v0 for librdkafka");

    // Produce v2: every partition is answered with UNSUPPORTED_VERSION, as Kafka 4 does.
    let mut s = connect(&kaas);
    let mut request = header(0, 2, 9);
    request.extend_from_slice(&(-1i16).to_be_bytes()); // acks
    request.extend_from_slice(&1000i32.to_be_bytes()); // timeout
    request.extend_from_slice(&1i32.to_be_bytes()); // one topic
    request.extend_from_slice(&1i16.to_be_bytes());
    request.extend_from_slice(b"t");
    request.extend_from_slice(&1i32.to_be_bytes()); // one partition
    request.extend_from_slice(&0i32.to_be_bytes());
    request.extend_from_slice(&(-1i32).to_be_bytes()); // null records
    s.write_all(&frame(&request)).unwrap();
    let body = read_response(&mut s).unwrap();
    // correlation, [topic: name, [partition, error, base_offset, log_append_time]], throttle
    assert_eq!(i32::from_be_bytes(body[0..4].try_into().unwrap()), 9);
    let error_at = 4 + 4 + 2 + 1 + 4 + 4;
    assert_eq!(i16_at(&body, error_at), 35);
    assert_eq!(body.len(), error_at + 2 + 8 + 8 + 4);
}

#[test]
fn malformed_frames_close_only_their_connection() {
    let mut kaas = Kaas::start("wire-malformed", &[]);
    let mut bystander = connect(&kaas);

    // A size beyond socket.request.max.bytes (100 MiB).
    let mut s = connect(&kaas);
    s.write_all(&200_000_000i32.to_be_bytes()).unwrap();
    assert!(closed(&mut s), "an oversized frame closes its connection");

    // A negative size.
    let mut s = connect(&kaas);
    s.write_all(&(-5i32).to_be_bytes()).unwrap();
    assert!(closed(&mut s));

    // An unknown API key.
    let mut s = connect(&kaas);
    s.write_all(&frame(&header(999, 0, 1))).unwrap();
    assert!(closed(&mut s), "an unknown api closes its connection");

    // A Metadata request whose body stops short.
    let mut s = connect(&kaas);
    let mut request = header(3, 4, 1);
    request.extend_from_slice(&[0, 0]);
    s.write_all(&frame(&request)).unwrap();
    assert!(closed(&mut s), "an undecodable body closes its connection");

    // Noise of every shape on many connections: each is answered or closed, never more.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for i in 0..300 {
        let mut s = connect(&kaas);
        let keys = [0i16, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20, 21, 32, 37, 42, 44, 60];
        let key = keys[(next() % keys.len() as u64) as usize];
        let version = (next() % 14) as i16;
        let mut request = header(key, version, i);
        let len = (next() % 64) as usize;
        request.extend((0..len).map(|_| next() as u8));
        s.write_all(&frame(&request)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        let _ = read_response(&mut s);
    }
    assert!(kaas.is_running(), "no request can bring the broker down");

    // The bystander connection was never disturbed.
    bystander.write_all(&frame(&header(18, 0, 42))).unwrap();
    let body = read_response(&mut bystander).unwrap();
    assert_eq!(i32::from_be_bytes(body[0..4].try_into().unwrap()), 42);
    api_versions_v0_works(&kaas);
}

#[test]
fn share_apis_are_refused_below_their_share_version() {
    // A whole ShareGroupHeartbeat (76, v1, flexible): group "g", member "m", epoch 0, no rack,
    // subscribed to "t". Answered at the default share.version; at 0, which advertises no share
    // group API, it closes its connection as an API kaas does not serve would.
    let mut request = Vec::new();
    request.extend_from_slice(&76i16.to_be_bytes());
    request.extend_from_slice(&1i16.to_be_bytes());
    request.extend_from_slice(&5i32.to_be_bytes());
    request.extend_from_slice(&(-1i16).to_be_bytes()); // no client id
    request.push(0); // no tagged fields
    request.extend_from_slice(&[2, b'g', 2, b'm', 0, 0, 0, 0, 0, 2, 2, b't', 0]);
    let kaas = Kaas::start("wire-share-version-3", &[]);
    let mut s = connect(&kaas);
    s.write_all(&frame(&request)).unwrap();
    let body = read_response(&mut s).expect("answered at share.version 3");
    assert_eq!(i32::from_be_bytes(body[0..4].try_into().unwrap()), 5);
    drop(kaas);
    let kaas = Kaas::start("wire-share-version-0", &["share.version=0"]);
    let mut s = connect(&kaas);
    s.write_all(&frame(&request)).unwrap();
    assert!(closed(&mut s), "a share API below share.version closes its connection");
    // ApiVersions still answers on a new connection.
    let mut s = connect(&kaas);
    s.write_all(&frame(&header(18, 1, 7))).unwrap();
    let body = read_response(&mut s).unwrap();
    assert_eq!(i32::from_be_bytes(body[0..4].try_into().unwrap()), 7);
    assert_eq!(i16::from_be_bytes(body[4..6].try_into().unwrap()), 0, "ApiVersions answers");
}
