//! Produce benchmark with librdkafka: 1 KiB records, acks=all, 6 partitions, against a release
//! kaas on a scratch data dir; prints MB/s and p50/p99 produce latency, next to the disk's own
//! ceiling measured the same way the broker writes (sequential appends + fdatasync).
//!
//! `cargo bench -p kaas-server --bench produce` (KAAS_BENCH_RECORDS to change the count,
//! KAAS_BENCH_DIR to choose the disk).

use std::fs::OpenOptions;
use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};

const RECORD_BYTES: usize = 1024;
const PARTITIONS: i32 = 6;

fn scratch() -> PathBuf {
    let base = std::env::var("KAAS_BENCH_DIR").map(PathBuf::from).unwrap_or_else(|_| std::env::temp_dir());
    base.join(format!("kaas-bench-{}", std::process::id()))
}

/// The disk's ceiling: `chunk`-sized appends, each followed by fdatasync, for `total` bytes.
fn disk_ceiling(dir: &Path, chunk: usize, total: usize) -> f64 {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("ceiling.dat");
    let mut file = OpenOptions::new().create(true).write(true).truncate(true).open(&path).unwrap();
    let buf = vec![0x5au8; chunk];
    let started = Instant::now();
    let mut written = 0;
    while written < total {
        file.write_all(&buf).unwrap();
        file.sync_data().unwrap();
        written += chunk;
    }
    let secs = started.elapsed().as_secs_f64();
    std::fs::remove_file(&path).unwrap();
    written as f64 / secs / 1e6
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Produces `records` keeping at most `window` unacknowledged; returns MB/s and the p50 and
/// p99 of send-to-ack latency.
async fn produce(bootstrap: &str, records: usize, window: usize, idempotent: bool) -> (f64, Duration, Duration) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("enable.idempotence", if idempotent { "true" } else { "false" })
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .expect("producer");
    let payload = vec![b'k'; RECORD_BYTES];
    // Warm up: metadata, connections.
    producer.send(FutureRecord::<(), _>::to("bench").payload(&payload), Duration::from_secs(10)).await.unwrap();
    let started = Instant::now();
    let mut in_flight = tokio::task::JoinSet::new();
    let mut latencies = Vec::with_capacity(records);
    for _ in 0..records {
        if in_flight.len() >= window {
            latencies.push(in_flight.join_next().await.expect("in flight").expect("join"));
        }
        let sent = Instant::now();
        let future = producer.send_result(FutureRecord::<(), _>::to("bench").payload(&payload)).expect("queue");
        in_flight.spawn(async move {
            future.await.expect("delivery").expect("acked");
            sent.elapsed()
        });
    }
    while let Some(latency) = in_flight.join_next().await {
        latencies.push(latency.expect("join"));
    }
    let secs = started.elapsed().as_secs_f64();
    producer.flush(Duration::from_secs(10)).unwrap();
    latencies.sort();
    ((records * RECORD_BYTES) as f64 / secs / 1e6, percentile(&latencies, 0.5), percentile(&latencies, 0.99))
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("produce: bench");
        return;
    }
    let records: usize = std::env::var("KAAS_BENCH_RECORDS").ok().and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let dir = scratch();
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    println!("disk ceiling (sequential append + fdatasync) in {}:", dir.display());
    for chunk in [64 * 1024, 1024 * 1024] {
        println!("  {:>5} KiB appends: {:8.1} MB/s", chunk / 1024, disk_ceiling(&dir, chunk, 256 << 20));
    }

    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let bootstrap = format!("127.0.0.1:{port}");
    let mut kaas = Command::new(env!("CARGO_BIN_EXE_kaas"))
        .args(["serve", "--data-dir"])
        .arg(dir.join("data"))
        .args(["--listen", &bootstrap])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("start kaas");
    while TcpStream::connect(&bootstrap).is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let admin: AdminClient<DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", &bootstrap).create().unwrap();
        let topic = NewTopic::new("bench", PARTITIONS, TopicReplication::Fixed(1));
        admin.create_topics([&topic], &AdminOptions::new()).await.unwrap();
        println!("produce: {records} records of {RECORD_BYTES} B, acks=all, {PARTITIONS} partitions, linger.ms=5");
        // Idempotence off and on, interleaved, so that drift of the machine hits both alike.
        for window in [100, 1000, 10_000] {
            for idempotent in [false, true] {
                let (mbps, p50, p99) = produce(&bootstrap, records, window, idempotent).await;
                println!(
                    "  at most {window:>6} unacked, idempotence {:>3}: {mbps:8.1} MB/s   latency p50 {:6.1} ms   p99 {:6.1} ms",
                    if idempotent { "on" } else { "off" },
                    p50.as_secs_f64() * 1e3,
                    p99.as_secs_f64() * 1e3
                );
            }
        }
    });
    let _ = kaas.kill();
    let _ = kaas.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
