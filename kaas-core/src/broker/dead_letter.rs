//! The broker's dead-letter writer (KIP-1191): one actor that takes the records share
//! partitions hold as Archiving (durable so), writes each to its group's dead-letter queue
//! topic with Apache's context headers, and then tells the share partition to archive them.
//!
//! As in Apache Kafka 4.4: the queue is `errors.deadletterqueue.topic.name` of the group; the
//! topic must not be internal, must have the broker's `errors.deadletterqueue.topic.name.prefix`
//! and `errors.deadletterqueue.group.enable=true`, and is created with that setting when
//! `errors.deadletterqueue.auto.create.topics.enable` allows; source partition `p` goes to
//! queue partition `p % n`; with `errors.deadletterqueue.copy.record.enable` the record's key,
//! value and headers are copied. A record that cannot be written (no queue, a refused topic,
//! a queue partition that stays unwritable) is archived anyway, with the reason logged.
//!
//! Delivery is at least once: a crash between the queue's write and the archive leaves the
//! records Archiving in the share partition's file, and its next owner sends them again.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use tokio::sync::mpsc;

use crate::config::{DLQ_GROUP_ENABLE, group};
use crate::env::{Clock, Env, Spawner};
use crate::error::CoreError;
use crate::partition::Isolation;
use crate::partition::log::batch;
use crate::partition::share::{DeadLetter, ShareCommand};
use crate::topics::{CreateTopic, MetadataSnapshot, TopicsHandle};
use crate::txn::peers::PeersHandle;

const HEADER_TOPIC: &str = "__dlq.errors.topic";
const HEADER_PARTITION: &str = "__dlq.errors.partition";
const HEADER_OFFSET: &str = "__dlq.errors.offset";
const HEADER_GROUP: &str = "__dlq.errors.group";
const HEADER_DELIVERY_COUNT: &str = "__dlq.errors.delivery.count";
const HEADER_MESSAGE: &str = "__dlq.errors.message";
/// Tries of a write whose queue partition is moving between owners, a retry interval apart.
const WRITE_TRIES: u32 = 20;
const RETRY_INTERVAL_MS: u64 = 500;
/// What one read of the source partition takes, for a copied record (Apache's figure).
const SOURCE_READ_BYTES: usize = 1 << 20;

/// The writer's view of its broker.
pub(super) struct DeadLetterWriter<E: Env> {
    pub env: E,
    pub topics: TopicsHandle,
    pub peers: PeersHandle,
    pub membership: crate::cluster::membership::MembershipHandle,
}

/// Starts the writer; partition actors send it their dead letters.
pub(super) fn start<E: Env>(writer: DeadLetterWriter<E>, letters: mpsc::UnboundedReceiver<DeadLetter>) {
    let env = writer.env.clone();
    env.spawner().spawn("dead-letters", writer.run(letters));
}

/// A queue partition between owners, or one that could not write just now.
fn retriable(e: &CoreError) -> bool {
    matches!(
        e,
        CoreError::NotLeaderOrFollower
            | CoreError::UnknownTopicOrPartition
            | CoreError::Storage(_)
            | CoreError::RequestTimedOut
            | CoreError::NotEnoughReplicas
    )
}

impl<E: Env> DeadLetterWriter<E> {
    async fn run(self, mut letters: mpsc::UnboundedReceiver<DeadLetter>) {
        while let Some(letter) = letters.recv().await {
            if let Err(why) = self.write(&letter).await {
                tracing::warn!(
                    group = %letter.group_id,
                    topic = %letter.topic,
                    partition = letter.partition,
                    first_offset = letter.range.first_offset,
                    last_offset = letter.range.last_offset,
                    reason = %why,
                    "records archived without their dead-letter queue"
                );
            }
            self.archive(&letter).await;
        }
    }

