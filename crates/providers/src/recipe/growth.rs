//! How large an expression's output may be, read from its syntax when the recipe is loaded, so
//! that no answer can make an expression take memory or time out of proportion to the answer.
//!
//! Each term is bounded as `scale × N + extra` bytes over all its outputs, N the size of its
//! input, and says whether it may give several outputs (`many`). A pipe multiplies the scales
//! (`.+. | .+.` is 4), `+` adds them; a term may give one output per part of its input, never one
//! per pair of parts (`.[] + .[]`, or `.[] + .`: a product of the answer with itself), and uses
//! only the functions of `FUNCTIONS`, with constant arguments where an argument is text (a
//! separator, a pattern). Variables, `reduce`, `foreach`, `label` and assignments are refused. An
//! expression is refused past `MAX_SCALE`.

use jaq_core::load::lex::StrPart;
use jaq_core::load::parse::{BinaryOp, Term};
use jaq_core::path::Part;

/// Most an expression's output may be, in multiples of the answer it reads.
pub const MAX_SCALE: u64 = 64;
/// Most bytes an expression's output may hold beyond that (its constants, repeated).
const MAX_EXTRA: u64 = 1 << 20;
/// Most outputs a term may give regardless of its input (its constants: `1, 2, 3`).
const CONSTANT_OUTPUTS: u64 = 1000;

/// A term's bound: its outputs together hold at most `scale × N + extra` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bound {
    scale: u64,
    extra: u64,
    many: bool,
}

impl Bound {
    const CONSTANT: Bound = Bound { scale: 0, extra: 8, many: false };
    const PART: Bound = Bound { scale: 1, extra: 0, many: false };

    fn constant(bytes: usize) -> Bound {
        Bound { scale: 0, extra: bytes as u64 + 2, many: false }
    }

    fn scaled(self, factor: u64) -> Bound {
        Bound { scale: self.scale.saturating_mul(factor), extra: self.extra.saturating_mul(factor), ..self }
    }

    fn max(self, other: Bound) -> Bound {
        Bound { scale: self.scale.max(other.scale), extra: self.extra.max(other.extra), many: self.many || other.many }
    }
}

/// Why an expression is refused.
pub type Refusal = String;

/// Checks the expression `text` (already known to parse): Ok, or why its output could grow out of
/// proportion to its input.
pub fn check(text: &str) -> Result<(), Refusal> {
    let term = jaq_core::load::parse(text, |p| p.term()).ok_or("does not parse as jq")?;
    let bound = bound(&term)?;
    if bound.scale > MAX_SCALE || bound.extra > MAX_EXTRA {
        return Err(format!(
            "could give an output {} times the answer it reads (at most {MAX_SCALE}): it combines the answer with itself too often",
            bound.scale
        ));
    }
    Ok(())
}

fn bound(term: &Term<&str>) -> Result<Bound, Refusal> {
    Ok(match term {
        Term::Id => Bound::PART,
        Term::Recurse => return Err("uses `..` (recursion)".into()),
        Term::Num(n) => Bound::constant(n.len()),
        Term::Str(format, parts) => string(format.as_deref(), parts)?,
        Term::Arr(None) => Bound::CONSTANT,
        Term::Arr(Some(items)) => collected(bound(items)?),
        Term::Obj(fields) => {
            let mut terms = Vec::new();
            for (key, value) in fields {
                terms.push(bound(key)?);
                // `{a}` is `{a: .a}`: a part.
                terms.push(match value {
                    Some(value) => bound(value)?,
                    None => Bound::PART,
                });
            }
            combined(&terms)?
        }
        Term::Neg(t) => bound(t)?,
        Term::BinOp(l, op, r) => binary(l, op, r)?,
        Term::Label(..) | Term::Break(_) => return Err("uses `label` (control flow)".into()),
        Term::Fold(..) => return Err("uses `reduce` or `foreach` (a loop)".into()),
        Term::TryCatch(body, catch) => {
            let body = bound(body)?;
            match catch {
                Some(catch) => body.max(bound(catch)?),
                None => body,
            }
        }
        Term::IfThenElse(branches, otherwise) => {
            let mut out = match otherwise {
                Some(t) => bound(t)?,
                None => Bound::PART,
            };
            for (condition, then) in branches {
                if bound(condition)?.many {
                    return Err("has a condition that gives several outputs (each would repeat the branch)".into());
                }
                out = out.max(bound(then)?);
            }
            out
        }
        Term::Def(..) => return Err("uses `def` (definitions)".into()),
        Term::Call(name, args) => call(name, args)?,
        Term::Var(name) => return Err(format!("uses the variable {name} (variables are not taken)")),
        Term::Path(base, path) => {
            let mut out = bound(base)?;
            for (part, _) in &path.0 {
                match part {
                    Part::Index(index) => {
                        let index = bound(index)?;
                        out.many |= index.many;
                    }
                    Part::Range(None, None) => out.many = true,
                    Part::Range(from, to) => {
                        for end in [from, to].into_iter().flatten() {
                            out.many |= bound(end)?.many;
                        }
                    }
                }
            }
            out
        }
    })
}

