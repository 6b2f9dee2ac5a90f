//! `Volume` over std::fs, each operation on tokio's blocking pool.

use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::env::{ReplaceStep, Volume, VolumeFile, VolumeSpace, parent, replace_steps, tmp_path};

#[derive(Clone)]
pub struct RealVolume {
    root: Arc<PathBuf>,
}

impl RealVolume {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        RealVolume { root: Arc::new(root.into()) }
    }

    fn path(&self, relative: &str) -> PathBuf {
        debug_assert!(!relative.starts_with('/'), "volume paths are relative: {relative}");
        debug_assert!(!relative.split('/').any(|c| c == ".."), "no escape from the volume: {relative}");
        self.root.join(relative)
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> io::Result<T> + Send + 'static) -> io::Result<T> {
    tokio::task::spawn_blocking(f).await.map_err(io::Error::other)?
}

/// statvfs(3) of the file system `dir` is on: its size, and what an unprivileged writer may
/// still use (`f_bavail`, as df shows it).
// The field widths differ between platforms (u64 on 64-bit Linux, u32 elsewhere).
#[allow(clippy::unnecessary_cast)]
fn statvfs(dir: &Path) -> io::Result<VolumeSpace> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(io::Error::other)?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is a NUL-terminated string and `stat` a buffer of the type statvfs fills.
    let rc = unsafe { libc::statvfs(path.as_ptr(), stat.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it filled the whole struct.
    let stat = unsafe { stat.assume_init() };
    let block = stat.f_frsize as u64;
    Ok(VolumeSpace { total_bytes: stat.f_blocks as u64 * block, usable_bytes: stat.f_bavail as u64 * block })
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

pub struct RealFile {
    file: Arc<File>,
    // Only the owning actor appends, so the end of the file is tracked here, not asked of the OS.
    len: Arc<AtomicU64>,
}

impl VolumeFile for RealFile {
    async fn append(&self, data: Bytes) -> io::Result<u64> {
        let file = self.file.clone();
        let position = self.len.fetch_add(data.len() as u64, Ordering::SeqCst);
        let len = self.len.clone();
        blocking(move || {
            let result = file.write_all_at(&data, position);
            if result.is_err() {
                // A failed write leaves the file's tail unknown: the caller truncates or stops.
                len.store(position, Ordering::SeqCst);
            }
            result.map(|_| position)
        })
        .await
    }

    async fn sync(&self) -> io::Result<()> {
        let file = self.file.clone();
        blocking(move || file.sync_data()).await
    }

    async fn read_at(&self, position: u64, len: usize) -> io::Result<Bytes> {
        let file = self.file.clone();
        blocking(move || {
            let mut buf = vec![0u8; len];
            let mut filled = 0;
            while filled < len {
                match file.read_at(&mut buf[filled..], position + filled as u64) {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
            buf.truncate(filled);
            Ok(Bytes::from(buf))
        })
        .await
    }

    async fn truncate(&self, len: u64) -> io::Result<()> {
        let file = self.file.clone();
        self.len.store(len, Ordering::SeqCst);
        blocking(move || {
            file.set_len(len)?;
            file.sync_all()
        })
        .await
    }

    fn len(&self) -> u64 {
        self.len.load(Ordering::SeqCst)
    }
}

impl Volume for RealVolume {
    /// This process and a count of its replaces: unique among the processes sharing the volume
    /// (on one host; on several, their pids may meet, so the host name goes in too).
    fn writer_tag(&self) -> String {
        static REPLACES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = REPLACES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{}-{}-{n}", host_name(), std::process::id())
    }

    type File = RealFile;

    async fn space(&self) -> Option<VolumeSpace> {
        let root = self.root.clone();
        blocking(move || statvfs(&root)).await.ok()
    }

    async fn create_dir_all(&self, path: &str) -> io::Result<()> {
        let full = self.path(path);
        let root = self.root.clone();
        blocking(move || {
            // A directory is durable only once its parent is synced. Every parent below the
            // data directory is synced, not only those of directories made now: an earlier
            // call may have made one and failed before its parent's sync.
            fs::create_dir_all(&full)?;
            for dir in full.ancestors().take_while(|d| d.starts_with(&*root) && *d != root.as_path()) {
                if let Some(parent) = dir.parent() {
                    sync_dir(parent)?;
                }
            }
            Ok(())
        })
        .await
    }

    async fn open(&self, path: &str) -> io::Result<RealFile> {
        let full = self.path(path);
        let dir = self.path(parent(path));
        blocking(move || {
            let existed = full.exists();
            let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&full)?;
            if !existed && let Err(e) = sync_dir(&dir) {
                // The new entry may not be durable. Remove it, so that a retry creates the file
                // anew and syncs the directory, rather than find it and trust it.
                let _ = fs::remove_file(&full);
                return Err(e);
            }
            let len = file.metadata()?.len();
            Ok(RealFile { file: Arc::new(file), len: Arc::new(AtomicU64::new(len)) })
        })
        .await
    }

    async fn create(&self, path: &str) -> io::Result<RealFile> {
        let full = self.path(path);
        blocking(move || {
            let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&full)?;
            Ok(RealFile { file: Arc::new(file), len: Arc::new(AtomicU64::new(0)) })
        })
        .await
    }

    async fn create_exclusive(&self, path: &str, data: Bytes) -> io::Result<()> {
        let full = self.path(path);
        // A name of this process's own: two brokers racing for one path never share a tmp file.
        let tmp = self.path(&format!("{path}.{}.excl", std::process::id()));
        let dir = self.path(parent(path));
        blocking(move || {
            let mut file = File::create(&tmp)?;
            file.write_all(&data)?;
            file.sync_all()?;
            let linked = fs::hard_link(&tmp, &full);
            let _ = fs::remove_file(&tmp);
            linked?;
            // On failure the entry stays: a peer may have read it already (see the trait).
            sync_dir(&dir)
        })
        .await
    }

    async fn read(&self, path: &str) -> io::Result<Option<Bytes>> {
        let full = self.path(path);
        blocking(move || match fs::read(full) {
            Ok(data) => Ok(Some(Bytes::from(data))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        })
        .await
    }

    async fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let (from, to) = (self.path(from), self.path(to));
        blocking(move || fs::rename(from, to)).await
    }

    /// The steps of `replace_steps`, in one blocking call: four hops to the blocking pool
    /// instead of one cost a third of the transactions a group commit gets through.
    async fn write_atomic(&self, path: &str, data: Bytes) -> io::Result<()> {
        let full = self.path(path);
        let tmp = self.path(&tmp_path(path, &self.writer_tag()));
        let dir = self.path(parent(path));
        blocking(move || {
            let mut file = None;
            for step in replace_steps() {
                match step {
                    ReplaceStep::WriteTmp => {
                        let mut created = File::create(&tmp)?;
                        created.write_all(&data)?;
                        file = Some(created);
                    }
                    ReplaceStep::SyncTmp => file.take().expect("written first").sync_all()?,
                    ReplaceStep::Rename => fs::rename(&tmp, &full)?,
                    ReplaceStep::SyncDir => sync_dir(&dir)?,
                }
            }
            Ok(())
        })
        .await
    }

    async fn sync_dir(&self, dir: &str) -> io::Result<()> {
        let dir = self.path(dir);
        blocking(move || sync_dir(&dir)).await
    }

    async fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        let full = self.path(dir);
        blocking(move || {
            let entries = match fs::read_dir(full) {
                Ok(entries) => entries,
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(e),
            };
            let mut names = Vec::new();
            for entry in entries {
                names.push(entry?.file_name().to_string_lossy().into_owned());
            }
            names.sort();
            Ok(names)
        })
        .await
    }

    async fn remove_file(&self, path: &str) -> io::Result<()> {
        let full = self.path(path);
        let dir = self.path(parent(path));
        blocking(move || match fs::remove_file(full) {
            Ok(()) => sync_dir(&dir),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        })
        .await
    }

    async fn remove_dir_all(&self, path: &str) -> io::Result<()> {
        let full = self.path(path);
        let dir = self.path(parent(path));
        blocking(move || match fs::remove_dir_all(full) {
            Ok(()) => sync_dir(&dir),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        })
        .await
    }
}

/// This machine's name, for temporary file names: `HOSTNAME` (a Kubernetes pod's name), else
/// /etc/hostname, else "host".
fn host_name() -> String {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        let name = std::env::var("HOSTNAME").ok().or_else(|| fs::read_to_string("/etc/hostname").ok());
        let name = name.map(|n| n.trim().replace(['/', '\\'], "_")).filter(|n| !n.is_empty());
        name.unwrap_or_else(|| "host".into())
    })
    .clone()
}