    /// Puts the letter's records on the group's dead-letter queue, or says why not.
    async fn write(&self, letter: &DeadLetter) -> Result<(), String> {
        let snapshot = self.topics.snapshot();
        if snapshot.effective.share_version < 2 {
            return Err("share.version is below 2".into());
        }
        let configs = snapshot.group_configs.get(&letter.group_id);
        let config = |name: &str| configs.and_then(|c| c.get(name)).map(|v| v.trim().to_string());
        let queue = config(group::ERRORS_DEADLETTERQUEUE_TOPIC_NAME).unwrap_or_default();
        if queue.is_empty() {
            return Err("the group has no dead-letter queue now".into());
        }
        if queue.starts_with("__") {
            return Err(format!("dead-letter queue {queue} is an internal topic's name"));
        }
        let prefix = &snapshot.effective.errors_deadletterqueue_topic_name_prefix;
        if !queue.starts_with(prefix.as_str()) {
            return Err(format!("dead-letter queue {queue} does not have the prefix {prefix}"));
        }
        let copy = config(group::ERRORS_DEADLETTERQUEUE_COPY_RECORD_ENABLE).is_some_and(|v| v == "true");
        let snapshot = self.queue_topic(snapshot, &queue).await?;
        let partitions = snapshot.topics.get(&queue).map(|t| t.meta.partitions).ok_or("the queue topic is gone")?;
        let target = letter.partition % partitions;
        let copied = match copy {
            true => self.source_records(&snapshot, letter).await,
            false => BTreeMap::new(),
        };
        let records = self.encode(letter, &copied);
        let mut last_error = String::new();
        for _ in 0..WRITE_TRIES {
            match self.produce(&queue, target, records.clone()).await {
                Ok(()) => return Ok(()),
                Err(e) if retriable(&e) => last_error = format!("{e:?}"),
                Err(e) => return Err(format!("{queue}-{target} refused the records: {e:?}")),
            }
            self.env.clock().sleep_ms(RETRY_INTERVAL_MS).await;
        }
        Err(format!("{queue}-{target} could not be written: {last_error}"))
    }

    /// The snapshot with the queue topic in it, created if it must and may be; the topic must
    /// say it takes dead letters.
    async fn queue_topic(&self, snapshot: Arc<MetadataSnapshot>, queue: &str) -> Result<Arc<MetadataSnapshot>, String> {
        let snapshot = match snapshot.topics.get(queue) {
            Some(_) => snapshot,
            None if snapshot.effective.errors_deadletterqueue_auto_create_topics_enable => {
                let create = CreateTopic {
                    name: queue.to_string(),
                    partitions: -1,
                    replication_factor: -1,
                    configs: BTreeMap::from([(DLQ_GROUP_ENABLE.to_string(), "true".to_string())]),
                    validate_only: false,
                };
                match self.topics.create(create).await {
                    Ok(_) | Err(CoreError::TopicAlreadyExists) => {}
                    Err(e) => return Err(format!("cannot create dead-letter queue {queue}: {e:?}")),
                }
                let fresh = self.topics.snapshot();
                if !fresh.topics.contains_key(queue) {
                    return Err(format!("dead-letter queue {queue} created but not yet known"));
                }
                fresh
            }
            None => return Err(format!("dead-letter queue {queue} does not exist and may not be created")),
        };
        let enabled = snapshot.topics[queue].meta.configs.get(DLQ_GROUP_ENABLE).is_some_and(|v| v.trim() == "true");
        if !enabled {
            return Err(format!("topic {queue} does not have {DLQ_GROUP_ENABLE}=true"));
        }
        Ok(snapshot)
    }

    /// The letter's records as the source partition has them (this broker owns it: its share
    /// partition just wrote them Archiving). Offsets it cannot read go with headers alone.
    async fn source_records(&self, snapshot: &MetadataSnapshot, letter: &DeadLetter) -> BTreeMap<i64, Record> {
        let mut found = BTreeMap::new();
        let Some(partition) = snapshot.partition(&letter.topic, letter.partition) else { return found };
        let mut offset = letter.range.first_offset;
        while offset <= letter.range.last_offset {
            let Ok(read) = partition.read(offset, SOURCE_READ_BYTES, Isolation::ReadUncommitted).await else { break };
            let Ok(batches) = batch::split_produced(&read.records) else { break };
            let before = offset;
            for (header, raw) in batches {
                let mut buf = raw;
                if let Ok(set) = RecordBatchDecoder::decode(&mut buf) {
                    for record in set.records {
                        if (letter.range.first_offset..=letter.range.last_offset).contains(&record.offset) {
                            found.insert(record.offset, record);
                        }
                    }
                }
                offset = offset.max(header.next_offset());
            }
            if offset == before {
                break;
            }
        }
        found
    }

