//! Prints the provider table (what each provider's states and events become), generated from the
//! same mapping tables the adapters use at run time and the conformance suite checks against the
//! providers' SDKs (`providers::vocabulary`). `--write` rewrites the book's generated sections
//! instead (`docs/generated.rs`): each provider page's table, each shipped recipe's page and their
//! list in SUMMARY.md (`make book-pages` also rewrites the command line's and the admin API's).

#[path = "../docs/generated.rs"]
mod generated;

fn main() {
    if std::env::args().any(|a| a == "--write") {
        let root = generated::repo_root(env!("CARGO_MANIFEST_DIR"));
        let changed = generated::write(&generated::expected_files(&root));
        for path in &changed {
            eprintln!("rewrote {}", path.display());
        }
        eprintln!("{} file(s) of the book rewritten", changed.len());
    } else {
        print!("{}", nevermiss_engine::providers::vocabulary::markdown());
    }
}
