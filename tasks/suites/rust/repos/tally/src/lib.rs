//! Small text and number utilities.

pub mod roman;
pub mod rpn;
pub mod stats;
pub mod text;
