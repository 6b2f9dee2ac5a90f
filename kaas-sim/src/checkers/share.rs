//! Share groups (invariant 10): what the members of a share group were given and what came of
//! their acknowledgements, against KIP-932's promises. Times are the history's sequence
//! numbers: a call `sent` before the event numbered so was recorded, and `received` by the one
//! after its outcome, so `a.received < b.sent` says `b` was sent after `a` was answered.
//! - redelivered-after-accept: a record acquired again by a request sent after an accept (or
//!   reject) of it was answered as done;
//! - double-acquisition: one record handed out twice with the same delivery count;
//! - delivery-count-backwards: a record acquired with a delivery count no higher than an
//!   acquisition answered before the request was sent;
//! - delivery-count-overrun: a delivery count above the group's limit;
//! - acquired-after-fence: a member acquired records by a request sent after its group said it
//!   was no longer a member and before it asked to join again;
//! - ack-after-fence: a transactional acknowledgement staged by a member epoch the group had
//!   fenced before the request was sent;
//! - lost-record: at the end, the share group's start offset short of the input's end, or a
//!   record behind it that no member accepted or rejected and that cannot have reached the
//!   delivery limit (archived unseen), counting the deliveries a fetch whose answer was lost
//!   may have made.
//! - dead-letter-missing (KIP-1191, with a dead-letter queue): a record rejected, or acquired
//!   as often as the limit allows and never accepted, is not on the queue (or the queue could
//!   not be read);
//! - dead-letter-wrong: a queue record naming a record that was accepted, another group or
//!   topic, or not carrying the record's value.

use std::collections::BTreeMap;

use bytes::Bytes;

/// How a member acknowledged a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckKind {
    Accept,
    Release,
    Reject,
}

/// What came of an acknowledgement, as the broker said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    Done,
    /// Refused with this code: nothing happened.
    Refused(i16),
    /// Its effect is unknown: a lost connection, or a refusal that can follow a write (an
    /// owner whose lease ran out between writing and answering).
    Unknown,
}

#[derive(Debug, Clone)]
pub struct Acquisition {
    pub member: String,
    pub partition: i32,
    pub offset: i64,
    pub delivery_count: i16,
    pub sent: u64,
    pub received: u64,
}

#[derive(Debug, Clone)]
pub struct Ack {
    pub member: String,
    pub partition: i32,
    pub offset: i64,
    pub kind: AckKind,
    pub sent: u64,
    pub received: u64,
    pub outcome: AckOutcome,
}

/// A transactional acknowledgement (KIP-1289) staged by `member` at `member_epoch`.
#[derive(Debug, Clone)]
pub struct Staged {
    pub member: String,
    pub member_epoch: i32,
    pub sent: u64,
    pub staged: bool,
}

/// A record of the dead-letter queue, by Apache's headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub group: String,
    pub delivery_count: i16,
    pub message: String,
    pub value: Option<Bytes>,
}

impl DeadLetter {
    pub fn from_headers(headers: &[(String, Option<Bytes>)], value: Option<Bytes>) -> DeadLetter {
        let text = |name: &str| {
            headers
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .and_then(|(_, v)| v.as_ref())
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default()
        };
        DeadLetter {
            topic: text("__dlq.errors.topic"),
            partition: text("__dlq.errors.partition").parse().unwrap_or(-1),
            offset: text("__dlq.errors.offset").parse().unwrap_or(-1),
            group: text("__dlq.errors.group"),
            delivery_count: text("__dlq.errors.delivery.count").parse().unwrap_or(-1),
            message: text("__dlq.errors.message"),
            value,
        }
    }
}

