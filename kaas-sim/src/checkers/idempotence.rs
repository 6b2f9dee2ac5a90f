//! What an idempotent producer may expect of the log (invariants 2 and 7 of DESIGN.md):
//! - pid-reuse: two producer instances were handed the same producer id;
//! - sequence-gap / reordered: per producer instance, the batches in the log are exactly its
//!   first n batches, in the order it sent them, each once (a retry is never written again).
//!
//! Duplicates and lost acked batches are the log checker's; this one needs to know which
//! instance sent each batch and in what order.

use std::collections::BTreeMap;

use bytes::Bytes;

/// Which producer instance sent a batch, and its place in that instance's stream.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Sender {
    pub instance: String,
    pub producer_id: i64,
    pub index: usize,
}

pub fn check(partition: &str, read: &[(i64, Bytes)], sender_of: &BTreeMap<Bytes, Sender>) -> Vec<String> {
    let mut violations = Vec::new();
    // instance -> the batch indices in log order (each record counts; a batch's records are
    // consecutive, so consecutive equal indices are one batch).
    let mut order: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (offset, value) in read {
        let Some(sender) = sender_of.get(value) else { continue };
        let seen = order.entry(&sender.instance).or_default();
        if seen.last() != Some(&sender.index) {
            if seen.contains(&sender.index) {
                violations.push(format!(
                    "reordered: {partition}: {} batch {} appears again at offset {offset}",
                    sender.instance, sender.index
                ));
            }
            seen.push(sender.index);
        }
    }
    for (instance, indices) in order {
        if let Some((at, index)) = indices.iter().enumerate().find(|(at, index)| *at != **index) {
            violations.push(format!(
                "sequence-gap: {partition}: {instance}'s batch {index} is its {at}th in the log: the ones before it are missing or reordered"
            ));
        }
    }
    violations
}

/// Every producer id handed to more than one instance.
pub fn check_producer_ids(instances: &[(String, i64)]) -> Vec<String> {
    let mut owner: BTreeMap<i64, &str> = BTreeMap::new();
    let mut violations = Vec::new();
    for (instance, pid) in instances {
        if let Some(first) = owner.insert(*pid, instance)
            && first != instance
        {
            violations.push(format!("pid-reuse: producer id {pid} was handed to {first} and to {instance}"));
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkers::b;

    fn senders() -> BTreeMap<Bytes, Sender> {
        let sender = |index| Sender { instance: "p.0".into(), producer_id: 7, index };
        BTreeMap::from([(b("a0"), sender(0)), (b("a1"), sender(0)), (b("b"), sender(1)), (b("c"), sender(2))])
    }

    fn read(values: &[&str]) -> Vec<(i64, Bytes)> {
        values.iter().enumerate().map(|(i, v)| (i as i64, b(v))).collect()
    }

    #[test]
    fn an_instances_batches_in_order_pass_and_anything_else_is_named() {
        assert!(check("p", &read(&["a0", "a1", "b"]), &senders()).is_empty(), "a prefix, in order");
        let found = check("p", &read(&["a0", "a1", "c"]), &senders());
        assert!(found[0].starts_with("sequence-gap"), "{found:?}");
        let found = check("p", &read(&["a0", "a1", "b", "a0", "a1"]), &senders());
        assert!(found[0].starts_with("reordered"), "{found:?}");
    }

    #[test]
    fn a_producer_id_handed_to_two_instances_is_named() {
        assert!(check_producer_ids(&[("a".into(), 1), ("b".into(), 2), ("a".into(), 1)]).is_empty());
        let found = check_producer_ids(&[("a".into(), 1), ("b".into(), 1)]);
        assert!(found[0].starts_with("pid-reuse: producer id 1"), "{found:?}");
    }
}
