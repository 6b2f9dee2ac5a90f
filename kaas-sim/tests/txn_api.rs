//! The transaction APIs' error contract over the wire, against the production broker in a
//! turmoil host: each wrong request gets the Kafka error Apache gives (with the departures
//! DESIGN.md asks for: INVALID_TXN_STATE for invalid transitions, KIP-360 validation, the
//! timeout ceiling, KIP-447 fencing of TxnOffsetCommit), and the right ones take effect.

use std::time::Duration;

use bytes::Bytes;
use kaas_core::BrokerConfig;
use kaas_sim::client::{Member, Outcome, ProducerStamp, WireClient};
use kaas_sim::hosts;
use kaas_sim::volume::SimVolume;

const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_TXN_STATE: i16 = 48;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
const UNKNOWN_MEMBER_ID: i16 = 25;
const ILLEGAL_GENERATION: i16 = 22;
const UNSTABLE_OFFSET_COMMIT: i16 = 88;
const PRODUCER_FENCED: i16 = 90;

async fn connect() -> WireClient {
    loop {
        if let Ok(c) = kaas_sim::client::connect("broker").await {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn scenario() -> turmoil::Result {
    let mut c = connect().await;
    assert_eq!(c.create_topic("t", 2).await?, 0);
    assert_eq!(c.create_topic("in", 1).await?, 0);

    // The timeout ceiling (transaction.max.timeout.ms, 900000).
    assert_eq!(c.init_txn_producer("a", 900_001, None).await, Outcome::Failed(INVALID_TRANSACTION_TIMEOUT));
    let Outcome::Ok(ids) = c.init_txn_producer("a", 60_000, None).await else { panic!("init") };
    assert_eq!(ids.1, 0, "a first InitProducerId gets epoch 0");

    // Invalid transitions are INVALID_TXN_STATE (48), not the reference's 50.
    assert_eq!(c.end_txn("a", ids, true).await, Outcome::Failed(INVALID_TXN_STATE), "EndTxn with nothing begun");
    assert_eq!(
        c.add_partitions_to_txn("a", (ids.0 + 1, 0), "t", &[0]).await,
        Outcome::Failed(INVALID_PRODUCER_ID_MAPPING)
    );
    assert_eq!(c.add_partitions_to_txn("a", (ids.0, 1), "t", &[0]).await, Outcome::Failed(PRODUCER_FENCED));

    // KIP-890: a transactional batch for a partition not in the transaction is refused.
    let stamp = ProducerStamp { producer_id: ids.0, producer_epoch: ids.1, base_sequence: 0 };
    let v = [Bytes::from_static(b"v")];
    assert_eq!(c.produce_txn("a", "t", 1, &v, 0, stamp, false).await, Outcome::Failed(INVALID_TXN_STATE));
    assert_eq!(c.add_partitions_to_txn("a", ids, "t", &[0]).await, Outcome::Ok(()));
    assert!(matches!(c.produce_txn("a", "t", 0, &v, 0, stamp, false).await, Outcome::Ok(0)));

    // KIP-447: offsets only for a group added to the transaction, from a current member.
    assert_eq!(c.txn_offset_commit("a", ids, "g", "in", &[(0, 5)], false).await, Outcome::Failed(INVALID_TXN_STATE));
    assert_eq!(c.add_offsets_to_txn("a", ids, "g").await, Outcome::Ok(()));
    let stranger = Member { member_id: "nobody".into(), generation: -1 };
    assert_eq!(
        c.txn_offset_commit_as("a", ids, "g", &stranger, "in", &[(0, 5)], false).await,
        Outcome::Failed(UNKNOWN_MEMBER_ID)
    );
    let stale = Member { member_id: String::new(), generation: 3 };
    assert_eq!(
        c.txn_offset_commit_as("a", ids, "g", &stale, "in", &[(0, 5)], false).await,
        Outcome::Failed(ILLEGAL_GENERATION)
    );
    assert_eq!(
        c.txn_offset_commit("a", (ids.0, 7), "g", "in", &[(0, 5)], false).await,
        Outcome::Failed(PRODUCER_FENCED)
    );
    assert_eq!(c.txn_offset_commit("a", ids, "g", "in", &[(0, 5)], false).await, Outcome::Ok(()));
    // Staged, not visible: require_stable answers UNSTABLE_OFFSET_COMMIT, a plain fetch -1.
    assert_eq!(c.committed_offsets_stable("g", "in", &[0]).await, Outcome::Failed(UNSTABLE_OFFSET_COMMIT));
    assert_eq!(c.committed_offset("g", "in", 0).await, Outcome::Ok(-1));

    // Two-phase EndTxn: a direction mismatch after completion is INVALID_TXN_STATE, a retry
    // of the same one is answered as done.
    assert_eq!(c.end_txn("a", ids, true).await, Outcome::Ok(()));
    assert_eq!(c.end_txn("a", ids, true).await, Outcome::Ok(()), "an idempotent retry");
    assert_eq!(c.end_txn("a", ids, false).await, Outcome::Failed(INVALID_TXN_STATE));
    assert_eq!(c.committed_offsets_stable("g", "in", &[0]).await, Outcome::Ok(vec![5]), "committed with the markers");
    let Outcome::Ok(read) = c.fetch_committed("t", 0, 0, 0).await else { panic!("fetch") };
    assert_eq!((read.records.len(), read.last_stable_offset, read.high_watermark), (1, 2, 2), "record + marker");

    // KIP-360: the current producer bumps its own epoch; a retry gets the same answer; an older
    // epoch is fenced, as is a batch of the old epoch anywhere.
    let Outcome::Ok(bumped) = c.init_txn_producer("a", 60_000, Some(ids)).await else { panic!("bump") };
    assert_eq!(bumped, (ids.0, 1));
    assert_eq!(c.init_txn_producer("a", 60_000, Some(ids)).await, Outcome::Ok(bumped), "a retried bump");
    assert_eq!(c.init_txn_producer("a", 60_000, Some((ids.0, 0))).await, Outcome::Ok(bumped));
    let Outcome::Ok(next) = c.init_txn_producer("a", 60_000, Some(bumped)).await else { panic!("bump") };
    assert_eq!(c.init_txn_producer("a", 60_000, Some(bumped)).await, Outcome::Ok(next));
    assert_eq!(c.init_txn_producer("a", 60_000, Some(ids)).await, Outcome::Failed(PRODUCER_FENCED), "two behind");
    let old = ProducerStamp { producer_id: ids.0, producer_epoch: 0, base_sequence: 1 };
    assert_eq!(c.produce_txn("a", "t", 0, &v, 0, old, false).await, Outcome::Failed(INVALID_PRODUCER_EPOCH));

    // A rejoin during a transaction aborts it first: CONCURRENT_TRANSACTIONS until then.
    assert_eq!(c.add_partitions_to_txn("a", next, "t", &[1]).await, Outcome::Ok(()));
    let first = ProducerStamp { producer_id: next.0, producer_epoch: next.1, base_sequence: 0 };
    assert!(matches!(c.produce_txn("a", "t", 1, &v, 0, first, false).await, Outcome::Ok(_)));
    let rejoined = loop {
        match c.init_txn_producer("a", 60_000, None).await {
            Outcome::Ok(ids) => break ids,
            Outcome::Failed(51) => tokio::time::sleep(Duration::from_millis(10)).await,
            other => panic!("{other:?}"),
        }
    };
    assert!(rejoined.1 > next.1 + 1, "the abort's bump and the rejoin's");
    let Outcome::Ok(read) = c.fetch_committed("t", 1, 0, 0).await else { panic!("fetch") };
    assert!(read.records.is_empty() && read.last_stable_offset == read.high_watermark, "{read:?}");
    assert_eq!(c.end_txn("a", next, true).await, Outcome::Failed(PRODUCER_FENCED));
    verify_only_v4(&mut c, rejoined).await?;
    Ok(())
}

/// AddPartitionsToTxn v4, the batched form brokers use for KIP-890 verification: verify_only
/// checks without adding; one answer per transaction and partition.
async fn verify_only_v4(c: &mut WireClient, ids: (i64, i16)) -> turmoil::Result {
    use kafka_protocol::messages::add_partitions_to_txn_request::{
        AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
    };
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    let topic = |partitions: Vec<i32>| {
        AddPartitionsToTxnTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(partitions)
    };
    let transaction = |verify_only: bool, partitions: Vec<i32>| {
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(StrBytes::from_static_str("a")))
            .with_producer_id(ProducerId(ids.0))
            .with_producer_epoch(ids.1)
            .with_verify_only(verify_only)
            .with_topics(vec![topic(partitions)])
    };
    let codes = |r: &AddPartitionsToTxnResponse| -> Vec<i16> {
        r.results_by_transaction
            .iter()
            .flat_map(|t| &t.topic_results)
            .flat_map(|t| &t.results_by_partition)
            .map(|p| p.partition_error_code)
            .collect()
    };
    let request = AddPartitionsToTxnRequest::default().with_transactions(vec![transaction(true, vec![0])]);
    let r: AddPartitionsToTxnResponse = c.call(ApiKey::AddPartitionsToTxn, 4, &request).await?;
    assert_eq!(codes(&r), vec![INVALID_TXN_STATE], "nothing open: verification fails, and adds nothing");
    let request = AddPartitionsToTxnRequest::default().with_transactions(vec![transaction(false, vec![0, 1])]);
    let r: AddPartitionsToTxnResponse = c.call(ApiKey::AddPartitionsToTxn, 5, &request).await?;
    assert_eq!(codes(&r), vec![0, 0]);
    let request = AddPartitionsToTxnRequest::default().with_transactions(vec![transaction(true, vec![1])]);
    let r: AddPartitionsToTxnResponse = c.call(ApiKey::AddPartitionsToTxn, 4, &request).await?;
    assert_eq!(codes(&r), vec![0], "now part of the open transaction");
    Ok(())
}

#[test]
fn transaction_apis_answer_apache_errors() {
    let mut sim = turmoil::Builder::new().simulation_duration(Duration::from_secs(60)).build();
    let spec = &hosts::BrokerSpec::single(1, 0)[0];
    hosts::add_broker(&mut sim, spec, &SimVolume::default(), BrokerConfig::default());
    sim.client("client", scenario());
    sim.run().unwrap();
}

/// Transactions v2 over the wire: the writes add to the transaction, every EndTxn bumps the
/// epoch (a retry is one behind), and a write of an ended transaction that arrives late is
/// fenced rather than joining the next one (KIP-890's case).
async fn transactions_v2() -> turmoil::Result {
    let mut c = connect().await;
    assert_eq!(c.create_topic("t", 2).await?, 0);
    assert_eq!(c.create_topic("in", 1).await?, 0);
    let Outcome::Ok(ids) = c.init_txn_producer("v2", 60_000, None).await else { panic!("init") };
    let v = [Bytes::from_static(b"v")];
    let stamp = |epoch: i16, partition_seq: i32| ProducerStamp {
        producer_id: ids.0,
        producer_epoch: epoch,
        base_sequence: partition_seq,
    };
    assert!(matches!(c.produce_txn("v2", "t", 0, &v, 0, stamp(0, 0), true).await, Outcome::Ok(0)), "no add first");
    assert_eq!(c.txn_offset_commit("v2", ids, "g2", "in", &[(0, 3)], true).await, Outcome::Ok(()));
    assert_eq!(c.end_txn_v2("v2", ids, true).await, Outcome::Ok((ids.0, 1)), "the epoch bumps");
    assert_eq!(c.end_txn_v2("v2", ids, true).await, Outcome::Ok((ids.0, 1)), "a retry, one epoch behind");
    assert_eq!(c.committed_offsets_stable("g2", "in", &[0]).await, Outcome::Ok(vec![3]));
    // The late writes of the ended transaction: where its marker went, and elsewhere.
    assert_eq!(c.produce_txn("v2", "t", 0, &v, 0, stamp(0, 1), true).await, Outcome::Failed(INVALID_PRODUCER_EPOCH));
    assert!(matches!(c.produce_txn("v2", "t", 1, &v, 0, stamp(1, 0), true).await, Outcome::Ok(0)));
    assert_eq!(c.produce_txn("v2", "t", 1, &v, 0, stamp(0, 0), true).await, Outcome::Failed(INVALID_PRODUCER_EPOCH));
    assert_eq!(c.end_txn_v2("v2", (ids.0, 1), false).await, Outcome::Ok((ids.0, 2)));
    let Outcome::Ok(read) = c.fetch_committed("t", 1, 0, 0).await else { panic!("fetch") };
    assert!(read.records.is_empty(), "the aborted write is not read: {read:?}");
    // Nothing open: an abort bumps too; a commit has nothing to commit.
    assert_eq!(c.end_txn_v2("v2", (ids.0, 2), false).await, Outcome::Ok((ids.0, 3)));
    assert_eq!(c.end_txn_v2("v2", (ids.0, 3), true).await, Outcome::Failed(INVALID_TXN_STATE));
    Ok(())
}

#[test]
fn transactions_v2_bump_the_epoch_at_every_end() {
    let mut sim = turmoil::Builder::new().simulation_duration(Duration::from_secs(60)).build();
    let spec = &hosts::BrokerSpec::single(1, 0)[0];
    hosts::add_broker(&mut sim, spec, &SimVolume::default(), BrokerConfig::default());
    sim.client("client", transactions_v2());
    sim.run().unwrap();
}