/// Everything the share members did and saw, for `check`.
#[derive(Debug, Default)]
pub struct ShareLog {
    pub topic: String,
    pub delivery_count_limit: i16,
    /// Each input partition's end: its records are offsets 0 up to it.
    pub input_end: BTreeMap<i32, i64>,
    pub acquisitions: Vec<Acquisition>,
    pub acks: Vec<Ack>,
    /// A member's heartbeat answered that it is not (or no longer) a member at an epoch:
    /// (member, the epoch it named, received).
    pub fences: Vec<(String, i32, u64)>,
    /// A member's join heartbeats: (member, sent).
    pub joins: Vec<(String, u64)>,
    pub staged: Vec<Staged>,
    /// Fetches whose acquisitions nobody saw, though they may have happened (a lost answer, a
    /// refusal that can follow a write): (partition, sent, received), received `u64::MAX` for a
    /// lost answer (a paused broker may act on it after its client gave up).
    pub unknown_fetches: Vec<(i32, u64, u64)>,
    /// The share group's start offset of each partition at the end (-1: none known).
    pub final_start: BTreeMap<i32, i64>,
    /// KIP-1191: the group had a dead-letter queue, and what it held at the end (`None`: it
    /// could not be read).
    pub dead_letter: bool,
    pub dead_letters: Option<Vec<DeadLetter>>,
    /// Each input record's value, by (partition, offset), for the copies on the queue.
    pub values: BTreeMap<(i32, i64), Bytes>,
}

/// Codes a broker refuses an acknowledgement with before anything is written.
pub fn refused_before_write(code: i16) -> bool {
    matches!(
        code,
        121 /* INVALID_RECORD_STATE */ | 42 /* INVALID_REQUEST */ | 122 /* SHARE_SESSION_NOT_FOUND */
            | 123 /* INVALID_SHARE_SESSION_EPOCH */ | 3 /* UNKNOWN_TOPIC_OR_PARTITION */
            | 100 /* UNKNOWN_TOPIC_ID */ | kaas_client::NOT_SENT
    )
}

pub fn check(log: &ShareLog) -> Vec<String> {
    let mut violations = Vec::new();
    let topic = &log.topic;
    let mut by_record: BTreeMap<(i32, i64), Vec<&Acquisition>> = BTreeMap::new();
    for a in &log.acquisitions {
        by_record.entry((a.partition, a.offset)).or_default().push(a);
        if a.delivery_count > log.delivery_count_limit || a.delivery_count < 1 {
            violations.push(format!(
                "delivery-count-overrun: {topic}-{} offset {} acquired by {} with delivery count {} (limit {})",
                a.partition, a.offset, a.member, a.delivery_count, log.delivery_count_limit
            ));
        }
    }
    for ((p, offset), acquired) in &by_record {
        for (i, a) in acquired.iter().enumerate() {
            for b in &acquired[i + 1..] {
                if a.delivery_count == b.delivery_count {
                    violations.push(format!(
                        "double-acquisition: {topic}-{p} offset {offset} handed to {} and to {} with delivery count {}",
                        a.member, b.member, a.delivery_count
                    ));
                    continue;
                }
                let (first, then) = if a.received < b.sent { (a, b) } else { (b, a) };
                if first.received < then.sent && then.delivery_count <= first.delivery_count {
                    violations.push(format!(
                        "delivery-count-backwards: {topic}-{p} offset {offset} given to {} with delivery count {}, then to {} with {}",
                        first.member, first.delivery_count, then.member, then.delivery_count
                    ));
                }
            }
        }
    }
    for ack in log.acks.iter().filter(|a| a.kind != AckKind::Release && a.outcome == AckOutcome::Done) {
        let again = by_record.get(&(ack.partition, ack.offset)).into_iter().flatten().find(|a| a.sent > ack.received);
        if let Some(again) = again {
            violations.push(format!(
                "redelivered-after-accept: {topic}-{} offset {} {} by {}, then acquired by {} with delivery count {}",
                ack.partition,
                ack.offset,
                if ack.kind == AckKind::Accept { "accepted" } else { "rejected" },
                ack.member,
                again.member,
                again.delivery_count
            ));
        }
    }
    for (member, epoch, fenced_at) in &log.fences {
        let rejoined_at =
            log.joins.iter().filter(|(m, sent)| m == member && *sent > *fenced_at).map(|(_, sent)| *sent).min();
        let late = log.acquisitions.iter().find(|a| {
            a.member == *member && a.sent > *fenced_at && rejoined_at.is_none_or(|joined| a.received < joined)
        });
        if let Some(a) = late {
            violations.push(format!(
                "acquired-after-fence: {member}, told it was no member at epoch {epoch}, acquired {topic}-{} offset {}",
                a.partition, a.offset
            ));
        }
        let staged = log.staged.iter().find(|s| s.member == *member && s.member_epoch <= *epoch && s.sent > *fenced_at);
        if let Some(s) = staged.filter(|s| s.staged) {
            violations.push(format!(
                "ack-after-fence: {member} staged acknowledgements at member epoch {}, fenced at epoch {epoch}",
                s.member_epoch
            ));
        }
    }
    for (&p, &end) in &log.input_end {
        let start = log.final_start.get(&p).copied().unwrap_or(-1);
        if start < end {
            violations.push(format!(
                "lost-record: {topic}-{p}: the share group starts at {start} at the end, the input ends at {end}"
            ));
            continue;
        }
        for offset in 0..end {
            let finished = log.acks.iter().any(|a| {
                a.partition == p
                    && a.offset == offset
                    && a.kind != AckKind::Release
                    && !matches!(a.outcome, AckOutcome::Refused(code) if refused_before_write(code))
            });
            if !finished && !may_be_archived(log, p, offset) {
                violations.push(format!(
                    "lost-record: {topic}-{p} offset {offset} is behind the share group's start {start}, never accepted nor rejected (delivered {} times)",
                    by_record.get(&(p, offset)).map_or(0, Vec::len)
                ));
                break;
            }
        }
    }
    if log.dead_letter {
        check_dead_letters(log, &by_record, &mut violations);
    }
    violations
}

