//! One expression of a recipe: jq, as developers already write it, compiled by jaq (a maintained
//! jq implementation in Rust) once when the recipe is loaded, and run on each answer.
//!
//! An expression reads an answer, it does not compute. Its input is bounded: at most `MAX_INPUT`
//! bytes and `MAX_DEPTH` levels deep (jaq reads, prints and drops values recursively). What could
//! loop without end, or reach past the answer, is refused when the recipe is loaded (`REFUSED`):
//! definitions and recursion (`def`, `recurse`, `..`, `repeat`, `range`, `until`, `while`), the
//! environment and the input stream (`env`, `$ENV`, `input`, `inputs`), `halt` (jaq's `halt` would
//! end the process), and the `*` operator (string repetition; times are read in seconds,
//! milliseconds or RFC 3339 without arithmetic: `recipe::time_ms`). Its output is bounded too:
//! at most `growth::MAX_SCALE` times its input, read from its syntax (`growth`). Only the first
//! output is taken.

use jaq_core::data::JustLut;
use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars};
pub use jaq_json::Val;

/// Longest expression accepted.
pub const MAX_EXPRESSION: usize = 1000;
/// Largest answer an expression reads.
pub const MAX_INPUT: usize = 1024 * 1024;
/// Deepest nesting of arrays and objects an answer may have (serde_json's own bound): jaq's
/// reader, its printer and its values' drop recurse once per level, so a deeper answer (a sender's
/// or a provider's) is refused before it is read, never left to overflow a worker's stack.
pub const MAX_DEPTH: usize = 128;

/// Names and symbols an expression may not use, with why (see the module's comment).
const REFUSED: &[(&str, &str)] = &[
    ("def", "definitions"),
    ("recurse", "recursion"),
    ("..", "recursion"),
    ("repeat", "an endless generator"),
    ("range", "a generator"),
    ("until", "a loop"),
    ("while", "a loop"),
    ("env", "the environment"),
    ("$ENV", "the environment"),
    ("input", "the input stream"),
    ("inputs", "the input stream"),
    ("halt", "ending the process"),
    ("halt_error", "ending the process"),
    ("debug", "writing to the log"),
    ("stderr", "writing to the log"),
    ("*", "repetition"),
];

type Program = jaq_core::compile::Filter<jaq_core::Native<JustLut<Val>>>;

/// A compiled expression, with its text.
#[derive(Clone)]
pub struct Expression {
    text: String,
    program: std::sync::Arc<Program>,
}

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Expression({:?})", self.text)
    }
}

/// What an expression gave on one answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Its first output (JSON `null` when it gave `null`).
    Value(serde_json::Value),
    /// It gave no output (`empty`, a `select` that did not hold): the field is absent.
    Nothing,
}

impl Expression {
    /// Compiles `text`, or says why it cannot be used, in one line.
    pub fn compile(text: &str) -> Result<Expression, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("is empty: write a jq expression such as .status".into());
        }
        if text.len() > MAX_EXPRESSION {
            return Err(format!("is over {MAX_EXPRESSION} characters"));
        }
        if let Some((name, why)) = refused_in(text) {
            return Err(format!("uses `{name}` ({why}), which a recipe's expression may not: it reads an answer, it does not compute"));
        }
        let parses = jaq_core::load::parse(text, |p| p.term()).is_some();
        if parses {
            super::growth::check(text)?;
        }
        let defs = jaq_core::defs().chain(jaq_std::defs()).chain(jaq_json::defs());
        let funs = jaq_core::funs().chain(jaq_std::funs()).chain(jaq_json::funs());
        let loader = Loader::new(defs);
        let arena = Arena::default();
        let modules = loader
            .load(&arena, File { code: text, path: () })
            .map_err(|errors| format!("does not parse as jq: {}", load_error(text, errors.first().map(|(_, e)| e))))?;
        let program = Compiler::default()
            .with_funs(funs)
            .compile(modules)
            .map_err(|errors| format!("does not compile as jq: {}", undefined(errors.iter().flat_map(|(_, e)| e.iter()))))?;
        Ok(Expression { text: text.to_owned(), program: std::sync::Arc::new(program) })
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// Runs on `answer` (the raw bytes of a JSON answer): its first output, or why it failed
    /// (an error the expression raised, an answer that is not JSON or is too large).
    pub fn run(&self, answer: &[u8]) -> Result<Output, String> {
        self.run_on(read_json(answer)?)
    }

    /// Runs on an answer read once by `read_json` (a `Val` clones cheaply: several expressions
    /// read one answer).
    pub fn run_on(&self, input: Val) -> Result<Output, String> {
        let ctx = Ctx::<JustLut<Val>>::new(&self.program.lut, Vars::new([]));
        let first = self.program.id.run((ctx, input)).next();
        match first {
            None => Ok(Output::Nothing),
            Some(Ok(value)) => {
                let text = value.to_string();
                serde_json::from_str(&text).map(Output::Value).map_err(|e| format!("`{}` gave a value that is not JSON ({e})", self.text))
            }
            Some(Err(exception)) => match exception.get_err() {
                Ok(error) => Err(format!("`{}` failed: {error}", self.text)),
                Err(_) => Err(format!("`{}` stopped", self.text)),
            },
        }
    }
}

