//! The fuzz targets (`fuzz/`, run with cargo-fuzz by `ci/fuzz.sh`) in the test suite, bounded:
//! each runs over its regressions (`fuzz/seeds/<target>/`) and whatever local coverage-guided
//! runs kept, then over seeded mutations of well-formed inputs for `KAAS_FUZZ_SECONDS` (default
//! 5) per target. A panic anywhere fails the test with the input, which belongs in the seeds
//! once fixed. The last test is the same fuzzer at a running broker's SASL and TLS listeners.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, StrBytes};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn budget() -> Duration {
    let seconds = std::env::var("KAAS_FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    Duration::from_secs(seconds)
}

/// The target's committed regressions (`fuzz/seeds/<target>`), then what local cargo-fuzz runs
/// kept (`fuzz/corpus/<target>`, not committed).
fn corpus(target: &str) -> Vec<Vec<u8>> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut inputs = Vec::new();
    for dir in [fuzz.join("seeds").join(target), fuzz.join("corpus").join(target)] {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut files: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        files.sort();
        inputs.extend(files.iter().filter_map(|f| std::fs::read(f).ok()));
    }
    inputs
}

/// A well-formed input changed a little: bits flipped, bytes replaced by boundary values,
/// cut short, extended, or a stretch repeated.
fn mutate(rng: &mut ChaCha8Rng, input: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..rng.random_range(1..=4) {
        let at = if out.is_empty() { 0 } else { rng.random_range(0..out.len()) };
        match rng.random_range(0..6) {
            0 if !out.is_empty() => out[at] ^= 1 << rng.random_range(0..8),
            1 if !out.is_empty() => out[at] = [0x00, 0x7f, 0x80, 0xff][rng.random_range(0..4)],
            2 => out.truncate(at),
            3 => {
                let mut extra = vec![0u8; rng.random_range(1..32)];
                rng.fill_bytes(&mut extra);
                out.splice(at..at, extra);
            }
            4 if out.len() >= at + 4 => {
                let value = [-1i32, 0, 1, i32::MAX, i32::MIN, 0x7fff][rng.random_range(0..6)];
                out[at..at + 4].copy_from_slice(&value.to_be_bytes());
            }
            _ => {
                let end = (at + rng.random_range(1..16)).min(out.len());
                let stretch = out[at..end].to_vec();
                out.splice(at..at, stretch);
            }
        }
    }
    out
}

/// Runs `target` over the corpus, then mutations of `seeds`, until the budget is spent.
fn fuzz(name: &str, seeds: Vec<Vec<u8>>, target: impl Fn(&[u8])) -> usize {
    let mut inputs = corpus(name);
    inputs.extend(seeds.iter().cloned());
    let mut rng = ChaCha8Rng::seed_from_u64(0x6b61_6173);
    let deadline = Instant::now() + budget();
    let mut runs = 0;
    let mut next = 0;
    loop {
        let input = match next < inputs.len() {
            true => inputs[next].clone(),
            false => {
                let base = &inputs[rng.random_range(0..inputs.len())];
                let mutated = mutate(&mut rng, base);
                if rng.random_bool(0.1) {
                    inputs.push(mutated.clone()); // mutations of mutations too
                }
                mutated
            }
        };
        next += 1;
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| target(&input))) {
            panic!("{name}: the input {input:02x?} panicked: {panic:?}");
        }
        runs += 1;
        if runs % 64 == 0 && Instant::now() > deadline {
            return runs;
        }
    }
}

fn request_body<T: Encodable + kafka_protocol::protocol::HeaderVersion>(
    key: ApiKey,
    version: i16,
    body: &T,
) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("fuzz")));
    let mut buf = BytesMut::new();
    header.encode(&mut buf, T::header_version(version)).unwrap();
    body.encode(&mut buf, version).unwrap();
    buf.to_vec()
}

fn batch() -> bytes::Bytes {
    use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
    let records: Vec<Record> = (0..3)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: 7,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: i,
            sequence: i as i32,
            timestamp: 1_767_225_600_000,
            key: Some(bytes::Bytes::from_static(b"k")),
            value: Some(bytes::Bytes::from_static(b"value")),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions { version: 2, compression: Compression::None };
    RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
    buf.freeze()
}

