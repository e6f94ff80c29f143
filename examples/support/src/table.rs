//! An export's data and its work: table-like rows as CSV text, compressed with deflate (about
//! a millisecond of CPU per 32 KiB, as a real export's library call).

use std::io::Write;

/// `len` bytes of CSV rows starting at row `first`: text that compresses as a table export does.
pub fn csv_rows(first: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 64);
    let mut i = first;
    while out.len() < len {
        let _ = writeln!(
            out,
            "{i},customer-{},{:.2},2026-11-26",
            i % 977,
            (i % 10_000) as f64 / 7.0
        );
        i += 1;
    }
    out.truncate(len);
    out
}

/// `data` compressed with deflate at flate2's default level.
pub fn deflate(data: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    let _ = z.write_all(data);
    z.finish().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_have_their_length_and_compress() {
        let c = csv_rows(0, 32 * 1024);
        assert_eq!(c.len(), 32 * 1024);
        assert!(c.starts_with(b"0,customer-0,0.00,"));
        let z = deflate(&c);
        assert!(!z.is_empty() && z.len() < c.len() / 2, "{}", z.len());
        assert!(csv_rows(5, 0).is_empty());
    }
}