/// An answer's raw bytes as the value expressions run on, or why it cannot be one (not JSON, over
/// `MAX_INPUT`, or nested deeper than `MAX_DEPTH`).
pub fn read_json(answer: &[u8]) -> Result<Val, String> {
    if answer.len() > MAX_INPUT {
        return Err(format!("the answer is over {} KiB", MAX_INPUT / 1024));
    }
    if !nesting_within(answer, MAX_DEPTH) {
        return Err(format!("the answer nests arrays or objects deeper than {MAX_DEPTH} levels"));
    }
    jaq_json::read::parse_single(answer).map_err(|e| format!("the answer is not JSON ({e:?})"))
}

/// Whether no array or object in `json` opens more than `max` levels deep, read in one pass
/// without recursion (brackets inside strings do not count). Not a validation: text that is not
/// JSON passes here and fails in the reader.
pub fn nesting_within(json: &[u8], max: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &byte in json {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return false;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    true
}

/// The first refused name or symbol `text` uses outside its string literals.
fn refused_in(text: &str) -> Option<(&'static str, &'static str)> {
    let code = outside_strings(text);
    REFUSED.iter().copied().find(|(name, _)| {
        if name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).any(|word| word == *name)
        } else if *name == "$ENV" {
            code.contains("$ENV")
        } else {
            code.contains(name)
        }
    })
}

/// `text` with the contents of its string literals blanked (so a literal "*" or "range" is fine).
fn outside_strings(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
                out.push('"');
                continue;
            }
            out.push(' ');
        } else {
            if c == '"' {
                in_string = true;
            }
            out.push(c);
        }
    }
    out
}

/// A jq syntax error in words: where in the expression (a character count from 1), what was
/// expected there and what was found.
fn load_error(text: &str, error: Option<&jaq_core::load::Error<&str>>) -> String {
    use jaq_core::load::Error;
    let (expected, rest) = match error {
        Some(Error::Lex(errors)) => match errors.first() {
            Some((expected, rest)) => (expected.as_str(), *rest),
            None => return "a token it cannot read".into(),
        },
        Some(Error::Parse(errors)) => match errors.first() {
            Some((expected, rest)) => (expected.as_str(), *rest),
            None => return "a term it cannot read".into(),
        },
        Some(Error::Io(_)) => return "it loads a module, which a recipe's expression may not".into(),
        None => return "no reason given".into(),
    };
    // The parser's slice of what remains: its start is where it stopped.
    let at = (rest.as_ptr() as usize).checked_sub(text.as_ptr() as usize).filter(|&o| o <= text.len()).unwrap_or(text.len());
    let found: String = text[at..].chars().take(16).collect();
    let found = if found.trim().is_empty() { "the end".to_owned() } else { format!("`{}`", found.trim_end()) };
    format!("at character {}: expected {expected}, found {found}", text[..at].chars().count() + 1)
}

