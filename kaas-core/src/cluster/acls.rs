//! ACL bindings as the volume keeps them: one file per binding, `__cluster/acls/<key>.json`,
//! named by a hash of the binding, so that creating one is writing its file (twice is once) and
//! deleting one is removing it: two brokers changing ACLs at once never lose each other's
//! change, as they would rewriting one shared file. A binding's file never changes, so a broker
//! reads each name once. A file that cannot be read, is of an unknown version, or holds a
//! binding other than its name says is reported and makes the whole set unreadable: the
//! authorizer then fails closed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::acl::AclBinding;
use crate::env::{Volume, join};
use crate::error::{CoreError, CoreResult};

pub const ACLS_DIR: &str = "__cluster/acls";
pub const FORMAT_VERSION: u32 = 1;
/// Bindings at most: a bound on memory and on a broker's reads.
pub const ACLS_MAX: usize = 100_000;

#[derive(Serialize, Deserialize)]
struct AclFile {
    format_version: u32,
    binding: AclBinding,
}

/// The file name of a binding: the hash of its canonical form.
pub fn file_name(binding: &AclBinding) -> String {
    let canonical = serde_json::to_vec(binding).expect("serialisable");
    format!("{}.json", crate::hex::encode(&Sha256::digest(&canonical)[..16]))
}

/// Writes a binding's file (again, harmlessly, if it is there).
pub async fn create<V: Volume>(volume: &V, binding: &AclBinding) -> CoreResult<()> {
    let path = join(ACLS_DIR, &file_name(binding));
    let storage = |e: std::io::Error| CoreError::Storage(format!("{path}: {e}"));
    volume.create_dir_all(ACLS_DIR).await.map_err(storage)?;
    let file = AclFile { format_version: FORMAT_VERSION, binding: binding.clone() };
    let data = bytes::Bytes::from(serde_json::to_vec(&file).expect("serialisable"));
    volume.write_atomic(&path, data).await.map_err(storage)
}

/// Removes a binding's file; one already gone is no error.
pub async fn delete<V: Volume>(volume: &V, binding: &AclBinding) -> CoreResult<()> {
    let path = join(ACLS_DIR, &file_name(binding));
    match volume.remove_file(&path).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(CoreError::Storage(format!("{path}: {e}"))),
    }
}

/// One binding file's content, checked against its name.
fn decode(name: &str, raw: &[u8]) -> Result<AclBinding, String> {
    let file: AclFile = serde_json::from_slice(raw).map_err(|e| format!("unreadable: {e}"))?;
    if file.format_version != FORMAT_VERSION {
        return Err(format!("unknown format version {}", file.format_version));
    }
    if file_name(&file.binding) != name {
        return Err("holds a binding other than its name says".into());
    }
    Ok(file.binding)
}

/// The bindings as a broker last read them, by file name, and what could not be read.
#[derive(Debug, Clone, Default)]
pub struct AclFiles {
    pub read: BTreeMap<String, AclBinding>,
    pub unreadable: BTreeMap<String, String>,
}

impl AclFiles {
    /// Brings the set up to what the volume lists now, reading only names not read before
    /// (and those that failed before). Whether anything changed.
    pub async fn rescan<V: Volume>(&mut self, volume: &V) -> CoreResult<bool> {
        let mut names = match volume.list(ACLS_DIR).await {
            Ok(names) => names,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(CoreError::Storage(format!("{ACLS_DIR}: {e}"))),
        };
        names.retain(|n| n.ends_with(".json"));
        names.sort();
        let unreadable_before = self.unreadable.clone();
        let listed: std::collections::BTreeSet<&String> = names.iter().collect();
        let gone = self.read.keys().filter(|n| !listed.contains(n)).count();
        self.read.retain(|n, _| listed.contains(n));
        self.unreadable.retain(|n, _| listed.contains(n));
        let mut added = 0;
        let new: Vec<&String> = names.iter().filter(|n| !self.read.contains_key(*n)).collect();
        for name in new {
            if self.read.len() >= ACLS_MAX {
                self.unreadable.insert(name.clone(), format!("more than {ACLS_MAX} bindings"));
                continue;
            }
            let path = join(ACLS_DIR, name);
            let outcome = match volume.read(&path).await {
                // Deleted between the listing and the read.
                Ok(None) => continue,
                Ok(Some(raw)) => decode(name, &raw),
                Err(e) => Err(e.to_string()),
            };
            match outcome {
                Ok(binding) => {
                    self.unreadable.remove(name);
                    self.read.insert(name.clone(), binding);
                    added += 1;
                }
                Err(why) => {
                    if self.unreadable.get(name) != Some(&why) {
                        tracing::error!(file = %path, error = %why, "unreadable ACL file: only super users are authorized");
                    }
                    self.unreadable.insert(name.clone(), why);
                }
            }
        }
        Ok(gone > 0 || added > 0 || unreadable_before != self.unreadable)
    }

