#![no_main]
//! A request frame's header and body, by every API kaas serves, and a Produce's record batches.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kaas_net::fuzz::request(data));