/// All outputs of `t` gathered into one value (`[t]`).
fn collected(t: Bound) -> Bound {
    Bound { many: false, ..t }
}

/// Terms whose outputs are put together into each output (`+`, an object's fields, a string's
/// interpolations): several outputs of more than one would make a product, and several outputs
/// of one beside another that reads the input would repeat the input once per output.
fn combined(terms: &[Bound]) -> Result<Bound, Refusal> {
    let generators = terms.iter().filter(|t| t.many).count();
    if generators > 1 {
        return Err("combines two terms that each give several outputs (every pair of them would be made)".into());
    }
    if generators == 1 && terms.iter().any(|t| !t.many && t.scale > 0) {
        return Err(
            "combines a term that gives several outputs with one that reads the answer (the answer would be repeated for each)".into()
        );
    }
    // With one generator, each of its (at most N / 2 + CONSTANT_OUTPUTS) outputs carries the
    // others' constants.
    let constants: u64 = terms.iter().filter(|t| !t.many).map(|t| t.extra).sum();
    let repeated = if generators == 1 { constants } else { 0 };
    Ok(Bound {
        scale: terms.iter().map(|t| t.scale).fold(0u64, u64::saturating_add).saturating_add(repeated.div_ceil(2)),
        extra: terms.iter().map(|t| t.extra).fold(0u64, u64::saturating_add).saturating_add(repeated.saturating_mul(CONSTANT_OUTPUTS)),
        many: generators == 1,
    })
}

/// `right` run on each output of `left`.
fn piped(left: Bound, right: Bound) -> Bound {
    // Each of left's outputs is at most its whole size; right adds its extra per output, and
    // left gives at most N / 2 + CONSTANT_OUTPUTS outputs when it gives several (each part of
    // the input is a value and its separator: two bytes at least).
    let (per_input, per_constant) =
        if left.many { (right.extra.div_ceil(2), right.extra.saturating_mul(CONSTANT_OUTPUTS)) } else { (0, right.extra) };
    Bound {
        scale: right.scale.saturating_mul(left.scale).saturating_add(per_input),
        extra: right.scale.saturating_mul(left.extra).saturating_add(per_constant),
        many: left.many || right.many,
    }
}

fn binary(l: &Term<&str>, op: &BinaryOp<&str>, r: &Term<&str>) -> Result<Bound, Refusal> {
    use jaq_core::ops::Math;
    Ok(match op {
        BinaryOp::Pipe(Some(_)) => return Err("binds a variable with `as` (variables are not taken)".into()),
        BinaryOp::Pipe(None) => piped(bound(l)?, bound(r)?),
        BinaryOp::Comma => {
            let (l, r) = (bound(l)?, bound(r)?);
            Bound { scale: l.scale.saturating_add(r.scale), extra: l.extra.saturating_add(r.extra), many: true }
        }
        BinaryOp::Alt => bound(l)?.max(bound(r)?),
        BinaryOp::Or | BinaryOp::And | BinaryOp::Cmp(_) => {
            let truth = combined(&[bound(l)?, bound(r)?])?;
            Bound { scale: 0, extra: 8, many: truth.many }
        }
        BinaryOp::Math(Math::Add | Math::Sub) => combined(&[bound(l)?, bound(r)?])?,
        // A string divided by a separator: an array of its pieces, each quoted.
        BinaryOp::Math(Math::Div) => combined(&[bound(l)?, bound(r)?])?.scaled(4),
        BinaryOp::Math(Math::Rem) => {
            combined(&[bound(l)?, bound(r)?])?;
            Bound::CONSTANT
        }
        BinaryOp::Math(Math::Mul) => return Err("uses `*` (repetition)".into()),
        BinaryOp::Assign | BinaryOp::Update | BinaryOp::UpdateMath(_) | BinaryOp::UpdateAlt => {
            return Err("assigns (`=`, `|=`, `+=`...): an expression reads an answer, it does not change it".into())
        }
    })
}

