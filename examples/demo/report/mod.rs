//! The report: the model (what was measured, each phase's rounds merged, the bars), the
//! controller settle-time analysis, and one module per output: the terminal table (`text`),
//! `json`, and `html` with the demo's SVG (`svg`: chart look and the at-a-glance bars).

mod html;
mod json;
mod model;
mod settle;
mod svg;
mod text;

pub use model::*;
