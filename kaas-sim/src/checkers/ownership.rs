//! Ownership does not thrash (an availability check). A broker whose lease keeps lapsing (cut
//! off from the volume again and again, each time for longer than its lease, and back each time
//! for less than the settle period) must get nothing back between the cuts. Whatever it got
//! back it would lose again at its next cut, and the peers could take it over only once its
//! lease ran out: a whole session timeout plus the drift margin without an owner, once per cut,
//! for its whole share of partitions, transaction slots and groups. The settle period exists to
//! prevent exactly that.
//! - thrash: the flapping broker claimed ownership in a lease session that began after one cut
//!   and ended at the next.
//!
//! The claims are read from the volume (`__cluster/owners/<kind>/<key>/<epoch>.json`): each
//! names the broker, its incarnation and its lease session. The flapping broker's sessions that
//! may claim are its first (before the first cut) and its last (after the last cut, once it has
//! settled), in any one incarnation.

use std::collections::BTreeMap;

use kaas_core::cluster::claims::{ClaimFile, OWNERS_DIR};

use crate::volume::SimVolume;

/// Every claim file on the volume, by path; a file that does not parse is a violation.
pub fn claims(volume: &SimVolume) -> (Vec<(String, ClaimFile)>, Vec<String>) {
    let mut claims = Vec::new();
    let mut violations = Vec::new();
    for (path, raw) in volume.files_under(OWNERS_DIR) {
        if !path.ends_with(".json") {
            continue;
        }
        match serde_json::from_slice::<ClaimFile>(&raw) {
            Ok(claim) => claims.push((path, claim)),
            Err(e) => violations.push(format!("corrupt-read: claim file {path}: {e}")),
        }
    }
    (claims, violations)
}

/// The thrash check for `flapper`, cut off `cuts` times.
pub fn check_flapping(claims: &[(String, ClaimFile)], flapper: i32, cuts: usize) -> Vec<String> {
    // incarnation -> session -> what the flapper claimed in it.
    let mut by_session: BTreeMap<u64, BTreeMap<u64, Vec<&str>>> = BTreeMap::new();
    for (path, claim) in claims.iter().filter(|(_, c)| c.broker_id == flapper) {
        by_session.entry(claim.incarnation).or_default().entry(claim.session).or_default().push(path);
    }
    let mut violations = Vec::new();
    for (incarnation, sessions) in &by_session {
        let inside = sessions.len().saturating_sub(2);
        let between: Vec<(u64, usize)> = sessions.iter().skip(1).take(inside).map(|(s, p)| (*s, p.len())).collect();
        // Lenient at both ends: a first session that claimed nothing before the first cut, or
        // a run ending before the broker settled after the last, lets one between-cuts session
        // pass as first or last.
        if !between.is_empty() {
            let example = sessions[&between[0].0][0];
            violations.push(format!(
                "thrash: broker {flapper} (incarnation {incarnation:x}) claimed ownership in {} lease sessions \
                 between its {cuts} cuts from the volume (session, claims: {between:?}; e.g. {example}); \
                 each was lost again at the next cut, a lease without an owner",
                between.len()
            ));
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(broker_id: i32, session: u64, epoch: u32) -> (String, ClaimFile) {
        let file = ClaimFile { format_version: 1, epoch, broker_id, incarnation: 7, session };
        (format!("{OWNERS_DIR}/partitions/t-0/{epoch:010}.json"), file)
    }

    #[test]
    fn claims_in_the_first_and_last_sessions_only_pass() {
        let claims = vec![claim(2, 0, 1), claim(0, 0, 2), claim(2, 4, 3), claim(1, 2, 4)];
        assert!(check_flapping(&claims, 2, 4).is_empty());
        assert!(check_flapping(&[claim(2, 3, 1)], 2, 4).is_empty(), "one session is first and last");
    }

    #[test]
    fn a_claim_in_a_session_between_two_cuts_is_thrash() {
        let claims = vec![claim(2, 0, 1), claim(0, 0, 2), claim(2, 2, 3), claim(0, 1, 4), claim(2, 4, 5)];
        let found = check_flapping(&claims, 2, 4);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("thrash: broker 2"), "{found:?}");
        assert!(found[0].contains("[(2, 1)]"), "{found:?}");
    }
}
