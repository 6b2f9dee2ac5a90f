//! The env seams: every clock read, file operation, random draw, socket and spawned task of the
//! broker goes through the one `Env` value handed to each actor. Production wires `real::RealEnv`;
//! the simulator wires its own implementation of the same traits, so the broker code is the same.

pub mod net;
pub mod real;

use std::future::Future;
use std::io;

use bytes::Bytes;

pub use net::{Listener, Net};

/// Wall time, monotonic time and sleeping. Wall time feeds record timestamps, expiry and
/// leases; monotonic time feeds timeouts and deadlines; sleeps drive every timer.
pub trait Clock: Clone + Send + Sync + 'static {
    /// Milliseconds since the Unix epoch, as this host believes (the simulator may skew it).
    fn now_ms(&self) -> i64;

    /// Monotonic time for deadlines: tokio's clock, which the simulator drives tick by tick.
    fn monotonic(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() // allow-nondeterminism: virtual under the simulator
    }

    fn sleep_ms(&self, ms: u64) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(std::time::Duration::from_millis(ms))
    }

    /// Sleeps until `deadline` of `monotonic` time (the simulator may run a host's clock fast
    /// or slow, so deadlines are reached through the clock that made them).
    fn sleep_until(&self, deadline: tokio::time::Instant) -> impl Future<Output = ()> + Send {
        tokio::time::sleep_until(deadline)
    }
}

/// Randomness: seeded ChaCha in the simulator, OS-seeded in production.
pub trait Rng: Clone + Send + Sync + 'static {
    fn next_u64(&self) -> u64;

    /// A uniformly drawn value in `0..bound`.
    fn below(&self, bound: u64) -> u64 {
        assert!(bound > 0);
        self.next_u64() % bound
    }

    fn uuid(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.next_u64().to_le_bytes());
        out[8..].copy_from_slice(&self.next_u64().to_le_bytes());
        // RFC 4122 version 4, variant 1: Kafka's Uuid.randomUuid() shape.
        out[6] = (out[6] & 0x0f) | 0x40;
        out[8] = (out[8] & 0x3f) | 0x80;
        out
    }
}

/// Task spawning. Both envs run actors on tokio (turmoil hosts are tokio runtimes); the seam
/// exists so that the simulator can name, count or reorder tasks without touching the broker.
pub trait Spawner: Clone + Send + Sync + 'static {
    fn spawn<F>(&self, name: &'static str, future: F)
    where
        F: Future<Output = ()> + Send + 'static;
}

