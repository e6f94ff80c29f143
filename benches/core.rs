//! Placeholder until this bench lands.
fn main() {}
