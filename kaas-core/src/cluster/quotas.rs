//! Client quotas as the volume keeps them: one file per entity, `__cluster/quotas/<key>.json`,
//! named by a hash of the entity and replaced whole, so that two brokers altering different
//! entities at once never lose each other's change. Every broker reads them all again on each
//! rescan (entities are few). A file that cannot be read, is of an unknown version, or holds an
//! entity other than its name says is reported and skipped: the quotas last read from it stand.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::env::{Volume, join};
use crate::error::{CoreError, CoreResult};
use crate::quota::{ClientQuotas, QuotaEntity, QuotaValues};

pub const QUOTAS_DIR: &str = "__cluster/quotas";
pub const FORMAT_VERSION: u32 = 1;
/// Entities with quotas, at most: a bound on memory and on each rescan's reads.
pub const ENTITIES_MAX: usize = 10_000;

#[derive(Serialize, Deserialize)]
struct QuotaFile {
    format_version: u32,
    entity: QuotaEntity,
    values: QuotaValues,
}

/// The file name of an entity: the hash of its canonical form.
pub fn file_name(entity: &QuotaEntity) -> String {
    let canonical = serde_json::to_vec(entity).expect("serialisable");
    format!("{}.json", crate::hex::encode(&Sha256::digest(&canonical)[..16]))
}

fn storage(path: &str) -> impl Fn(std::io::Error) -> CoreError + '_ {
    move |e| CoreError::Storage(format!("{path}: {e}"))
}

/// One entity's quotas as the volume holds them now (none: an empty set).
pub async fn read_entity<V: Volume>(volume: &V, entity: &QuotaEntity) -> CoreResult<QuotaValues> {
    let name = file_name(entity);
    let path = join(QUOTAS_DIR, &name);
    match volume.read(&path).await.map_err(storage(&path))? {
        None => Ok(QuotaValues::new()),
        Some(raw) => decode(&name, &raw).map(|(_, v)| v).map_err(|why| CoreError::Storage(format!("{path}: {why}"))),
    }
}

/// Replaces an entity's quotas; an empty set removes its file.
pub async fn write_entity<V: Volume>(volume: &V, entity: &QuotaEntity, values: &QuotaValues) -> CoreResult<()> {
    let path = join(QUOTAS_DIR, &file_name(entity));
    if values.is_empty() {
        return match volume.remove_file(&path).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(storage(&path)(e)),
            _ => Ok(()),
        };
    }
    volume.create_dir_all(QUOTAS_DIR).await.map_err(storage(&path))?;
    let file = QuotaFile { format_version: FORMAT_VERSION, entity: entity.clone(), values: values.clone() };
    let data = Bytes::from(serde_json::to_vec(&file).expect("serialisable"));
    volume.write_atomic(&path, data).await.map_err(storage(&path))
}

fn decode(name: &str, raw: &[u8]) -> Result<(QuotaEntity, QuotaValues), String> {
    let file: QuotaFile = serde_json::from_slice(raw).map_err(|e| format!("unreadable: {e}"))?;
    if file.format_version != FORMAT_VERSION {
        return Err(format!("unknown format version {}", file.format_version));
    }
    if file_name(&file.entity) != name {
        return Err("holds an entity other than its name says".into());
    }
    Ok((file.entity, file.values))
}

/// Every entity's quotas as the volume holds them now. A file that cannot be read keeps what
/// `last` had from it (logged, and counted in the second value).
pub async fn read_all<V: Volume>(volume: &V, last: &ClientQuotas) -> CoreResult<(ClientQuotas, usize)> {
    let mut names = match volume.list(QUOTAS_DIR).await {
        Ok(names) => names,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(CoreError::Storage(format!("{QUOTAS_DIR}: {e}"))),
    };
    names.retain(|n| n.ends_with(".json"));
    names.sort();
    names.truncate(ENTITIES_MAX);
    let previous: BTreeMap<String, &QuotaEntity> = last.entities.keys().map(|e| (file_name(e), e)).collect();
    let mut read = ClientQuotas::default();
    let mut unreadable = 0;
    for name in names {
        let path = join(QUOTAS_DIR, &name);
        let raw = match volume.read(&path).await {
            Ok(Some(raw)) => raw,
            Ok(None) => continue, // removed since listed
            Err(e) => {
                tracing::warn!(path, error = %e, "cannot read a quota file");
                Bytes::new() // decoded below as unreadable
            }
        };
        match decode(&name, &raw) {
            Ok((entity, values)) => {
                read.entities.insert(entity, values);
            }
            Err(why) => {
                tracing::error!(path, why, "a quota file is unreadable: the quotas last read from it stand");
                unreadable += 1;
                if let Some(entity) = previous.get(&name) {
                    read.entities.insert((*entity).clone(), last.entities[*entity].clone());
                }
            }
        }
    }
    Ok((read, unreadable))
}
