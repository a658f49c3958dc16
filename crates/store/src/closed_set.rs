//! Closed sets of named values (job states, outcomes, health, notification kinds, ...) as enums
//! that know their own wire names: `closed_set!` writes the enum, its `ALL`, `as_str`, `parse`
//! and `Display` from one list of `Variant = "name"`, and gives serde (and so ts-rs, which turns
//! the enum into a union of those names for the UI) and utoipa (the API's OpenAPI document) the
//! same names. The store keeps them as text, the API sends them as JSON strings, the UI reads
//! them as unions: one spelling each.

/// `closed_set! { #[ts(export)] pub enum Name { A = "a", B = "b" } }`; attributes before the enum
/// (doc comments, `#[ts(export)]`, `#[derive(Default)]`) and before each variant are kept.
#[doc(hidden)]
#[macro_export]
macro_rules! __closed_set {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$variant_meta:meta])* $variant:ident = $text:literal ),+ $(,)?
        }
    ) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize, ts_rs::TS)]
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$variant_meta])* #[serde(rename = $text)] $variant ),+
        }

        impl $name {
            /// Every value, in declaration order.
            #[allow(dead_code)]
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The value's name on the wire and in the database.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            /// The value a name stands for.
            #[allow(dead_code)]
            pub fn parse(name: &str) -> Option<$name> {
                match name {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        // By hand: utoipa's derive does not see a `rename` whose text comes through a macro, and
        // would describe the variants' Rust names.
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .enum_values(Some([$($text),+]))
                    .into()
            }
        }

        impl utoipa::ToSchema for $name {}

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

// Exported at the crate's root under a hidden name (`macro_export` puts it there), and named here.
pub use crate::__closed_set as closed_set;
