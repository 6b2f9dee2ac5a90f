//! The first proof that the seams are real: the production broker in a turmoil host serves a
//! simulated wire client, survives a crash with torn writes, and a seed replays bit for bit.

use kaas_core::env::{Volume, VolumeFile};
use kaas_sim::scenarios::smoke;
use kaas_sim::volume::SimVolume;

#[test]
fn smoke_seeds_pass() {
    for seed in 0..20 {
        let result = smoke::run(seed);
        assert!(result.pass, "seed {seed}: {:?}", result.violations);
        assert!(result.sim_seconds > 0.0);
    }
}

fn kaas_sim(args: &[&str]) -> (bool, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_kaas-sim")).args(args).output().expect("run kaas-sim");
    (output.status.success(), String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The trace of each line, without the wall time.
fn traces(stdout: &str) -> Vec<String> {
    stdout.lines().filter(|l| l.starts_with("seed=")).map(|l| l.split(" sim_s=").next().unwrap().to_string()).collect()
}

#[test]
fn a_seed_replays_to_the_same_trace() {
    let (ok, batch) = kaas_sim(&["run", "--scenario", "smoke", "--seeds", "0..8", "--check-determinism"]);
    assert!(ok, "{batch}");
    let batch = traces(&batch);
    assert_eq!(batch.len(), 8);
    let (_, alone) = kaas_sim(&["run", "--scenario", "smoke", "--seed", "5"]);
    assert_eq!(traces(&alone), vec![batch[5].clone()], "a seed run alone matches the same seed in a batch");
    assert_ne!(batch[1], batch[2], "different seeds explore different runs");
}

#[test]
fn every_mutant_is_caught() {
    let (ok, out) = kaas_sim(&["mutants", "--seeds", "0..2000"]);
    assert!(ok, "a mutant survived:\n{out}");
    assert_eq!(out.lines().filter(|l| l.contains("caught_by_seed=")).count(), 5, "{out}");
}

#[tokio::test]
async fn a_crash_loses_unsynced_bytes_and_keeps_synced_ones() {
    let volume = SimVolume::default();
    let file = volume.open("p/00.log").await.unwrap();
    file.append(bytes::Bytes::from_static(b"durable")).await.unwrap();
    file.sync().await.unwrap();
    file.append(bytes::Bytes::from(vec![7u8; 2000])).await.unwrap();
    volume.crash();
    assert_eq!(volume.contents("p/00.log").unwrap(), b"durable");
    volume.write_atomic("p/state.json", bytes::Bytes::from_static(b"{}")).await.unwrap();
    volume.crash();
    assert_eq!(volume.contents("p/state.json").unwrap(), b"{}");
    assert_eq!(volume.list("p").await.unwrap(), vec!["00.log".to_string(), "state.json".to_string()]);
}

#[tokio::test]
async fn torn_writes_keep_whole_blocks_and_zero_the_gaps() {
    use kaas_sim::volume::{Torn, VolumeFaults};
    for seed in 0..20 {
        let volume =
            SimVolume::new(seed, VolumeFaults { torn: Torn::Scattered, sync_latency_ms_max: 0, io_error_per_mille: 0 });
        let file = volume.open("f").await.unwrap();
        file.append(bytes::Bytes::from(vec![1u8; 100])).await.unwrap();
        file.sync().await.unwrap();
        file.append(bytes::Bytes::from(vec![7u8; 5000])).await.unwrap();
        volume.crash();
        let data = volume.contents("f").unwrap();
        assert!(data.len() >= 100 && data[..100].iter().all(|b| *b == 1), "synced bytes survive");
        for block in data[100..].chunks(512) {
            assert!(block.iter().all(|b| *b == 7) || block.iter().all(|b| *b == 0), "whole blocks only");
        }
    }
}