    /// One batch with a record per offset of the letter: Apache's context headers, after the
    /// copied record's own headers when the record is copied.
    fn encode(&self, letter: &DeadLetter, copied: &BTreeMap<i64, Record>) -> Bytes {
        let now_ms = self.env.clock().now_ms();
        let text = |s: &str| Some(Bytes::copy_from_slice(s.as_bytes()));
        let records: Vec<Record> = (letter.range.first_offset..=letter.range.last_offset)
            .enumerate()
            .map(|(i, offset)| {
                let source = copied.get(&offset);
                let mut headers: IndexMap<StrBytes, Option<Bytes>> =
                    source.map(|r| r.headers.clone()).unwrap_or_default();
                headers.insert(StrBytes::from_static_str(HEADER_TOPIC), text(&letter.topic));
                headers.insert(StrBytes::from_static_str(HEADER_PARTITION), text(&letter.partition.to_string()));
                headers.insert(StrBytes::from_static_str(HEADER_OFFSET), text(&offset.to_string()));
                headers.insert(StrBytes::from_static_str(HEADER_GROUP), text(&letter.group_id));
                headers.insert(
                    StrBytes::from_static_str(HEADER_DELIVERY_COUNT),
                    text(&letter.range.delivery_count.to_string()),
                );
                headers.insert(StrBytes::from_static_str(HEADER_MESSAGE), text(letter.cause.message()));
                Record {
                    transactional: false,
                    control: false,
                    delete_horizon: false,
                    partition_leader_epoch: -1,
                    producer_id: -1,
                    producer_epoch: -1,
                    timestamp_type: TimestampType::Creation,
                    offset: i as i64,
                    sequence: i as i32 - 1,
                    timestamp: now_ms,
                    key: source.and_then(|r| r.key.clone()),
                    value: source.and_then(|r| r.value.clone()),
                    headers,
                }
            })
            .collect();
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions { version: 2, compression: Compression::None };
        RecordBatchEncoder::encode(&mut buf, &records, &options).expect("an uncompressed batch encodes");
        buf.freeze()
    }

    /// Appends the batch to the queue partition: here if this broker owns it, else at its
    /// owner, as a Produce.
    async fn produce(&self, queue: &str, partition: i32, records: Bytes) -> Result<(), CoreError> {
        let snapshot = self.topics.snapshot();
        let handle = snapshot.partition(queue, partition).ok_or(CoreError::UnknownTopicOrPartition)?;
        let batches = batch::split_produced(&records).map_err(CoreError::from)?;
        match handle.append(batches, None).await.await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(CoreError::NotLeaderOrFollower)) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(CoreError::NotLeaderOrFollower),
        }
        let view = self.membership.view();
        let owner = snapshot.owner(queue, partition, &view).and_then(|o| view.endpoint_of(o));
        match owner {
            Some(peer) => self.peers.produce(peer, queue, partition, records).await,
            None => Err(CoreError::NotLeaderOrFollower),
        }
    }

    /// Tells the share partition the records may be archived now.
    async fn archive(&self, letter: &DeadLetter) {
        let snapshot = self.topics.snapshot();
        if let Some(partition) = snapshot.partition(&letter.topic, letter.partition) {
            let command = ShareCommand::DeadLettered {
                group_id: letter.group_id.clone(),
                first_offset: letter.range.first_offset,
                last_offset: letter.range.last_offset,
            };
            partition.share(command).await;
        }
    }
}
