//! The consumer protocol embedded in a classic group's JoinGroup and SyncGroup bytes
//! (ConsumerProtocolSubscription and ConsumerProtocolAssignment, each after an i16 version).
//! The coordinator reads it only to move a live group between the classic and the consumer
//! protocol (`migration`) and to answer classic members of a consumer group; a classic group
//! of its own treats the bytes as opaque.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as AssignedTopic;
use kafka_protocol::messages::{ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// The newest version of either message this crate knows.
const NEWEST: i16 = 3;

/// Partitions by topic name, as the embedded protocol names them.
pub type Partitions = Vec<(String, Vec<i32>)>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    pub version: i16,
    pub topics: Vec<String>,
    /// What the member owns as it joins (v1+; a member of an eager protocol owns nothing).
    pub owned: Partitions,
    pub rack_id: Option<String>,
}

fn split_version(bytes: &[u8]) -> Option<(i16, Bytes)> {
    let mut buf = Bytes::copy_from_slice(bytes);
    if buf.len() < 2 {
        return None;
    }
    let version = buf.get_i16();
    // A newer version than we know is read as the newest we know, as Kafka's clients do.
    (version >= 0).then_some((version.min(NEWEST), buf))
}

/// A member's subscription, or None if the bytes are not the consumer protocol.
pub fn decode_subscription(bytes: &[u8]) -> Option<Subscription> {
    let (version, mut buf) = split_version(bytes)?;
    let s = ConsumerProtocolSubscription::decode(&mut buf, version).ok()?;
    Some(Subscription {
        version,
        topics: s.topics.iter().map(|t| t.to_string()).collect(),
        owned: s.owned_partitions.iter().map(|t| (t.topic.to_string(), t.partitions.clone())).collect(),
        rack_id: s.rack_id.map(|r| r.to_string()),
    })
}

/// A member's assignment; empty bytes (a member never synced) are no partitions.
pub fn decode_assignment(bytes: &[u8]) -> Option<Partitions> {
    if bytes.is_empty() {
        return Some(Vec::new());
    }
    let (version, mut buf) = split_version(bytes)?;
    let a = ConsumerProtocolAssignment::decode(&mut buf, version).ok()?;
    Some(a.assigned_partitions.iter().map(|t| (t.topic.to_string(), t.partitions.clone())).collect())
}

/// An assignment at `version` (the member's subscription's, as Apache answers it).
pub fn encode_assignment(partitions: &Partitions, version: i16) -> Bytes {
    let version = version.clamp(0, NEWEST);
    let message = ConsumerProtocolAssignment::default().with_assigned_partitions(
        partitions
            .iter()
            .map(|(topic, ps)| {
                AssignedTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(topic.clone())))
                    .with_partitions(ps.clone())
            })
            .collect(),
    );
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    message.encode(&mut buf, version).expect("an assignment of names and numbers encodes");
    buf.freeze()
}

/// A subscription at `version`, as a classic consumer sends it (used by tests and the
/// simulator's members).
pub fn encode_subscription(topics: &[String], owned: &Partitions, version: i16) -> Bytes {
    use kafka_protocol::messages::consumer_protocol_subscription::TopicPartition as OwnedTopic;
    let version = version.clamp(0, NEWEST);
    let message = ConsumerProtocolSubscription::default()
        .with_topics(topics.iter().map(|t| StrBytes::from_string(t.clone())).collect())
        .with_owned_partitions(
            owned
                .iter()
                .map(|(topic, ps)| {
                    OwnedTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(topic.clone())))
                        .with_partitions(ps.clone())
                })
                .collect(),
        );
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    message.encode(&mut buf, version).expect("a subscription of names and numbers encodes");
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_and_assignments_read_back_and_garbage_is_refused() {
        let owned = vec![("t".to_string(), vec![0, 2])];
        let s = decode_subscription(&encode_subscription(&["t".into(), "u".into()], &owned, 1)).unwrap();
        assert_eq!((s.version, s.topics.len(), s.owned.clone()), (1, 2, owned.clone()));
        let v0 = decode_subscription(&encode_subscription(&["t".into()], &owned, 0)).unwrap();
        assert!(v0.owned.is_empty(), "v0 has no owned partitions");
        assert_eq!(decode_assignment(&encode_assignment(&owned, 3)), Some(owned));
        assert_eq!(decode_assignment(&[]), Some(Vec::new()));
        assert_eq!(decode_subscription(&[]), None);
        assert_eq!(decode_subscription(&[0, 1, 0xff, 0xff, 0xff]), None);
        assert_eq!(decode_assignment(&[0xff, 0xff]), None, "a negative version is not the protocol");
    }
}
