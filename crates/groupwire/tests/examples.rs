//! The examples run to completion and say what they promise. `cargo test`
//! builds them next to this test's binary (`target/<profile>/examples/`).

use std::path::PathBuf;
use std::process::Command;

fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let path = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: `cargo test -p groupwire` builds the examples",
        path.display()
    );
    path
}

fn run(name: &str) -> String {
    let out = Command::new(example(name))
        .output()
        .expect("the example runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn telepointer_shows_the_pointer() {
    let out = run("telepointer");
    assert!(out.contains("received"), "{out}");
    assert!(out.contains("of 150 positions"), "{out}");
}

#[test]
fn state_sync_converges() {
    let out = run("state_sync");
    assert!(
        out.contains("replica equals the owner's board: 16 shapes"),
        "{out}"
    );
}

#[test]
fn file_fetch_checks_the_hash() {
    let out = run("file_fetch");
    assert!(out.contains("fetched 8388608 bytes"), "{out}");
    assert!(out.contains("BLAKE3 checked"), "{out}");
}
