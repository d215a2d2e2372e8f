//! Every committed fuzz corpus file, replayed through its target's own
//! checks on stable Rust: a regression of anything a fuzzer once found (or
//! once covered) fails `cargo test`.
//!
//! A crash a fuzzer finds is fixed and its input committed under
//! `fuzz/corpus/TARGET/` (`scripts/fuzz.sh` copies `fuzz/artifacts/` there),
//! so it is replayed here from then on.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use groupwire_fuzz_targets::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The file stems in `dir` with extension `ext`, sorted.
fn stems(dir: &Path, ext: &str) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .map(|p| p.file_stem().expect("stem").to_string_lossy().into_owned())
        .collect()
}

#[test]
fn every_corpus_file_passes_its_targets_checks() {
    let mut total = 0;
    for t in TARGETS {
        let dir = fuzz_dir().join("corpus").join(t.name);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("corpus of {} at {}: {e}", t.name, dir.display()))
            .map(|e| e.expect("dir entry").path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{} has an empty corpus", t.name);
        for f in &files {
            let data = std::fs::read(f).expect("corpus file");
            let run = std::panic::catch_unwind(|| (t.check)(&data));
            assert!(run.is_ok(), "{} fails on {}", t.name, f.display());
        }
        eprintln!("{:>16}: {} inputs", t.name, files.len());
        total += files.len();
    }
    assert!(total > 0);
}

#[test]
fn every_target_has_a_fuzz_binary_a_cargo_entry_and_a_corpus() {
    let listed: BTreeSet<String> = TARGETS.iter().map(|t| t.name.to_owned()).collect();
    let binaries = stems(&fuzz_dir().join("fuzz_targets"), "rs");
    assert_eq!(binaries, listed, "fuzz/fuzz_targets/*.rs against TARGETS");
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("manifest");
    for name in &listed {
        assert!(
            manifest.contains(&format!("name = \"{name}\"")),
            "fuzz/Cargo.toml has no [[bin]] {name}"
        );
        let body = std::fs::read_to_string(fuzz_dir().join(format!("fuzz_targets/{name}.rs")))
            .expect("target source");
        assert!(
            body.contains(&format!("groupwire_fuzz_targets::{name}")),
            "fuzz_targets/{name}.rs does not call groupwire_fuzz_targets::{name}"
        );
    }
    let corpora: BTreeSet<String> = std::fs::read_dir(fuzz_dir().join("corpus"))
        .expect("corpus dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(corpora, listed, "fuzz/corpus/* against TARGETS");
}
