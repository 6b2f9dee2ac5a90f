//! The principal of a client that presented a certificate on an SSL listener, as Apache's
//! brokers name it: the certificate's subject as an RFC 2253 distinguished name (what Java's
//! `X500Principal.getName()` prints: the most specific name first, no spaces, specials escaped),
//! mapped by `ssl.principal.mapping.rules` (`DEFAULT`, or `RULE:pattern/replacement/[LU]`, the
//! first rule whose pattern matches the whole name wins; none: the client is refused).

use regex::Regex;
use x509_parser::prelude::{FromDer, X509Certificate};

#[derive(Debug, Clone)]
enum Rule {
    Default,
    Replace { pattern: Regex, replacement: String, case: Option<char> },
}

/// `ssl.principal.mapping.rules`, parsed.
#[derive(Debug, Clone)]
pub struct PrincipalRules(Vec<Rule>);

impl PrincipalRules {
    pub fn parse(text: &str) -> Result<PrincipalRules, String> {
        let bad = |why: &str| format!("ssl.principal.mapping.rules {text:?}: {why}");
        let mut rules = Vec::new();
        let mut rest = text.trim();
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("DEFAULT") {
                rules.push(Rule::Default);
                rest = after;
            } else if let Some(after) = rest.strip_prefix("RULE:") {
                // pattern/replacement/ with backslash escapes, then L, U or nothing.
                let mut parts = Vec::new();
                let mut part = String::new();
                let mut chars = after.char_indices();
                let mut end = None;
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => {
                            part.push(c);
                            if let Some((_, next)) = chars.next() {
                                part.push(next);
                            }
                        }
                        '/' => {
                            parts.push(std::mem::take(&mut part));
                            if parts.len() == 2 {
                                end = Some(i + 1);
                                break;
                            }
                        }
                        _ => part.push(c),
                    }
                }
                let end = end.ok_or_else(|| bad("a RULE is RULE:pattern/replacement/[LU]"))?;
                let mut after = &after[end..];
                let case = match after.chars().next() {
                    Some(c @ ('L' | 'U')) => {
                        after = &after[1..];
                        Some(c)
                    }
                    _ => None,
                };
                let pattern = Regex::new(&format!("^(?:{})$", parts[0])).map_err(|e| bad(&e.to_string()))?;
                rules.push(Rule::Replace { pattern, replacement: parts[1].replace("\\/", "/"), case });
                rest = after;
            } else {
                return Err(bad("each rule is DEFAULT or RULE:pattern/replacement/[LU]"));
            }
            rest = rest.trim_start();
            rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
        }
        if rules.is_empty() {
            return Err(bad("no rule"));
        }
        Ok(PrincipalRules(rules))
    }

    /// The principal's name for a distinguished name, if a rule applies.
    pub fn apply(&self, dn: &str) -> Option<String> {
        self.0.iter().find_map(|rule| match rule {
            Rule::Default => Some(dn.to_string()),
            Rule::Replace { pattern, replacement, case } => {
                let captures = pattern.captures(dn)?;
                let mut name = String::new();
                captures.expand(replacement, &mut name);
                Some(match case {
                    Some('L') => name.to_lowercase(),
                    Some('U') => name.to_uppercase(),
                    _ => name,
                })
            }
        })
    }
}

/// The subject of a DER certificate as RFC 2253 prints it.
pub fn subject_dn(der: &[u8]) -> Result<String, String> {
    let (_, cert) = X509Certificate::from_der(der).map_err(|e| format!("an unreadable certificate: {e}"))?;
    let mut rdns = Vec::new();
    for rdn in cert.subject().iter() {
        let attributes: Vec<String> = rdn
            .iter()
            .map(|a| {
                let oid = a.attr_type().to_id_string();
                let name = match oid.as_str() {
                    "2.5.4.3" => "CN",
                    "2.5.4.6" => "C",
                    "2.5.4.7" => "L",
                    "2.5.4.8" => "ST",
                    "2.5.4.9" => "STREET",
                    "2.5.4.10" => "O",
                    "2.5.4.11" => "OU",
                    "0.9.2342.19200300.100.1.25" => "DC",
                    "0.9.2342.19200300.100.1.1" => "UID",
                    _ => "",
                };
                match (name, a.as_str()) {
                    ("", _) | (_, Err(_)) => format!("{oid}=#{}", kaas_core::hex::encode(a.attr_value().data)),
                    (name, Ok(value)) => format!("{name}={}", escape(value)),
                }
            })
            .collect();
        rdns.push(attributes.join("+"));
    }
    rdns.reverse();
    Ok(rdns.join(","))
}

/// RFC 2253's escaping of an attribute value.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DN: &str = "CN=kaas-client,OU=ServiceUsers,O=kaas,C=NL";

    #[test]
    fn rules_map_as_apaches_do() {
        let default = PrincipalRules::parse("DEFAULT").unwrap();
        assert_eq!(default.apply(DN).as_deref(), Some(DN));
        let rules =
            PrincipalRules::parse("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, RULE:^CN=([^,]*),.*$/$1@other/U,DEFAULT")
                .unwrap();
        assert_eq!(rules.apply("CN=Kaas-Client,OU=ServiceUsers,O=kaas").as_deref(), Some("kaas-client"));
        assert_eq!(rules.apply("CN=bob,OU=People,O=kaas").as_deref(), Some("BOB@OTHER"));
        assert_eq!(rules.apply("O=only").as_deref(), Some("O=only"), "DEFAULT last");
        let strict = PrincipalRules::parse("RULE:^CN=([^,]*),O=kaas$/$1/").unwrap();
        assert_eq!(strict.apply("CN=a,O=kaas").as_deref(), Some("a"));
        assert_eq!(strict.apply("CN=a,O=kaas,C=NL"), None, "the pattern matches the whole name or not at all");
        let slash = PrincipalRules::parse(r"RULE:^CN=(.*)$/user\/$1/").unwrap();
        assert_eq!(slash.apply("CN=x").as_deref(), Some("user/x"));
        for bad in ["", "RULE:^CN=(.*)$", "RULE:(/x/", "SOMETHING"] {
            assert!(PrincipalRules::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn values_are_escaped_as_rfc_2253_says() {
        assert_eq!(escape("a,b+c"), r"a\,b\+c");
        assert_eq!(escape(" lead"), r"\ lead");
        assert_eq!(escape("#x"), r"\#x");
        assert_eq!(escape("trail "), r"trail\ ");
        assert_eq!(escape("plain"), "plain");
    }
}
