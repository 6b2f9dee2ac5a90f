//! `SimVolume`: the shared volume (the PVC) in memory, one instance for every broker host.
//!
//! Appends are pending until the file is synced; `crash` throws away what a crashed host had
//! not synced, except that, as on a real disk, a prefix of the pending bytes in whole blocks
//! may have reached the platter anyway (a torn write), when the seed turns torn writes on.
//! Atomic replaces, removals and file creations are durable when they return, as the real
//! volume makes them (file + directory fsync).

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use kaas_core::env::{Volume, VolumeFile};

/// Torn writes keep whole blocks of this size.
const BLOCK_BYTES: usize = 512;

#[derive(Default)]
struct Inode {
    data: Vec<u8>,
    /// Bytes that survive a crash.
    durable_len: usize,
}

#[derive(Default)]
struct State {
    /// path -> inode number
    paths: BTreeMap<String, u64>,
    inodes: BTreeMap<u64, Inode>,
    dirs: std::collections::BTreeSet<String>,
    next_inode: u64,
    /// Bytes written, synced: for the trace.
    stats: VolumeStats,
}

#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct VolumeStats {
    pub bytes_appended: u64,
    pub syncs: u64,
    pub atomic_writes: u64,
    pub bytes_lost_in_crashes: u64,
}

#[derive(Clone, Default)]
pub struct SimVolume {
    state: Arc<Mutex<State>>,
}

pub struct SimFile {
    state: Arc<Mutex<State>>,
    inode: u64,
}

fn not_found(path: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, path.to_string())
}

impl SimVolume {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("volume lock")
    }

    /// A host crashed: unsynced bytes are lost, but for `torn_blocks(pending_len)` whole
    /// blocks of them that had already reached the disk.
    pub fn crash(&self, mut torn_blocks: impl FnMut(usize) -> usize) {
        let mut state = self.lock();
        let mut lost = 0u64;
        for inode in state.inodes.values_mut() {
            let pending = inode.data.len() - inode.durable_len;
            if pending == 0 {
                continue;
            }
            let kept = (torn_blocks(pending.div_ceil(BLOCK_BYTES)) * BLOCK_BYTES).min(pending);
            inode.data.truncate(inode.durable_len + kept);
            inode.durable_len = inode.data.len();
            lost += (pending - kept) as u64;
        }
        state.stats.bytes_lost_in_crashes += lost;
    }

    pub fn stats(&self) -> VolumeStats {
        self.lock().stats
    }

    /// A digest of every path and its bytes, for the trace hash.
    pub fn digest(&self) -> u64 {
        let state = self.lock();
        let mut hash = 0xcbf2_9ce4_8422_2325u64;
        let mut feed = |bytes: &[u8]| {
            for b in bytes {
                hash ^= u64::from(*b);
                hash = hash.wrapping_mul(0x100_0000_01b3);
            }
        };
        for (path, inode) in &state.paths {
            feed(path.as_bytes());
            feed(&state.inodes[inode].data);
        }
        hash
    }

    /// Bytes of a file as a reader would see them (tests and checkers).
    pub fn contents(&self, path: &str) -> Option<Vec<u8>> {
        let state = self.lock();
        state.paths.get(path).map(|i| state.inodes[i].data.clone())
    }
}

fn parent_dirs(path: &str) -> impl Iterator<Item = String> + '_ {
    path.match_indices('/').map(move |(i, _)| path[..i].to_string())
}

impl Volume for SimVolume {
    type File = SimFile;

    async fn create_dir_all(&self, path: &str) -> io::Result<()> {
        let mut state = self.lock();
        for dir in parent_dirs(path) {
            state.dirs.insert(dir);
        }
        state.dirs.insert(path.to_string());
        Ok(())
    }

    async fn open(&self, path: &str) -> io::Result<SimFile> {
        let mut state = self.lock();
        let inode = match state.paths.get(path) {
            Some(inode) => *inode,
            None => {
                state.next_inode += 1;
                let inode = state.next_inode;
                state.inodes.insert(inode, Inode::default());
                state.paths.insert(path.to_string(), inode);
                inode
            }
        };
        Ok(SimFile { state: self.state.clone(), inode })
    }

    async fn read(&self, path: &str) -> io::Result<Option<Bytes>> {
        let state = self.lock();
        Ok(state.paths.get(path).map(|i| Bytes::copy_from_slice(&state.inodes[i].data)))
    }

    async fn write_atomic(&self, path: &str, data: Bytes) -> io::Result<()> {
        let mut state = self.lock();
        state.next_inode += 1;
        let inode = state.next_inode;
        let len = data.len();
        state.inodes.insert(inode, Inode { data: data.to_vec(), durable_len: len });
        if let Some(old) = state.paths.insert(path.to_string(), inode) {
            state.inodes.remove(&old);
        }
        state.stats.atomic_writes += 1;
        Ok(())
    }

    async fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        let state = self.lock();
        let prefix = if dir.is_empty() { String::new() } else { format!("{dir}/") };
        let mut names: Vec<String> = state
            .paths
            .keys()
            .chain(state.dirs.iter())
            .filter_map(|p| p.strip_prefix(&prefix))
            .filter(|rest| !rest.is_empty())
            .map(|rest| rest.split('/').next().expect("non-empty").to_string())
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    async fn remove_file(&self, path: &str) -> io::Result<()> {
        let mut state = self.lock();
        if let Some(inode) = state.paths.remove(path) {
            state.inodes.remove(&inode);
        }
        Ok(())
    }

    async fn remove_dir_all(&self, path: &str) -> io::Result<()> {
        let mut state = self.lock();
        let prefix = format!("{path}/");
        let doomed: Vec<String> = state.paths.keys().filter(|p| p.starts_with(&prefix)).cloned().collect();
        for p in doomed {
            let inode = state.paths.remove(&p).expect("listed");
            state.inodes.remove(&inode);
        }
        state.dirs.retain(|d| d != path && !d.starts_with(&prefix));
        Ok(())
    }
}

impl SimFile {
    fn with<T>(&self, f: impl FnOnce(&mut Inode, &mut VolumeStats) -> T) -> io::Result<T> {
        let mut state = self.state.lock().expect("volume lock");
        let State { inodes, stats, .. } = &mut *state;
        let inode = inodes.get_mut(&self.inode).ok_or_else(|| not_found("removed file"))?;
        Ok(f(inode, stats))
    }
}

impl VolumeFile for SimFile {
    async fn append(&self, data: Bytes) -> io::Result<u64> {
        self.with(|inode, stats| {
            let position = inode.data.len() as u64;
            inode.data.extend_from_slice(&data);
            stats.bytes_appended += data.len() as u64;
            position
        })
    }

    async fn sync(&self) -> io::Result<()> {
        self.with(|inode, stats| {
            inode.durable_len = inode.data.len();
            stats.syncs += 1;
        })
    }

    async fn read_at(&self, position: u64, len: usize) -> io::Result<Bytes> {
        self.with(|inode, _| {
            let start = (position as usize).min(inode.data.len());
            let end = start.saturating_add(len).min(inode.data.len());
            Bytes::copy_from_slice(&inode.data[start..end])
        })
    }

    async fn truncate(&self, len: u64) -> io::Result<()> {
        self.with(|inode, _| {
            inode.data.truncate(len as usize);
            inode.durable_len = inode.data.len();
        })
    }

    fn len(&self) -> u64 {
        self.with(|inode, _| inode.data.len() as u64).unwrap_or(0)
    }
}
