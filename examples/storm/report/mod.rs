//! The report: the model (what was measured, each phase's rounds merged, the bars), and one
//! module per output: the terminal summary (`text`), `json`, and `html` with its charts.

mod html;
mod json;
mod model;
mod text;

pub use model::*;
