//! The transactional producer's APIs (KIP-98, KIP-447, KIP-664): AddPartitionsToTxn (v0-v5,
//! the batched and verify-only v4+ form included), AddOffsetsToTxn (v0-v4), EndTxn (v0-v5),
//! TxnOffsetCommit (v0-v6; v6 by topic id), WriteTxnMarkers (v1-v2), ListTransactions (v0-v1) and
//! DescribeTransactions (v0). Each decodes, asks the transaction coordinator (or the group
//! coordinator, or a partition), and encodes; the state machine lives in kaas-core.

use std::collections::{BTreeMap, BTreeSet};

use kaas_core::acl::{Operation, Resource};
use kaas_core::broker::TxnOffsetCommit;
use kaas_core::env::{Clock, Env};
use kaas_core::group::{CommitRequest, CommittedOffset};
use kaas_core::participant::{Join, Participant, TxnWriter};
use kaas_core::txn::peers::{Markers, member_from_wire, member_on_wire};
use kaas_core::txn::state::{TV2, TxnEntry, TxnState};
use kaas_core::{CoreError, CoreResult};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequestTopic;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::*;

use super::{is_unknown_id, resolve_topic_ids, text, topic, unknown_partitions};
use crate::connection::Context;
use crate::error;

/// Apache's names of the transaction states, as ListTransactions filters and answers them.
pub fn state_name(state: TxnState) -> &'static str {
    match state {
        TxnState::Empty => "Empty",
        TxnState::Ongoing => "Ongoing",
        TxnState::PrepareCommit => "PrepareCommit",
        TxnState::PrepareAbort => "PrepareAbort",
        TxnState::CompleteCommit => "CompleteCommit",
        TxnState::CompleteAbort => "CompleteAbort",
    }
}

const STATE_NAMES: [&str; 8] = [
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
];

fn transactional_id(id: &TransactionalId) -> CoreResult<String> {
    if id.0.is_empty() {
        return Err(CoreError::InvalidRequest("empty transactional.id".into()));
    }
    Ok(id.0.to_string())
}

/// Adds one transaction's partitions (a client, v0-v3: `join` None), or, from a partition's or
/// a group's owner (v4+), checks each member is in the transaction or adds it for a v2 write.
/// Every partition of a client's add gets the same answer, except that unknown partitions get
/// UNKNOWN_TOPIC_OR_PARTITION and, if there are any, the others OPERATION_NOT_ATTEMPTED, as
/// Apache answers.
async fn add_partitions<E: Env>(
    ctx: &Context<E>,
    id: &TransactionalId,
    producer_id: i64,
    producer_epoch: i16,
    join: Option<Join>,
    topics: &[AddPartitionsToTxnTopic],
) -> Vec<AddPartitionsToTxnTopicResult> {
    let snapshot = ctx.broker.topics.snapshot();
    let mut wanted = Vec::new();
    let mut unknown = Vec::new();
    // Participants that are no partitions: a peer verifying a TxnOffsetCommit for the group it
    // owns, or a TxnShareAcknowledge for a share partition it owns.
    let mut others = Vec::new();
    for t in topics {
        for &p in &t.partitions {
            let tp = (t.name.0.to_string(), p);
            match member_from_wire(&tp.0, p) {
                other @ (Participant::Group(_) | Participant::SharePartition(_)) if join.is_some() => {
                    others.push((tp, other))
                }
                _ if snapshot.partition(&tp.0, p).is_some() => wanted.push(tp),
                _ => unknown.push(tp),
            }
        }
    }
    let mut codes: BTreeMap<(String, i32), i16> = BTreeMap::new();
    if !unknown.is_empty() {
        for tp in wanted {
            codes.insert(tp, ResponseError::OperationNotAttempted.code());
        }
        for tp in unknown {
            codes.insert(tp, ResponseError::UnknownTopicOrPartition.code());
        }
    } else {
        let txn = &ctx.broker.txn;
        let result = match transactional_id(id) {
            Err(e) => Err(e),
            Ok(id) if let Some(join) = join => {
                let mut result = Ok(());
                let members = wanted.iter().map(|tp| (tp.clone(), Participant::Partition(tp.clone())));
                for (tp, member) in members.chain(others) {
                    let verified = txn.verify(id.clone(), producer_id, producer_epoch, member, join).await;
                    codes.insert(tp, error::code_of(&verified));
                    result = result.and(verified);
                }
                result
            }
            Ok(id) => txn.add_partitions(id, producer_id, producer_epoch, wanted.clone()).await,
        };
        for tp in wanted {
            codes.entry(tp).or_insert_with(|| error::code_of(&result));
        }
    }
    topics
        .iter()
        .map(|t| {
            let results = t
                .partitions
                .iter()
                .map(|&p| {
                    let code = codes.get(&(t.name.0.to_string(), p)).copied().unwrap_or(0);
                    AddPartitionsToTxnPartitionResult::default().with_partition_index(p).with_partition_error_code(code)
                })
                .collect();
            AddPartitionsToTxnTopicResult::default().with_name(t.name.clone()).with_results_by_partition(results)
        })
        .collect()
}

