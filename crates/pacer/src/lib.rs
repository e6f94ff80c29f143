//! Enforce: pace elastic work with CPU tokens.
