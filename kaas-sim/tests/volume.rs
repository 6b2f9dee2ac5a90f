//! The simulated volume keeps the promises a real NFS-mounted PVC keeps, and breaks the ones
//! it breaks: unsynced bytes die with their host, other hosts see only synced bytes, entry
//! changes need their directory synced, torn writes keep whole blocks, a failed fsync leaves
//! bytes readable but not durable, and the atomic replace survives a crash between any two of
//! its steps. (What both volumes must do alike is in tests/volume_contract.rs.)

use bytes::Bytes;
use kaas_core::env::{Volume, VolumeFile};
use kaas_sim::volume::{SimVolume, Torn, VolumeFaults};

#[tokio::test]
async fn a_crash_loses_unsynced_bytes_and_keeps_synced_ones() {
    let volume = SimVolume::default();
    assert!(volume.open("p/00.log").await.is_err(), "no file in a directory that does not exist");
    volume.create_dir_all("p").await.unwrap();
    let file = volume.open("p/00.log").await.unwrap();
    file.append(Bytes::from_static(b"durable")).await.unwrap();
    file.sync().await.unwrap();
    file.append(Bytes::from(vec![7u8; 2000])).await.unwrap();
    volume.crash("");
    assert_eq!(volume.contents("p/00.log").unwrap(), b"durable");
    volume.write_atomic("p/state.json", Bytes::from_static(b"{}")).await.unwrap();
    volume.crash("");
    assert_eq!(volume.contents("p/state.json").unwrap(), b"{}");
    assert_eq!(volume.list("p").await.unwrap(), vec!["00.log".to_string(), "state.json".to_string()]);
}

#[tokio::test]
async fn torn_writes_keep_whole_blocks_and_zero_the_gaps() {
    for seed in 0..20 {
        let volume =
            SimVolume::new(seed, VolumeFaults { torn: Torn::Scattered, sync_latency_ms_max: 0, io_error_per_mille: 0 });
        let file = volume.open("f").await.unwrap();
        file.append(Bytes::from(vec![1u8; 100])).await.unwrap();
        file.sync().await.unwrap();
        file.append(Bytes::from(vec![7u8; 5000])).await.unwrap();
        volume.crash("");
        let data = volume.contents("f").unwrap();
        assert!(data.len() >= 100 && data[..100].iter().all(|b| *b == 1), "synced bytes survive");
        for block in data[100..].chunks(512) {
            assert!(block.iter().all(|b| *b == 7) || block.iter().all(|b| *b == 0), "whole blocks only");
        }
    }
}

#[tokio::test]
async fn other_hosts_see_a_writers_bytes_only_once_synced() {
    let volume = SimVolume::default();
    let (a, b) = (volume.for_host("a"), volume.for_host("b"));
    a.create_dir_all("p").await.unwrap();
    let written = a.open("p/00.log").await.unwrap();
    written.append(Bytes::from_static(b"synced")).await.unwrap();
    written.sync().await.unwrap();
    written.append(Bytes::from_static(b"+pending")).await.unwrap();
    let read = b.open("p/00.log").await.unwrap();
    assert_eq!(read.len(), 6);
    assert_eq!(&read.read_at(0, 100).await.unwrap()[..], b"synced");
    assert_eq!(&written.read_at(0, 100).await.unwrap()[..], b"synced+pending", "a writer reads its own bytes");
    b.crash("b");
    assert_eq!(a.contents("p/00.log").unwrap(), b"synced+pending", "b's crash leaves a's pending bytes");
    written.sync().await.unwrap();
    assert_eq!(b.contents("p/00.log").unwrap(), b"synced+pending");
    assert!(volume.violations().is_empty());
}

#[tokio::test]
async fn two_hosts_with_unsynced_bytes_in_one_file_are_a_violation() {
    let volume = SimVolume::default();
    let (a, b) = (volume.for_host("a"), volume.for_host("b"));
    a.open("f").await.unwrap().append(Bytes::from_static(b"a")).await.unwrap();
    b.open("f").await.unwrap().append(Bytes::from_static(b"b")).await.unwrap();
    let violations = volume.violations();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(violations[0].starts_with("two-writers: b appended to f while a"), "{violations:?}");
}

