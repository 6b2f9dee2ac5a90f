//! One contract, two volumes: every assertion here runs against the real volume (std::fs on a
//! scratch directory) and against `SimVolume`, so the simulated volume answers as the real one
//! does when nothing fails (STYLE habit 7). What only the simulator can do (crash, tear, fail
//! an fsync) is in tests/volume.rs.

use std::io::ErrorKind;

use bytes::Bytes;
use kaas_core::env::real::{RealRng, RealVolume};
use kaas_core::env::{Rng, Volume, VolumeFile};
use kaas_sim::volume::SimVolume;

async fn contract<V: Volume>(v: V) {
    // Files live in directories that exist.
    assert_eq!(v.open("a/b/f.log").await.err().map(|e| e.kind()), Some(ErrorKind::NotFound));
    assert_eq!(v.read("a/b/f.log").await.unwrap(), None, "a missing file reads as none");
    assert!(v.list("a").await.unwrap().is_empty(), "a missing directory lists empty");
    v.create_dir_all("a/b").await.unwrap();
    v.create_dir_all("a/b").await.unwrap();
    assert_eq!(v.list("a").await.unwrap(), vec!["b".to_string()]);

    // Appends go at the end, and read back whole or in part.
    let f = v.open("a/b/f.log").await.unwrap();
    assert!(f.is_empty());
    assert_eq!(f.append(Bytes::from_static(b"hello ")).await.unwrap(), 0);
    assert_eq!(f.append(Bytes::from_static(b"world")).await.unwrap(), 6);
    assert_eq!(f.len(), 11);
    f.sync().await.unwrap();
    assert_eq!(&f.read_at(6, 100).await.unwrap()[..], b"world", "short only at the end");
    assert!(f.read_at(50, 10).await.unwrap().is_empty());
    assert_eq!(&v.read("a/b/f.log").await.unwrap().unwrap()[..], b"hello world");
    let again = v.open("a/b/f.log").await.unwrap();
    assert_eq!(again.len(), 11, "opening again keeps what is there");
    f.truncate(5).await.unwrap();
    assert_eq!(&v.read("a/b/f.log").await.unwrap().unwrap()[..], b"hello");

    // create makes a file empty, whatever was there.
    let c = v.create("a/b/f.log").await.unwrap();
    assert!(c.is_empty());
    assert_eq!(&v.read("a/b/f.log").await.unwrap().unwrap()[..], b"");

    // The atomic replace leaves the new content and no temporary file.
    v.write_atomic("a/state.json", Bytes::from_static(b"{\"v\":1}")).await.unwrap();
    v.write_atomic("a/state.json", Bytes::from_static(b"{\"v\":2}")).await.unwrap();
    assert_eq!(&v.read("a/state.json").await.unwrap().unwrap()[..], b"{\"v\":2}");
    assert_eq!(v.list("a").await.unwrap(), vec!["b".to_string(), "state.json".to_string()]);

    // Renames replace their target; a missing source is an error.
    v.write_atomic("a/other.json", Bytes::from_static(b"other")).await.unwrap();
    v.rename("a/other.json", "a/state.json").await.unwrap();
    v.sync_dir("a").await.unwrap();
    assert_eq!(&v.read("a/state.json").await.unwrap().unwrap()[..], b"other");
    assert_eq!(v.read("a/other.json").await.unwrap(), None);
    assert_eq!(v.rename("a/none", "a/x").await.err().map(|e| e.kind()), Some(ErrorKind::NotFound));

    // Removal: absent is fine; a directory goes with everything in it.
    v.remove_file("a/state.json").await.unwrap();
    v.remove_file("a/state.json").await.unwrap();
    assert_eq!(v.read("a/state.json").await.unwrap(), None);
    v.remove_dir_all("a/b").await.unwrap();
    v.remove_dir_all("a/b").await.unwrap();
    assert!(v.list("a").await.unwrap().is_empty());
    assert_eq!(v.read("a/b/f.log").await.unwrap(), None);
}

/// Two brokers replacing one file at the same moment (the broker configs, a topic's file):
/// both replaces succeed and the file holds one of them whole. With one temporary name for
/// every writer, one broker's rename carried off the other's file and the other's failed.
async fn two_writers<V: Volume>(a: V, b: V) {
    a.create_dir_all("shared").await.unwrap();
    for i in 0..20 {
        let (x, y) = (Bytes::from(format!("a{i}")), Bytes::from(format!("b{i}")));
        let (ra, rb) =
            tokio::join!(a.write_atomic("shared/f.json", x.clone()), b.write_atomic("shared/f.json", y.clone()));
        ra.unwrap();
        rb.unwrap();
        let now = a.read("shared/f.json").await.unwrap().unwrap();
        assert!(now == x || now == y, "{now:?}");
    }
    assert_eq!(a.list("shared").await.unwrap(), vec!["f.json".to_string()], "no temporary file left");
}

#[tokio::test]
async fn the_real_volume_keeps_the_contract() {
    let dir = std::env::temp_dir().join(format!("kaas-contract-{:x}", RealRng::default().next_u64()));
    std::fs::create_dir_all(&dir).unwrap();
    contract(RealVolume::new(&dir)).await;
    two_writers(RealVolume::new(&dir), RealVolume::new(&dir)).await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn the_simulated_volume_keeps_the_contract() {
    contract(SimVolume::default().for_host("h")).await;
    contract(SimVolume::default().for_host("h").under("data")).await;
    let shared = SimVolume::default();
    two_writers(shared.for_host("h1"), shared.for_host("h2")).await;
}