fn request_seeds() -> Vec<Vec<u8>> {
    use produce_request::{PartitionProduceData, TopicProduceData};
    let produce = ProduceRequest::default().with_acks(-1).with_timeout_ms(1000).with_topic_data(vec![
        TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partition_data(vec![PartitionProduceData::default().with_index(0).with_records(Some(batch()))]),
    ]);
    let metadata = MetadataRequest::default().with_topics(Some(vec![
        metadata_request::MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_static_str("t")))),
    ]));
    let fetch = FetchRequest::default().with_max_wait_ms(0).with_topics(vec![
        fetch_request::FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![fetch_request::FetchPartition::default().with_partition_max_bytes(1024)]),
    ]);
    let txn = EndTxnRequest::default().with_transactional_id(TransactionalId(StrBytes::from_static_str("x")));
    vec![
        request_body(ApiKey::Produce, 9, &produce),
        request_body(ApiKey::Produce, 3, &produce),
        request_body(ApiKey::Metadata, 12, &metadata),
        request_body(ApiKey::Metadata, 1, &metadata),
        request_body(ApiKey::Fetch, 12, &fetch),
        request_body(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()),
        request_body(ApiKey::EndTxn, 4, &txn),
        request_body(ApiKey::ShareFetch, 1, &ShareFetchRequest::default()),
    ]
}

#[test]
fn request_decoders_never_panic() {
    let runs = fuzz("request", request_seeds(), kaas_net::fuzz::request);
    assert!(runs > 1000, "{runs} runs");
}

#[test]
fn frame_reading_never_panics() {
    let seeds = request_seeds()
        .into_iter()
        .map(|body| {
            let mut framed = BytesMut::new();
            framed.put_i32(body.len() as i32);
            framed.put_slice(&body);
            framed.put_slice(&framed.clone());
            framed.to_vec()
        })
        .collect();
    let runs = fuzz("frames", seeds, kaas_net::fuzz::frames);
    assert!(runs > 1000, "{runs} runs");
}

