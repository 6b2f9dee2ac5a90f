//! The server-side assignors of the consumer protocol (KIP-848), pure: from the members'
//! subscriptions, the subscribed topics' partitions and the current target, the next target.
//! `uniform` (the default, as in Apache) balances the partitions over the members and keeps a
//! partition where it is while its member is within its share; `range` gives each member a
//! contiguous range of each topic it subscribes to, in member id order, as the classic range
//! assignor does.

use std::collections::{BTreeMap, BTreeSet};

/// A topic by id: what assignments name.
pub type TopicId = [u8; 16];

/// Partitions per topic.
pub type Assignment = BTreeMap<TopicId, BTreeSet<i32>>;

/// The server assignors kaas has, by the names clients give (`group.remote.assignor`).
pub const ASSIGNORS: [&str; 2] = ["uniform", "range"];

/// A subscribed topic as the assignor sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    pub topic_id: TopicId,
    pub name: String,
    pub partitions: i32,
}

/// One member's say: the topics it subscribes to (by name) and what it has now.
pub struct Subscriber<'a> {
    pub member_id: &'a str,
    pub topics: &'a BTreeSet<String>,
    pub current: Option<&'a Assignment>,
}

/// The next target assignment of every member.
pub fn assign(
    assignor: &str,
    members: &[Subscriber<'_>],
    topics: &BTreeMap<String, TopicMetadata>,
) -> BTreeMap<String, Assignment> {
    let mut target: BTreeMap<String, Assignment> =
        members.iter().map(|m| (m.member_id.to_string(), Assignment::new())).collect();
    match assignor {
        "range" => range(members, topics, &mut target),
        _ => uniform(members, topics, &mut target),
    }
    target
}

fn range(
    members: &[Subscriber<'_>],
    topics: &BTreeMap<String, TopicMetadata>,
    target: &mut BTreeMap<String, Assignment>,
) {
    for (name, topic) in topics {
        let subscribed: Vec<&str> = members
            .iter()
            .filter(|m| m.topics.contains(name))
            .map(|m| m.member_id)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if subscribed.is_empty() {
            continue;
        }
        let (share, extra) = (topic.partitions / subscribed.len() as i32, topic.partitions % subscribed.len() as i32);
        let mut next = 0;
        for (i, member) in subscribed.iter().enumerate() {
            let count = share + i32::from((i as i32) < extra);
            let partitions: BTreeSet<i32> = (next..next + count).collect();
            next += count;
            if !partitions.is_empty() {
                target.get_mut(*member).expect("every member has a target").insert(topic.topic_id, partitions);
            }
        }
    }
}

fn uniform(
    members: &[Subscriber<'_>],
    topics: &BTreeMap<String, TopicMetadata>,
    target: &mut BTreeMap<String, Assignment>,
) {
    let all: Vec<(&TopicMetadata, i32)> =
        topics.values().flat_map(|t| (0..t.partitions).map(move |p| (t, p))).collect();
    let subscribers = |t: &TopicMetadata| members.iter().filter(|m| m.topics.contains(&t.name)).count();
    let eligible_total = all.iter().filter(|(t, _)| subscribers(t) > 0).count();
    // Each member's share is the floor of an even split; `extra` of them may hold one more.
    let floor = eligible_total / members.len().max(1);
    let mut extra = eligible_total % members.len().max(1);
    let mut counts: BTreeMap<&str, usize> = members.iter().map(|m| (m.member_id, 0)).collect();
    let mut placed: BTreeSet<(TopicId, i32)> = BTreeSet::new();
    // Sticky: a member keeps what it has, up to its share, then one more while extras last.
    for keep_extra in [false, true] {
        for m in members {
            let Some(current) = m.current else { continue };
            for (topic_id, partitions) in current {
                let Some(topic) = topics.values().find(|t| t.topic_id == *topic_id && m.topics.contains(&t.name))
                else {
                    continue;
                };
                for &p in partitions.iter().filter(|&&p| p < topic.partitions) {
                    let count = counts[m.member_id];
                    let room = count < floor || (keep_extra && count == floor && extra > 0);
                    if room && placed.insert((*topic_id, p)) {
                        if count == floor {
                            extra -= 1;
                        }
                        *counts.get_mut(m.member_id).expect("counted") += 1;
                        target.get_mut(m.member_id).expect("a target").entry(*topic_id).or_default().insert(p);
                    }
                }
            }
        }
    }
    // The rest, each to the subscribed member with the fewest (by member id on a tie).
    for (topic, p) in all {
        if placed.contains(&(topic.topic_id, p)) {
            continue;
        }
        let least = members
            .iter()
            .filter(|m| m.topics.contains(&topic.name))
            .min_by_key(|m| (counts[m.member_id], m.member_id));
        if let Some(m) = least {
            *counts.get_mut(m.member_id).expect("counted") += 1;
            target.get_mut(m.member_id).expect("a target").entry(topic.topic_id).or_default().insert(p);
        }
    }
}

/// The share group assignor (KIP-932's `simple`), as Apache's: per topic, each partition is
/// shared by as few members as give every subscriber one (`sharing`, the subscribers over the
/// partitions, rounded up), and each subscriber gets its fair number of the `sharing` times
/// partitions slots. It is sticky: a member keeps what it holds within its number, and only the
/// surplus moves. Members are taken in id order, partitions in index order: the same group and
/// topics give the same assignment on any broker.
pub fn simple(members: &[Subscriber<'_>], topics: &BTreeMap<String, TopicMetadata>) -> BTreeMap<String, Assignment> {
    let mut target: BTreeMap<String, Assignment> = BTreeMap::new();
    for m in members {
        let current = m.current.cloned().unwrap_or_default();
        // What a member keeps to begin with: partitions of topics it still subscribes to that
        // still exist.
        let kept = current
            .into_iter()
            .filter_map(|(id, partitions)| {
                let topic = topics.values().find(|t| t.topic_id == id && m.topics.contains(&t.name))?;
                let partitions: BTreeSet<i32> = partitions.into_iter().filter(|&p| p < topic.partitions).collect();
                (!partitions.is_empty()).then_some((id, partitions))
            })
            .collect();
        target.insert(m.member_id.to_string(), kept);
    }
    for topic in topics.values() {
        let subscribers: Vec<&str> = members
            .iter()
            .filter(|m| m.topics.contains(&topic.name))
            .map(|m| m.member_id)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if subscribers.is_empty() || topic.partitions <= 0 {
            continue;
        }
        share_topic(topic, &subscribers, &mut target);
    }
    target
}

/// One topic's part of `simple`.
fn share_topic(topic: &TopicMetadata, subscribers: &[&str], target: &mut BTreeMap<String, Assignment>) {
    let id = topic.topic_id;
    let (count, partitions) = (subscribers.len(), topic.partitions as usize);
    let sharing = count.div_ceil(partitions);
    let slots = sharing * partitions;
    // Each subscriber's fair number of slots, the remainder to the first in id order.
    let mut desired: BTreeMap<&str, usize> = BTreeMap::new();
    let mut given = 0;
    for (i, member) in subscribers.iter().enumerate() {
        let upto = ((i + 1) * slots).div_ceil(count);
        desired.insert(member, upto - given);
        given = upto;
    }
    let held = |target: &BTreeMap<String, Assignment>, m: &str| target[m].get(&id).map_or(0, BTreeSet::len);
    // Over its number: the highest partitions go.
    for member in subscribers {
        let mine = target.get_mut(*member).expect("a target per member").entry(id).or_default();
        while mine.len() > desired[member] {
            let last = *mine.last().expect("not empty");
            mine.remove(&last);
        }
    }
    // Shared by more than `sharing`: the members most over their number give it up first.
    for p in 0..topic.partitions {
        let mut holders: Vec<&str> =
            subscribers.iter().copied().filter(|m| target[*m].get(&id).is_some_and(|s| s.contains(&p))).collect();
        holders.sort_by_key(|m| std::cmp::Reverse(held(target, m) as i64 - desired[m] as i64));
        for member in holders.into_iter().skip(sharing) {
            target.get_mut(member).expect("a target per member").entry(id).or_default().remove(&p);
        }
    }
    // Under its number: the free slots, partition by partition, to the members in turn.
    let mut wanting: Vec<&str> = subscribers.iter().copied().filter(|m| held(target, m) < desired[m]).collect();
    let mut turn = 0;
    for p in 0..topic.partitions {
        let mut holders = subscribers.iter().filter(|m| target[**m].get(&id).is_some_and(|s| s.contains(&p))).count();
        while holders < sharing && !wanting.is_empty() {
            let candidate = (0..wanting.len())
                .map(|k| (turn + k) % wanting.len())
                .find(|&k| !target[wanting[k]].get(&id).is_some_and(|s| s.contains(&p)));
            let Some(k) = candidate else { break };
            let member = wanting[k];
            target.get_mut(member).expect("a target per member").entry(id).or_default().insert(p);
            holders += 1;
            if held(target, member) >= desired[member] {
                wanting.remove(k);
                turn = if wanting.is_empty() { 0 } else { k % wanting.len() };
            } else {
                turn = (k + 1) % wanting.len();
            }
        }
    }
    for member in subscribers {
        let mine = target.get_mut(*member).expect("a target per member");
        if mine.get(&id).is_some_and(BTreeSet::is_empty) {
            mine.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(id: u8, name: &str, partitions: i32) -> (String, TopicMetadata) {
        (name.to_string(), TopicMetadata { topic_id: [id; 16], name: name.to_string(), partitions })
    }

    fn count(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    #[test]
    fn uniform_balances_and_keeps_what_it_can() {
        let topics: BTreeMap<_, _> = [topic(1, "a", 4), topic(2, "b", 2)].into_iter().collect();
        let both: BTreeSet<String> = ["a".into(), "b".into()].into_iter().collect();
        let first = assign("uniform", &[Subscriber { member_id: "m1", topics: &both, current: None }], &topics);
        assert_eq!(count(&first["m1"]), 6);
        let m1 = first["m1"].clone();
        let two = [
            Subscriber { member_id: "m1", topics: &both, current: Some(&m1) },
            Subscriber { member_id: "m2", topics: &both, current: None },
        ];
        let next = assign("uniform", &two, &topics);
        assert_eq!((count(&next["m1"]), count(&next["m2"])), (3, 3));
        for (t, ps) in &next["m1"] {
            assert!(ps.is_subset(&m1[t]), "m1 keeps part of what it had");
        }
        let mut all = next["m1"].clone();
        for (t, ps) in &next["m2"] {
            assert!(all.entry(*t).or_default().is_disjoint(ps), "no partition twice");
            all.get_mut(t).unwrap().extend(ps);
        }
        assert_eq!(count(&all), 6, "every partition once");
    }

    #[test]
    fn uniform_takes_from_sticky_members_for_a_newcomer() {
        // Two members hold two partitions each: a third gets one, not nothing.
        let topics: BTreeMap<_, _> = [topic(1, "a", 4)].into_iter().collect();
        let a: BTreeSet<String> = ["a".into()].into_iter().collect();
        let half = |ps: [i32; 2]| Assignment::from([([1u8; 16], BTreeSet::from(ps))]);
        let (m1, m2) = (half([0, 1]), half([2, 3]));
        let three = [
            Subscriber { member_id: "m1", topics: &a, current: Some(&m1) },
            Subscriber { member_id: "m2", topics: &a, current: Some(&m2) },
            Subscriber { member_id: "m3", topics: &a, current: None },
        ];
        let next = assign("uniform", &three, &topics);
        let mut counts: Vec<usize> = next.values().map(count).collect();
        counts.sort();
        assert_eq!(counts, vec![1, 1, 2]);
        assert!(next["m1"][&[1u8; 16]].is_subset(&m1[&[1u8; 16]]), "m1 keeps part of what it had");
    }

    #[test]
    fn uniform_gives_a_topic_only_to_its_subscribers() {
        let topics: BTreeMap<_, _> = [topic(1, "a", 3), topic(2, "b", 3)].into_iter().collect();
        let a: BTreeSet<String> = ["a".into()].into_iter().collect();
        let b: BTreeSet<String> = ["b".into()].into_iter().collect();
        let t = assign(
            "uniform",
            &[
                Subscriber { member_id: "x", topics: &a, current: None },
                Subscriber { member_id: "y", topics: &b, current: None },
            ],
            &topics,
        );
        assert_eq!(t["x"].keys().collect::<Vec<_>>(), vec![&[1u8; 16]]);
        assert_eq!(t["y"].keys().collect::<Vec<_>>(), vec![&[2u8; 16]]);
    }

    #[test]
    fn range_gives_contiguous_ranges_in_member_order() {
        let topics: BTreeMap<_, _> = [topic(1, "a", 5)].into_iter().collect();
        let a: BTreeSet<String> = ["a".into()].into_iter().collect();
        let members = [
            Subscriber { member_id: "m2", topics: &a, current: None },
            Subscriber { member_id: "m1", topics: &a, current: None },
        ];
        let t = assign("range", &members, &topics);
        assert_eq!(t["m1"][&[1u8; 16]], [0, 1, 2].into_iter().collect());
        assert_eq!(t["m2"][&[1u8; 16]], [3, 4].into_iter().collect());
    }

    #[test]
    fn the_share_assignor_balances_shares_partitions_when_members_outnumber_them_and_is_sticky() {
        let topic = TopicMetadata { topic_id: [1; 16], name: "t".into(), partitions: 3 };
        let topics = BTreeMap::from([("t".to_string(), topic)]);
        let subscribed = BTreeSet::from(["t".to_string()]);
        let ids: Vec<String> = (0..5).map(|i| format!("m{i}")).collect();
        let members: Vec<Subscriber<'_>> =
            ids.iter().take(2).map(|id| Subscriber { member_id: id, topics: &subscribed, current: None }).collect();
        let two = simple(&members, &topics);
        let counts: Vec<usize> = two.values().map(|a| a.get(&[1; 16]).map_or(0, BTreeSet::len)).collect();
        assert_eq!(counts, vec![2, 1], "three partitions over two members, each once");
        // Five members over three partitions: every partition shared by two, every member has one or two.
        let members: Vec<Subscriber<'_>> =
            ids.iter().map(|id| Subscriber { member_id: id, topics: &subscribed, current: two.get(id) }).collect();
        let five = simple(&members, &topics);
        for p in 0..3 {
            let holders = five.values().filter(|a| a.get(&[1; 16]).is_some_and(|s| s.contains(&p))).count();
            assert_eq!(holders, 2, "partition {p} is shared by two");
        }
        assert!(five.values().all(|a| a.get(&[1; 16]).is_some_and(|s| !s.is_empty())), "{five:?}");
        let kept = two["m0"][&[1; 16]].intersection(&five["m0"][&[1; 16]]).count();
        assert!(kept >= 1, "m0 keeps what it held within its number");
    }
}
