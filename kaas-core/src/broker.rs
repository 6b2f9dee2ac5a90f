//! The broker: the env, the configuration and the handles of the actors that own its state.
//! Connections hold a clone and route each request to the owning actor.

use std::sync::Arc;

use crate::config::BrokerConfig;
use crate::env::Env;
use crate::error::CoreResult;
use crate::group::{self, GroupsHandle};
use crate::topics::{self, TopicsHandle};

#[derive(Clone)]
pub struct Broker<E: Env> {
    pub env: E,
    pub config: Arc<BrokerConfig>,
    pub topics: TopicsHandle,
    pub groups: GroupsHandle,
}

impl<E: Env> Broker<E> {
    /// Recovers every partition and the committed offsets from the volume and starts the actors.
    pub async fn start(env: E, config: BrokerConfig) -> CoreResult<Self> {
        let config = Arc::new(config);
        let topics = topics::start(&env, config.clone()).await?;
        let groups = group::start(&env, config.clone()).await?;
        Ok(Broker { env, config, topics, groups })
    }

    /// Flushes and closes every partition log.
    pub async fn shutdown(&self) {
        self.topics.shutdown().await;
    }
}
