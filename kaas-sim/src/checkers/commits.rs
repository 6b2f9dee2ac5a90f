//! Committed offsets never move backwards: a consumer that reads its group's committed offset
//! finds at least every offset whose commit was acked before it asked (the commits of fenced
//! generations are refused, so nothing may lower it).
//! - commit-backwards: a committed offset read back below one acked before the read was sent.

use super::PartitionHistory;

pub fn check(partition: &str, h: &PartitionHistory) -> Vec<String> {
    let mut violations = Vec::new();
    for resume in &h.resumes {
        let acked_before = h.commits.iter().filter(|c| c.acked_seq < resume.sent_seq).max_by_key(|c| c.offset);
        if let Some(c) = acked_before
            && resume.committed < c.offset
        {
            violations.push(format!(
                "commit-backwards: {partition}: {} resumed at {} after {} had {} acked",
                resume.consumer, resume.committed, c.consumer, c.offset
            ));
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkers::{Commit, Resume};

    #[test]
    fn a_resume_below_an_earlier_acked_commit_is_named() {
        let mut h = PartitionHistory::default();
        h.commits.push(Commit { consumer: "c".into(), acked_seq: 10, offset: 7 });
        h.resumes.push(Resume { consumer: "c".into(), sent_seq: 5, committed: 3 });
        h.resumes.push(Resume { consumer: "c".into(), sent_seq: 11, committed: 7 });
        assert!(check("p", &h).is_empty(), "the first resume was sent before the commit was acked");
        h.resumes.push(Resume { consumer: "d".into(), sent_seq: 12, committed: 6 });
        let found = check("p", &h);
        assert_eq!(found.len(), 1);
        assert!(found[0].starts_with("commit-backwards: p: d resumed at 6"), "{found:?}");
    }
}