/// The names a compile error is about, in one line: `unknown filter \`foo/1\``.
fn undefined<'a>(errors: impl Iterator<Item = &'a (&'a str, jaq_core::compile::Undefined)>) -> String {
    use jaq_core::compile::Undefined;
    let names: Vec<String> = errors
        .map(|(name, what)| match what {
            Undefined::Filter(arity) => format!("unknown filter `{name}/{arity}`"),
            Undefined::Var => format!("unknown variable `${}`", name.trim_start_matches('$')),
            other => format!("unknown {} `{name}`", other.as_str()),
        })
        .collect();
    if names.is_empty() {
        "no reason given".into()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_jq_syntax_error_says_where_and_what_was_expected() {
        let error = Expression::compile(".status |").unwrap_err();
        assert_eq!(error, "does not parse as jq: at character 10: expected term, found the end");
        let error = Expression::compile(".a | (.b").unwrap_err();
        assert!(error.starts_with("does not parse as jq: at character ") && error.contains("closing parenthesis"), "{error}");
    }

    fn run(expression: &str, answer: serde_json::Value) -> Result<Output, String> {
        Expression::compile(expression).unwrap().run(&serde_json::to_vec(&answer).unwrap())
    }

    #[test]
    fn an_expression_can_be_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<Expression>();
    }

    #[test]
    fn an_expression_reads_what_jq_reads() {
        let answer = json!({"status": "COMPLETED", "output": {"images": [{"url": "https://x/1.png"}]}, "error": null, "n": 3});
        assert_eq!(run(".status", answer.clone()), Ok(Output::Value(json!("COMPLETED"))));
        assert_eq!(run(".output.images[0].url", answer.clone()), Ok(Output::Value(json!("https://x/1.png"))));
        assert_eq!(run(".error // \"none\"", answer.clone()), Ok(Output::Value(json!("none"))));
        assert_eq!(run(".error // empty", answer.clone()), Ok(Output::Nothing));
        assert_eq!(run("if .n > 2 then \"big\" else \"small\" end", answer.clone()), Ok(Output::Value(json!("big"))));
        assert_eq!(run("[.output.images[].url]", answer.clone()), Ok(Output::Value(json!(["https://x/1.png"]))));
        assert_eq!(run(".missing.deeper", answer.clone()), Ok(Output::Value(json!(null))));
        assert_eq!(run("\"a*b \" + .status", answer.clone()), Ok(Output::Value(json!("a*b COMPLETED"))), "a literal * is text");
        // An expression that fails on a real answer says so; it is never a value.
        assert!(run(".status | tonumber", answer.clone()).is_err());
        assert!(Expression::compile(".status").unwrap().run(b"not json").is_err());
    }

    #[test]
    fn an_answer_nested_past_the_bound_is_refused_before_it_is_read() {
        let nested = |levels: usize| format!("{}1{}", "[".repeat(levels), "]".repeat(levels));
        let at_bound = nested(MAX_DEPTH);
        assert!(read_json(at_bound.as_bytes()).is_ok());
        // Far deeper than any worker's stack would survive in the recursive reader.
        for levels in [MAX_DEPTH + 1, 400_000] {
            let error = read_json(nested(levels).as_bytes()).expect_err("refused");
            assert!(error.contains("deeper than 128"), "{error}");
        }
        let objects = "{\"a\":".repeat(MAX_DEPTH + 1) + "1" + &"}".repeat(MAX_DEPTH + 1);
        assert!(read_json(objects.as_bytes()).is_err());
        // Brackets inside strings, escaped quotes among them, are text.
        let text = format!("{{\"a\":\"\\\"{}\"}}", "[".repeat(10_000));
        assert!(nesting_within(text.as_bytes(), 2), "{}", &text[..20]);
        assert!(read_json(text.as_bytes()).is_ok());
    }

    #[test]
    fn what_could_loop_grow_or_leave_the_answer_is_refused_when_loaded() {
        for refused in [
            "def f: f; f",
            "recurse",
            "..",
            "[range(1000000000)]",
            "repeat(.)",
            "until(false; .)",
            "env.HOME",
            "$ENV.HOME",
            "input",
            "halt",
            "\"x\" * 1000000000",
        ] {
            let error = Expression::compile(refused).unwrap_err();
            assert!(error.contains("may not"), "{refused}: {error}");
        }
        assert!(Expression::compile("").is_err());
        assert!(Expression::compile(".status |").unwrap_err().contains("parse"));
        assert!(Expression::compile("no_such_function").is_err());
        assert!(Expression::compile(&".a".repeat(600)).is_err());
    }
}
