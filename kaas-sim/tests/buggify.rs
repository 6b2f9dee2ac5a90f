//! BUGGIFY as the simulator relies on it (`kaas_core::sim`): a plan's sites fire on a share of
//! their visits, the same ones on every replay, and sites it leaves off never fire. Here rather
//! than in kaas-core, whose `sim` feature only simulation builds turn on.

use std::collections::BTreeSet;

use kaas_core::sim::{BUGGIFY_SITES, BuggifyPlan, buggify, set_buggify};

fn visits(plan: &BuggifyPlan) -> Vec<bool> {
    set_buggify(Some(plan));
    let fired = (0..2000).map(|i| buggify(if i % 2 == 0 { "log.early_roll" } else { "txn.slow_dispatch" })).collect();
    set_buggify(None);
    fired
}

#[test]
fn enabled_sites_fire_and_replay_exactly() {
    let plan = BuggifyPlan { seed: 7, sites: BTreeSet::from(["log.early_roll"]) };
    let fired = visits(&plan);
    assert_eq!(fired, visits(&plan), "a plan replays its fires");
    let early_roll = fired.iter().step_by(2).filter(|f| **f).count();
    let slow_dispatch = fired.iter().skip(1).step_by(2).filter(|f| **f).count();
    // An enabled site fires on about 5% of its 1000 visits; a disabled one never.
    assert!((20..=100).contains(&early_roll), "{early_roll} fires");
    assert_eq!(slow_dispatch, 0, "a site the plan leaves off never fires");
    assert!(!buggify("log.early_roll"), "off once the run is over");
}

#[test]
fn every_listed_site_is_named_once() {
    let unique: BTreeSet<&str> = BUGGIFY_SITES.into_iter().collect();
    assert_eq!(unique.len(), BUGGIFY_SITES.len());
    assert_eq!(BuggifyPlan::site("partition.slow_sync"), Some("partition.slow_sync"));
    assert_eq!(BuggifyPlan::site("no.such_site"), None);
}
