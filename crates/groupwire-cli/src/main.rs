//! The `groupwire` command (work in progress).
fn main() {}
