//! The clients of each primitive, the history they record, and the run
//! that sends them through the faulty network and hands the history to
//! the checker: one module per primitive.

pub mod election;
pub mod fenced_log;
pub mod fenced_resource;
pub mod lease;
