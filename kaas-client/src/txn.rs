//! The transactional client's calls: InitProducerId with a transactional id, AddPartitionsToTxn,
//! AddOffsetsToTxn, TxnOffsetCommit, EndTxn, transactional produce, OffsetFetch with
//! require_stable, ListTransactions, and a read_committed fetch that drops aborted records as
//! Kafka's consumer does.

use std::collections::{BTreeSet, VecDeque};

use bytes::{Buf, Bytes};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::records::RecordBatchDecoder;

use crate::wire::{produce_messages_request, text};
use crate::{Member, Message, Outcome, ProducerStamp, WireClient};

/// What a read_committed fetch served: the committed records as (offset, value), the offset to
/// fetch next (past control records and aborted ones too), and the watermarks.
#[derive(Debug, Clone, Default)]
pub struct Fetched {
    pub records: Vec<(i64, Bytes)>,
    /// Each record's key, in the order of `records`, and whether its value was null (a
    /// tombstone): a compacted topic's reader needs both.
    pub keys: Vec<(Option<Bytes>, bool)>,
    pub next_offset: i64,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
}

fn first_error(codes: impl IntoIterator<Item = i16>) -> Outcome<()> {
    match codes.into_iter().find(|&c| c != 0) {
        None => Outcome::Ok(()),
        Some(code) => Outcome::Failed(code),
    }
}

