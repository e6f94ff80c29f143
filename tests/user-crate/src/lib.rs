//! Compiles and runs the README's code blocks as a user would, with nothing but the README's
//! dependencies, checks that `examples/quickstart.rs` is the README's quick start, and that
//! `Elastic::builder().run` is measured as the README says.
#![doc = include_str!("../../../README.md")]

#[cfg(test)]
mod tests {
    use elastic_cpu::snapshot::ProbeSource;
    use elastic_cpu::Elastic;

    /// `Elastic::builder().run`, as the README's axum service starts: the task hooks measure
    /// its runtime where `tokio_unstable` is on, the sampler where it is off (this crate's
    /// build in CI), as the README's `tokio_unstable` section says.
    #[test]
    fn the_readme_run_is_measured_as_the_readme_says() {
        let source = Elastic::builder()
            .run(|elastic| async move {
                let sum = elastic.spawn(async { (0..1_000u64).sum::<u64>() }).unwrap();
                assert_eq!(sum.await.unwrap(), 499_500);
                elastic.snapshot().probe_source
            })
            .unwrap();
        let expected = if cfg!(tokio_unstable) {
            ProbeSource::TaskHooks
        } else {
            ProbeSource::Sampler
        };
        assert_eq!(source, expected);
    }

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
