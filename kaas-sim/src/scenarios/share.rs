//! share: a share group (KIP-932) of member slots consuming a topic written beforehand, on one
//! broker or on 3 to 5 sharing the volume. Members crash (their connections close), go silent
//! (connections open, nothing more: only locks and the session timeout free what they hold) or
//! pause and come back as zombies; they release, reject and forget records; locks run out;
//! brokers crash, pause past their lease and lose the volume, while share partitions move with
//! their partitions.
//!
//! Half the worlds give the group a dead-letter queue (KIP-1191), created when first written.
//!
//! Afterwards `checkers::share` holds the run to invariant 10: one holder at a time with
//! delivery counts that only go up, nothing accepted delivered again, no acquisition by a
//! member its group fenced, nothing lost (the group's start offset reaches the input's end),
//! and, with a queue, every record rejected or run out on it.

use std::time::Duration;

use bytes::Bytes;
use kaas_core::BrokerConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::cluster::{self, Leases};
use super::common::{self, Common, FaultMix};
use super::{RunResult, World};
use crate::checkers::share as share_check;
use crate::client::Outcome;
use crate::faults::{Fault, Planned};
use crate::workloads::share_member::{self, Plan, SharedMembers};
use crate::workloads::{self, Shared, backoff};

const TOPIC: &str = "queue";
const GROUP: &str = "workers";
/// The group's dead-letter queue, in the worlds that have one.
const DEAD_LETTERS: &str = "dlq.queue";
const SIM_SECONDS_MAX: u64 = 900;
/// The members have this long, from their start, to finish the queue.
const FINISH_MS: u64 = 240_000;
const LIVENESS_MS: u64 = 300_000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Share {
    pub common: Common,
    /// A cluster of 3 to 5 brokers on one volume; `None`: one broker.
    pub leases: Option<Leases>,
    pub partitions: i32,
    pub records_per_partition: usize,
    pub slots: i32,
    pub stop_per_mille: u32,
    pub pause_per_mille: u32,
    pub silent_per_mille: u32,
    pub pause_ms_max: u64,
    pub release_per_mille: u32,
    pub reject_per_mille: u32,
    pub forget_per_mille: u32,
    pub explicit_per_mille: u32,
    /// `group.share.record.lock.duration.ms`, `group.share.session.timeout.ms`,
    /// `group.share.heartbeat.interval.ms`, `group.share.delivery.count.limit`.
    pub lock_duration_ms: i32,
    pub session_timeout_ms: i32,
    pub heartbeat_interval_ms: i32,
    pub delivery_count_limit: i32,
    /// KIP-1191: the group has a dead-letter queue (records copied there).
    #[serde(default)]
    pub dead_letter: bool,
}

impl World for Share {
    fn draw(seed: u64) -> Share {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let cluster = rng.random_bool(0.6);
        // A third of the clusters have short leases, so that an owner paused past its lease
        // can come back while its clients still wait for it (a request waits 5 s).
        let short = cluster && rng.random_bool(0.35);
        let leases = match (cluster, short) {
            (false, _) => None,
            (true, false) => Some(Leases::draw(&mut rng)),
            (true, true) => {
                let session_timeout_ms = rng.random_range(1500..=2500);
                Some(Leases {
                    session_timeout_ms,
                    heartbeat_interval_ms: session_timeout_ms / 4,
                    drift_margin_ms: session_timeout_ms / 10,
                    settle_ms: 0,
                })
            }
        };
        let partitions = rng.random_range(1..=4);
        let records_per_partition = rng.random_range(10..60);
        let mix = FaultMix {
            progress_max: partitions as usize * records_per_partition,
            clock_steps: false,
            drift_ppm_max: 1000,
        };
        let mut common = cluster::draw_common(&mut rng, leases.as_ref(), mix);
        if let Some(l) = &leases
            && rng.random_bool(0.75)
        {
            common.plan.extend(cluster::zombie_faults(&mut rng, &common.hosts(), l, mix.progress_max));
        }
        if let Some(l) = leases.as_ref().filter(|_| short) {
            // A zombie owner: paused past its lease and its successor's takeover, back before
            // its clients give up on what they sent it.
            let takeover_ms = l.session_timeout_ms + l.drift_margin_ms + l.settle_ms;
            let hosts = common.hosts();
            let host = hosts[rng.random_range(0..hosts.len())].clone();
            let ms = rng.random_range(takeover_ms + 300..=4500.max(takeover_ms + 400));
            let at = common::trigger(&mut rng, mix.progress_max);
            common.plan.push(Planned { at, fault: Fault::Pause { host, ms } });
        }
        let dead_letter = rng.random_bool(0.5);
        if dead_letter && cluster && rng.random_bool(0.5) {
            // KIP-1191's race: the queue partition down while the source partition moves.
            let buggify = common.buggify.get_or_insert_with(|| common::Buggify { seed: rng.random(), sites: vec![] });
            let site = "dead_letter.queue_down".to_string();
            if !buggify.sites.contains(&site) {
                buggify.sites.push(site);
            }
        }
        let session_timeout_ms = rng.random_range(2000..=6000);
        Share {
            common,
            leases,
            partitions,
            records_per_partition,
            slots: rng.random_range(1..=4),
            stop_per_mille: rng.random_range(0..40),
            pause_per_mille: rng.random_range(0..=500),
            silent_per_mille: rng.random_range(0..=300),
            pause_ms_max: rng.random_range(500..=2 * session_timeout_ms as u64),
            release_per_mille: rng.random_range(0..150),
            reject_per_mille: rng.random_range(0..50),
            forget_per_mille: rng.random_range(0..80),
            explicit_per_mille: rng.random_range(0..=1000),
            lock_duration_ms: rng.random_range(1000..=5000),
            session_timeout_ms,
            heartbeat_interval_ms: rng.random_range(session_timeout_ms / 6..=session_timeout_ms / 3),
            delivery_count_limit: rng.random_range(2..=5),
            dead_letter,
        }
    }

