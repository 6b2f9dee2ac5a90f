//! The ACL bindings as this broker knows them: read again on every rescan (so a change made on
//! a peer is in force here within a heartbeat), changed by CreateAcls and DeleteAcls through
//! this actor, and published in the snapshot the handlers authorize by.

use std::sync::Arc;

use super::TopicManager;
use crate::acl::{AclBinding, AclFilter};
use crate::cluster::acls;
use crate::env::Env;
use crate::error::{CoreError, CoreResult};

impl<E: Env> TopicManager<E> {
    /// A peer's change, picked up on the rescan; whether anything changed. A listing that
    /// fails keeps what this broker has, logged.
    pub(super) async fn rescan_acls(&mut self) -> bool {
        match self.acl_files.rescan(self.env.volume()).await {
            Ok(true) => {
                self.acls = Arc::new(self.acl_files.acl_set());
                true
            }
            Ok(false) => false,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the ACLs");
                false
            }
        }
    }

    /// CreateAcls: each binding written, or why not. In force here at once, on peers within
    /// a heartbeat.
    pub(super) async fn create_acls(&mut self, bindings: Vec<AclBinding>) -> Vec<CoreResult<()>> {
        let mut results = Vec::with_capacity(bindings.len());
        for binding in bindings {
            results.push(match binding.invalid() {
                Some(why) => Err(CoreError::InvalidRequest(why)),
                None => acls::create(self.env.volume(), &binding).await,
            });
        }
        self.rescan_acls().await;
        self.publish();
        results
    }

    /// DeleteAcls: per filter, the bindings it deleted (those the volume has now that it
    /// selects), or why not.
    pub(super) async fn delete_acls(&mut self, filters: Vec<AclFilter>) -> Vec<CoreResult<Vec<AclBinding>>> {
        self.rescan_acls().await;
        let mut results = Vec::with_capacity(filters.len());
        for filter in filters {
            let selected: Vec<AclBinding> = self.acls.bindings.iter().filter(|b| filter.matches(b)).cloned().collect();
            let mut deleted = Vec::with_capacity(selected.len());
            let mut failed = None;
            for binding in selected {
                match acls::delete(self.env.volume(), &binding).await {
                    Ok(()) => deleted.push(binding),
                    Err(e) => failed = Some(e),
                }
            }
            results.push(match failed {
                Some(e) => Err(e),
                None => Ok(deleted),
            });
        }
        self.rescan_acls().await;
        self.publish();
        results
    }
}
