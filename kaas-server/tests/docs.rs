//! Documentation generated from the code: each file must match what the code writes now.
//! `KAAS_WRITE_DOCS=1 cargo test -p kaas-server --test docs` rewrites them.

use std::path::Path;

fn check(relative: &str, want: String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(relative);
    if std::env::var_os("KAAS_WRITE_DOCS").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(have == want, "{relative} is stale: run KAAS_WRITE_DOCS=1 cargo test -p kaas-server --test docs");
}

#[test]
fn the_configuration_reference_is_current() {
    check("docs/configuration.md", kaas_core::config::settings::reference_markdown());
}

#[test]
fn the_api_table_is_current() {
    check("docs/api.md", kaas_net::api::reference::api_table_markdown());
}

#[test]
fn the_metrics_list_is_current() {
    check("docs/metrics.md", kaas_core::metrics::reference_markdown());
}