/// A client's AddPartitionsToTxn that the ACLs refuse, answered as Apache answers it: every
/// partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED without WRITE on the transactional id; else
/// TOPIC_AUTHORIZATION_FAILED for the topics without WRITE, and OPERATION_NOT_ATTEMPTED for the
/// rest. None: nothing refused.
fn refused_topics<E: Env>(
    ctx: &Context<E>,
    id: &TransactionalId,
    topics: &[AddPartitionsToTxnTopic],
) -> Option<Vec<AddPartitionsToTxnTopicResult>> {
    let txn_refused = !ctx.authorized(Operation::Write, Resource::transactional_id(&id.0));
    let topic_refused = |name: &str| !ctx.authorized(Operation::Write, Resource::topic(name));
    if !txn_refused && !topics.iter().any(|t| topic_refused(&t.name.0)) {
        return None;
    }
    let results = topics
        .iter()
        .map(|t| {
            let code = match () {
                _ if txn_refused => ResponseError::TransactionalIdAuthorizationFailed.code(),
                _ if topic_refused(&t.name.0) => ResponseError::TopicAuthorizationFailed.code(),
                _ => ResponseError::OperationNotAttempted.code(),
            };
            let results = t
                .partitions
                .iter()
                .map(|&p| {
                    AddPartitionsToTxnPartitionResult::default().with_partition_index(p).with_partition_error_code(code)
                })
                .collect();
            AddPartitionsToTxnTopicResult::default().with_name(t.name.clone()).with_results_by_partition(results)
        })
        .collect();
    Some(results)
}

pub async fn add_partitions_to_txn<E: Env>(
    ctx: &Context<E>,
    header: &RequestHeader,
    request: AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    if header.request_api_version <= 3 {
        let id = &request.v3_and_below_transactional_id;
        if let Some(results) = refused_topics(ctx, id, &request.v3_and_below_topics) {
            return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
        }
        let results = add_partitions(
            ctx,
            &request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id.0,
            request.v3_and_below_producer_epoch,
            None,
            &request.v3_and_below_topics,
        )
        .await;
        return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
    }
    // v4+ is a broker's call (CLUSTER_ACTION), as in Apache.
    if !ctx.authorized(Operation::ClusterAction, Resource::cluster()) {
        return AddPartitionsToTxnResponse::default().with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let mut results = Vec::new();
    for t in &request.transactions {
        // v4+ comes from brokers: a partition's leader verifying a v1 write, or adding the
        // partition for a v2 write.
        let join = if t.verify_only { Join::Verify } else { Join::Add };
        let topics =
            add_partitions(ctx, &t.transactional_id, t.producer_id.0, t.producer_epoch, Some(join), &t.topics).await;
        results.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(t.transactional_id.clone())
                .with_topic_results(topics),
        );
    }
    AddPartitionsToTxnResponse::default().with_results_by_transaction(results)
}

pub async fn add_offsets_to_txn<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: AddOffsetsToTxnRequest,
) -> AddOffsetsToTxnResponse {
    let result = match transactional_id(&request.transactional_id) {
        _ if !ctx.authorized(Operation::Write, Resource::transactional_id(&request.transactional_id.0)) => {
            Err(CoreError::TransactionalIdAuthorizationFailed)
        }
        _ if !ctx.authorized(Operation::Read, Resource::group(&request.group_id.0)) => {
            Err(CoreError::GroupAuthorizationFailed)
        }
        Err(e) => Err(e),
        Ok(_) if request.group_id.0.is_empty() => Err(CoreError::InvalidGroupId),
        Ok(id) => {
            let group_id = request.group_id.0.to_string();
            ctx.broker.txn.add_offsets(id, request.producer_id.0, request.producer_epoch, group_id).await
        }
    };
    AddOffsetsToTxnResponse::default().with_error_code(error::code_of(&result))
}