/// How much a string format may make of a value (`@json` escapes each character in up to 6).
fn format_factor(format: &str) -> Result<u64, Refusal> {
    Ok(match format {
        "@text" | "@base64d" => 1,
        "@base64" => 2,
        "@uri" => 3,
        "@json" | "@html" | "@csv" | "@tsv" | "@sh" => 6,
        other => return Err(format!("uses the format {other}, which a recipe's expression may not")),
    })
}

fn string(format: Option<&str>, parts: &[StrPart<&str, Term<&str>>]) -> Result<Bound, Refusal> {
    let factor = format.map(format_factor).transpose()?.unwrap_or(1);
    let mut terms = Vec::new();
    for part in parts {
        terms.push(match part {
            StrPart::Str(text) => Bound::constant(text.len()),
            StrPart::Char(_) => Bound::constant(4),
            // An interpolated value is printed as JSON: up to 6 bytes a byte.
            StrPart::Term(t) => bound(t)?.scaled(6 * factor),
        });
    }
    if terms.is_empty() {
        return Ok(Bound::CONSTANT);
    }
    combined(&terms)
}

/// What a function gives, in terms of its input (`Bound::PART` scaled) and its arguments.
#[derive(Clone, Copy)]
enum Gives {
    /// A value of constant size (a number, a boolean, a date).
    Constant,
    /// At most its input, times this (escaping, quoting, wrapping).
    Input(u64),
    /// Its input's parts one by one (`splits`, `values`... as a generator).
    Parts,
    /// Its argument's bound, run on the input's elements and gathered (`map(f)`).
    EachElement(u64),
    /// Its argument's bound, run on the input (`first(f)`): its only output.
    FirstOf,
    /// Its last argument run on the input, as a generator (`limit(n; f)`).
    ArgumentStream,
}

/// What arguments a function takes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Arguments {
    /// None.
    None,
    /// Constants only (a separator, a pattern, a key): each must not read the answer.
    Constants,
    /// Filters run on the input or its elements (`map(f)`, `select(f)`): any term.
    Filters,
}

