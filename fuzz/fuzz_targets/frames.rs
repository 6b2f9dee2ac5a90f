#![no_main]
//! Request framing: size prefixes, bounds, short reads.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kaas_net::fuzz::frames(data));