/// KIP-1191: what must be on the dead-letter queue is, and what is there is right.
fn check_dead_letters(
    log: &ShareLog,
    by_record: &BTreeMap<(i32, i64), Vec<&Acquisition>>,
    violations: &mut Vec<String>,
) {
    let topic = &log.topic;
    let Some(letters) = &log.dead_letters else {
        violations.push("dead-letter-missing: the dead-letter queue could not be read at the end".into());
        return;
    };
    let on_queue: BTreeMap<(i32, i64), &DeadLetter> = letters.iter().map(|l| ((l.partition, l.offset), l)).collect();
    // An acknowledgement of a record already done is answered as done and changes nothing,
    // so one kind answered done rules out nothing of the other: both are "maybe".
    let acked = |key: (i32, i64), kind: AckKind, surely: bool| {
        log.acks.iter().any(|a| {
            (a.partition, a.offset) == key
                && a.kind == kind
                && match surely {
                    true => a.outcome == AckOutcome::Done,
                    false => !matches!(a.outcome, AckOutcome::Refused(code) if refused_before_write(code)),
                }
        })
    };
    let ran_out = |key: (i32, i64)| {
        by_record
            .get(&key)
            .is_some_and(|acquired| acquired.iter().any(|a| a.delivery_count >= log.delivery_count_limit))
    };
    for letter in letters {
        let key = (letter.partition, letter.offset);
        let only_accepted = acked(key, AckKind::Accept, true) && !acked(key, AckKind::Reject, false) && !ran_out(key);
        let wrong = if letter.topic != *topic || letter.group.is_empty() {
            Some(format!("names {}/{} of group {:?}", letter.topic, letter.partition, letter.group))
        } else if only_accepted {
            Some("was accepted, never rejected nor run out".into())
        } else if log.values.get(&key).is_some_and(|v| letter.value.as_ref() != Some(v)) {
            Some(format!("carries {:?}, not the record's value", letter.value))
        } else {
            None
        };
        if let Some(why) = wrong {
            violations
                .push(format!("dead-letter-wrong: the queue's record for {topic}-{} offset {} {why}", key.0, key.1));
            return;
        }
    }
    for &key in by_record.keys() {
        let rejected = acked(key, AckKind::Reject, true);
        let must = (rejected || ran_out(key)) && !acked(key, AckKind::Accept, false);
        if must && !on_queue.contains_key(&key) {
            violations.push(format!(
                "dead-letter-missing: {topic}-{} offset {} was {} but is not on the dead-letter queue",
                key.0,
                key.1,
                if rejected { "rejected" } else { "delivered as often as the limit allows and never accepted" }
            ));
            return;
        }
    }
}

