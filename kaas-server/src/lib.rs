//! The parts of the `kaas` binary that are worth reaching from outside it: the SASL listener's
//! mechanisms (rsasl's, with OAUTHBEARER's tokens checked by `oauth`) and the principal of a
//! client certificate, so that the fuzz targets (`fuzz/`) and the fuzz run of the test suite
//! drive the real ones.

pub mod oauth;
pub mod principal;
pub mod sasl;
