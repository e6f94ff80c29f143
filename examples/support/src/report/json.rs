//! Numbers as the JSON reports write them, and the document as text.

use serde::{Serialize, Serializer};

/// A number as the reports write it: rounded to 3 decimals, a whole number without a fraction,
/// null when not finite.
#[derive(Clone, Copy)]
pub struct Num(pub f64);

impl Serialize for Num {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if !self.0.is_finite() {
            return s.serialize_none();
        }
        let r = (self.0 * 1000.0).round() / 1000.0;
        if r == r.trunc() && r.abs() < 1e15 {
            s.serialize_i64(r as i64)
        } else {
            s.serialize_f64(r)
        }
    }
}

/// An optional [`Num`].
pub fn opt(x: Option<f64>) -> Option<Num> {
    x.map(Num)
}

/// Serialize an optional number as a [`Num`] (for `#[serde(serialize_with)]`).
pub fn opt_num<S: Serializer>(x: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    opt(*x).serialize(s)
}

/// The document, pretty-printed, with a final newline.
pub fn to_string<T: Serialize>(doc: &T) -> String {
    let mut s = serde_json::to_string_pretty(doc).expect("the report serializes");
    s.push('\n');
    s
}
