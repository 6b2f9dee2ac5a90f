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
//! a topic that refuses them) is archived anyway, with the reason logged, as Apache does. A
//! queue partition that cannot be written just now (between owners, its owner down) is tried
//! again for as long as this broker owns the source partition, where Apache gives up: the
//! records wait as Archiving meanwhile, so none is archived without reaching the queue.
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
use crate::reach;
use crate::topics::{CreateTopic, MetadataSnapshot, TopicsHandle};
use crate::txn::peers::PeersHandle;

const HEADER_TOPIC: &str = "__dlq.errors.topic";
const HEADER_PARTITION: &str = "__dlq.errors.partition";
const HEADER_OFFSET: &str = "__dlq.errors.offset";
const HEADER_GROUP: &str = "__dlq.errors.group";
const HEADER_DELIVERY_COUNT: &str = "__dlq.errors.delivery.count";
const HEADER_MESSAGE: &str = "__dlq.errors.message";
/// How long a write waits before it tries a queue partition again.
const RETRY_INTERVAL_MS: u64 = 500;
/// BUGGIFY: how long a queue partition stays down (a lease's length at the simulator's settings).
const QUEUE_DOWN_MS: u64 = 6000;
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

/// What came of a letter's write.
enum Written {
    Yes,
    /// No queue can take the records (none configured, a refused topic): archived anyway.
    Never(String),
    /// The source partition moved to another broker while the queue could not be written.
    NotOurs,
}

/// Why a letter cannot be written.
enum Unwritable {
    /// Not to any queue: archived anyway.
    Never(String),
    /// Not yet: tried again while the source is this broker's.
    Yet(String),
}

/// Whether a queue partition may take the records later: anything but a refusal of the records
/// themselves (a partition between owners, its owner down, a peer that did not answer).
fn retriable(e: &CoreError) -> bool {
    !matches!(
        e,
        CoreError::InvalidRecord
            | CoreError::RecordsRejected(_)
            | CoreError::InvalidTimestamp(_)
            | CoreError::CorruptMessage
            | CoreError::MessageTooLarge
            | CoreError::UnsupportedForMessageFormat
            | CoreError::InvalidTopic(_)
            | CoreError::InvalidRequiredAcks
    )
}

impl<E: Env> DeadLetterWriter<E> {
    async fn run(self, mut letters: mpsc::UnboundedReceiver<DeadLetter>) {
        while let Some(letter) = letters.recv().await {
            tracing::debug!(%letter, cause = letter.cause.message(), "dead letter to write");
            match self.write(&letter).await {
                Written::Yes => {}
                Written::Never(why) => {
                    tracing::warn!(%letter, reason = %why, "records archived without their dead-letter queue")
                }
                // Its next owner sends the records again.
                Written::NotOurs => {
                    reach("dead-letter source moved before the queue was written");
                    continue;
                }
            }
            self.archive(&letter).await;
        }
    }

    /// Puts the letter's records on the group's dead-letter queue: retried while the queue
    /// partition cannot take them and this broker still owns the source partition.
    async fn write(&self, letter: &DeadLetter) -> Written {
        loop {
            let outcome = if crate::buggify!("dead_letter.queue_down") {
                // The queue partition's owner down until its lease runs out: the records wait
                // as Archiving, and the source partition may move meanwhile.
                self.env.clock().sleep_ms(QUEUE_DOWN_MS).await;
                "the queue partition's owner is down (BUGGIFY)".to_string()
            } else {
                match self.try_write(letter).await {
                    Ok(done) => return done,
                    Err(not_yet) => not_yet,
                }
            };
            tracing::debug!(%letter, reason = %outcome, "dead-letter queue not written yet");
            if !self.owns_source(letter) {
                return Written::NotOurs;
            }
            self.env.clock().sleep_ms(RETRY_INTERVAL_MS).await;
        }
    }

    /// One try at the write: written or never to be (`Ok`), or why not yet (`Err`).
    async fn try_write(&self, letter: &DeadLetter) -> Result<Written, String> {
        Err(match self.prepare(letter).await {
            Ok((queue, target, records)) => match self.produce(&queue, target, records).await {
                Ok(()) => {
                    tracing::debug!(%letter, queue = %queue, "records written to the dead-letter queue");
                    return Ok(Written::Yes);
                }
                Err(e) if retriable(&e) => format!("{queue}-{target}: {e:?}"),
                Err(e) => return Ok(Written::Never(format!("{queue}-{target} refused the records: {e:?}"))),
            },
            Err(Unwritable::Never(why)) => return Ok(Written::Never(why)),
            Err(Unwritable::Yet(why)) => why,
        })
    }

    /// Whether this broker still owns the letter's source partition.
    fn owns_source(&self, letter: &DeadLetter) -> bool {
        let view = self.membership.view();
        let owner = self.topics.snapshot().owner(&letter.topic, letter.partition, &view);
        owner == Some(view.me)
    }