    /// What the authorizer decides by.
    pub fn acl_set(&self) -> crate::acl::authorizer::AclSet {
        crate::acl::authorizer::AclSet {
            bindings: self.read.values().cloned().collect(),
            unreadable: self.unreadable.iter().next().map(|(name, why)| format!("{ACLS_DIR}/{name}: {why}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::{Operation, PatternType, Permission, ResourceType};
    use crate::env::Rng;
    use crate::env::real::{RealRng, RealVolume};

    fn binding(name: &str) -> AclBinding {
        AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: name.into(),
            pattern_type: PatternType::Literal,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: Operation::Read,
            permission: Permission::Allow,
        }
    }

    #[tokio::test]
    async fn bindings_round_trip_and_a_bad_file_makes_the_set_unreadable() {
        let dir = std::env::temp_dir().join(format!("kaas-acls-{:x}", RealRng::default().next_u64()));
        let volume = &RealVolume::new(dir);
        {
            let mut files = AclFiles::default();
            assert!(!files.rescan(volume).await.unwrap(), "no directory: nothing");
            create(volume, &binding("a")).await.unwrap();
            create(volume, &binding("a")).await.unwrap();
            create(volume, &binding("b")).await.unwrap();
            assert!(files.rescan(volume).await.unwrap());
            assert_eq!(files.acl_set().bindings.len(), 2, "the same binding twice is one");
            assert!(!files.rescan(volume).await.unwrap(), "nothing new");
            delete(volume, &binding("a")).await.unwrap();
            delete(volume, &binding("a")).await.unwrap();
            assert!(files.rescan(volume).await.unwrap());
            assert_eq!(files.acl_set().bindings.into_iter().map(|b| b.resource_name).collect::<Vec<_>>(), ["b"]);

            // A torn file, and one of a newer version: reported, and the set fails closed.
            let torn = join(ACLS_DIR, &file_name(&binding("c")));
            volume.write_atomic(&torn, bytes::Bytes::from_static(b"{\"format_version\":1,\"bin")).await.unwrap();
            assert!(files.rescan(volume).await.unwrap());
            assert!(files.acl_set().unreadable.is_some());
            volume.remove_file(&torn).await.unwrap();
            assert!(files.rescan(volume).await.unwrap());
            assert!(files.acl_set().unreadable.is_none(), "gone, and the set reads again");
            let newer = serde_json::json!({"format_version": 2, "binding": binding("d")});
            let path = join(ACLS_DIR, &file_name(&binding("d")));
            volume.write_atomic(&path, bytes::Bytes::from(newer.to_string())).await.unwrap();
            files.rescan(volume).await.unwrap();
            assert!(files.acl_set().unreadable.unwrap().contains("unknown format version 2"));
            // A file whose content is another binding than its name says.
            volume.remove_file(&path).await.unwrap();
            let other = serde_json::json!({"format_version": 1, "binding": binding("e")});
            volume.write_atomic(&path, bytes::Bytes::from(other.to_string())).await.unwrap();
            files.rescan(volume).await.unwrap();
            assert!(files.acl_set().unreadable.unwrap().contains("other than its name"));
        }
    }
}