/// Whether a record may have reached the group's delivery limit, and so been archived unseen:
/// its most delivered acquisition seen, plus every fetch whose answer was lost since.
pub fn may_be_archived(log: &ShareLog, p: i32, offset: i64) -> bool {
    let seen =
        log.acquisitions.iter().filter(|a| a.partition == p && a.offset == offset).max_by_key(|a| a.delivery_count);
    let (count, since) = seen.map_or((0, 0), |a| (a.delivery_count, a.sent));
    // A fetch answered after the last seen acquisition was sent may have come after it.
    let unseen = log.unknown_fetches.iter().filter(|(up, _, received)| *up == p && *received > since).count();
    i64::from(count) + unseen as i64 >= i64::from(log.delivery_count_limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquired(member: &str, offset: i64, delivery_count: i16, sent: u64, received: u64) -> Acquisition {
        Acquisition { member: member.into(), partition: 0, offset, delivery_count, sent, received }
    }

    fn ack(member: &str, offset: i64, kind: AckKind, sent: u64, received: u64, outcome: AckOutcome) -> Ack {
        Ack { member: member.into(), partition: 0, offset, kind, sent, received, outcome }
    }

    fn log() -> ShareLog {
        ShareLog {
            topic: "t".into(),
            delivery_count_limit: 3,
            input_end: BTreeMap::from([(0, 2)]),
            acquisitions: vec![acquired("a", 0, 1, 1, 2), acquired("a", 1, 1, 1, 2)],
            acks: vec![
                ack("a", 0, AckKind::Accept, 3, 4, AckOutcome::Done),
                ack("a", 1, AckKind::Reject, 3, 4, AckOutcome::Done),
            ],
            final_start: BTreeMap::from([(0, 2)]),
            ..ShareLog::default()
        }
    }

    fn classes(v: &[String]) -> Vec<&str> {
        v.iter().map(|v| crate::scenarios::class(v)).collect()
    }

    #[test]
    fn each_record_acquired_once_and_finished_passes() {
        assert!(check(&log()).is_empty());
    }

    #[test]
    fn a_record_given_again_after_its_accept_is_named() {
        let mut l = log();
        l.acquisitions.push(acquired("b", 0, 2, 5, 6));
        assert_eq!(classes(&check(&l)), ["redelivered-after-accept"]);
        let mut released = log();
        released.acks[0].kind = AckKind::Release;
        released.acks.push(ack("b", 0, AckKind::Accept, 7, 8, AckOutcome::Done));
        released.acquisitions.push(acquired("b", 0, 2, 5, 6));
        assert!(check(&released).is_empty(), "a released record comes back");
    }

    #[test]
    fn delivery_counts_only_go_up_and_stay_under_the_limit() {
        let mut same = log();
        same.acquisitions.push(acquired("b", 0, 1, 1, 3));
        assert_eq!(classes(&check(&same)), ["double-acquisition"]);
        let mut back = log();
        back.acks[0].kind = AckKind::Release;
        back.acquisitions.push(acquired("b", 0, 2, 3, 5));
        back.acquisitions.push(acquired("c", 0, 2, 6, 7));
        back.acks.push(ack("c", 0, AckKind::Accept, 8, 9, AckOutcome::Done));
        assert_eq!(classes(&check(&back)), ["double-acquisition"]);
        let mut over = log();
        over.acquisitions[1].delivery_count = 4;
        assert_eq!(classes(&check(&over)), ["delivery-count-overrun"]);
    }

    #[test]
    fn a_fenced_member_acquires_nothing_until_it_joins_again() {
        let mut l = log();
        l.fences.push(("a".into(), 3, 0));
        assert_eq!(classes(&check(&l)), ["acquired-after-fence"]);
        l.joins.push(("a".into(), 3));
        assert_eq!(classes(&check(&l)), ["acquired-after-fence"], "answered before the rejoin was sent");
        l.joins[0].1 = 1;
        assert!(check(&l).is_empty(), "the rejoin may have come first");
        l.staged.push(Staged { member: "a".into(), member_epoch: 3, sent: 5, staged: true });
        assert_eq!(classes(&check(&l)), ["ack-after-fence"]);
    }

    fn letter(offset: i64, value: &str) -> DeadLetter {
        DeadLetter {
            topic: "t".into(),
            partition: 0,
            offset,
            group: "g".into(),
            delivery_count: 1,
            message: "Offset rejected by client.".into(),
            value: Some(Bytes::from(value.to_string())),
        }
    }

    #[test]
    fn with_a_dead_letter_queue_what_is_rejected_or_runs_out_is_on_it() {
        let mut l = log();
        l.dead_letter = true;
        l.values = BTreeMap::from([((0, 0), Bytes::from("v0")), ((0, 1), Bytes::from("v1"))]);
        l.dead_letters = Some(vec![letter(1, "v1")]);
        assert!(check(&l).is_empty());
        let mut missing = l;
        missing.dead_letters = Some(vec![]);
        assert_eq!(classes(&check(&missing)), ["dead-letter-missing"], "offset 1 was rejected");
        let mut unread = missing;
        unread.dead_letters = None;
        assert_eq!(classes(&check(&unread)), ["dead-letter-missing"]);
        let mut ran_out = log();
        ran_out.dead_letter = true;
        ran_out.dead_letters = Some(vec![letter(1, "v1")]);
        ran_out.acks[0].kind = AckKind::Release;
        ran_out.acquisitions.push(acquired("b", 0, 3, 5, 6));
        assert_eq!(classes(&check(&ran_out)), ["dead-letter-missing"], "offset 0 ran out of deliveries");
        let mut accepted = log();
        accepted.dead_letter = true;
        accepted.dead_letters = Some(vec![letter(1, "v1"), letter(0, "v0")]);
        assert_eq!(classes(&check(&accepted)), ["dead-letter-wrong"], "offset 0 was accepted");
        let mut miscopied = log();
        miscopied.dead_letter = true;
        miscopied.values = BTreeMap::from([((0, 1), Bytes::from("v1"))]);
        miscopied.dead_letters = Some(vec![letter(1, "v0")]);
        assert_eq!(classes(&check(&miscopied)), ["dead-letter-wrong"]);
    }

    #[test]
    fn records_left_behind_are_lost() {
        let mut short = log();
        short.final_start.insert(0, 1);
        assert_eq!(classes(&check(&short)), ["lost-record"]);
        let mut skipped = log();
        skipped.acks[1].outcome = AckOutcome::Refused(121);
        assert_eq!(classes(&check(&skipped)), ["lost-record"]);
        let mut archived = skipped;
        archived.acquisitions.push(acquired("b", 1, 3, 5, 6));
        assert!(check(&archived).is_empty(), "a record at its delivery limit is archived");
        let mut unseen = log();
        unseen.acks[1].outcome = AckOutcome::Refused(121);
        unseen.unknown_fetches = vec![(0, 0, 1), (0, 3, 4)];
        assert_eq!(classes(&check(&unseen)), ["lost-record"], "one more delivery is not the limit");
        unseen.unknown_fetches.push((0, 0, u64::MAX));
        assert!(check(&unseen).is_empty(), "two lost answers may have delivered it to its limit");
    }
}
