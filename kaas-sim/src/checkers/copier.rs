//! Consume-transform-produce (invariant 6): the read_committed output holds exactly one copy of
//! each input record, and the group's committed offsets end at the input's end.
//! - offset-without-output: an input offset was committed but its copy never was;
//! - output-without-offset: a copy committed twice, its offset not committed with the first;
//! - offsets-not-committed: after the liveness phase the group's offset is not the input's end;
//! - lso-stuck: the output's last stable offset below its high watermark at the end.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::transactions::FinalRead;

/// The copy of input offset `offset` of `partition`: the value the copier writes.
pub fn copy_of(partition: i32, offset: i64) -> Bytes {
    Bytes::from(format!("copy:{partition}:{offset}"))
}

#[derive(Debug, Default)]
pub struct Copies {
    /// The input as written: offsets per partition, and each partition's end.
    pub input: BTreeMap<i32, Vec<i64>>,
    pub input_end: BTreeMap<i32, i64>,
    /// The output read read_committed after the liveness phase, per partition.
    pub output: BTreeMap<i32, FinalRead>,
    pub committed_at_end: BTreeMap<i32, i64>,
}

pub fn check(copies: &Copies, input: &str, output: &str) -> Vec<String> {
    let mut violations = Vec::new();
    for (p, offsets) in &copies.input {
        let Some(out) = copies.output.get(p) else { continue };
        if out.last_stable_offset < out.high_watermark {
            violations.push(format!(
                "lso-stuck: {output}-{p}: last stable offset {} below the high watermark {}",
                out.last_stable_offset, out.high_watermark
            ));
        }
        let mut count: BTreeMap<&[u8], usize> = BTreeMap::new();
        for (_, v) in &out.values {
            *count.entry(v.as_ref()).or_default() += 1;
        }
        for o in offsets {
            match count.get(copy_of(*p, *o).as_ref()).copied().unwrap_or(0) {
                1 => {}
                0 => violations.push(format!("offset-without-output: {input}-{p} offset {o} was never copied")),
                n => violations.push(format!("output-without-offset: {input}-{p} offset {o} copied {n} times")),
            }
        }
        let end = copies.input_end[p];
        let committed = copies.committed_at_end.get(p).copied().unwrap_or(-1);
        if committed != end {
            violations.push(format!("offsets-not-committed: {input}-{p}: committed {committed}, input ends at {end}"));
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copies(output: &[i64], committed: i64) -> Copies {
        let values = output.iter().enumerate().map(|(i, o)| (i as i64, copy_of(0, *o))).collect();
        let n = output.len() as i64;
        Copies {
            input: BTreeMap::from([(0, vec![0, 1, 2])]),
            input_end: BTreeMap::from([(0, 3)]),
            output: BTreeMap::from([(
                0,
                FinalRead { values, log_start_offset: 0, last_stable_offset: n, high_watermark: n },
            )]),
            committed_at_end: BTreeMap::from([(0, committed)]),
        }
    }

    fn classes(v: &[String]) -> Vec<&str> {
        v.iter().map(|v| crate::scenarios::class(v)).collect()
    }

    #[test]
    fn one_copy_of_each_input_with_the_offsets_at_the_end_passes() {
        assert!(check(&copies(&[0, 1, 2], 3), "in", "out").is_empty());
    }

    #[test]
    fn missing_and_doubled_copies_and_short_commits_are_named() {
        assert_eq!(classes(&check(&copies(&[0, 2], 3), "in", "out")), ["offset-without-output"]);
        assert_eq!(classes(&check(&copies(&[0, 1, 1, 2], 3), "in", "out")), ["output-without-offset"]);
        assert_eq!(classes(&check(&copies(&[0, 1, 2], 2), "in", "out")), ["offsets-not-committed"]);
        let mut stuck = copies(&[0, 1, 2], 3);
        stuck.output.get_mut(&0).unwrap().last_stable_offset = 1;
        assert_eq!(classes(&check(&stuck, "in", "out")), ["lso-stuck"]);
    }
}