/// The functions a recipe's expression may use, by name and number of arguments.
const FUNCTIONS: &[(&str, usize, Arguments, Gives)] = {
    use Arguments::{Constants as C, Filters as F, None as N};
    use Gives::*;
    &[
        // Values of constant size.
        ("length", 0, N, Constant),
        ("utf8bytelength", 0, N, Constant),
        ("not", 0, N, Constant),
        ("type", 0, N, Constant),
        ("null", 0, N, Constant),
        ("true", 0, N, Constant),
        ("false", 0, N, Constant),
        ("empty", 0, N, Constant),
        ("now", 0, N, Constant),
        ("floor", 0, N, Constant),
        ("ceil", 0, N, Constant),
        ("round", 0, N, Constant),
        ("fabs", 0, N, Constant),
        ("abs", 0, N, Constant),
        ("tonumber", 0, N, Constant),
        ("isnan", 0, N, Constant),
        ("isinfinite", 0, N, Constant),
        ("isnormal", 0, N, Constant),
        ("mktime", 0, N, Constant),
        ("gmtime", 0, N, Constant),
        ("localtime", 0, N, Constant),
        ("fromdate", 0, N, Constant),
        ("fromdateiso8601", 0, N, Constant),
        ("todate", 0, N, Constant),
        ("todateiso8601", 0, N, Constant),
        ("has", 1, C, Constant),
        ("in", 1, C, Constant),
        ("contains", 1, C, Constant),
        ("inside", 1, C, Constant),
        ("startswith", 1, C, Constant),
        ("endswith", 1, C, Constant),
        ("test", 1, C, Constant),
        ("test", 2, C, Constant),
        ("index", 1, C, Constant),
        ("rindex", 1, C, Constant),
        ("strptime", 1, C, Constant),
        ("strftime", 1, C, Constant),
        ("strflocaltime", 1, C, Constant),
        ("any", 0, N, Constant),
        ("all", 0, N, Constant),
        ("any", 1, F, Constant),
        ("all", 1, F, Constant),
        ("isempty", 1, F, Constant),
        ("error", 0, N, Input(1)),
        ("error", 1, C, Constant),
        // At most the input, or a few times it.
        ("keys", 0, N, Input(2)),
        ("keys_unsorted", 0, N, Input(2)),
        ("ascii_downcase", 0, N, Input(1)),
        ("ascii_upcase", 0, N, Input(1)),
        ("trim", 0, N, Input(1)),
        ("ltrim", 0, N, Input(1)),
        ("rtrim", 0, N, Input(1)),
        ("ltrimstr", 1, C, Input(1)),
        ("rtrimstr", 1, C, Input(1)),
        ("fromjson", 0, N, Input(1)),
        ("tojson", 0, N, Input(6)),
        ("tostring", 0, N, Input(6)),
        ("ascii", 0, N, Input(1)),
        ("implode", 0, N, Input(1)),
        ("explode", 0, N, Input(8)),
        ("min", 0, N, Input(1)),
        ("max", 0, N, Input(1)),
        ("add", 0, N, Input(1)),
        ("first", 0, N, Input(1)),
        ("last", 0, N, Input(1)),
        ("reverse", 0, N, Input(1)),
        ("sort", 0, N, Input(1)),
        ("unique", 0, N, Input(1)),
        ("flatten", 0, N, Input(1)),
        ("flatten", 1, C, Input(1)),
        ("to_entries", 0, N, Input(8)),
        ("from_entries", 0, N, Input(1)),
        ("tostream", 0, N, Input(8)),
        ("split", 1, C, Input(4)),
        ("split", 2, C, Input(4)),
        ("join", 1, C, Input(4)),
        ("indices", 1, C, Input(8)),
        ("sub", 2, C, Input(4)),
        ("sub", 3, C, Input(4)),
        ("gsub", 2, C, Input(4)),
        ("gsub", 3, C, Input(4)),
        ("getpath", 1, C, Input(1)),
        ("del", 1, F, Input(1)),
        ("sort_by", 1, F, Input(1)),
        ("group_by", 1, F, Input(2)),
        ("unique_by", 1, F, Input(1)),
        ("min_by", 1, F, Input(1)),
        ("max_by", 1, F, Input(1)),
        ("select", 1, F, Input(1)),
        ("values", 0, N, Input(1)),
        ("nulls", 0, N, Input(1)),
        ("booleans", 0, N, Input(1)),
        ("numbers", 0, N, Input(1)),
        ("strings", 0, N, Input(1)),
        ("arrays", 0, N, Input(1)),
        ("objects", 0, N, Input(1)),
        ("iterables", 0, N, Input(1)),
        ("scalars", 0, N, Input(1)),
        ("toarray", 0, N, Input(1)),
        // Parts of the input, one by one.
        ("splits", 1, C, Parts),
        ("splits", 2, C, Parts),
        ("scan", 1, C, Parts),
        ("match", 1, C, Parts),
        ("match", 2, C, Parts),
        ("capture", 1, C, Parts),
        ("capture", 2, C, Parts),
        // A filter on each element, gathered.
        ("map", 1, F, EachElement(1)),
        ("map_values", 1, F, EachElement(1)),
        ("with_entries", 1, F, EachElement(8)),
        // A filter's first or last output.
        ("first", 1, F, FirstOf),
        ("last", 1, F, FirstOf),
        ("limit", 2, F, ArgumentStream),
    ]
};