    fn common(&self) -> &Common {
        &self.common
    }

    fn run(&self, seed: u64) -> RunResult {
        let config = BrokerConfig {
            group_initial_rebalance_delay_ms: 0,
            group_share_record_lock_duration_ms: self.lock_duration_ms,
            group_share_session_timeout_ms: self.session_timeout_ms,
            group_share_heartbeat_interval_ms: self.heartbeat_interval_ms,
            group_share_delivery_count_limit: self.delivery_count_limit,
            errors_deadletterqueue_auto_create_topics_enable: true,
            ..BrokerConfig::default()
        };
        let config = match &self.leases {
            Some(leases) => leases.apply(config),
            None => config,
        };
        let mut run = common::start(seed, &self.common, SIM_SECONDS_MAX, &config);
        let world = workloads::shared(self.common.hosts(), &run.history);
        let members: SharedMembers = Default::default();
        run.sim.client("clients", workload(self.clone(), world.clone(), members.clone()));
        let accepted = || members.lock().unwrap().accepted;
        let mut violations = run.drive(&self.common, accepted, LIVENESS_MS);
        violations.extend(world.lock().unwrap().violations.iter().cloned());
        if violations.is_empty() {
            violations = share_check::check(&members.lock().unwrap().log);
        }
        share_member::release_silent(&members);
        run.finish("share", seed, violations)
    }
}

/// Writes `records_per_partition` records to each partition, in batches of 1 to 5: the first
/// `upfront` of them at once, the rest while the members consume, a batch every 20 to 200 ms,
/// so that the queue never simply runs dry. The partitions' ends.
async fn write_input(s: &Share, world: &Shared, upfront: bool) -> std::collections::BTreeMap<i32, i64> {
    let mut client = workloads::client(world, if upfront { "input" } else { "input-trickle" });
    let mut rng = ChaCha8Rng::seed_from_u64(s.common.workload_seed ^ u64::from(upfront));
    let mut ends = std::collections::BTreeMap::new();
    let half = s.records_per_partition / 2;
    for p in 0..s.partitions {
        let (mut written, until) = if upfront { (0, half) } else { (half, s.records_per_partition) };
        while written < until {
            if !upfront {
                tokio::time::sleep(Duration::from_millis(rng.random_range(20..200))).await;
            }
            let n = rng.random_range(1..=5).min(until - written);
            let values: Vec<Bytes> = (written..written + n).map(|i| Bytes::from(format!("job:{p}:{i}"))).collect();
            workloads::produce_until_acked(&mut client, TOPIC, p, &values).await;
            written += n;
        }
        // The end as it is: an indefinite attempt may have written a batch twice.
        let end = workloads::log_end(&mut client, TOPIC, p).await;
        ends.insert(p, end);
    }
    ends
}

/// The group's start offset of each partition, by DescribeShareGroupOffsets.
async fn starts(client: &mut crate::client::Client, partitions: i32) -> Option<Vec<(i32, i64)>> {
    let all: Vec<i32> = (0..partitions).collect();
    match client.share_group_offsets(GROUP, TOPIC, &all).await {
        Outcome::Ok(offsets) => {
            client.record("share-starts", "ok", serde_json::json!({ "offsets": offsets }));
            Some(offsets.into_iter().map(|(p, start, _)| (p, start)).collect())
        }
        _ => None,
    }
}

