//! Compiles and runs the README's code blocks as a user would, with nothing but the README's
//! dependencies, and checks that `examples/quickstart.rs` is the README's quick start.
#![doc = include_str!("../../../README.md")]

#[cfg(test)]
mod tests {
    /// The first `rust` block of the README, as written there.
    fn readme_quick_start() -> String {
        let readme = include_str!("../../../README.md");
        let start = readme.find("```rust\n").expect("a rust block") + "```rust\n".len();
        let len = readme[start..].find("```\n").expect("its end");
        readme[start..start + len].to_string()
    }

    #[test]
    fn the_quickstart_example_is_the_readme_quick_start() {
        let example = include_str!("../../../examples/quickstart.rs");
        let body = example
            .lines()
            .skip_while(|l| l.starts_with("//!") || l.is_empty())
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(body.trim_end(), readme_quick_start().trim_end());
    }
}