/// EndTxn; from v5 (transactions v2, when the broker's `transaction.version` is 2) the epoch
/// bumps, and the answer names the producer id and epoch to go on with.
pub async fn end_txn<E: Env>(ctx: &Context<E>, header: &RequestHeader, request: EndTxnRequest) -> EndTxnResponse {
    let transaction_version = match header.request_api_version >= 5 {
        true => ctx.broker.config.transaction_version.min(TV2),
        false => 0,
    };
    let result = match transactional_id(&request.transactional_id) {
        _ if !ctx.authorized(Operation::Write, Resource::transactional_id(&request.transactional_id.0)) => {
            Err(CoreError::TransactionalIdAuthorizationFailed)
        }
        Err(e) => Err(e),
        Ok(id) => {
            let (producer_id, producer_epoch, commit) =
                (request.producer_id.0, request.producer_epoch, request.committed);
            ctx.broker.txn.end_txn(id, producer_id, producer_epoch, commit, transaction_version).await
        }
    };
    let (producer_id, producer_epoch) = *result.as_ref().unwrap_or(&(-1, -1));
    EndTxnResponse::default()
        .with_error_code(error::code_of(&result.map(|_| ())))
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(producer_epoch)
}

/// Stages the offsets of a consume-transform-produce transaction (KIP-447): the producer's
/// transaction must be open with the group added (from v5, transactions v2, the commit adds
/// it), and the member (v3) current in the group.
pub async fn txn_offset_commit<E: Env>(
    ctx: &Context<E>,
    header: &RequestHeader,
    mut request: TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    if header.request_api_version >= 6 {
        resolve_topic_ids(ctx, request.topics.iter_mut().map(|t| (&mut t.name, &t.topic_id))).await;
    }
    // As Apache: WRITE on the transactional id, then READ on the group (the whole request),
    // then READ on each topic (its partitions TOPIC_AUTHORIZATION_FAILED, the others staged).
    let whole = match () {
        _ if !ctx.authorized(Operation::Write, Resource::transactional_id(&request.transactional_id.0)) => {
            Some(ResponseError::TransactionalIdAuthorizationFailed.code())
        }
        _ if !ctx.authorized(Operation::Read, Resource::group(&request.group_id.0)) => {
            Some(ResponseError::GroupAuthorizationFailed.code())
        }
        _ => None,
    };
    let denied: BTreeSet<String> = request
        .topics
        .iter()
        .map(|t| t.name.0.to_string())
        .filter(|name| !is_unknown_id(name) && !ctx.authorized(Operation::Read, Resource::topic(name)))
        .collect();
    let allowed = request
        .clone()
        .with_topics(request.topics.iter().filter(|t| !denied.contains(t.name.0.as_str())).cloned().collect());
    let staged = match whole {
        Some(_) => None,
        None => Some(stage_allowed(ctx, header, &allowed).await),
    };
    let code_of = |name: &str, p: i32| match (whole, &staged) {
        (Some(code), _) => code,
        _ if denied.contains(name) => ResponseError::TopicAuthorizationFailed.code(),
        _ if is_unknown_id(name) => ResponseError::UnknownTopicId.code(),
        (None, Some((unknown, _))) if unknown.contains(&(name.to_string(), p)) => {
            ResponseError::UnknownTopicOrPartition.code()
        }
        (None, Some((_, code))) => *code,
        (None, None) => unreachable!("staged unless refused whole"),
    };
    let topics = request
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code_of(&t.name.0, p.partition_index))
                })
                .collect();
            TxnOffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_topic_id(t.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

/// Stages what the ACLs allowed: the partitions no topic of which exists, and the code of the
/// staging for the rest.
async fn stage_allowed<E: Env>(
    ctx: &Context<E>,
    header: &RequestHeader,
    request: &TxnOffsetCommitRequest,
) -> (BTreeSet<(String, i32)>, i16) {
    let unknown = unknown_partitions(
        ctx,
        request
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (t.name.0.to_string(), p.partition_index)))
            .collect(),
    )
    .await;
    let join = if header.request_api_version >= 5 { Join::Add } else { Join::Verify };
    let result = stage(ctx, request, &unknown, join).await.map_err(|e| match e {
        // A consumer-protocol member's stale epoch: v6 says so (KIP-1319); older versions know
        // no member epochs, so it is an old generation.
        CoreError::StaleMemberEpoch | CoreError::FencedMemberEpoch => match header.request_api_version >= 6 {
            true => CoreError::StaleMemberEpoch,
            false => CoreError::IllegalGeneration,
        },
        e => e,
    });
    (unknown, error::code_of(&result))
}

