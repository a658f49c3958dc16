//! Prints the README's provider table (what each provider's states and events become), generated
//! from the same mapping tables the adapters use at run time and the conformance suite checks
//! against the providers' SDKs (`providers::vocabulary`). `--write` rewrites it in README.md.

fn main() {
    let table = nevermiss_engine::providers::vocabulary::markdown();
    if std::env::args().any(|a| a == "--write") {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
        let readme = std::fs::read_to_string(&path).expect("README.md");
        let rewritten = nevermiss_engine::providers::vocabulary::with_readme_section(&readme)
            .expect("README.md has no provider-table markers (see providers::vocabulary::README_BEGIN)");
        std::fs::write(&path, rewritten).expect("README.md written");
        eprintln!("rewrote the provider table in {}", path.display());
    } else {
        print!("{table}");
    }
}
