//! The schema's migrations are embedded at compile time (`refinery::embed_migrations!`), which
//! cargo does not see: a new or changed migration file rebuilds the crate.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