/// Partitions in `unknown` are left out; with none left, nothing is asked of the coordinator
/// (as Apache does).
async fn stage<E: Env>(
    ctx: &Context<E>,
    request: &TxnOffsetCommitRequest,
    unknown: &BTreeSet<(String, i32)>,
    join: Join,
) -> CoreResult<()> {
    let known = |t: &TxnOffsetCommitRequestTopic, p: i32| !unknown.contains(&(t.name.0.to_string(), p));
    if !request.topics.iter().any(|t| t.partitions.iter().any(|p| known(t, p.partition_index))) {
        return Ok(());
    }
    let transactional_id = transactional_id(&request.transactional_id)?;
    let (producer_id, producer_epoch) = (request.producer_id.0, request.producer_epoch);
    let now_ms = ctx.broker.env.clock().now_ms();
    let mut offsets = Vec::new();
    for t in &request.topics {
        for p in t.partitions.iter().filter(|p| known(t, p.partition_index)) {
            let committed = CommittedOffset {
                offset: p.committed_offset,
                leader_epoch: p.committed_leader_epoch,
                metadata: p.committed_metadata.as_ref().map(|m| m.to_string()).unwrap_or_default(),
                commit_timestamp_ms: now_ms,
            };
            offsets.push(((t.name.0.to_string(), p.partition_index), committed));
        }
    }
    let commit = CommitRequest {
        group_id: request.group_id.0.to_string(),
        member_id: request.member_id.to_string(),
        group_instance_id: request.group_instance_id.as_ref().map(|s| s.to_string()),
        generation_id: request.generation_id_or_member_epoch,
        offsets,
    };
    let writer = TxnWriter { transactional_id, producer_id, producer_epoch, join };
    ctx.broker.txn_offset_commit(TxnOffsetCommit { writer, commit }).await
}

/// The receiver side of Apache's coordinator-to-leader API: writes each marker into each named
/// partition, or ends the producer's staged offsets in a named group (a kaas coordinator on a
/// peer names groups as `cluster::peers` says), and answers once each is durable. A peer's
/// markers are written only as its queued entry still owes them (`cluster::peers`).
pub async fn write_txn_markers<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    let from_peer = ctx.from_broker;
    // Only the cluster's brokers write markers (CLUSTER_ACTION), as in Apache.
    if !ctx.authorized(Operation::ClusterAction, Resource::cluster()) {
        let code = ResponseError::ClusterAuthorizationFailed.code();
        let markers = request
            .markers
            .iter()
            .map(|m| {
                let topics = m
                    .topics
                    .iter()
                    .map(|t| {
                        let partitions = t
                            .partition_indexes
                            .iter()
                            .map(|&p| {
                                WritableTxnMarkerPartitionResult::default()
                                    .with_partition_index(p)
                                    .with_error_code(code)
                            })
                            .collect();
                        WritableTxnMarkerTopicResult::default().with_name(t.name.clone()).with_partitions(partitions)
                    })
                    .collect();
                WritableTxnMarkerResult::default().with_producer_id(m.producer_id).with_topics(topics)
            })
            .collect();
        return WriteTxnMarkersResponse::default().with_markers(markers);
    }
    let mut markers = Vec::new();
    for m in request.markers {
        if m.topics.is_empty() {
            // A peer coordinator's fence (`kaas_core::txn::peers`).
            ctx.broker.fence_here(m.producer_id.0, m.producer_epoch).await;
            markers.push(WritableTxnMarkerResult::default().with_producer_id(m.producer_id));
            continue;
        }
        let members = m.topics.iter().flat_map(|t| t.partition_indexes.iter().map(|&p| member_from_wire(&t.name.0, p)));
        let asked = Markers {
            producer_id: m.producer_id.0,
            producer_epoch: m.producer_epoch,
            commit: m.transaction_result,
            coordinator_epoch: m.coordinator_epoch,
            participants: members.collect(),
        };
        let mut topics: Vec<WritableTxnMarkerTopicResult> = Vec::new();
        let answers = if from_peer {
            ctx.broker.write_called_markers(asked).await
        } else {
            ctx.broker.write_markers_here(&asked).await
        };
        for (member, result) in answers {
            let (name, p) = member_on_wire(&member);
            let answer = WritableTxnMarkerPartitionResult::default()
                .with_partition_index(p)
                .with_error_code(error::code_of(&result));
            match topics.iter_mut().find(|t| t.name.0.as_str() == name) {
                Some(t) => t.partitions.push(answer),
                None => topics.push(
                    WritableTxnMarkerTopicResult::default().with_name(topic(&name)).with_partitions(vec![answer]),
                ),
            }
        }
        markers.push(WritableTxnMarkerResult::default().with_producer_id(m.producer_id).with_topics(topics));
    }
    WriteTxnMarkersResponse::default().with_markers(markers)
}

