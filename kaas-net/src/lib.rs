//! kaas-net
