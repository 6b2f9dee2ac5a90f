//! Dynamic broker settings (IncrementalAlterConfigs on the broker resource): one file for the
//! whole cluster, `__cluster/broker-configs.json`, read again on every heartbeat, applied to
//! every partition.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::{ConfigOp, TopicManager, storage};
use crate::config::BrokerConfig;
use crate::env::{Env, Volume};
use crate::error::{CoreError, CoreResult};

pub const BROKER_CONFIGS_FILE: &str = "__cluster/broker-configs.json";
const BROKER_CONFIGS_FORMAT_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct BrokerConfigsFile {
    format_version: u32,
    configs: BTreeMap<String, String>,
}

impl<E: Env> TopicManager<E> {
    /// The dynamic broker settings as the volume holds them, at start: a file that cannot be
    /// read stops the start rather than run the broker on settings it was not given.
    pub(super) async fn load_broker_configs(&mut self) -> CoreResult<()> {
        let Some(raw) = self.env.volume().read(BROKER_CONFIGS_FILE).await.map_err(storage)? else { return Ok(()) };
        let file: BrokerConfigsFile = serde_json::from_slice(&raw)
            .map_err(|e| CoreError::Storage(format!("{BROKER_CONFIGS_FILE}: unreadable: {e}")))?;
        if file.format_version != BROKER_CONFIGS_FORMAT_VERSION {
            return Err(CoreError::Storage(format!(
                "{BROKER_CONFIGS_FILE}: unknown format version {}",
                file.format_version
            )));
        }
        self.effective = Arc::new(self.config.with_dynamic(&file.configs).map_err(CoreError::Storage)?);
        self.broker_overrides = file.configs;
        Ok(())
    }

    pub(super) async fn alter_broker_configs(&mut self, ops: Vec<ConfigOp>, validate_only: bool) -> CoreResult<()> {
        let mut overrides = self.broker_overrides.clone();
        for op in ops {
            match op {
                ConfigOp::Set(k, v) => overrides.insert(k, v),
                ConfigOp::Delete(k) => overrides.remove(&k),
            };
        }
        let effective = self.config.with_dynamic(&overrides).map_err(CoreError::InvalidConfig)?;
        if validate_only {
            return Ok(());
        }
        let file = BrokerConfigsFile { format_version: BROKER_CONFIGS_FORMAT_VERSION, configs: overrides.clone() };
        let raw = serde_json::to_vec_pretty(&file).expect("serialisable");
        self.env.volume().write_atomic(BROKER_CONFIGS_FILE, Bytes::from(raw)).await.map_err(storage)?;
        self.apply_broker_configs(overrides, effective).await;
        self.publish();
        Ok(())
    }

    /// Takes dynamic broker configs on, and hands every partition its new settings.
    pub(super) async fn apply_broker_configs(&mut self, overrides: BTreeMap<String, String>, effective: BrokerConfig) {
        self.broker_overrides = overrides;
        self.effective = Arc::new(effective);
        for t in self.topics.values() {
            let settings = self.effective.partition_settings(&t.meta.configs);
            for p in &t.partitions {
                p.set_config(settings).await;
            }
        }
    }

    /// A peer's AlterConfigs of the broker resource, picked up on the rescan; whether anything
    /// changed. The caller publishes, after the topics are read too.
    pub(super) async fn rescan_broker_configs(&mut self) -> bool {
        let read = match self.env.volume().read(BROKER_CONFIGS_FILE).await {
            Ok(read) => read,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the dynamic broker configs");
                return false;
            }
        };
        let overrides = match read.map(|raw| serde_json::from_slice::<BrokerConfigsFile>(&raw)) {
            None => BTreeMap::new(),
            Some(Ok(file)) if file.format_version == BROKER_CONFIGS_FORMAT_VERSION => file.configs,
            // Never guessed at: the configs this broker has stand.
            Some(_) => {
                tracing::warn!("{BROKER_CONFIGS_FILE}: unreadable or of an unknown format version");
                return false;
            }
        };
        if overrides == self.broker_overrides {
            return false;
        }
        match self.config.with_dynamic(&overrides) {
            Ok(effective) => {
                self.apply_broker_configs(overrides, effective).await;
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "a peer's dynamic broker configs do not apply here");
                false
            }
        }
    }
}