#[tokio::test]
async fn a_crash_before_the_directory_sync_undoes_entry_changes() {
    let faults = VolumeFaults { torn: Torn::None, sync_latency_ms_max: 50, io_error_per_mille: 0 };
    // Each change in its own directory: one directory's sync does not make another's durable.
    let mut undone = 0;
    for seed in 0..10 {
        let volume = SimVolume::new(seed, faults).for_host("h");
        for dir in ["a", "b", "c"] {
            volume.create_dir_all(dir).await.unwrap();
        }
        volume.write_atomic("a/state.json", Bytes::from_static(b"old")).await.unwrap();
        volume.open("c/doomed.log").await.unwrap();
        let (replacing, creating, removing) = {
            let v = volume.clone();
            let replace = tokio::spawn(async move { v.write_atomic("a/state.json", Bytes::from_static(b"new")).await });
            let v = volume.clone();
            let create = tokio::spawn(async move { v.open("b/new.log").await.map(|_| ()) });
            let v = volume.clone();
            let remove = tokio::spawn(async move { v.remove_file("c/doomed.log").await });
            (replace, create, remove)
        };
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        let done = [replacing.is_finished(), creating.is_finished(), removing.is_finished()];
        volume.crash("h");
        for task in [replacing, creating, removing] {
            task.abort();
        }
        let (b, c) = (volume.list("b").await.unwrap(), volume.list("c").await.unwrap());
        // A change whose call returned survives the crash; one still waiting is undone.
        assert_eq!(volume.contents("a/state.json").unwrap(), if done[0] { &b"new"[..] } else { &b"old"[..] });
        assert_eq!(b.contains(&"new.log".to_string()), done[1], "{b:?}");
        assert_eq!(c.contains(&"doomed.log".to_string()), !done[2], "{c:?}");
        undone += done.iter().filter(|d| !**d).count();
    }
    assert!(undone > 0, "some seed crashed inside a directory sync");
}

#[tokio::test]
async fn a_directory_sync_makes_earlier_entry_changes_durable_and_a_clean_exit_loses_nothing() {
    let faults = VolumeFaults { torn: Torn::None, sync_latency_ms_max: 50, io_error_per_mille: 0 };
    let mut interrupted = 0;
    for seed in 0..10 {
        let volume = SimVolume::new(seed, faults).for_host("h");
        volume.create_dir_all("d").await.unwrap();
        // A task that dies inside its directory sync (a process ending mid-call).
        let v = volume.clone();
        let creating = tokio::spawn(async move { v.open("d/early.log").await.map(|_| ()) });
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        let finished = creating.is_finished();
        creating.abort();
        interrupted += usize::from(!finished);
        // A later change to the same directory syncs it, and with it the earlier entry.
        volume.write_atomic("d/state.json", Bytes::from_static(b"{}")).await.unwrap();
        let file = volume.open("d/early.log").await.unwrap();
        file.append(Bytes::from_static(b"unsynced")).await.unwrap();
        volume.settle("h");
        volume.crash("h");
        assert_eq!(volume.list("d").await.unwrap(), vec!["early.log".to_string(), "state.json".to_string()]);
        assert_eq!(volume.contents("d/early.log").unwrap(), b"unsynced", "settled bytes survive a crash");
    }
    assert!(interrupted > 0, "some seed interrupted a directory sync");
}

const NO_FAULTS: VolumeFaults = VolumeFaults { torn: Torn::None, sync_latency_ms_max: 0, io_error_per_mille: 0 };

#[tokio::test]
async fn a_failed_fsync_leaves_bytes_readable_that_a_crash_turns_to_zeros() {
    let volume = SimVolume::new(1, NO_FAULTS).for_host("h");
    volume.create_dir_all("p").await.unwrap();
    let file = volume.open("p/00.log").await.unwrap();
    file.append(Bytes::from_static(b"durable")).await.unwrap();
    file.sync().await.unwrap();
    file.append(Bytes::from_static(b"limbo")).await.unwrap();
    volume.set_faults(VolumeFaults { io_error_per_mille: 1000, ..NO_FAULTS });
    assert!(file.sync().await.is_err());
    volume.set_faults(NO_FAULTS);
    assert_eq!(&file.read_at(0, 100).await.unwrap()[..], b"durablelimbo", "still readable, as on Linux");
    file.sync().await.unwrap();
    assert_eq!(volume.contents("p/00.log").unwrap(), b"durablelimbo", "a second fsync succeeds");
    volume.crash("h");
    assert_eq!(volume.contents("p/00.log").unwrap(), b"durable\0\0\0\0\0", "and wrote nothing");
    assert_eq!(volume.stats().bytes_in_limbo, 5);
}

#[tokio::test]
async fn a_truncate_takes_limbo_bytes_out() {
    let volume = SimVolume::new(1, NO_FAULTS).for_host("h");
    let file = volume.open("f").await.unwrap();
    file.append(Bytes::from_static(b"ok")).await.unwrap();
    file.sync().await.unwrap();
    file.append(Bytes::from_static(b"lost")).await.unwrap();
    volume.set_faults(VolumeFaults { io_error_per_mille: 1000, ..NO_FAULTS });
    assert!(file.sync().await.is_err());
    volume.set_faults(NO_FAULTS);
    file.truncate(2).await.unwrap();
    file.append(Bytes::from_static(b"+new")).await.unwrap();
    file.sync().await.unwrap();
    volume.crash("h");
    assert_eq!(volume.contents("f").unwrap(), b"ok+new", "nothing the cut removed comes back as zeros");
}

