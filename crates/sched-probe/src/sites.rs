//! Spawn sites as small numbers: an outlier record holds a site in one word, and the thread
//! that reads the record turns it back into the source location.
//!
//! A process-wide table of `&'static Location`s, filled on first sight (open addressing on the
//! location's address) and never emptied: code has finitely many spawn sites. Looking a known
//! site up is a few loads; only the first sight of a site writes. Once the table is full, new
//! sites are [`OTHER`].

use std::panic::Location;
use std::sync::OnceLock;

/// Sites the table holds.
const CAPACITY: usize = 4096;

/// The number of a site the table had no room for.
pub(crate) const OTHER: u32 = u32::MAX;

/// How far a lookup probes past a site's home entry before it gives up.
const PROBES: usize = 64;

static TABLE: [OnceLock<&'static Location<'static>>; CAPACITY] =
    [const { OnceLock::new() }; CAPACITY];

/// The number of `site` (the same for every call with the same location).
pub(crate) fn intern(site: &'static Location<'static>) -> u32 {
    let address = site as *const Location<'static> as usize;
    // Fibonacci hashing of the address: locations sit a few dozen bytes apart.
    let home = (address.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20) % CAPACITY;
    for i in 0..PROBES {
        let index = (home + i) % CAPACITY;
        let entry = &TABLE[index];
        let held = match entry.get() {
            Some(held) => *held,
            None => *entry.get_or_init(|| site),
        };
        if std::ptr::eq(held, site) || held == site {
            return index as u32;
        }
    }
    OTHER
}

/// The location of site number `id` (`None` for [`OTHER`]).
pub(crate) fn location(id: u32) -> Option<&'static Location<'static>> {
    TABLE.get(id as usize).and_then(|e| e.get().copied())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_site_keeps_its_number() {
        let here = Location::caller();
        let there = Location::caller();
        let (a, b) = (intern(here), intern(there));
        assert_eq!(intern(here), a);
        assert_ne!(a, b);
        assert_eq!(location(a), Some(here));
        assert_eq!(location(OTHER), None);
    }
}
