//! HTTP/2 (placeholder while the parts land).
// wired into the app stack by the integration step
#![allow(dead_code)]

pub(crate) mod frame;
pub(crate) mod hpack;