#[tokio::test]
async fn an_open_whose_directory_sync_fails_leaves_no_file() {
    let volume = SimVolume::new(1, NO_FAULTS).for_host("h");
    volume.create_dir_all("p").await.unwrap();
    volume.set_faults(VolumeFaults { io_error_per_mille: 1000, ..NO_FAULTS });
    assert!(volume.open("p/00.log").await.is_err());
    volume.set_faults(NO_FAULTS);
    assert!(volume.list("p").await.unwrap().is_empty(), "a retry creates it anew and syncs its directory");
    volume.open("p/00.log").await.unwrap();
    volume.crash("h");
    assert_eq!(volume.list("p").await.unwrap(), vec!["00.log".to_string()]);
}

#[tokio::test]
async fn an_exclusive_create_whose_directory_sync_fails_keeps_its_entry_until_its_host_crashes() {
    // Errors are drawn per call; the seeds where the link landed and the sync after it failed
    // are the case. Other hosts see that entry at once, so it is never taken back: it is
    // undone only by a crash of its host before any host synced the directory.
    let (mut undone, mut kept) = (0, 0);
    for seed in 0..200 {
        let shared = SimVolume::new(seed, NO_FAULTS);
        let (creator, peer) = (shared.for_host("h"), shared.for_host("peer"));
        creator.create_dir_all("owners").await.unwrap();
        creator.set_faults(VolumeFaults { io_error_per_mille: 500, ..NO_FAULTS });
        let made = creator.create_exclusive("owners/00001", Bytes::from_static(b"claim")).await;
        creator.set_faults(NO_FAULTS);
        let seen = peer.read("owners/00001").await.unwrap();
        if made.is_ok() || seen.is_none() {
            continue;
        }
        assert_eq!(&seen.unwrap()[..], b"claim", "the peer reads the whole content");
        let retry = creator.create_exclusive("owners/00001", Bytes::from_static(b"claim")).await;
        assert_eq!(retry.err().map(|e| e.kind()), Some(std::io::ErrorKind::AlreadyExists));
        if seed % 2 == 0 {
            shared.crash("h");
            assert_eq!(peer.read("owners/00001").await.unwrap(), None, "never synced: undone");
            undone += 1;
        } else {
            peer.sync_dir("owners").await.unwrap();
            shared.crash("h");
            assert!(peer.read("owners/00001").await.unwrap().is_some(), "the peer's sync made it durable");
            kept += 1;
        }
    }
    assert!(undone > 0 && kept > 0, "both cases drawn: undone {undone}, kept {kept}");
}

#[tokio::test]
async fn a_retried_create_dir_all_makes_an_earlier_directory_durable() {
    let volume = SimVolume::new(1, NO_FAULTS).for_host("h");
    volume.set_faults(VolumeFaults { io_error_per_mille: 1000, ..NO_FAULTS });
    assert!(volume.create_dir_all("p").await.is_err(), "made, but its parent not synced");
    volume.set_faults(NO_FAULTS);
    volume.create_dir_all("p").await.unwrap();
    volume.open("p/f").await.unwrap();
    volume.crash("h");
    assert_eq!(volume.list("p").await.unwrap(), vec!["f".to_string()], "the directory and its file survive");
}

#[tokio::test]
async fn an_atomic_replace_crashed_between_any_two_steps_leaves_old_or_new() {
    let faults = VolumeFaults { sync_latency_ms_max: 20, ..NO_FAULTS };
    let (mut old, mut new) = (0, 0);
    for seed in 0..40 {
        let volume = SimVolume::new(seed, faults).for_host("h");
        volume.create_dir_all("d").await.unwrap();
        volume.write_atomic("d/s.json", Bytes::from_static(b"old")).await.unwrap();
        let v = volume.clone();
        let replacing = tokio::spawn(async move { v.write_atomic("d/s.json", Bytes::from_static(b"new")).await });
        tokio::time::sleep(std::time::Duration::from_millis(seed % 45)).await;
        let finished = replacing.is_finished();
        volume.crash("h");
        replacing.abort();
        let after = volume.contents("d/s.json").unwrap();
        assert!(after == b"old" || after == b"new", "{after:?}");
        if finished {
            assert_eq!(after, b"new", "a replace that returned is durable");
        }
        if after == b"old" { old += 1 } else { new += 1 }
    }
    assert!(old > 0 && new > 0, "crashes landed before and after the rename's sync: {old} old, {new} new");
}
