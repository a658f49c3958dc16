//! The job search's case folding, one rule on both databases ("über" finds "Über").
//!
//! A text is folded by Unicode's default lowercase mapping, no language's own rules (what Rust's
//! `str::to_lowercase` and ICU's root locale do: full mappings, so "İ" becomes "i" followed by
//! U+0307, the combining dot), and then two letters are taken as Unicode's case folding takes
//! them: "ß" as "ss" (so "STRASSE", "strasse" and "Straße" find each other, and the capital "ẞ",
//! lowered to "ß", with them) and the final sigma "ς" as "σ" (so "σ" finds "ΟΔΟΣ", whose last
//! letter lowers to "ς"). What this decides, and the tests pin on both databases:
//! - Turkish's dotless "ı" and dotted "İ" are not tailored: "I" folds to "i", never "ı", so "ı"
//!   finds only "ı"; "İstanbul" folds to "i̇stanbul" (a dot between "i" and "s"), so "istanbul"
//!   does not find it, while "i" and "İstanbul" do.
//! - Scripts without case (CJK, Arabic, Hebrew, Devanagari...) are compared as they are.
//!
//! SQLite has no Unicode lowercase of its own (its `lower()` and `LIKE` fold ASCII only), so the
//! store registers `nevermiss_fold`, this module's `fold`, on each of its connections.
//! PostgreSQL's `lower()` follows the collation's locale (the database's default: under `C` it
//! folds ASCII only, under `C.UTF-8` one character to one), so the store names ICU's root
//! collation (`und-x-icu`: PostgreSQL built with ICU, as Debian's, Red Hat's and the official
//! images are), whose `lower()` is Unicode's full mapping, as Rust's.

/// The folded text: lowercased by Unicode's default rules, "ß" as "ss", "ς" as "σ".
pub fn fold(text: &str) -> String {
    let lower = text.to_lowercase();
    if lower.contains(['ß', 'ς']) {
        lower.replace('ß', "ss").replace('ς', "σ")
    } else {
        lower
    }
}

/// The same fold of a column, in PostgreSQL's SQL.
macro_rules! postgres_fold {
    ($column:literal) => {
        concat!("translate(replace(lower(", $column, " COLLATE \"und-x-icu\"), 'ß', 'ss'), 'ς', 'σ')")
    };
}
pub(crate) use postgres_fold;

/// The name SQLite's connections know `fold` by.
pub const SQLITE_FUNCTION: &str = "nevermiss_fold";

/// Registers `nevermiss_fold(text)` on a SQLite connection (NULL stays NULL), and the search
/// index's `nevermiss_short_grams` (`search_index::register`), which the schema calls as well.
pub fn register(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    use rusqlite::functions::FunctionFlags;
    super::search_index::register(conn)?;
    conn.create_scalar_function(
        SQLITE_FUNCTION,
        1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC | FunctionFlags::SQLITE_INNOCUOUS,
        |ctx| {
            let text: Option<String> = ctx.get(0)?;
            Ok(text.map(|t| fold(&t)))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::fold;

    #[test]
    fn folds_by_unicode_rules_with_the_two_folding_letters() {
        assert_eq!(fold("Über"), "über");
        assert_eq!(fold("STRASSE"), fold("Straße"));
        assert_eq!(fold("ẞ"), "ss");
        assert_eq!(fold("ΟΔΟΣ"), "οδοσ");
        assert_eq!(fold("Σ"), "σ");
        assert_eq!(fold("İ"), "i\u{307}");
        assert_eq!(fold("I"), "i");
        assert_eq!(fold("ı"), "ı");
        assert_eq!(fold("ПРИВЕТ"), "привет");
        assert_eq!(fold("日本語"), "日本語");
        assert_eq!(fold("ǅ"), "ǆ");
    }

    #[test]
    fn sqlite_runs_the_same_fold() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        super::register(&conn).unwrap();
        let folded: String = conn.query_row("SELECT nevermiss_fold('ÜBER İ ΟΔΟΣ Straße')", [], |r| r.get(0)).unwrap();
        assert_eq!(folded, fold("ÜBER İ ΟΔΟΣ Straße"));
        let null: Option<String> = conn.query_row("SELECT nevermiss_fold(NULL)", [], |r| r.get(0)).unwrap();
        assert_eq!(null, None);
    }
}