impl WireClient {
    /// InitProducerId (v4) for a transactional id; `current` is the caller's producer id and
    /// epoch when it bumps its own epoch (KIP-360).
    pub async fn init_txn_producer(
        &mut self,
        transactional_id: &str,
        transaction_timeout_ms: i32,
        current: Option<(i64, i16)>,
    ) -> Outcome<(i64, i16)> {
        let (producer_id, producer_epoch) = current.unwrap_or((-1, -1));
        let request = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(text(transactional_id))))
            .with_transaction_timeout_ms(transaction_timeout_ms)
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(producer_epoch);
        match self.call::<_, InitProducerIdResponse>(ApiKey::InitProducerId, 4, &request).await {
            Ok(r) if r.error_code == 0 => Outcome::Ok((r.producer_id.0, r.producer_epoch)),
            Ok(r) => Outcome::Failed(r.error_code),
            Err(_) => Outcome::Indefinite,
        }
    }

    pub async fn add_partitions_to_txn(
        &mut self,
        transactional_id: &str,
        (producer_id, producer_epoch): (i64, i16),
        topic: &str,
        partitions: &[i32],
    ) -> Outcome<()> {
        let request = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(text(transactional_id)))
            .with_v3_and_below_producer_id(ProducerId(producer_id))
            .with_v3_and_below_producer_epoch(producer_epoch)
            .with_v3_and_below_topics(vec![
                AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(text(topic)))
                    .with_partitions(partitions.to_vec()),
            ]);
        match self.call::<_, AddPartitionsToTxnResponse>(ApiKey::AddPartitionsToTxn, 3, &request).await {
            Ok(r) => first_error(
                r.results_by_topic_v3_and_below
                    .iter()
                    .flat_map(|t| t.results_by_partition.iter().map(|p| p.partition_error_code)),
            ),
            Err(_) => Outcome::Indefinite,
        }
    }

    pub async fn add_offsets_to_txn(
        &mut self,
        transactional_id: &str,
        (producer_id, producer_epoch): (i64, i16),
        group: &str,
    ) -> Outcome<()> {
        let request = AddOffsetsToTxnRequest::default()
            .with_transactional_id(TransactionalId(text(transactional_id)))
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(producer_epoch)
            .with_group_id(GroupId(text(group)));
        match self.call::<_, AddOffsetsToTxnResponse>(ApiKey::AddOffsetsToTxn, 3, &request).await {
            Ok(r) => first_error([r.error_code]),
            Err(_) => Outcome::Indefinite,
        }
    }

    /// TxnOffsetCommit (v3; v5 with `tv2`, which adds the group to the transaction) of
    /// partitions' offsets, without group membership (generation -1, as a consumer with
    /// assigned partitions sends it).
    pub async fn txn_offset_commit(
        &mut self,
        transactional_id: &str,
        ids: (i64, i16),
        group: &str,
        topic: &str,
        offsets: &[(i32, i64)],
        tv2: bool,
    ) -> Outcome<()> {
        self.txn_offset_commit_as(transactional_id, ids, group, &Member::default(), topic, offsets, tv2).await
    }

    /// TxnOffsetCommit (v3, or v5 with `tv2`) as `member` of the group (KIP-447's group
    /// metadata).
    #[allow(clippy::too_many_arguments)]
    pub async fn txn_offset_commit_as(
        &mut self,
        transactional_id: &str,
        (producer_id, producer_epoch): (i64, i16),
        group: &str,
        member: &Member,
        topic: &str,
        offsets: &[(i32, i64)],
        tv2: bool,
    ) -> Outcome<()> {
        let partitions = offsets
            .iter()
            .map(|&(p, o)| TxnOffsetCommitRequestPartition::default().with_partition_index(p).with_committed_offset(o))
            .collect();
        let request = TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(text(transactional_id)))
            .with_group_id(GroupId(text(group)))
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(producer_epoch)
            .with_generation_id_or_member_epoch(member.generation)
            .with_member_id(text(&member.member_id))
            .with_topics(vec![
                TxnOffsetCommitRequestTopic::default().with_name(TopicName(text(topic))).with_partitions(partitions),
            ]);
        let version = if tv2 { 5 } else { 3 };
        match self.call::<_, TxnOffsetCommitResponse>(ApiKey::TxnOffsetCommit, version, &request).await {
            Ok(r) => first_error(r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code))),
            Err(_) => Outcome::Indefinite,
        }
    }

    pub async fn end_txn(&mut self, transactional_id: &str, ids: (i64, i16), commit: bool) -> Outcome<()> {
        match self.end_txn_version(transactional_id, ids, commit, 3).await {
            Outcome::Ok(_) => Outcome::Ok(()),
            Outcome::Failed(code) => Outcome::Failed(code),
            Outcome::Indefinite => Outcome::Indefinite,
        }
    }

    /// EndTxn v5 (transactions v2): the producer id and epoch to go on with, bumped.
    pub async fn end_txn_v2(&mut self, transactional_id: &str, ids: (i64, i16), commit: bool) -> Outcome<(i64, i16)> {
        self.end_txn_version(transactional_id, ids, commit, 5).await
    }

    async fn end_txn_version(
        &mut self,
        transactional_id: &str,
        (producer_id, producer_epoch): (i64, i16),
        commit: bool,
        version: i16,
    ) -> Outcome<(i64, i16)> {
        let request = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(text(transactional_id)))
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(producer_epoch)
            .with_committed(commit);
        match self.call::<_, EndTxnResponse>(ApiKey::EndTxn, version, &request).await {
            Ok(r) if r.error_code == 0 => Outcome::Ok((r.producer_id.0, r.producer_epoch)),
            Ok(r) => Outcome::Failed(r.error_code),
            Err(_) => Outcome::Indefinite,
        }
    }

    /// Produces one transactional acks=all batch; its base offset on success. With `tv2` it
    /// is Produce v12, which adds the partition to the transaction (no AddPartitionsToTxn).
    #[allow(clippy::too_many_arguments)]
    pub async fn produce_txn(
        &mut self,
        transactional_id: &str,
        topic: &str,
        partition: i32,
        values: &[Bytes],
        timestamp_ms: i64,
        stamp: ProducerStamp,
        tv2: bool,
    ) -> Outcome<i64> {
        let messages: Vec<Message> = values.iter().cloned().map(Message::value).collect();
        self.produce_txn_messages(transactional_id, topic, partition, &messages, timestamp_ms, stamp, tv2).await
    }

    /// `produce_txn` of whole messages (key, value, headers).
    #[allow(clippy::too_many_arguments)]
    pub async fn produce_txn_messages(
        &mut self,
        transactional_id: &str,
        topic: &str,
        partition: i32,
        messages: &[Message],
        timestamp_ms: i64,
        stamp: ProducerStamp,
        tv2: bool,
    ) -> Outcome<i64> {
        let tid = Some(transactional_id);
        let Ok(request) = produce_messages_request(topic, partition, messages, timestamp_ms, stamp, -1, tid) else {
            return Outcome::Failed(-1);
        };
        let version = if tv2 { 12 } else { 9 };
        match self.call::<_, ProduceResponse>(ApiKey::Produce, version, &request).await {
            Err(_) => Outcome::Indefinite,
            Ok(response) => match response.responses.first().and_then(|t| t.partition_responses.first()) {
                Some(p) if p.error_code == 0 => Outcome::Ok(p.base_offset),
                Some(p) => Outcome::Failed(p.error_code),
                None => Outcome::Failed(-1),
            },
        }
    }

    /// The group's committed offsets of `partitions` (-1 if none) by OffsetFetch v7 with
    /// require_stable: UNSTABLE_OFFSET_COMMIT while a transaction has an offset staged.
    pub async fn committed_offsets_stable(
        &mut self,
        group: &str,
        topic: &str,
        partitions: &[i32],
    ) -> Outcome<Vec<i64>> {
        let request = OffsetFetchRequest::default()
            .with_group_id(GroupId(text(group)))
            .with_require_stable(true)
            .with_topics(Some(vec![
                OffsetFetchRequestTopic::default()
                    .with_name(TopicName(text(topic)))
                    .with_partition_indexes(partitions.to_vec()),
            ]));
        let response: OffsetFetchResponse = match self.call(ApiKey::OffsetFetch, 7, &request).await {
            Ok(r) => r,
            Err(_) => return Outcome::Indefinite,
        };
        if response.error_code != 0 {
            return Outcome::Failed(response.error_code);
        }
        let mut offsets = Vec::new();
        for &wanted in partitions {
            let found = response.topics.iter().flat_map(|t| &t.partitions).find(|p| p.partition_index == wanted);
            match found {
                Some(p) if p.error_code == 0 => offsets.push(p.committed_offset),
                Some(p) => return Outcome::Failed(p.error_code),
                None => return Outcome::Failed(-1),
            }
        }
        Outcome::Ok(offsets)
    }

    /// The transactional ids the broker knows and their states (ListTransactions v0).
    pub async fn list_transactions(&mut self) -> Outcome<Vec<(String, String)>> {
        let request = ListTransactionsRequest::default();
        match self.call::<_, ListTransactionsResponse>(ApiKey::ListTransactions, 0, &request).await {
            Ok(r) if r.error_code == 0 => Outcome::Ok(
                r.transaction_states
                    .iter()
                    .map(|s| (s.transactional_id.0.to_string(), s.transaction_state.to_string()))
                    .collect(),
            ),
            Ok(r) => Outcome::Failed(r.error_code),
            Err(_) => Outcome::Indefinite,
        }
    }

    /// One read_committed fetch (v12) from `offset`. Records of aborted transactions and
    /// control records are dropped as Kafka's consumer drops them: a producer's records are
    /// aborted from the first offset the broker lists for it up to its ABORT marker.
    pub async fn fetch_committed(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_wait_ms: i32,
    ) -> Outcome<Fetched> {
        let p = match self.fetch_partition(topic, partition, offset, max_wait_ms, 1).await {
            Outcome::Ok(p) => p,
            Outcome::Failed(code) => return Outcome::Failed(code),
            Outcome::Indefinite => return Outcome::Indefinite,
        };
        let mut aborted: Vec<(i64, i64)> =
            p.aborted_transactions.iter().flatten().map(|a| (a.first_offset, a.producer_id.0)).collect();
        aborted.sort_unstable();
        let mut aborted: VecDeque<(i64, i64)> = aborted.into();
        let mut aborting: BTreeSet<i64> = BTreeSet::new();
        let mut fetched = Fetched {
            records: Vec::new(),
            keys: Vec::new(),
            next_offset: offset,
            high_watermark: p.high_watermark,
            last_stable_offset: p.last_stable_offset,
        };
        if let Some(mut records) = p.records.clone() {
            while records.has_remaining() {
                let last = super::batch_last_offset(&records);
                let Ok(set) = RecordBatchDecoder::decode(&mut records) else {
                    return Outcome::Failed(super::CORRUPT_READ);
                };
                let skip_below = super::skipped_below(last, offset);
                // A compacted batch may hold nothing at or past the fetch offset: the next
                // fetch starts after it all the same.
                if let Some(last) = last.filter(|&l| l >= offset) {
                    fetched.next_offset = fetched.next_offset.max(last + 1);
                }
                for r in set.records {
                    while aborted.front().is_some_and(|&(first, _)| first <= r.offset) {
                        aborting.insert(aborted.pop_front().expect("checked").1);
                    }
                    if r.offset < skip_below {
                        continue;
                    }
                    fetched.next_offset = fetched.next_offset.max(r.offset + 1);
                    if r.control {
                        // The key's type: 0 ABORT, 1 COMMIT. Either ends the producer's transaction.
                        aborting.remove(&r.producer_id);
                    } else if !(r.transactional && aborting.contains(&r.producer_id)) {
                        fetched.keys.push((r.key, r.value.is_none()));
                        fetched.records.push((r.offset, r.value.unwrap_or_default()));
                    }
                }
            }
        }
        Outcome::Ok(fetched)
    }
}
