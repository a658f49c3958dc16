//! Where in a recipe's text a refusal points: the line and column of a TOML error (from its span),
//! and of a key named by its dotted path (`poll.headers.Authorization`), so that every refusal
//! reads `file:line:column: key: problem`, as a compiler's would.

use super::RecipeError;

/// The 1-based line and column of a byte offset.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The table a byte offset is in (`read`, `poll.headers`), from the last `[header]` above it;
/// empty at the top level.
fn table_at(text: &str, offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    before
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('[') && !l.starts_with("[["))
        .map(|l| l.trim_start_matches('[').split(']').next().unwrap_or("").trim().to_owned())
        .unwrap_or_default()
}

/// A TOML error as a refusal: its place from the parser's span; an unknown or missing field
/// named with the table it is in (`read.colour`); a syntax error with no key.
pub(super) fn toml_error(file: &str, text: &str, e: &toml::de::Error) -> RecipeError {
    let message = e.message().replace('\n', " ");
    let start = e.span().map(|s| s.start);
    let at = start.map(|s| line_and_column(text, s));
    // serde names the field in backquotes: `unknown field `colour``, `missing field `url``.
    let field =
        message.strip_prefix("unknown field `").or_else(|| message.strip_prefix("missing field `")).and_then(|rest| rest.split('`').next());
    let key = match (field, start) {
        (Some(field), Some(start)) if message.starts_with("unknown") => dotted(&table_at(text, start), field),
        // A missing field's span is its table: the field belongs inside it.
        (Some(field), Some(start)) => dotted(&table_at(text, start + 1), field),
        (Some(field), None) => field.to_owned(),
        (None, _) => String::new(),
    };
    RecipeError { file: file.to_owned(), at, key, problem: message }
}

fn dotted(table: &str, field: &str) -> String {
    if table.is_empty() {
        field.to_owned()
    } else {
        format!("{table}.{field}")
    }
}

/// Where a key named by its dotted path is written: the line that sets its last part inside the
/// table its other parts name (`[poll]` then `url = ...`, or `headers = { Authorization = ...}`
/// inside `[poll]`), or the table's own header. `None` when it is not written (a missing key).
pub(super) fn of_key(text: &str, key: &str) -> Option<(usize, usize)> {
    let parts: Vec<&str> = key.split('.').collect();
    let (last, tables) = parts.split_last()?;
    let mut offset = 0;
    let mut table = String::new();
    let mut header_at = None;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        let indent = line.len() - line.trim_start().len();
        if trimmed.starts_with('[') {
            table = trimmed.trim_start_matches('[').split(']').next().unwrap_or("").trim().to_owned();
            if table == key {
                header_at = Some(offset + indent);
            }
        } else if let Some((name, _)) = trimmed.split_once('=') {
            let name = name.trim().trim_matches('"');
            let in_table = tables.join(".");
            // `key = ...` in its own table, or a table's name set inline in the one above it.
            let direct = table == in_table && name == *last;
            let inline = !tables.is_empty()
                && table == tables[..tables.len() - 1].join(".")
                && name == *tables.last().unwrap()
                && trimmed.contains(&format!("{last} ="));
            if direct {
                return Some(line_and_column(text, offset + indent));
            }
            if inline {
                let column = line.find(&format!("{last} =")).unwrap_or(indent);
                return Some(line_and_column(text, offset + column));
            }
        }
        offset += line.len();
    }
    header_at.map(|at| line_and_column(text, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str =
        "name = \"a\"\n\n[poll]\nurl = \"x\"\nheaders = { Authorization = \"Bearer {api_key}\" }\n\n[read]\nstate = \".status\"\n";

    #[test]
    fn a_key_is_found_in_its_table_or_inline_and_a_table_at_its_header() {
        assert_eq!(of_key(TEXT, "name"), Some((1, 1)));
        assert_eq!(of_key(TEXT, "poll.url"), Some((4, 1)));
        assert_eq!(of_key(TEXT, "poll.headers.Authorization"), Some((5, 13)));
        assert_eq!(of_key(TEXT, "read.state"), Some((8, 1)));
        assert_eq!(of_key(TEXT, "read"), Some((7, 1)));
        assert_eq!(of_key(TEXT, "read.missing"), None);
        // `state` is written in [read], not at the top level.
        assert_eq!(of_key(TEXT, "state"), None);
    }

    #[test]
    fn lines_and_columns_count_from_one_in_characters() {
        assert_eq!(line_and_column("ab\ncé d", 7), (2, 4));
        assert_eq!(line_and_column("x", 0), (1, 1));
    }
}
