//! Committed offsets never move backwards: a consumer that reads its group's committed offset
//! finds at least every offset whose commit was acked before it asked (the commits of fenced
//! generations are refused, so nothing may lower it).

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
