//! Consumers and the final reads:
//! - `committing`: reads one partition from its group's committed offset, commits what it read,
//!   and starts a new session from the committed offset after every lost connection;
//! - `read_committed`: reads one partition read_committed from offset 0 while the producers
//!   run, recording every read with its watermarks and history sequence numbers;
//! - `read_partition`, `read_committed_to_end`, `final_committed`: the reads of the liveness
//!   phase's end that the checkers compare everything against.

use std::time::Duration;

use bytes::Bytes;

use super::{Shared, backoff};
use crate::checkers::transactions::{CommittedSession, FinalRead, Read};
use crate::checkers::{Commit, Resume, Session};
use crate::client::{CORRUPT_READ, Client, OFFSET_OUT_OF_RANGE, Outcome};
use crate::history::outcome_name;

/// Reads `partition` of `topic` from the group's committed offset, commits what it read, and
/// starts over from the committed offset after every lost connection, until `producers`
/// producers are done and it has caught up.
pub async fn committing(
    name: String,
    topic: String,
    group: String,
    partition: i32,
    producers: usize,
    max_wait_ms: i32,
    world: Shared,
) {
    let mut client = super::client(&world, &name);
    'session: loop {
        let sent_seq = world.lock().unwrap().history.next_seq();
        let resumed = client.committed_offset(&group, &topic, partition).await;
        let committed = {
            let mut w = world.lock().unwrap();
            let detail = match resumed {
                Outcome::Ok(o) => serde_json::json!({"partition": partition, "committed": o}),
                _ => serde_json::json!({"partition": partition}),
            };
            w.history.record(&name, "resume", &outcome_name(&resumed), detail);
            if let Outcome::Ok(offset) = resumed {
                let resume = Resume { consumer: name.clone(), sent_seq, committed: offset };
                w.partitions.entry(partition).or_default().resumes.push(resume);
            }
            resumed
        };
        let Outcome::Ok(committed) = committed else {
            backoff().await;
            continue 'session;
        };
        let mut position = committed.max(0);
        let session =
            Session { consumer: name.clone(), start: position, records: Vec::new(), high_watermarks: Vec::new() };
        world.lock().unwrap().partitions.entry(partition).or_default().sessions.push(session);
        loop {
            // Caught up means: nothing left at a high watermark read after the last ack.
            let all_acked = world.lock().unwrap().producers_done == producers;
            let fetched = client.fetch(&topic, partition, position, max_wait_ms).await;
            let last = {
                let mut w = world.lock().unwrap();
                let detail = match &fetched {
                    Outcome::Ok((records, hwm)) => {
                        serde_json::json!({"partition": partition, "offset": position, "records": records.len(), "hwm": hwm})
                    }
                    _ => serde_json::json!({"partition": partition, "offset": position}),
                };
                w.history.record(&name, "poll", &outcome_name(&fetched), detail);
                match fetched {
                    Outcome::Ok((records, hwm)) => {
                        let session = w.partitions.entry(partition).or_default().sessions.last_mut().expect("started");
                        session.high_watermarks.push(hwm);
                        session.records.extend(records.iter().cloned());
                        if all_acked && records.is_empty() && position >= hwm {
                            return;
                        }
                        records.last().map(|(offset, _)| *offset)
                    }
                    Outcome::Failed(CORRUPT_READ) => {
                        w.violations.push(format!(
                            "corrupt-read: partition {partition}: the batch at offset {position} failed its CRC"
                        ));
                        return;
                    }
                    Outcome::Failed(OFFSET_OUT_OF_RANGE) => {
                        // Only consumed offsets are committed, so the log lost what was read.
                        w.violations.push(format!(
                            "lost-write: partition {partition}: position {position} is past the end of the log"
                        ));
                        return;
                    }
                    Outcome::Failed(_) => None,
                    Outcome::Indefinite => continue 'session,
                }
            };
            let Some(last) = last else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            position = last + 1;
            let committed = client.commit_offset(&group, &topic, partition, position).await;
            let mut w = world.lock().unwrap();
            let detail = serde_json::json!({"partition": partition, "offset": position});
            let acked_seq = w.history.record(&name, "commit", &outcome_name(&committed), detail);
            match committed {
                Outcome::Ok(()) => w.partitions.entry(partition).or_default().commits.push(Commit {
                    consumer: name.clone(),
                    acked_seq,
                    offset: position,
                }),
                Outcome::Failed(_) => {}
                Outcome::Indefinite => continue 'session,
            }
        }
    }
}

