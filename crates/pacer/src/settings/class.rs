//! [`ClassSettings`]: what a class of elastic work made with
//! [`Elastic::class`](crate::Elastic::class) is called and what part of the elastic share it
//! gets.

use elastic_cpu_core::SettingError;

/// The name of the class elastic work paced through the `Elastic` handle itself belongs to.
pub use elastic_cpu_core::decide::DEFAULT_CLASS;

/// The longest class name: it is a metrics label.
const NAME_MAX: usize = 64;

/// A class of elastic work: a name (its metrics label), a relative weight, and optionally a
/// cap and a floor, both shares of the CPUs. The governor splits the elastic share among the
/// classes with work by weight; a capped class never runs above its cap, even on an idle
/// machine; a floor is kept, within the elastic share, while the class has work.
///
/// ```
/// use elastic_cpu_pacer::settings::ClassSettings;
/// let backup = ClassSettings::new("backup").weight(3.0);
/// let tenant = ClassSettings::new("tenant-b").cap(0.1);
/// assert_eq!(backup.weight_of(), 3.0);
/// assert_eq!(tenant.cap_of(), Some(0.1));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ClassSettings {
    name: String,
    weight: f64,
    cap: Option<f64>,
    floor: f64,
}

impl ClassSettings {
    /// A class called `name`, of weight 1, with no cap and no floor.
    pub fn new(name: impl Into<String>) -> ClassSettings {
        ClassSettings {
            name: name.into(),
            weight: 1.0,
            cap: None,
            floor: 0.0,
        }
    }

    /// Its weight relative to the other classes' (the default class's is 1). Valid: 0.01 ..=
    /// 1000.
    pub fn weight(mut self, weight: f64) -> ClassSettings {
        self.weight = weight;
        self
    }

    /// A share of the CPUs the class never exceeds, even when nothing else runs. Valid: above
    /// 0, at most 1.
    pub fn cap(mut self, share: f64) -> ClassSettings {
        self.cap = Some(share);
        self
    }

    /// A share of the CPUs the class gets while it has work, taken from the elastic share
    /// (floors together take at most half of it, so a class without one still moves). Valid:
    /// 0 ..= 1, at most the cap.
    pub fn floor(mut self, share: f64) -> ClassSettings {
        self.floor = share;
        self
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The weight.
    pub fn weight_of(&self) -> f64 {
        self.weight
    }

    /// The cap, if any.
    pub fn cap_of(&self) -> Option<f64> {
        self.cap
    }

    /// The floor.
    pub fn floor_of(&self) -> f64 {
        self.floor
    }

    /// Check every setting; the first bad one is the error.
    ///
    /// ```
    /// use elastic_cpu_pacer::settings::ClassSettings;
    /// let err = ClassSettings::new("x").weight(0.0).validate().unwrap_err();
    /// assert_eq!(err.setting, "ClassSettings::weight");
    /// let err = ClassSettings::new("x").cap(0.2).floor(0.3).validate().unwrap_err();
    /// assert_eq!(err.setting, "ClassSettings::floor");
    /// ```
    pub fn validate(&self) -> Result<(), SettingError> {
        let name = self.name.as_str();
        if name.is_empty() || name.len() > NAME_MAX || name.chars().any(char::is_control) {
            return Err(SettingError::new(
                "ClassSettings::name",
                format!("{name:?}"),
                "1 to 64 bytes, no control characters",
            ));
        }
        if name == DEFAULT_CLASS {
            return Err(SettingError::new(
                "ClassSettings::name",
                format!("{name:?}"),
                "a name other than \"default\" (the `Elastic`'s own class)",
            ));
        }
        if !(0.01..=1000.0).contains(&self.weight) {
            return Err(SettingError::new(
                "ClassSettings::weight",
                self.weight,
                "0.01 ..= 1000",
            ));
        }
        if let Some(cap) = self.cap {
            if !(cap > 0.0 && cap <= 1.0) {
                return Err(SettingError::new(
                    "ClassSettings::cap",
                    cap,
                    "above 0, at most 1",
                ));
            }
        }
        let most = self.cap.unwrap_or(1.0);
        if !(0.0..=most).contains(&self.floor) {
            return Err(SettingError::new(
                "ClassSettings::floor",
                self.floor,
                "0 ..= 1, at most the cap",
            ));
        }
        Ok(())
    }
}
