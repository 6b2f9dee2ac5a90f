//! Client quotas for the handlers: how long a client is throttled for what it sent, fetched or
//! kept the broker busy with (`quota::rate`, measured on this broker as Apache measures on
//! each of its own), and DescribeClientQuotas and AlterClientQuotas over the quotas on the
//! volume (`cluster::quotas`).

use std::sync::Mutex;

use super::Broker;
use crate::env::{Clock, Env};
use crate::error::CoreResult;
use crate::quota::rate::{QuotaRates, Window};
use crate::quota::{QuotaEntity, QuotaFilter, QuotaKey, QuotaOp, QuotaRefusal, QuotaValues};
use crate::topics::quotas::AlterOutcome;

/// The rates this broker measures, shared by its connections.
#[derive(Debug, Default)]
pub struct Rates(Mutex<QuotaRates>);

/// Who is measured: the principal's name (`alice` of `User:alice`) and the request's client id.
#[derive(Debug, Clone, Copy)]
pub struct QuotaClient<'a> {
    pub principal: &'a str,
    pub client_id: &'a str,
}

impl QuotaClient<'_> {
    fn user(&self) -> &str {
        self.principal.split_once(':').map_or(self.principal, |(_, name)| name)
    }
}

impl<E: Env> Broker<E> {
    fn quota_window(&self) -> Window {
        Window {
            samples: self.config.quota_window_num.max(1),
            size_ms: i64::from(self.config.quota_window_size_seconds.max(1)) * 1000,
        }
    }

    /// Records `value` against `client`'s quota of `key`; how long, in milliseconds, the
    /// client is throttled for it (0 without a quota).
    pub fn record_quota(&self, key: QuotaKey, client: QuotaClient, value: f64) -> u64 {
        let quotas = self.topics.snapshot().quotas.clone();
        if !quotas.any(key) {
            return 0;
        }
        let tags = quotas.tags(key, client.user(), client.client_id);
        let Some(bound) = quotas.limit(key, &tags) else {
            return 0;
        };
        let now_ms = self.env.clock().now_ms();
        let window = self.quota_window();
        let mut throttle = self.rates.0.lock().expect("rates lock").record(key, tags, bound, value, now_ms, window);
        if key == QuotaKey::RequestPercentage {
            // Apache bounds a request-time throttle by one window.
            throttle = throttle.min(window.size_ms as u64);
        }
        if throttle > 0 {
            self.metrics.throttled(key, throttle);
        }
        throttle
    }

    /// Takes back what `record_quota` recorded (a throttled fetch returns nothing).
    pub fn unrecord_quota(&self, key: QuotaKey, client: QuotaClient, value: f64) {
        let quotas = self.topics.snapshot().quotas.clone();
        let tags = quotas.tags(key, client.user(), client.client_id);
        let now_ms = self.env.clock().now_ms();
        self.rates.0.lock().expect("rates lock").unrecord(key, tags, value, now_ms, self.quota_window());
    }

    /// The most `client` may take of `key` in one go without being throttled for sure (Apache's
    /// `getMaxValueInQuotaWindow`): a fetch asks for no more.
    pub fn quota_window_max(&self, key: QuotaKey, client: QuotaClient) -> Option<f64> {
        let quotas = self.topics.snapshot().quotas.clone();
        if !quotas.any(key) {
            return None;
        }
        let bound = quotas.limit(key, &quotas.tags(key, client.user(), client.client_id))?;
        let window = self.quota_window();
        Some(bound * f64::from(window.samples - 1) * (window.size_ms as f64 / 1000.0))
    }

    /// DescribeClientQuotas, on the quotas this broker read last.
    pub fn describe_client_quotas(
        &self,
        filter: &QuotaFilter,
    ) -> Result<Vec<(QuotaEntity, QuotaValues)>, QuotaRefusal> {
        self.topics.snapshot().quotas.describe(filter)
    }

    /// AlterClientQuotas: per entity, in the order given, altered or why not.
    pub async fn alter_client_quotas(
        &self,
        alterations: Vec<(QuotaEntity, Vec<QuotaOp>)>,
        validate_only: bool,
    ) -> CoreResult<Vec<AlterOutcome>> {
        self.topics.alter_quotas(alterations, validate_only).await
    }
}