/// Reads `partition` of `topic` read_committed from offset 0 until `done()` says the producers
/// have finished; each lost connection starts a new session (the LSO may be read anew).
pub async fn read_committed(
    name: String,
    topic: String,
    partition: i32,
    world: Shared,
    done: impl Fn() -> bool,
) -> Vec<CommittedSession> {
    let mut client = super::client(&world, &name);
    let history = world.lock().unwrap().history.clone();
    let fresh = || CommittedSession { consumer: name.clone(), partition, reads: Vec::new() };
    let mut sessions = Vec::new();
    let mut session = fresh();
    let mut offset = 0;
    while !done() {
        let sent_seq = history.next_seq();
        match client.fetch_committed(&topic, partition, offset, 100).await {
            Outcome::Ok(fetched) => {
                let detail = serde_json::json!({
                    "partition": partition, "offset": offset, "records": fetched.records.len(),
                    "lso": fetched.last_stable_offset, "hwm": fetched.high_watermark,
                });
                let answered_seq = history.record(&name, "poll-committed", "ok", detail);
                offset = fetched.next_offset;
                session.reads.push(Read {
                    sent_seq,
                    answered_seq,
                    answered_ms: crate::env::world_elapsed().as_millis() as u64,
                    last_stable_offset: fetched.last_stable_offset,
                    high_watermark: fetched.high_watermark,
                    values: fetched.records,
                });
            }
            Outcome::Failed(CORRUPT_READ) => {
                world.lock().unwrap().violations.push(format!("corrupt-read: {name} at offset {offset}"));
                break;
            }
            Outcome::Failed(OFFSET_OUT_OF_RANGE) => {
                // Retention moved the log start past the position: go on from the log start.
                if let Outcome::Ok(start) = client.list_offset(&topic, partition, -2, true).await {
                    offset = offset.max(start);
                }
            }
            Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            Outcome::Indefinite => sessions.push(std::mem::replace(&mut session, fresh())),
        }
    }
    sessions.push(session);
    sessions
}

/// The log start offset of a partition, asked until a broker answers.
async fn log_start(client: &mut Client, topic: &str, partition: i32) -> i64 {
    loop {
        match client.list_offset(topic, partition, -2, false).await {
            Outcome::Ok(start) => return start,
            _ => backoff().await,
        }
    }
}

/// Reads a whole partition once the workload is done: its records, the high watermark, and a
/// violation if a batch failed its CRC.
pub async fn read_partition(world: &Shared, topic: &str, partition: i32) -> (Vec<(i64, Bytes)>, i64, Option<String>) {
    let mut client = super::client(world, "final-read");
    let mut offset = log_start(&mut client, topic, partition).await;
    let mut read = Vec::new();
    loop {
        match client.fetch(topic, partition, offset, 100).await {
            Outcome::Ok((records, hwm)) => {
                if let Some((last, _)) = records.last() {
                    offset = last + 1;
                }
                read.extend(records);
                if offset >= hwm {
                    return (read, hwm, None);
                }
            }
            Outcome::Failed(CORRUPT_READ) => {
                let corrupt =
                    format!("corrupt-read: partition {partition}: the batch at offset {offset} failed its CRC");
                return (read, offset, Some(corrupt));
            }
            Outcome::Failed(_) | Outcome::Indefinite => backoff().await,
        }
    }
}

/// Reads a whole partition once the workload is done and keeps the read in its history, for
/// the log checker; a corrupt batch is a violation.
pub async fn final_read(world: &Shared, topic: &str, partition: i32) {
    let (read, hwm, corrupt) = read_partition(world, topic, partition).await;
    let mut w = world.lock().unwrap();
    w.violations.extend(corrupt);
    let history = w.partitions.entry(partition).or_default();
    history.read = read;
    history.high_watermark = hwm;
}

/// Reads a partition read_committed from its log start once the workload is done, until its
/// last stable offset reaches its high watermark (or `deadline` passes: then what is stable).
pub async fn read_committed_to_end(
    client: &mut Client,
    topic: &str,
    partition: i32,
    deadline: tokio::time::Instant,
) -> FinalRead {
    let mut read = FinalRead { log_start_offset: log_start(client, topic, partition).await, ..FinalRead::default() };
    let mut offset = read.log_start_offset;
    loop {
        match client.fetch_committed(topic, partition, offset, 100).await {
            Outcome::Ok(f) => {
                let offsets: Vec<i64> = f.records.iter().map(|(o, _)| *o).collect();
                let detail = serde_json::json!({
                    "partition": partition, "offset": offset, "offsets": offsets,
                    "lso": f.last_stable_offset, "hwm": f.high_watermark,
                });
                client.record("read-committed", "ok", detail);
                offset = f.next_offset;
                read.values.extend(f.records);
                (read.last_stable_offset, read.high_watermark) = (f.last_stable_offset, f.high_watermark);
                let settled = f.last_stable_offset == f.high_watermark;
                if offset >= f.last_stable_offset && (settled || tokio::time::Instant::now() > deadline) {
                    return read;
                }
                if offset >= f.last_stable_offset {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            Outcome::Failed(OFFSET_OUT_OF_RANGE) => {
                // Retention passed the reader: what it removed the checker excuses.
                read.log_start_offset = log_start(client, topic, partition).await;
                offset = offset.max(read.log_start_offset);
                read.values.retain(|(o, _)| *o >= read.log_start_offset);
            }
            Outcome::Failed(_) | Outcome::Indefinite => backoff().await,
        }
    }
}

/// Reads the group's committed offset of `partition` once the workload is done, as a last
/// resume: it must not be below any commit acked before.
pub async fn final_committed(world: &Shared, group: &str, topic: &str, partition: i32) {
    let mut client = super::client(world, "final-read");
    loop {
        let sent_seq = world.lock().unwrap().history.next_seq();
        let outcome = client.committed_offset(group, topic, partition).await;
        if let Outcome::Ok(committed) = outcome {
            let resume = Resume { consumer: "final-read".into(), sent_seq, committed };
            world.lock().unwrap().partitions.entry(partition).or_default().resumes.push(resume);
            return;
        }
        backoff().await;
    }
}
