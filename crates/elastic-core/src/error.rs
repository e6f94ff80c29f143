//! The one error every crate of elastic-cpu returns for a setting it refuses.

use std::fmt;

/// A refused setting: which one, the value given, and what is accepted.
///
/// Every validation in elastic-cpu (controller, probe, builder) reports this one shape, so a
/// caller matches on one type and can print a message that names the builder method to fix.
///
/// ```
/// use elastic_cpu_core::{ControllerConfig, SettingError};
/// use std::time::Duration;
///
/// let bad = ControllerConfig { tick: Duration::ZERO, ..Default::default() };
/// let err: SettingError = bad.validate().unwrap_err();
/// assert_eq!(err.setting, "tick");
/// assert_eq!(err.value, "0ns");
/// assert_eq!(err.to_string(), "invalid `tick` = 0ns: expected above zero");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SettingError {
    /// The setting as the user spells it: the builder method or config field.
    pub setting: &'static str,
    /// The value given, printed.
    pub value: String,
    /// What a valid value looks like (a range, or the rule it breaks).
    pub expected: &'static str,
}

impl SettingError {
    /// `setting` was given `value`; it accepts `expected`.
    pub fn new(setting: &'static str, value: impl fmt::Display, expected: &'static str) -> Self {
        SettingError {
            setting,
            value: value.to_string(),
            expected,
        }
    }
}

impl fmt::Display for SettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid `{}` = {}: expected {}",
            self.setting, self.value, self.expected
        )
    }
}

impl std::error::Error for SettingError {}
