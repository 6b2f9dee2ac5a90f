//! Transaction benchmark with librdkafka: transactional producers (one, then eight at once),
//! 10 records of 100 B per transaction over 3 partitions, each committed before the next
//! begins, against a release kaas on a scratch data dir. Prints committed transactions per
//! second, and the latency of the commit itself (EndTxn: prepare, markers durable in every
//! partition, complete) and of the produce before it, p50 and p99.
//!
//! `cargo bench -p kaas-server --bench transactions` (KAAS_BENCH_TXNS to change the count,
//! KAAS_BENCH_DIR to choose the disk).

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};

/// Prints librdkafka's debug log (KAAS_BENCH_DEBUG=eos,protocol) with a timestamp.
struct Context(Instant);

impl ClientContext for Context {
    fn log(&self, _level: RDKafkaLogLevel, fac: &str, message: &str) {
        eprintln!("{:>9.3} ms {fac} {message}", self.0.elapsed().as_secs_f64() * 1e3);
    }
}

impl ProducerContext for Context {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &rdkafka::message::DeliveryResult<'_>, _: ()) {}
}

const RECORDS_PER_TXN: usize = 10;
const PARTITIONS: i32 = 3;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// `txns` transactions of one producer: the latency of each commit, and of each transaction's
/// produce (AddPartitionsToTxn and the records, until acked).
fn transact(bootstrap: &str, transactional_id: &str, txns: usize) -> (Vec<Duration>, Vec<Duration>) {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap).set("transactional.id", transactional_id).set("linger.ms", "0");
    if let Ok(debug) = std::env::var("KAAS_BENCH_DEBUG") {
        config.set("debug", &debug).set_log_level(RDKafkaLogLevel::Debug);
    }
    let producer: BaseProducer<Context> = config.create_with_context(Context(Instant::now())).expect("producer");
    let timeout = Duration::from_secs(30);
    producer.init_transactions(timeout).unwrap();
    let payload = vec![b'v'; 100];
    let mut commits = Vec::with_capacity(txns);
    let mut flushes = Vec::with_capacity(txns);
    for _ in 0..txns {
        producer.begin_transaction().unwrap();
        for r in 0..RECORDS_PER_TXN {
            let record = BaseRecord::<(), _>::to("bench-txn").partition(r as i32 % PARTITIONS).payload(&payload);
            producer.send(record).map_err(|(e, _)| e).unwrap();
        }
        let flushing = Instant::now();
        // Served delivery reports, polled tightly: the client crate's flush() sleeps in 100 ms
        // steps, which would measure the harness, not the broker.
        while producer.in_flight_count() > 0 {
            producer.poll(Duration::from_millis(1));
        }
        flushes.push(flushing.elapsed());
        let committing = Instant::now();
        producer.commit_transaction(timeout).unwrap();
        commits.push(committing.elapsed());
    }
    (commits, flushes)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("transactions: bench");
        return;
    }
    let txns: usize = std::env::var("KAAS_BENCH_TXNS").ok().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let base = std::env::var("KAAS_BENCH_DIR").map(PathBuf::from).unwrap_or_else(|_| std::env::temp_dir());
    let dir = base.join(format!("kaas-bench-txn-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let bootstrap = format!("127.0.0.1:{port}");
    let mut kaas = Command::new(env!("CARGO_BIN_EXE_kaas"))
        .args(["serve", "--data-dir"])
        .arg(&dir)
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
        let topic = NewTopic::new("bench-txn", PARTITIONS, TopicReplication::Fixed(1));
        admin.create_topics([&topic], &AdminOptions::new()).await.unwrap();
    });
    // One producer, then eight at once (each its own transactional.id): what one client gets,
    // and what the coordinator serves in all.
    for producers in [1usize, 8] {
        let started = Instant::now();
        let threads: Vec<_> = (0..producers)
            .map(|i| {
                let bootstrap = bootstrap.clone();
                std::thread::spawn(move || transact(&bootstrap, &format!("bench-{i}"), txns / producers))
            })
            .collect();
        let (mut commits, mut flushes) = (Vec::new(), Vec::new());
        for t in threads {
            let (c, f) = t.join().expect("producer thread");
            commits.extend(c);
            flushes.extend(f);
        }
        let secs = started.elapsed().as_secs_f64();
        commits.sort();
        flushes.sort();
        println!(
            "transactions: {} of {RECORDS_PER_TXN} records over {PARTITIONS} partitions, {producers} producer(s): \
             {:.0} committed/s",
            commits.len(),
            commits.len() as f64 / secs
        );
        println!(
            "  commit (EndTxn) latency p50 {:.2} ms   p99 {:.2} ms",
            percentile(&commits, 0.5).as_secs_f64() * 1e3,
            percentile(&commits, 0.99).as_secs_f64() * 1e3
        );
        println!(
            "  produce (AddPartitionsToTxn and the records) p50 {:.2} ms   p99 {:.2} ms",
            percentile(&flushes, 0.5).as_secs_f64() * 1e3,
            percentile(&flushes, 0.99).as_secs_f64() * 1e3
        );
    }
    let _ = kaas.kill();
    let _ = kaas.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
