//! The `kaas` these tests run is the one a user builds: the simulator's hooks (mutants, BUGGIFY,
//! crash points) are not in it. Run the tests per package (`ci/test.sh`): a `--workspace`
//! build unifies features and switches kaas-core's `sim` feature on for every crate.

#[test]
fn the_binary_carries_no_simulation_hooks() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kaas")).arg("--version").output().expect("run kaas");
    let version = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(version.starts_with("kaas "), "{version}");
    assert!(
        !version.contains("simulator"),
        "the tested kaas carries the simulator's hooks (a --workspace build?): {version}"
    );
}