async fn workload(s: Share, world: Shared, members: SharedMembers) -> turmoil::Result {
    workloads::create_topic(&world, TOPIC, s.partitions).await;
    let mut admin = workloads::client(&world, "admin");
    let mut configs = vec![("share.auto.offset.reset", "earliest")];
    if s.dead_letter {
        configs.push(("errors.deadletterqueue.topic.name", DEAD_LETTERS));
        configs.push(("errors.deadletterqueue.copy.record.enable", "true"));
    }
    while !matches!(admin.alter_group_configs(GROUP, &configs).await, Outcome::Ok(())) {
        backoff().await;
    }
    if s.dead_letter {
        // Every broker knows of the queue before the first record can be rejected: group
        // configs reach the others within a heartbeat.
        tokio::time::sleep(Duration::from_millis(5_000)).await;
    }
    write_input(&s, &world, true).await;
    {
        let mut m = members.lock().unwrap();
        m.log.topic = TOPIC.into();
        m.log.delivery_count_limit = s.delivery_count_limit as i16;
    }
    let trickle = tokio::spawn({
        let (s, world) = (s.clone(), world.clone());
        async move { write_input(&s, &world, false).await }
    });
    let plan = Plan {
        group: GROUP.into(),
        topic: TOPIC.into(),
        partitions: s.partitions,
        stop_per_mille: s.stop_per_mille,
        pause_per_mille: s.pause_per_mille,
        silent_per_mille: s.silent_per_mille,
        pause_ms_max: s.pause_ms_max,
        release_per_mille: s.release_per_mille,
        reject_per_mille: s.reject_per_mille,
        forget_per_mille: s.forget_per_mille,
        explicit_per_mille: s.explicit_per_mille,
    };
    let tasks: Vec<_> = (0..s.slots)
        .map(|slot| {
            let seed = s.common.workload_seed ^ (slot as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            tokio::spawn(share_member::slot(slot, plan.clone(), world.clone(), members.clone(), seed))
        })
        .collect();
    let ends = trickle.await?;
    members.lock().unwrap().log.input_end = ends.clone();
    // Until the queue is finished (every partition's start at its end), or time is up.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(FINISH_MS);
    let mut monitor = workloads::client(&world, "monitor");
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let Some(starts) = starts(&mut monitor, s.partitions).await
            && starts.iter().all(|(p, start)| ends.get(p).is_some_and(|end| start >= end))
        {
            break;
        }
    }
    members.lock().unwrap().done = true;
    for t in tasks {
        t.await?;
    }
    let final_deadline = tokio::time::Instant::now() + Duration::from_millis(60_000);
    while tokio::time::Instant::now() < final_deadline {
        if let Some(starts) = starts(&mut monitor, s.partitions).await {
            members.lock().unwrap().log.final_start = starts.into_iter().collect();
            break;
        }
        backoff().await;
    }
    if s.dead_letter {
        let letters = dead_letters(&mut monitor).await;
        let mut values = std::collections::BTreeMap::new();
        for (&p, &end) in &ends {
            values.extend(input_values(&mut monitor, p, end).await.into_iter().map(|(o, v)| ((p, o), v)));
        }
        let mut m = members.lock().unwrap();
        m.log.dead_letter = true;
        m.log.dead_letters = letters;
        m.log.values = values;
    }
    Ok(())
}

/// The input partition's records up to `end`, as (offset, value).
async fn input_values(client: &mut crate::client::Client, partition: i32, end: i64) -> Vec<(i64, Bytes)> {
    let mut values = Vec::new();
    let mut offset = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(60_000);
    while offset < end && tokio::time::Instant::now() < deadline {
        match client.fetch(TOPIC, partition, offset, 100).await {
            Outcome::Ok((records, _)) => {
                for (at, value) in records {
                    offset = at + 1;
                    values.push((at, value));
                }
            }
            _ => backoff().await,
        }
    }
    values
}

/// Everything on the dead-letter queue (one partition: `num.partitions`), as the checker
/// reads it: the record each names by its headers. `None` if it could not be read in time.
async fn dead_letters(client: &mut crate::client::Client) -> Option<Vec<share_check::DeadLetter>> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(20_000);
    let mut letters = Vec::new();
    let mut offset = 0;
    while tokio::time::Instant::now() < deadline {
        match client.fetch_messages(DEAD_LETTERS, 0, offset, 100).await {
            Outcome::Ok((records, high_watermark)) => {
                for (at, message) in records {
                    offset = at + 1;
                    letters.push(share_check::DeadLetter::from_headers(&message.headers, message.value));
                }
                if offset >= high_watermark {
                    return Some(letters);
                }
            }
            _ => backoff().await,
        }
    }
    // Never readable: never created, if nothing was rejected or ran out (the checker says).
    (offset == 0).then_some(letters)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worlds_draw_the_same_from_the_same_seed() {
        assert_eq!(Share::draw(7), Share::draw(7));
        let clusters = (0..40).filter(|s| Share::draw(*s).leases.is_some()).count();
        assert!((10..40).contains(&clusters), "both one broker and clusters are drawn: {clusters}");
    }
}