    /// The queue, its partition for the letter, and the batch to write there; or why the
    /// records cannot go to a queue.
    async fn prepare(&self, letter: &DeadLetter) -> Result<(String, i32, Bytes), Unwritable> {
        let snapshot = self.topics.snapshot();
        if snapshot.effective.share_version < 2 {
            return Err(Unwritable::Never("share.version is below 2".into()));
        }
        // Read afresh: a group config set a moment ago on a peer may not have reached this
        // broker's snapshot yet (a new owner of the source, say), and a record must not be
        // archived unsent for that.
        let fresh = crate::cluster::group_configs::read(self.env.volume()).await;
        let fresh = fresh.map_err(|e| Unwritable::Yet(format!("cannot read the group configs: {e:?}")))?;
        let configs = fresh.get(&letter.group_id);
        let config = |name: &str| configs.and_then(|c| c.get(name)).map(|v| v.trim().to_string());
        let queue = config(group::ERRORS_DEADLETTERQUEUE_TOPIC_NAME).unwrap_or_default();
        if queue.is_empty() {
            return Err(Unwritable::Never("the group has no dead-letter queue now".into()));
        }
        if queue.starts_with("__") {
            return Err(Unwritable::Never(format!("dead-letter queue {queue} is an internal topic's name")));
        }
        let prefix = &snapshot.effective.errors_deadletterqueue_topic_name_prefix;
        if !queue.starts_with(prefix.as_str()) {
            return Err(Unwritable::Never(format!("dead-letter queue {queue} does not have the prefix {prefix}")));
        }
        let copy = config(group::ERRORS_DEADLETTERQUEUE_COPY_RECORD_ENABLE).is_some_and(|v| v == "true");
        let snapshot = self.queue_topic(snapshot, &queue).await?;
        let partitions = snapshot.topics.get(&queue).map(|t| t.meta.partitions);
        let partitions = partitions.ok_or_else(|| Unwritable::Yet("the queue topic is not known here yet".into()))?;
        let target = letter.partition % partitions;
        let copied = match copy {
            true => self.source_records(&snapshot, letter).await.map_err(Unwritable::Yet)?,
            false => BTreeMap::new(),
        };
        let records = self.encode(letter, &copied);
        Ok((queue, target, records))
    }

    /// The snapshot with the queue topic in it, created if it must and may be; the topic must
    /// say it takes dead letters.
    async fn queue_topic(
        &self,
        snapshot: Arc<MetadataSnapshot>,
        queue: &str,
    ) -> Result<Arc<MetadataSnapshot>, Unwritable> {
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
                    // A name no topic may have: never. Anything else (the volume full for a
                    // moment, say): again.
                    Err(e @ (CoreError::InvalidTopic(_) | CoreError::InvalidConfig(_))) => {
                        return Err(Unwritable::Never(format!("cannot create dead-letter queue {queue}: {e:?}")));
                    }
                    Err(e) => return Err(Unwritable::Yet(format!("cannot create dead-letter queue {queue}: {e:?}"))),
                }
                let fresh = self.topics.snapshot();
                if !fresh.topics.contains_key(queue) {
                    return Err(Unwritable::Yet(format!("dead-letter queue {queue} created but not yet known")));
                }
                fresh
            }
            None => {
                return Err(Unwritable::Never(format!(
                    "dead-letter queue {queue} does not exist and may not be created"
                )));
            }
        };
        let enabled = snapshot.topics[queue].meta.configs.get(DLQ_GROUP_ENABLE).is_some_and(|v| v.trim() == "true");
        if !enabled {
            return Err(Unwritable::Never(format!("topic {queue} does not have {DLQ_GROUP_ENABLE}=true")));
        }
        Ok(snapshot)
    }

    /// The letter's records as the source partition has them (this broker owns it: its share
    /// partition just wrote them Archiving); offsets gone below the log's start go with headers
    /// alone. An error if the partition cannot be read now.
    async fn source_records(
        &self,
        snapshot: &MetadataSnapshot,
        letter: &DeadLetter,
    ) -> Result<BTreeMap<i64, Record>, String> {
        let mut found = BTreeMap::new();
        let partition =
            snapshot.partition(&letter.topic, letter.partition).ok_or("the source partition is not known")?;
        let mut offset = letter.range.first_offset;
        while offset <= letter.range.last_offset {
            let read = partition.read(offset, SOURCE_READ_BYTES, Isolation::ReadUncommitted).await;
            let read = read.map_err(|e| format!("cannot read the source records: {e:?}"))?;
            if read.records.is_empty() {
                // Gone below the log's start (retention): headers alone, as Apache writes them.
                break;
            }
            let before = offset;
            let mut at = 0;
            while at < read.records.len() {
                let Ok(header) = batch::BatchHeader::parse(&read.records[at..]) else { break };
                let end = (at + header.total_len()).min(read.records.len());
                let mut raw = read.records.slice(at..end);
                if let Ok(set) = RecordBatchDecoder::decode(&mut raw) {
                    let wanted = letter.range.first_offset..=letter.range.last_offset;
                    found.extend(set.records.into_iter().filter(|r| wanted.contains(&r.offset)).map(|r| (r.offset, r)));
                }
                offset = offset.max(header.next_offset());
                at = end;
            }
            if offset == before {
                break;
            }
        }
        Ok(found)
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
            Ok(Ok(_)) => {
                reach("dead-letter written (queue partition here)");
                return Ok(());
            }
            Ok(Err(CoreError::NotLeaderOrFollower)) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(CoreError::NotLeaderOrFollower),
        }
        let view = self.membership.view();
        let owner = snapshot.owner(queue, partition, &view).and_then(|o| view.endpoint_of(o));
        match owner {
            Some(peer) => {
                let written = self.peers.produce(peer, queue, partition, records).await;
                if written.is_ok() {
                    reach("dead-letter written (at the queue partition's owner)");
                }
                written
            }
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