fn call(name: &str, args: &[Term<&str>]) -> Result<Bound, Refusal> {
    if let Some(format) = name.strip_prefix('@') {
        if args.is_empty() {
            return Ok(Bound::PART.scaled(format_factor(&format!("@{format}"))?));
        }
    }
    let Some(&(_, _, arguments, gives)) = FUNCTIONS.iter().find(|(n, arity, _, _)| *n == name && *arity == args.len()) else {
        return Err(format!("uses `{name}`{}, which a recipe's expression may not (it reads an answer: paths, `select`, `map`, `if`, `//`, string and date functions)",
            if args.is_empty() { String::new() } else { format!(" with {} argument(s)", args.len()) }));
    };
    let bounds = args.iter().map(bound).collect::<Result<Vec<_>, _>>()?;
    if arguments == Arguments::Constants && bounds.iter().any(|b| b.scale > 0 || b.many) {
        return Err(format!("gives `{name}` an argument that reads the answer: write a constant (a text, a number)"));
    }
    let filter = bounds.last().copied().unwrap_or(Bound::CONSTANT);
    Ok(match gives {
        Gives::Constant => Bound::CONSTANT,
        Gives::Input(factor) => {
            // `select(f)` gives its input once for each true output of f: a generator there would
            // repeat the input.
            if arguments == Arguments::Filters && filter.many && name == "select" {
                return Err("gives `select` a condition with several outputs (the input would be repeated for each)".into());
            }
            Bound::PART.scaled(factor)
        }
        Gives::Parts => Bound { many: true, ..Bound::PART },
        Gives::EachElement(factor) => collected(piped(Bound { many: true, ..Bound::PART }, filter)).scaled(factor),
        Gives::FirstOf => collected(filter),
        Gives::ArgumentStream => {
            if bounds[0].scale > 0 || bounds[0].many {
                return Err("gives `limit` a count that reads the answer: write a number".into());
            }
            filter
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_recipes_read_passes() {
        for text in [
            ".status",
            ".output.images[0].url",
            ".error // \"none\"",
            "if .n > 2 then \"big\" else \"small\" end",
            "[.output.images[].url]",
            "\"a*b \" + .status",
            "[.response.generateVideoResponse.generatedSamples[]?.video.uri // empty]",
            ".error.message // (.response.x.reasons // empty | join(\"; \"))",
            "if .metadata.state then \"batch\" else \"operation/\" + ((.name // \"\") | split(\"/\")[1] // \"\") end",
            "if .output == null then empty elif (.output | type) == \"string\" then .output else .output | tojson end",
            ".data[] | select(.status == \"running\") | .id",
            "[.data[] | {id, state: .status}]",
            "map(select(.done)) | length",
            ".created_at | fromdateiso8601",
            "(.a | tostring) + \" of \" + (.b | tostring)",
            "\"\\(.a) done\"",
            "first(.items[] | select(.ok)) // empty",
            "@base64",
            ".x[1:3]",
            "to_entries | map(.key) | join(\",\")",
        ] {
            assert_eq!(check(text), Ok(()), "{text}");
        }
    }

    #[test]
    fn what_could_grow_past_the_answer_is_refused() {
        for text in [
            ".+. | .+. | .+. | .+. | .+. | .+. | .+.",
            "[.,.] | tojson | tojson | tojson",
            ".[] + .[]",
            ".[] + .",
            "[.[] | [., .]] | tojson | tojson",
            "{a: .[], b: .[]}",
            "\"\\(.[])\\(.[])\"",
            "reduce .[] as $x (.; . + .)",
            ". as $all | .[] | $all",
            "combinations",
            "select(.[] | true)",
            "join(.sep)",
            "gsub(\"\"; .x)",
            "limit(.n; .[])",
            "if .[] then . else . end",
            ".a = 1",
            "paths",
            "walk(.)",
            "@nonsense",
        ] {
            assert!(check(text).is_err(), "{text}: {:?}", bound(&jaq_core::load::parse(text, |p| p.term()).unwrap()));
        }
        let why = check(".+. | .+. | .+. | .+. | .+. | .+. | .+.").unwrap_err();
        assert!(why.contains("128 times") && why.contains("at most 64"), "{why}");
    }
}
