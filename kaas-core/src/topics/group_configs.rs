//! Group configs (IncrementalAlterConfigs on the GROUP resource), the topic manager's side: it
//! writes the cluster's file (`cluster::group_configs`), reads it again on every heartbeat like
//! the broker configs, and publishes it with the topics for whoever serves a group's members
//! or its share partitions.

use std::sync::Arc;

use bytes::Bytes;

use super::{ConfigOp, TopicManager, storage};
use crate::cluster::group_configs::{FORMAT_VERSION, GROUP_CONFIGS_FILE, GROUPS_MAX, GroupConfigsFile, read};
use crate::config::group;
use crate::env::{Env, Volume};
use crate::error::{CoreError, CoreResult};

impl<E: Env> TopicManager<E> {
    /// At start: a file that cannot be read stops the start.
    pub(super) async fn load_group_configs(&mut self) -> CoreResult<()> {
        self.group_configs = Arc::new(read(self.env.volume()).await?);
        Ok(())
    }

    /// A peer's change, picked up on the rescan; whether anything changed.
    pub(super) async fn rescan_group_configs(&mut self) -> bool {
        match read(self.env.volume()).await {
            Ok(groups) if groups != *self.group_configs => {
                self.group_configs = Arc::new(groups);
                true
            }
            Ok(_) => false,
            Err(e) => {
                // Never guessed at: the configs this broker has stand.
                tracing::warn!(error = %e, "cannot read the group configs");
                false
            }
        }
    }

    pub(super) async fn alter_group_configs(
        &mut self,
        group_id: &str,
        ops: Vec<ConfigOp>,
        validate_only: bool,
    ) -> CoreResult<()> {
        if group_id.is_empty() {
            return Err(CoreError::InvalidGroupId);
        }
        // Built on what the volume has now, not on what this broker saw a heartbeat ago.
        let mut groups = read(self.env.volume()).await?;
        let configs = groups.entry(group_id.to_string()).or_default();
        for op in ops {
            match op {
                ConfigOp::Set(name, value) => {
                    group::validate(&name, &value, &self.effective).map_err(CoreError::InvalidConfig)?;
                    configs.insert(name, value);
                }
                ConfigOp::Delete(name) => {
                    group::find(&name)
                        .ok_or_else(|| CoreError::InvalidConfig(format!("Unknown group config name: {name}")))?;
                    configs.remove(&name);
                }
            }
        }
        if configs.is_empty() {
            groups.remove(group_id);
        }
        if groups.len() > GROUPS_MAX {
            return Err(CoreError::InvalidConfig(format!("more than {GROUPS_MAX} groups with configs of their own")));
        }
        if validate_only {
            return Ok(());
        }
        let raw =
            serde_json::to_vec_pretty(&GroupConfigsFile { format_version: FORMAT_VERSION, groups: groups.clone() })
                .expect("serialisable");
        self.env.volume().write_atomic(GROUP_CONFIGS_FILE, Bytes::from(raw)).await.map_err(storage)?;
        self.group_configs = Arc::new(groups);
        self.publish();
        Ok(())
    }
}
