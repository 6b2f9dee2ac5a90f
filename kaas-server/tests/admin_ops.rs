//! Topic administration and log operations through librdkafka's admin and consumer APIs:
//! configs described and altered, partitions added, records deleted, offsets looked up by time,
//! topics deleted and re-created, retention, and a graceful SIGTERM restart.

mod common;

use std::time::{Duration, Instant};

use common::Kaas;
use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, ConfigSource, NewPartitions, NewTopic, OwnedResourceSpecifier,
    ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

const T: Duration = Duration::from_secs(10);

fn admin(kaas: &Kaas) -> AdminClient<DefaultClientContext> {
    ClientConfig::new().set("bootstrap.servers", kaas.bootstrap()).create().unwrap()
}

fn consumer(kaas: &Kaas) -> BaseConsumer {
    ClientConfig::new().set("bootstrap.servers", kaas.bootstrap()).set("group.id", "admin-test").create().unwrap()
}

fn producer(kaas: &Kaas) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", kaas.bootstrap())
        .set("acks", "all")
        .set("linger.ms", "0")
        .create()
        .unwrap()
}

fn partitions_of(kaas: &Kaas, topic: &str) -> usize {
    let c = consumer(kaas);
    let md = c.fetch_metadata(Some(topic), T).unwrap();
    md.topics()[0].partitions().len()
}

