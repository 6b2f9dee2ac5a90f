//! Lower-case hex, for bytes that go into file names and JSON state files (group ids, member
//! metadata, topic ids).

pub fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of `s`, or `None` if it is not whole hex pairs (never a panic: `s` may be any name
/// found on the volume).
pub fn decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_is_not_hex() {
        assert_eq!(encode(b"g\x00\xff"), "6700ff");
        assert_eq!(decode("67000ff").as_deref(), None, "odd length");
        assert_eq!(decode("67000f").as_deref(), Some(&b"g\x00\x0f"[..]));
        assert_eq!(decode("zz"), None);
        assert_eq!(decode("é1"), None, "not on a char boundary: refused, not a panic");
        assert_eq!(decode("+1"), None, "from_str_radix takes a sign; a name must not");
    }
}