/// An open file on the volume. Appends are buffered by the OS until `sync`; only synced bytes
/// survive a crash. One actor writes a file at a time; reads may come from anyone.
pub trait VolumeFile: Send + Sync + 'static {
    /// Appends `data` at the end, returning the position it was written at.
    fn append(&self, data: Bytes) -> impl Future<Output = io::Result<u64>> + Send;
    /// Makes every appended byte durable (fsync / fdatasync).
    fn sync(&self) -> impl Future<Output = io::Result<()>> + Send;
    /// Reads up to `len` bytes at `position`; shorter only at the end of the file.
    fn read_at(&self, position: u64, len: usize) -> impl Future<Output = io::Result<Bytes>> + Send;
    /// Cuts the file to `len` bytes, durably.
    fn truncate(&self, len: u64) -> impl Future<Output = io::Result<()>> + Send;
    /// The current length, appended but unsynced bytes included.
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The shared volume. Paths are relative to the data directory and use `/`.
///
/// Entry changes (a created file, a created directory, a rename, a removal) are durable only
/// once their parent directory is synced, as on Linux and NFS; each method says whether it
/// syncs the directory itself. A crash between two calls keeps any prefix of them.
pub trait Volume: Clone + Send + Sync + 'static {
    type File: VolumeFile;

    /// Creates every missing directory of `path`, durably: each new directory's parent is
    /// synced before this returns.
    fn create_dir_all(&self, path: &str) -> impl Future<Output = io::Result<()>> + Send;
    /// Opens a file for appending and reading, creating it (and syncing its directory) if absent.
    fn open(&self, path: &str) -> impl Future<Output = io::Result<Self::File>> + Send;
    /// Creates `path` empty, truncating a file already there. The new entry is not durable
    /// until its directory is synced.
    fn create(&self, path: &str) -> impl Future<Output = io::Result<Self::File>> + Send;
    /// Creates `path` holding `data`, only if no entry of that name exists (`ErrorKind::
    /// AlreadyExists` otherwise), durably: the content is written and synced under a temporary
    /// name and then hard-linked into place, so no reader ever sees the file empty or torn.
    /// This is the exclusive create ownership claims rest on (link(2) is atomic on local
    /// disks, NFSv3+, EFS and CephFS). On NFS a lost reply to a retried call can surface as
    /// AlreadyExists although this call made the file: callers read it back to tell.
    ///
    /// An error after the link (the directory sync failed) leaves the entry in place: other
    /// hosts may have read it already, so it is never taken back. Its durability is unknown
    /// until some host syncs the directory; a caller that finds its own entry on a retry
    /// syncs the directory before it trusts it.
    fn create_exclusive(&self, path: &str, data: Bytes) -> impl Future<Output = io::Result<()>> + Send;
    /// The whole file, or `None` if it does not exist.
    fn read(&self, path: &str) -> impl Future<Output = io::Result<Option<Bytes>>> + Send;
    /// Renames `from` over `to` in one step (readers see the old file or the new one). Not
    /// durable until the directory is synced.
    fn rename(&self, from: &str, to: &str) -> impl Future<Output = io::Result<()>> + Send;
    /// Makes every entry change in `dir` durable (fsync of the directory).
    fn sync_dir(&self, dir: &str) -> impl Future<Output = io::Result<()>> + Send;
    /// Entry names in a directory, sorted; empty if it does not exist.
    fn list(&self, dir: &str) -> impl Future<Output = io::Result<Vec<String>>> + Send;
    /// Removes a file durably; absent is not an error.
    fn remove_file(&self, path: &str) -> impl Future<Output = io::Result<()>> + Send;
    /// Removes a directory and everything in it, durably; absent is not an error.
    fn remove_dir_all(&self, path: &str) -> impl Future<Output = io::Result<()>> + Send;

    /// The size of the file system the volume is on and the bytes free to this process, if
    /// it can tell (DescribeLogDirs answers them). Decides nothing.
    fn space(&self) -> impl Future<Output = Option<VolumeSpace>> + Send {
        async { None }
    }

    /// What names this writer's temporary files apart from other writers' (`tmp_path`): brokers
    /// sharing the volume may replace one file at the same moment (the broker configs, a
    /// topic's file), and one temporary name for all would let one broker's rename carry off
    /// the other's half-written file.
    fn writer_tag(&self) -> String;

    /// Atomic durable replace, in its real steps (`replace_steps`): write `<path>.tmp-<tag>`,
    /// fsync it, rename it over `path`, fsync the directory. A crash leaves the old content or
    /// the new, never a mix (and perhaps a stray temporary file, which readers skip). The
    /// simulator runs the steps one call at a time, so that a crash can fall between any two;
    /// the real volume runs the same list in one blocking call.
    fn write_atomic(&self, path: &str, data: Bytes) -> impl Future<Output = io::Result<()>> + Send {
        async move {
            let tmp = tmp_path(path, &self.writer_tag());
            let mut file = None;
            for step in replace_steps() {
                match step {
                    ReplaceStep::WriteTmp => {
                        let created = self.create(&tmp).await?;
                        created.append(data.clone()).await?;
                        file = Some(created);
                    }
                    ReplaceStep::SyncTmp => file.take().expect("written first").sync().await?,
                    ReplaceStep::Rename => self.rename(&tmp, path).await?,
                    ReplaceStep::SyncDir => self.sync_dir(parent(path)).await?,
                }
            }
            Ok(())
        }
    }
}

/// What `Volume::space` reports, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeSpace {
    pub total_bytes: u64,
    pub usable_bytes: u64,
}

/// One step of the atomic replace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplaceStep {
    /// Create `<path>.tmp` (empty) and write the new content into it.
    WriteTmp,
    /// fsync the temporary file.
    SyncTmp,
    /// Rename it over the target.
    Rename,
    /// fsync the directory, which makes the rename durable.
    SyncDir,
}

/// The atomic replace, as both volumes carry it out: one list, so that what the simulator
/// crashes step by step is what production runs.
pub fn replace_steps() -> &'static [ReplaceStep] {
    use ReplaceStep::*;
    if crate::mutant!(AtomicReplaceSkipsDirSync) {
        &[WriteTmp, SyncTmp, Rename]
    } else {
        &[WriteTmp, SyncTmp, Rename, SyncDir]
    }
}

/// The temporary file an atomic replace of `path` by the writer `tag` writes first.
pub fn tmp_path(path: &str, tag: &str) -> String {
    format!("{path}.tmp-{tag}")
}

/// The bundle handed to every actor: one type parameter instead of five.
pub trait Env: Clone + Send + Sync + 'static {
    type Clock: Clock;
    type Rng: Rng;
    type Spawner: Spawner;
    type Volume: Volume;
    type Net: Net;

    fn clock(&self) -> &Self::Clock;
    fn rng(&self) -> &Self::Rng;
    fn spawner(&self) -> &Self::Spawner;
    fn volume(&self) -> &Self::Volume;
    fn net(&self) -> &Self::Net;
}

/// Joins volume path components with `/`.
pub fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() { name.to_string() } else { format!("{dir}/{name}") }
}

/// The directory part of a volume path ("" for a top-level entry).
pub fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(i) => &path[..i],
        None => "",
    }
}