/// A config's value and its source, the latter as its Debug name (ConfigSource is not Clone).
async fn config_value(admin: &AdminClient<DefaultClientContext>, topic: &str, name: &str) -> (Option<String>, String) {
    let described = admin.describe_configs([&ResourceSpecifier::Topic(topic)], &AdminOptions::new()).await.unwrap();
    let resource = described.into_iter().next().unwrap().expect("describe configs");
    assert!(matches!(&resource.specifier, OwnedResourceSpecifier::Topic(t) if t == topic));
    let entry = resource.get(name).unwrap_or_else(|| panic!("{name} described"));
    (entry.value.clone(), format!("{:?}", entry.source))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configs_partitions_delete_records_offsets_for_times_and_delete_topics() {
    let mut kaas = Kaas::start("admin", &["auto.create.topics.enable=false"]);
    let admin = admin(&kaas);
    let topic = NewTopic::new("adm", 2, TopicReplication::Fixed(1)).set("retention.ms", "3600000");
    let created = admin.create_topics([&topic], &AdminOptions::new()).await.unwrap();
    assert!(created[0].is_ok(), "{created:?}");
    let bad = NewTopic::new("bad", 1, TopicReplication::Fixed(1)).set("retention.ms", "soon");
    let refused = admin.create_topics([&bad], &AdminOptions::new()).await.unwrap();
    assert!(refused[0].is_err(), "an invalid config value is refused");

    assert_eq!(
        config_value(&admin, "adm", "retention.ms").await,
        (Some("3600000".into()), format!("{:?}", ConfigSource::DynamicTopic))
    );
    assert_eq!(
        config_value(&admin, "adm", "cleanup.policy").await,
        (Some("delete".into()), format!("{:?}", ConfigSource::Default))
    );
    let alter = AlterConfig::new(ResourceSpecifier::Topic("adm")).set("retention.ms", "7200000");
    let altered = admin.alter_configs([&alter], &AdminOptions::new()).await.unwrap();
    assert!(altered[0].is_ok(), "{altered:?}");
    assert_eq!(config_value(&admin, "adm", "retention.ms").await.0, Some("7200000".into()));
    let broker = admin.describe_configs([&ResourceSpecifier::Broker(0)], &AdminOptions::new()).await.unwrap();
    let broker = broker.into_iter().next().unwrap().unwrap();
    assert_eq!(broker.get("auto.create.topics.enable").unwrap().value.as_deref(), Some("false"));

    let grown = admin.create_partitions([&NewPartitions::new("adm", 4)], &AdminOptions::new()).await.unwrap();
    assert!(grown[0].is_ok(), "{grown:?}");
    assert_eq!(partitions_of(&kaas, "adm"), 4);
    let shrink = admin.create_partitions([&NewPartitions::new("adm", 3)], &AdminOptions::new()).await.unwrap();
    assert!(shrink[0].is_err(), "partitions cannot be removed");

    // 100 single-record batches, one second apart in record time.
    let p = producer(&kaas);
    let t0 = 1_700_000_000_000i64;
    for i in 0..100i64 {
        let payload = format!("r{i}");
        let delivered =
            p.send(FutureRecord::<(), _>::to("adm").partition(0).payload(&payload).timestamp(t0 + i * 1000), T).await;
        assert_eq!(delivered.unwrap().offset, i);
    }
    let c = consumer(&kaas);
    let mut lookup = TopicPartitionList::new();
    lookup.add_partition_offset("adm", 0, Offset::Offset(t0 + 50_000)).unwrap();
    let found = c.offsets_for_times(lookup, T).unwrap();
    assert_eq!(found.find_partition("adm", 0).unwrap().offset(), Offset::Offset(50));
    let mut late = TopicPartitionList::new();
    late.add_partition_offset("adm", 0, Offset::Offset(t0 + 1_000_000)).unwrap();
    let none = c.offsets_for_times(late, T).unwrap();
    assert_eq!(none.find_partition("adm", 0).unwrap().offset(), Offset::End, "no record that late");

    let mut cut = TopicPartitionList::new();
    cut.add_partition_offset("adm", 0, Offset::Offset(30)).unwrap();
    let deleted = admin.delete_records(&cut, &AdminOptions::new()).await.unwrap();
    assert_eq!(deleted.find_partition("adm", 0).unwrap().offset(), Offset::Offset(30));
    assert_eq!(c.fetch_watermarks("adm", 0, T).unwrap(), (30, 100));
    let mut from_start = TopicPartitionList::new();
    from_start.add_partition_offset("adm", 0, Offset::Beginning).unwrap();
    c.assign(&from_start).unwrap();
    let first = loop {
        if let Some(m) = c.poll(T) {
            break m.unwrap().offset();
        }
    };
    assert_eq!(first, 30, "reading from the beginning starts at the new log start offset");

    // A dynamic broker setting becomes every topic's default; a static one cannot change.
    let dynamic = AlterConfig::new(ResourceSpecifier::Broker(0)).set("log.retention.bytes", "1048576");
    assert!(admin.alter_configs([&dynamic], &AdminOptions::new()).await.unwrap()[0].is_ok());
    let inherited = config_value(&admin, "adm", "retention.bytes").await;
    assert_eq!(inherited, (Some("1048576".into()), format!("{:?}", ConfigSource::DynamicBroker)));
    let fixed = AlterConfig::new(ResourceSpecifier::Broker(0)).set("num.partitions", "9");
    // rust-rdkafka reports every AlterConfigs resource as Ok, so the refusal shows in describe.
    admin.alter_configs([&fixed], &AdminOptions::new()).await.unwrap();
    let broker = admin.describe_configs([&ResourceSpecifier::Broker(0)], &AdminOptions::new()).await.unwrap();
    let broker = broker.into_iter().next().unwrap().unwrap();
    assert_eq!(broker.get("num.partitions").unwrap().value.as_deref(), Some("1"), "a static setting is not altered");
    assert_eq!(broker.get("log.retention.bytes").unwrap().value.as_deref(), Some("1048576"));

    // A graceful stop syncs and closes; everything is there after the restart.
    assert!(kaas.terminate().success(), "SIGTERM exits cleanly");
    kaas.restart();
    let c = consumer(&kaas);
    assert_eq!(c.fetch_watermarks("adm", 0, T).unwrap(), (30, 100));
    assert_eq!(config_value(&admin, "adm", "retention.ms").await.0, Some("7200000".into()));
    assert_eq!(
        config_value(&admin, "adm", "retention.bytes").await.0,
        Some("1048576".into()),
        "dynamic configs persist"
    );

    let dropped = admin.delete_topics(&["adm"], &AdminOptions::new()).await.unwrap();
    assert!(dropped[0].is_ok(), "{dropped:?}");
    let md = c.fetch_metadata(None, T).unwrap();
    assert!(md.topics().iter().all(|t| t.name() != "adm"));
    let again = admin
        .create_topics([&NewTopic::new("adm", 1, TopicReplication::Fixed(1))], &AdminOptions::new())
        .await
        .unwrap();
    assert!(again[0].is_ok());
    assert_eq!(c.fetch_watermarks("adm", 0, T).unwrap(), (0, 0), "a re-created topic starts empty");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_old_segments() {
    let kaas = Kaas::start("retention", &["log.retention.check.interval.ms=100"]);
    let admin = admin(&kaas);
    let topic =
        NewTopic::new("old", 1, TopicReplication::Fixed(1)).set("retention.ms", "60000").set("segment.bytes", "2048");
    assert!(admin.create_topics([&topic], &AdminOptions::new()).await.unwrap()[0].is_ok());
    let p = producer(&kaas);
    let an_hour_ago =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64 - 3_600_000;
    let payload = "x".repeat(300);
    for i in 0..40 {
        p.send(FutureRecord::<(), _>::to("old").payload(&payload).timestamp(an_hour_ago + i), T).await.unwrap();
    }
    let c = consumer(&kaas);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (low, high) = c.fetch_watermarks("old", 0, T).unwrap();
        assert_eq!(high, 40);
        if low > 0 {
            assert!(low < 40, "the active segment is kept");
            break;
        }
        assert!(Instant::now() < deadline, "retention never moved the log start offset");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_zero_and_acks_one_produce() {
    let kaas = Kaas::start("acks", &["num.partitions=1"]);
    for (acks, topic) in [("0", "fire-and-forget"), ("1", "leader-ack")] {
        let p: FutureProducer =
            ClientConfig::new().set("bootstrap.servers", kaas.bootstrap()).set("acks", acks).create().unwrap();
        for i in 0..100 {
            let payload = format!("m{i}");
            let delivered = p.send(FutureRecord::<(), _>::to(topic).payload(&payload), T).await.unwrap();
            if acks == "1" {
                assert_eq!(delivered.offset, i, "acks=1 answers with the offset");
            }
        }
        let c = consumer(&kaas);
        let deadline = Instant::now() + Duration::from_secs(10);
        while c.fetch_watermarks(topic, 0, T).unwrap() != (0, 100) {
            assert!(Instant::now() < deadline, "acks={acks}: not every record arrived");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
