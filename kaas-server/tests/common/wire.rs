//! One Kafka request at a time over a blocking socket, with kafka-protocol's structs: for tests
//! that check what kaas answers field by field, as no client library shows it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

pub struct Wire {
    stream: TcpStream,
    correlation_id: i32,
    client_id: String,
}

impl Wire {
    pub fn connect(bootstrap: &str) -> Wire {
        let stream = TcpStream::connect(bootstrap).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Wire { stream, correlation_id: 0, client_id: "kaas-wire-test".into() }
    }

    /// The client id the requests carry from now on.
    pub fn with_client_id(mut self, client_id: &str) -> Wire {
        self.client_id = client_id.into();
        self
    }

    /// Connects and authenticates with SASL/PLAIN; panics if refused.
    pub fn connect_plain(bootstrap: &str, user: &str, password: &str) -> Wire {
        use kafka_protocol::messages::{
            SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
        };
        let mut wire = Wire::connect(bootstrap);
        let handshake = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
        let answer: SaslHandshakeResponse = wire.call(ApiKey::SaslHandshake, 1, &handshake);
        assert_eq!(answer.error_code, 0, "SaslHandshake PLAIN");
        let token = Bytes::from(format!("\0{user}\0{password}"));
        let authenticate = SaslAuthenticateRequest::default().with_auth_bytes(token);
        let answer: SaslAuthenticateResponse = wire.call(ApiKey::SaslAuthenticate, 2, &authenticate);
        assert_eq!(answer.error_code, 0, "SASL/PLAIN as {user}");
        wire
    }

    /// Sends `request` as `version` of `key` and decodes the answer.
    pub fn call<Req: Encodable, Resp: Decodable>(&mut self, key: ApiKey, version: i16, request: &Req) -> Resp {
        self.correlation_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_string(self.client_id.clone())));
        let mut body = BytesMut::new();
        header.encode(&mut body, key.request_header_version(version)).expect("encode header");
        request.encode(&mut body, version).expect("encode request");
        let mut frame = (body.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(&body);
        self.stream.write_all(&frame).expect("send");
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).expect("response size");
        let mut answer = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut answer).expect("response");
        let mut answer = Bytes::from(answer);
        let header = ResponseHeader::decode(&mut answer, key.response_header_version(version)).expect("header");
        assert_eq!(header.correlation_id, self.correlation_id);
        Resp::decode(&mut answer, version).expect("decode response")
    }
}

/// A batch of `count` records from a producer, as a client encodes it.
pub fn batch(producer: (i64, i16), base_sequence: i32, count: i32, transactional: bool) -> Bytes {
    encode_batch(producer, base_sequence, count, transactional, |i| {
        (None, Bytes::from(format!("value-{i}")), TIMESTAMP)
    })
}

/// A batch of `count` records of `value_len` bytes each, from no producer in particular.
pub fn batch_of(count: i32, value_len: usize) -> Bytes {
    encode_batch((-1, -1), 0, count, false, |_| (None, Bytes::from(vec![b'x'; value_len]), TIMESTAMP))
}

/// A batch from no producer in particular of one record per (key, timestamp).
pub fn keyed_batch(records: &[(Option<&str>, i64)]) -> Bytes {
    encode_batch((-1, -1), 0, records.len() as i32, false, |i| {
        let (key, timestamp) = records[i as usize];
        (key.map(|k| Bytes::copy_from_slice(k.as_bytes())), Bytes::from(format!("value-{i}")), timestamp)
    })
}

/// The records' timestamps where a test does not choose them (2026-01-01), plus their index.
const TIMESTAMP: i64 = 1_767_225_600_000;

fn encode_batch(
    producer: (i64, i16),
    base_sequence: i32,
    count: i32,
    transactional: bool,
    record: impl Fn(i32) -> (Option<Bytes>, Bytes, i64),
) -> Bytes {
    use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
    let records: Vec<Record> = (0..count)
        .map(|i| (i, record(i)))
        .map(|(i, (key, value, timestamp))| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: producer.0,
            producer_epoch: producer.1,
            timestamp_type: TimestampType::Creation,
            offset: i64::from(i),
            sequence: if producer.0 < 0 { i - 1 } else { base_sequence + i },
            timestamp: timestamp + i64::from(i),
            key,
            value: Some(value),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions { version: 2, compression: Compression::None };
    RecordBatchEncoder::encode(&mut buf, &records, &options).expect("encodes");
    buf.freeze()
}
