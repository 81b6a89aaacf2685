//! The clients of each primitive and the run that sends them through the
//! faulty network and returns the history they recorded
//! (`crate::history`); `crate::report` checks it. One module per primitive,
//! and `fenced` for what the `fenced_resource` and `fenced_log` clients
//! share. Nothing here imports the checkers.

pub mod create_once;
pub mod election;
pub mod fair;
mod fenced;
pub mod fenced_log;
pub mod fenced_resource;
pub mod first_use;
pub mod group_commit;
pub mod lease;
pub mod rwlock;
pub mod semaphore;
pub mod session;
pub mod swap_once;
