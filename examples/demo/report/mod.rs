//! The report: the model (what was measured, each phase's rounds merged, the bars), the
//! controller settle-time analysis, and one module per output: the terminal table (`text`),
//! `json`, and `html` with the demo's `charts` (phase colours, the at-a-glance bars).

mod charts;
mod html;
mod json;
mod model;
mod settle;
mod text;

pub use model::*;