#[test]
fn sasl_before_authentication_never_panics_nor_serves() {
    let dir = std::env::temp_dir().join(format!("kaas-fuzz-sasl-{}", std::process::id()));
    let listener: Arc<dyn kaas_net::sasl::Mechanisms> =
        Arc::new(kaas_server::sasl::fuzz_listener(&dir.display().to_string()));
    // Chunks: a length byte (high bit: a raw frame), then the bytes. Mechanisms by index:
    // PLAIN 0, SCRAM-SHA-256 1, SCRAM-SHA-512 2, OAUTHBEARER 3.
    let chunk = |bytes: &[u8]| [&[bytes.len() as u8][..], bytes].concat();
    let seeds = vec![
        [&[0x05][..], &chunk(b"\0fuzz\0fuzz")].concat(),
        [&[0x05][..], &chunk(b"\0fuzz\0wrong")].concat(),
        [&[0x13][..], &chunk(b"n,,n=fuzz,r=fyko+d2lbbFgONRv9qkxdawL")].concat(),
        [&[0x23][..], &chunk(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"), &chunk(b"c=biws,r=rOprNGfwEbeRWgbNEkqO,p=dHzbZap")]
            .concat(),
        [&[0x30][..], &chunk(b"n,,\x01auth=Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJmdXp6In0.\x01\x01")].concat(),
        [&[0xf0][..], &chunk(&request_seeds()[5])].concat(),
    ];
    let runs = fuzz("sasl", seeds, move |data| kaas_net::fuzz::sasl(listener.clone(), data));
    assert!(runs > 1000, "{runs} runs");
    let _ = std::fs::remove_dir_all(dir);
}

/// A key and a self-signed certificate for `localhost`, in one PEM file (key, then chain).
fn keystore(dir: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let (key, cert) = (dir.join("broker.key"), dir.join("broker.pem"));
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl");
    assert!(made.success());
    let keystore = dir.join("keystore.pem");
    std::fs::write(&keystore, [std::fs::read(key).unwrap(), std::fs::read(cert).unwrap()].concat()).unwrap();
    keystore
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The bad-input fuzzer at the SASL and TLS listeners of a running broker, before anyone
/// authenticates: mutated handshakes and exchanges, and mutated TLS records, each on a
/// connection of its own. The broker stays up and serves, its memory stays bounded, every one
/// of those connections is closed, and nothing stored changes.
#[test]
fn garbage_before_authentication_leaves_the_broker_up_bounded_and_unchanged() {
    use std::io::{Read, Write};
    let dir = std::env::temp_dir().join(format!("kaas-fuzz-wire-{}", std::process::id()));
    let keystore = keystore(&dir);
    let jaas = "org.apache.kafka.common.security.plain.PlainLoginModule required user_alice=\"alice-secret\";";
    let settings = [
        format!("ssl.keystore.location={}", keystore.display()),
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512".to_string(),
        format!("listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}"),
        "connection.failed.authentication.delay.ms=0".to_string(),
    ];
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let kaas = common::Kaas::with_listeners("fuzz-wire", &["SSL", "SASL_PLAINTEXT"], &settings);
    let port_of = |name: &str| kaas.listeners.iter().find(|(n, _)| n == name).unwrap().1;
    let (ssl, sasl) = (port_of("SSL"), port_of("SASL_PLAINTEXT"));

    // Something stored first, to see it unchanged after.
    let mut wire = common::wire::Wire::connect(&kaas.bootstrap());
    let create = CreateTopicsRequest::default().with_timeout_ms(10_000).with_topics(vec![
        create_topics_request::CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("kept")))
            .with_num_partitions(1)
            .with_replication_factor(1),
    ]);
    let created: CreateTopicsResponse = wire.call(ApiKey::CreateTopics, 5, &create);
    assert_eq!(created.topics[0].error_code, 0);
    let produce = ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![
        produce_request::TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("kept")))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(common::wire::batch_of(5, 10))),
            ]),
    ]);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let produced: ProduceResponse = wire.call(ApiKey::Produce, 9, &produce);
        match produced.responses[0].partition_responses[0].error_code {
            0 => break,
            code => assert!(Instant::now() < deadline, "produce: {code}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let fetch = FetchRequest::default().with_max_wait_ms(0).with_topics(vec![
        fetch_request::FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str("kept")))
            .with_partitions(vec![fetch_request::FetchPartition::default().with_partition_max_bytes(1 << 20)]),
    ]);
    let before: FetchResponse = wire.call(ApiKey::Fetch, 12, &fetch);
    let rss_before = rss_kib(kaas.pid());

    // SASL: a handshake for a mechanism, then mutated exchanges; raw frames now and then.
    let framed = |body: &[u8]| [&(body.len() as i32).to_be_bytes()[..], body].concat();
    let handshake = |m: &str| {
        framed(&request_body(
            ApiKey::SaslHandshake,
            1,
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(m.into())),
        ))
    };
    let authenticate = |bytes: &[u8]| {
        let request = SaslAuthenticateRequest::default().with_auth_bytes(bytes::Bytes::copy_from_slice(bytes));
        framed(&request_body(ApiKey::SaslAuthenticate, 2, &request))
    };
    let sasl_seeds: Vec<Vec<u8>> = vec![
        [handshake("PLAIN"), authenticate(b"\0alice\0guess")].concat(),
        [handshake("SCRAM-SHA-256"), authenticate(b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL")].concat(),
        [handshake("SCRAM-SHA-512"), authenticate(b"n,,n=a,")].concat(),
        framed(&request_seeds()[2]),
    ];
    // TLS: a ClientHello's record header with mutated contents.
    let mut hello = vec![0x16, 0x03, 0x01, 0x00, 0x40, 0x01, 0x00, 0x00, 0x3c, 0x03, 0x03];
    hello.extend([0x42; 0x38]);
    let tls_seeds = vec![hello, vec![0x16, 0x03, 0x03, 0xff, 0xff], vec![0x80, 0x2e, 0x01, 0x03, 0x01]];
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let send = |port: u16, input: &[u8]| {
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return };
        s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let _ = s.write_all(input);
        let mut sink = [0u8; 4096];
        while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
    };
    // Each seed as it is, then mutations until the budget is spent.
    sasl_seeds.iter().for_each(|seed| send(sasl, seed));
    tls_seeds.iter().for_each(|seed| send(ssl, seed));
    let (mut connections, deadline) = (0, Instant::now() + budget());
    while Instant::now() < deadline {
        for (port, seeds) in [(sasl, &sasl_seeds), (ssl, &tls_seeds)] {
            let seed = &seeds[rng.random_range(0..seeds.len())];
            send(port, &mutate(&mut rng, seed));
            connections += 1;
        }
    }
    assert!(connections > 20, "{connections} connections");

    // Up and serving, every garbage connection closed, memory bounded, data as it was.
    let after: FetchResponse = wire.call(ApiKey::Fetch, 12, &fetch);
    assert_eq!(after.responses[0].partitions[0].records, before.responses[0].partitions[0].records);
    assert_eq!(after.responses[0].partitions[0].high_watermark, 5);
    let metrics = kaas.metrics_port.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let open = common::sample(&common::get(metrics, "/metrics"), "kaas_connections_open").unwrap();
        if open <= 1.0 {
            break;
        }
        assert!(Instant::now() < deadline, "{open} connections still open");
        std::thread::sleep(Duration::from_millis(100));
    }
    let rss_after = rss_kib(kaas.pid());
    assert!(rss_after < rss_before + 64 * 1024, "memory grew from {rss_before} KiB to {rss_after} KiB");
    let _ = std::fs::remove_dir_all(dir);
}
