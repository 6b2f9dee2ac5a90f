//! The new fault kinds do what they say, against the production broker in a turmoil host: a
//! paused broker answers nothing until it resumes, then answers as the same process (no
//! restart); a broker cut off from the volume stalls its writes, which complete or fail once
//! the volume is back; a broker whose clock runs fast sees its deadlines come early.

use std::time::Duration;

use bytes::Bytes;
use kaas_core::BrokerConfig;
use kaas_core::env::Clock;
use kaas_sim::client::{Outcome, WireClient};
use kaas_sim::env::{ClockModel, SimClock};
use kaas_sim::hosts::{self, BrokerSpec};
use kaas_sim::volume::SimVolume;

async fn connect() -> WireClient {
    loop {
        if let Ok(c) = kaas_sim::client::connect("broker").await {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn a_paused_broker_answers_nothing_until_it_resumes_as_the_same_process() {
    let mut sim = turmoil::Builder::new().simulation_duration(Duration::from_secs(60)).build();
    let control =
        hosts::add_broker(&mut sim, &BrokerSpec::single(1, 0)[0], &SimVolume::default(), BrokerConfig::default());
    let c = control.clone();
    sim.client("client", async move {
        let mut client = connect().await;
        assert_eq!(client.create_topic("t", 1).await?, 0);
        let v = [Bytes::from_static(b"v")];
        assert!(matches!(client.produce("t", 0, &v, 0).await, Outcome::Ok(0)));
        c.gate.pause();
        let started = tokio::time::Instant::now();
        assert_eq!(client.produce("t", 0, &v, 0).await, Outcome::Indefinite, "no answer while paused");
        assert!(started.elapsed() >= Duration::from_secs(5), "the request timed out");
        c.gate.resume();
        let mut client = connect().await;
        // The batch sent while paused was read by the kernel and is handled after the resume.
        assert!(matches!(client.produce("t", 0, &v, 0).await, Outcome::Ok(1 | 2)));
        assert_eq!(c.boots(), 1, "a pause is not a restart");
        Ok(())
    });
    sim.run().unwrap();
}

#[test]
fn a_broker_cut_off_from_the_volume_stalls_and_then_goes_on() {
    let mut sim = turmoil::Builder::new().simulation_duration(Duration::from_secs(60)).build();
    let volume = SimVolume::new(3, Default::default());
    hosts::add_broker(&mut sim, &BrokerSpec::single(1, 0)[0], &volume, BrokerConfig::default());
    let v2 = volume.clone();
    sim.client("client", async move {
        let mut client = connect().await;
        assert_eq!(client.create_topic("t", 1).await?, 0);
        v2.stall("broker");
        let v = [Bytes::from_static(b"v")];
        assert_eq!(client.produce("t", 0, &v, 0).await, Outcome::Indefinite, "the write stalls past the timeout");
        v2.heal("broker");
        let mut client = connect().await;
        let mut acked = false;
        for _ in 0..50 {
            match client.produce("t", 0, &v, 0).await {
                Outcome::Ok(_) => {
                    acked = true;
                    break;
                }
                Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                Outcome::Indefinite => client = connect().await,
            }
        }
        assert!(acked, "writes go on once the volume is back");
        Ok(())
    });
    sim.run().unwrap();
}

#[test]
fn a_fast_clock_reaches_its_deadlines_early() {
    let mut sim = turmoil::Builder::new().simulation_duration(Duration::from_secs(30)).build();
    sim.client("client", async {
        let clock = SimClock::new(ClockModel::new(0, 100_000)); // 10% fast
        let (wall, mono) = (clock.now_ms(), clock.monotonic());
        let started = tokio::time::Instant::now();
        clock.sleep_ms(11_000).await;
        let slept = started.elapsed();
        assert!(slept >= Duration::from_secs(9) && slept <= Duration::from_millis(10_100), "{slept:?}");
        let host_ms = clock.monotonic().duration_since(mono).as_millis() as i64;
        assert!((10_900..=11_100).contains(&host_ms), "the host saw its 11 s pass: {host_ms}");
        assert!((10_900..=11_100).contains(&(clock.now_ms() - wall)), "its wall clock too");
        Ok(())
    });
    sim.run().unwrap();
}

/// BUGGIFY as the simulator relies on it (`kaas_core::sim`): a plan's sites fire on a share of
/// their visits, the same ones on every replay, and sites it leaves off never fire. Here rather
/// than in kaas-core, whose `sim` feature only simulation builds turn on.
mod buggify {
    use std::collections::BTreeSet;

    use kaas_core::sim::{BUGGIFY_SITES, BuggifyPlan, buggify, set_buggify};

    fn visits(plan: &BuggifyPlan) -> Vec<bool> {
        set_buggify(Some(plan));
        let fired =
            (0..2000).map(|i| buggify(if i % 2 == 0 { "log.early_roll" } else { "txn.slow_dispatch" })).collect();
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
}