pub async fn list_transactions<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: ListTransactionsRequest,
) -> ListTransactionsResponse {
    let filters: Vec<String> = request.state_filters.iter().map(|s| s.to_string()).collect();
    let unknown: Vec<_> = filters.iter().filter(|f| !STATE_NAMES.contains(&f.as_str())).map(|f| text(f)).collect();
    // v2: only the transactional ids the whole of which the pattern matches (empty: any).
    let pattern = match request.transactional_id_pattern.as_deref().filter(|p| !p.is_empty()) {
        None => None,
        Some(p) => match regex::Regex::new(&format!("^(?:{p})$")) {
            Ok(re) => Some(re),
            Err(_) => {
                return ListTransactionsResponse::default()
                    .with_error_code(ResponseError::InvalidRegularExpression.code())
                    .with_unknown_state_filters(unknown);
            }
        },
    };
    let entries = match ctx.broker.txn.list().await {
        Ok(entries) => entries,
        Err(e) => return ListTransactionsResponse::default().with_error_code(error::code(&e)),
    };
    let now_ms = ctx.broker.env.clock().now_ms();
    let states = entries
        .into_iter()
        .filter(|e| filters.is_empty() || filters.iter().any(|f| f == state_name(e.state)))
        .filter(|e| {
            request.producer_id_filters.is_empty() || request.producer_id_filters.contains(&ProducerId(e.producer_id))
        })
        .filter(|e| pattern.as_ref().is_none_or(|re| re.is_match(&e.transactional_id)))
        // Only the transactional ids the client may DESCRIBE, as Apache lists them.
        .filter(|e| ctx.authorized(Operation::Describe, Resource::transactional_id(&e.transactional_id)))
        .filter(|e| {
            // v1: only transactions running longer than the duration (-1: any).
            request.duration_filter < 0
                || e.ongoing_since_ms >= 0 && now_ms - e.ongoing_since_ms > request.duration_filter
        })
        .map(|e| {
            list_transactions_response::TransactionState::default()
                .with_transactional_id(TransactionalId(text(&e.transactional_id)))
                .with_producer_id(ProducerId(e.producer_id))
                .with_transaction_state(text(state_name(e.state)))
        })
        .collect();
    ListTransactionsResponse::default().with_unknown_state_filters(unknown).with_transaction_states(states)
}

pub async fn describe_transactions<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let ids = request.transactional_ids.iter().map(|id| id.0.to_string()).collect();
    let described = match ctx.broker.txn.describe(ids).await {
        Ok(described) => described,
        Err(e) => {
            let states = request
                .transactional_ids
                .into_iter()
                .map(|id| {
                    describe_transactions_response::TransactionState::default()
                        .with_transactional_id(id)
                        .with_error_code(error::code(&e))
                })
                .collect();
            return DescribeTransactionsResponse::default().with_transaction_states(states);
        }
    };
    let states = described
        .into_iter()
        .map(|(id, entry)| match ctx.authorized(Operation::Describe, Resource::transactional_id(&id)) {
            true => describe_one(&id, entry),
            false => describe_transactions_response::TransactionState::default()
                .with_transactional_id(TransactionalId(text(&id)))
                .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code()),
        })
        .collect();
    DescribeTransactionsResponse::default().with_transaction_states(states)
}

fn describe_one(id: &str, entry: CoreResult<Option<TxnEntry>>) -> describe_transactions_response::TransactionState {
    // An error leaves every other field at its default, as Apache answers it.
    let state =
        describe_transactions_response::TransactionState::default().with_transactional_id(TransactionalId(text(id)));
    let entry = match entry {
        Ok(entry) => entry,
        Err(e) => return state.with_error_code(error::code(&e)),
    };
    let Some(entry) = entry else {
        return state.with_error_code(error::code(&CoreError::TransactionalIdNotFound));
    };
    let state = state.with_producer_id(ProducerId(-1)).with_producer_epoch(-1).with_transaction_start_time_ms(-1);
    let mut topics: Vec<describe_transactions_response::TopicData> = Vec::new();
    for (name, p) in &entry.partitions {
        match topics.iter_mut().find(|t| t.topic.0.as_str() == name) {
            Some(t) => t.partitions.push(*p),
            None => topics.push(
                describe_transactions_response::TopicData::default().with_topic(topic(name)).with_partitions(vec![*p]),
            ),
        }
    }
    state
        .with_transaction_state(text(state_name(entry.state)))
        .with_transaction_timeout_ms(entry.transaction_timeout_ms)
        .with_transaction_start_time_ms(entry.ongoing_since_ms)
        .with_producer_id(ProducerId(entry.producer_id))
        .with_producer_epoch(entry.producer_epoch)
        .with_topics(topics)
}
