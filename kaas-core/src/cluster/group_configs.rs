//! Group configs as the volume keeps them: one file for the whole cluster,
//! `__cluster/group-configs.json`, each group's configs by group id, replaced whole. The topic
//! manager writes it and publishes it; a share partition reads it afresh when it first starts,
//! so that a group's `share.auto.offset.reset` set a moment before holds on every broker.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::env::Volume;
use crate::error::{CoreError, CoreResult};

pub const GROUP_CONFIGS_FILE: &str = "__cluster/group-configs.json";
pub const FORMAT_VERSION: u32 = 1;
/// Groups with configs of their own, at most: a bound on the file and on memory.
pub const GROUPS_MAX: usize = 100_000;

/// Each group's configs, by group id.
pub type GroupConfigs = BTreeMap<String, BTreeMap<String, String>>;

#[derive(Serialize, Deserialize)]
pub struct GroupConfigsFile {
    pub format_version: u32,
    pub groups: GroupConfigs,
}

/// The group configs the volume holds now; an unreadable file is an error, never guessed at.
pub async fn read<V: Volume>(volume: &V) -> CoreResult<GroupConfigs> {
    let Some(raw) = volume.read(GROUP_CONFIGS_FILE).await.map_err(|e| CoreError::Storage(e.to_string()))? else {
        return Ok(GroupConfigs::new());
    };
    let file: GroupConfigsFile = serde_json::from_slice(&raw)
        .map_err(|e| CoreError::Storage(format!("{GROUP_CONFIGS_FILE}: unreadable: {e}")))?;
    if file.format_version != FORMAT_VERSION {
        return Err(CoreError::Storage(format!(
            "{GROUP_CONFIGS_FILE}: unknown format version {}",
            file.format_version
        )));
    }
    Ok(file.groups)
}
