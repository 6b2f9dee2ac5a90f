//! The exactly-once queue (KIP-1289): copiers take records from a share group, write them to
//! the output and accept them in the same transaction. Afterwards the read_committed output
//! must hold each input record exactly as many times as the input does (a value written twice
//! by a retried produce is two records), and the share group must have acknowledged everything:
//! - copy-missing: an input record with no committed copy (acknowledged without its output,
//!   or never acknowledged and never copied);
//! - copy-duplicated: a record copied by two committed transactions (its acknowledgement did
//!   not commit with the first output, or the record came back after it did);
//! - not-acknowledged: at the end, the share group's start short of the input's end (staged
//!   acknowledgements never completed, records held for good);
//! - lso-stuck: an output partition's last stable offset below its high watermark at the end.
//!
//! The share checker's rules (ack-after-fence above all) run over the same run's share log.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::transactions::FinalRead;

#[derive(Debug, Default)]
pub struct Loop {
    /// Every input record's value, per partition, as read at the end.
    pub input: BTreeMap<i32, Vec<Bytes>>,
    /// Each input partition's end.
    pub input_end: BTreeMap<i32, i64>,
    /// The output read read_committed at the end, per partition.
    pub output: BTreeMap<i32, FinalRead>,
    /// The share group's start offset of each input partition at the end.
    pub final_start: BTreeMap<i32, i64>,
    /// Input records that may have reached the delivery limit (aborted or let go too often)
    /// and been archived: their copy may be missing. (partition, offset)
    pub may_be_archived: std::collections::BTreeSet<(i32, i64)>,
}

pub fn check(l: &Loop, input: &str, output: &str) -> Vec<String> {
    let mut violations = Vec::new();
    let mut wanted: BTreeMap<&[u8], usize> = BTreeMap::new();
    let mut archivable: BTreeMap<&[u8], usize> = BTreeMap::new();
    for (p, values) in &l.input {
        for (offset, v) in values.iter().enumerate() {
            *wanted.entry(v.as_ref()).or_default() += 1;
            if l.may_be_archived.contains(&(*p, offset as i64)) {
                *archivable.entry(v.as_ref()).or_default() += 1;
            }
        }
    }
    let mut copied: BTreeMap<&[u8], usize> = BTreeMap::new();
    for (p, read) in &l.output {
        if read.last_stable_offset < read.high_watermark {
            violations.push(format!(
                "lso-stuck: {output}-{p}: last stable offset {} below the high watermark {}",
                read.last_stable_offset, read.high_watermark
            ));
        }
        for (_, v) in &read.values {
            *copied.entry(v.as_ref()).or_default() += 1;
        }
    }
    for (value, &n) in &wanted {
        let got = copied.get(value).copied().unwrap_or(0);
        let name = String::from_utf8_lossy(value);
        if got + archivable.get(value).copied().unwrap_or(0) < n {
            violations.push(format!("copy-missing: {name} is in {input} {n} times, committed to {output} {got} times"));
        } else if got > n {
            violations
                .push(format!("copy-duplicated: {name} is in {input} {n} times, committed to {output} {got} times"));
        }
    }
    for (value, &got) in &copied {
        if !wanted.contains_key(value) {
            let name = String::from_utf8_lossy(value);
            violations.push(format!("copy-duplicated: {name} committed to {output} {got} times, never in {input}"));
        }
    }
    for (&p, &end) in &l.input_end {
        let start = l.final_start.get(&p).copied().unwrap_or(-1);
        if start < end {
            violations.push(format!(
                "not-acknowledged: {input}-{p}: the share group starts at {start} at the end, the input ends at {end}"
            ));
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(output: &[&str], start: i64) -> Loop {
        let values: Vec<(i64, Bytes)> =
            output.iter().enumerate().map(|(i, v)| (i as i64, Bytes::from(v.to_string()))).collect();
        let n = values.len() as i64;
        Loop {
            input: BTreeMap::from([(0, vec![Bytes::from("a"), Bytes::from("b"), Bytes::from("b")])]),
            input_end: BTreeMap::from([(0, 3)]),
            output: BTreeMap::from([(
                0,
                FinalRead { values, log_start_offset: 0, last_stable_offset: n, high_watermark: n },
            )]),
            final_start: BTreeMap::from([(0, start)]),
            may_be_archived: Default::default(),
        }
    }

    fn classes(v: &[String]) -> Vec<&str> {
        v.iter().map(|v| crate::scenarios::class(v)).collect()
    }

    #[test]
    fn each_input_record_once_and_everything_acknowledged_passes() {
        assert!(check(&l(&["b", "a", "b"], 3), "in", "out").is_empty());
    }

    #[test]
    fn missing_doubled_and_unacknowledged_records_are_named() {
        assert_eq!(classes(&check(&l(&["a", "b"], 3), "in", "out")), ["copy-missing"]);
        let mut archived = l(&["a", "b"], 3);
        archived.may_be_archived.insert((0, 2));
        assert!(check(&archived, "in", "out").is_empty(), "a record at its delivery limit may be archived");
        assert_eq!(classes(&check(&l(&["a", "a", "b", "b"], 3), "in", "out")), ["copy-duplicated"]);
        assert_eq!(classes(&check(&l(&["a", "b", "b"], 2), "in", "out")), ["not-acknowledged"]);
        let mut stuck = l(&["a", "b", "b"], 3);
        stuck.output.get_mut(&0).unwrap().last_stable_offset = 1;
        assert_eq!(classes(&check(&stuck, "in", "out")), ["lso-stuck"]);
    }
}
