//! Group commit: many callers' fenced updates (or appends) behind one
//! conditional write.
//!
//! A store accepts only a few conditional writes per second on one object
//! (GCS documents one), so a [`FencedResource`] or [`FencedLog`] written one
//! call at a time cannot go faster, however many tasks call it. A group
//! handle queues its callers' updates; one committer task per handle takes
//! every update queued while the previous write was in flight, up to the
//! batch limits, and makes them one write through the ordinary fenced path
//! (same fencing, same resolution of unanswered writes by nonce). Each
//! caller is answered only once the write carrying its update has landed,
//! with its own place in the batch.
//!
//! A batch holds updates of one token: a caller with another token waits
//! for the next batch, so queue order is also write order.

use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::FutureExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use crate::{CasError, ErrorKind, Version};

use super::{FencedLog, FencedResource, LeaseError, LogEntry};

/// Limits of a group-commit handle: how many updates may wait, and how
/// large one batch may grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupCommitConfig {
    /// Updates waiting for a batch; a caller beyond this waits for room
    /// (back-pressure). Default 4096; a handle clamps it to between 1 and
    /// [`Semaphore::MAX_PERMITS`](tokio::sync::Semaphore::MAX_PERMITS).
    pub max_queued: usize,
    /// Records in one batch. Default 1024.
    pub max_batch_records: usize,
    /// Encoded bytes of a log batch's records (a resource batch writes one
    /// value, so only the record count limits it). Default 4 MiB.
    pub max_batch_bytes: usize,
}

impl Default for GroupCommitConfig {
    fn default() -> Self {
        GroupCommitConfig {
            max_queued: 4096,
            max_batch_records: 1024,
            max_batch_bytes: 4 << 20,
        }
    }
}

impl GroupCommitConfig {
    /// Sets how many updates may wait for a batch (at least 1, at most
    /// [`Semaphore::MAX_PERMITS`](tokio::sync::Semaphore::MAX_PERMITS)).
    #[must_use = "the setter returns the changed configuration"]
    pub fn with_max_queued(mut self, max_queued: usize) -> Self {
        self.max_queued = max_queued.clamp(1, Semaphore::MAX_PERMITS);
        self
    }

    /// Sets the most records in one batch (at least 1).
    #[must_use = "the setter returns the changed configuration"]
    pub fn with_max_batch_records(mut self, records: usize) -> Self {
        self.max_batch_records = records.max(1);
        self
    }

    /// Sets the most encoded bytes of a log batch's records (at least 1).
    #[must_use = "the setter returns the changed configuration"]
    pub fn with_max_batch_bytes(mut self, bytes: usize) -> Self {
        self.max_batch_bytes = bytes.max(1);
        self
    }
}

/// What a caller of a [`GroupResource`] is told once its update landed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Applied<T> {
    /// The value right after this caller's update (later updates of the
    /// same batch may have changed the stored value since).
    pub value: T,
    /// The token the batch was fenced with (the caller's own).
    pub token: u64,
    /// The version of the object the batch wrote: that of our write, or of
    /// the object as read if writes of others already replaced ours (the
    /// write was found again by its nonce), as for
    /// [`FencedResource::update`].
    pub version: Version,
    /// This update's place in its batch, from 0.
    pub offset: usize,
    /// How many updates the batch carried.
    pub batch_len: usize,
}

/// What became of a [`Ticket`] that was cancelled.
#[derive(Debug)]
#[must_use = "MayHaveApplied means the update may still land; wait on the ticket it hands back to learn"]
pub enum Cancelled<D> {
    /// The update was still queued: it was removed and will never be
    /// written.
    Removed,
    /// The update's batch was already sealed, so it may have been applied:
    /// wait on the ticket to learn, or drop it.
    MayHaveApplied(Ticket<D>),
}

/// A queued update: wait on it for the outcome, or cancel it.
///
/// Dropping a ticket (or the future of [`GroupResource::update`] /
/// [`GroupLog::append`]) before its batch is sealed removes the update;
/// after, the update may still be applied, unseen by anyone.
#[derive(Debug)]
#[must_use = "an update is only known applied once its ticket is waited on"]
pub struct Ticket<D> {
    id: u64,
    reply: oneshot::Receiver<Result<D, LeaseError>>,
    queue: Arc<dyn Unqueue>,
}

impl<D> Ticket<D> {
    /// Waits until the write carrying this update has landed (`Ok`, with
    /// its place) or failed (the batch's error, the same for every update
    /// of the batch: [`LeaseError::FencedOut`] for all of them, or
    /// [`ErrorKind::Ambiguous`] when the batch may have been applied).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the ticket: an update still queued is
    /// removed (never written); one whose batch was sealed may still be
    /// applied, with the rest of its batch, and nobody is told. Use
    /// [`cancel`](Ticket::cancel) to learn which.
    pub async fn wait(self) -> Result<D, LeaseError> {
        match self.reply.await {
            Ok(result) => result,
            // The committer stopped (its runtime shut down) after sealing
            // the batch: the write may have been sent.
            Err(_) => Err(LeaseError::Store(CasError::new(
                ErrorKind::Ambiguous,
                "the group commit stopped before answering; the update may have been applied",
            ))),
        }
    }

    /// Removes the update if it is still queued; else says it may have
    /// been applied and hands the ticket back.
    pub fn cancel(self) -> Cancelled<D> {
        if self.queue.unqueue(self.id) {
            Cancelled::Removed
        } else {
            Cancelled::MayHaveApplied(self)
        }
    }
}

/// Removes a queued update, for a [`Ticket`] that does not know the
/// queue's item type.
trait Unqueue: Send + Sync + std::fmt::Debug {
    /// Removes update `id`: false if it was no longer queued.
    fn unqueue(&self, id: u64) -> bool;
}

/// One batch made into one fenced write.
trait BatchWriter: Send + Sync + 'static {
    /// One caller's update.
    type Item: Send + 'static;
    /// What a caller is told once the batch landed.
    type Done: Send + 'static;

    /// Writes `items` in order as one write fenced by `token`: one answer
    /// per item, in order, or the error of the whole batch.
    fn write(
        &self,
        token: u64,
        items: Vec<Self::Item>,
    ) -> impl Future<Output = Result<Vec<Self::Done>, LeaseError>> + Send;
}

struct Queued<I, D> {
    id: u64,
    token: u64,
    bytes: usize,
    item: I,
    reply: oneshot::Sender<Result<D, LeaseError>>,
    /// The queue slot, freed when the update leaves the queue.
    _slot: OwnedSemaphorePermit,
}

struct Queue<I, D> {
    waiting: VecDeque<Queued<I, D>>,
    /// A committer task is running; it ends once the queue is empty.
    committing: bool,
    next_id: u64,
}

/// The queue of one group handle and the rule that cuts it into batches.
struct Batcher<W: BatchWriter> {
    writer: W,
    config: GroupCommitConfig,
    queue: Mutex<Queue<W::Item, W::Done>>,
    slots: Arc<Semaphore>,
}

impl<W: BatchWriter> std::fmt::Debug for Batcher<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<W: BatchWriter> Batcher<W> {
    fn new(writer: W, config: GroupCommitConfig) -> Arc<Self> {
        Arc::new(Batcher {
            writer,
            config,
            queue: Mutex::new(Queue {
                waiting: VecDeque::new(),
                committing: false,
                next_id: 0,
            }),
            // Above MAX_PERMITS the semaphore would panic.
            slots: Arc::new(Semaphore::new(
                config.max_queued.clamp(1, Semaphore::MAX_PERMITS),
            )),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Queue<W::Item, W::Done>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `item` (waiting for room), starting a committer if none runs.
    async fn submit(
        self: &Arc<Self>,
        token: u64,
        bytes: usize,
        item: W::Item,
    ) -> Result<Ticket<W::Done>, LeaseError> {
        if bytes > self.config.max_batch_bytes {
            return Err(LeaseError::InvalidConfig(format!(
                "a record of {bytes} bytes can never fit a batch of at most {} bytes; raise max_batch_bytes",
                self.config.max_batch_bytes
            )));
        }
        // The committer is a task of the caller's runtime.
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            LeaseError::InvalidConfig(
                "group commit needs a tokio runtime: call submit, update or append from within one"
                    .to_string(),
            )
        })?;
        // The semaphore is never closed; the error arm is unreachable.
        let slot = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| LeaseError::Cancelled)?;
        let (reply, answer) = oneshot::channel();
        let start = {
            let mut queue = self.lock();
            let id = queue.next_id;
            queue.next_id += 1;
            queue.waiting.push_back(Queued {
                id,
                token,
                bytes,
                item,
                reply,
                _slot: slot,
            });
            let start = !queue.committing;
            queue.committing = true;
            (id, start)
        };
        let (id, start) = start;
        if start {
            // The guard is made before the task: a task dropped unpolled
            // (its runtime shutting down) still hands the queue back.
            let guard = Committer {
                batcher: self.clone(),
                finished: false,
            };
            runtime.spawn(guard.run());
        }
        Ok(Ticket {
            id,
            reply: answer,
            queue: self.clone(),
        })
    }

    /// Writes batches until the queue is empty.
    async fn commit_loop(&self) {
        loop {
            let batch = {
                let mut queue = self.lock();
                let batch = self.seal(&mut queue.waiting);
                if batch.is_empty() {
                    queue.committing = false;
                    return;
                }
                batch
            };
            self.commit(batch).await;
            self.let_answered_callers_queue().await;
        }
    }

    /// The committer stopped without emptying the queue (its task was
    /// dropped at runtime shutdown, or it panicked): no committer runs any
    /// more, so the next caller starts one, and the updates still queued
    /// (never sent) are refused rather than left waiting forever.
    fn committer_stopped(&self) {
        let stranded: Vec<_> = {
            let mut queue = self.lock();
            if !queue.committing {
                return;
            }
            queue.committing = false;
            queue.waiting.drain(..).collect()
        };
        if !stranded.is_empty() {
            tracing::warn!(
                queued = stranded.len(),
                "group commit: the committer stopped; refusing the queued updates"
            );
        }
        for queued in stranded {
            let _ = queued.reply.send(Err(LeaseError::Store(CasError::new(
                ErrorKind::NotSent,
                "the group commit's committer stopped (its runtime shut down) before this update was sent; it was not applied",
            ))));
        }
    }

    /// Lets the callers just answered run before the next batch is sealed
    /// (yielding while the queue still grows, a few times at most): a caller
    /// that sends its next update at once then joins that batch instead of
    /// waiting out one more write. No timer: an idle queue costs nothing.
    async fn let_answered_callers_queue(&self) {
        const MAX_YIELDS: usize = 8;
        let mut queued = self.lock().waiting.len();
        for _ in 0..MAX_YIELDS {
            tokio::task::yield_now().await;
            let now = self.lock().waiting.len();
            if now == queued {
                return;
            }
            queued = now;
        }
    }

    /// Takes the next batch off the queue: the oldest updates with the
    /// first one's token, within the limits, skipping those whose caller
    /// is gone (they are never written).
    fn seal(
        &self,
        waiting: &mut VecDeque<Queued<W::Item, W::Done>>,
    ) -> Vec<Queued<W::Item, W::Done>> {
        let mut batch: Vec<Queued<W::Item, W::Done>> = Vec::new();
        let mut bytes = 0usize;
        while let Some(next) = waiting.front() {
            if next.reply.is_closed() {
                waiting.pop_front();
                continue;
            }
            if let Some(first) = batch.first() {
                let full = batch.len() >= self.config.max_batch_records
                    || bytes.saturating_add(next.bytes) > self.config.max_batch_bytes;
                if next.token != first.token || full {
                    break;
                }
            }
            bytes = bytes.saturating_add(next.bytes);
            match waiting.pop_front() {
                Some(queued) => batch.push(queued),
                None => break,
            }
        }
        batch
    }

    /// Writes one sealed batch and answers its callers.
    async fn commit(&self, batch: Vec<Queued<W::Item, W::Done>>) {
        let token = batch.first().map_or(0, |q| q.token);
        let mut replies = Vec::with_capacity(batch.len());
        let mut items = Vec::with_capacity(batch.len());
        for queued in batch {
            replies.push(queued.reply);
            items.push(queued.item);
        }
        tracing::debug!(
            token,
            records = items.len(),
            "group commit: writing a batch"
        );
        // A panicking update function fails its batch, not the handle.
        let written = match AssertUnwindSafe(self.writer.write(token, items))
            .catch_unwind()
            .await
        {
            Ok(written) => written,
            Err(panic) => {
                let what = panic_message(panic.as_ref());
                tracing::warn!(token, panic = %what, "group commit: an update function panicked");
                Err(LeaseError::Store(CasError::new(
                    ErrorKind::Ambiguous,
                    format!(
                        "an update function of this batch panicked ({what}); the batch's write was abandoned, but an earlier attempt of it may have landed"
                    ),
                )))
            }
        };
        match written {
            Ok(done) if done.len() == replies.len() => {
                for (reply, done) in replies.into_iter().zip(done) {
                    // A caller gone after sealing is not told; its update
                    // stands (its ticket's drop said it may).
                    let _ = reply.send(Ok(done));
                }
            }
            Ok(done) => {
                let err = LeaseError::Store(CasError::new(
                    ErrorKind::Ambiguous,
                    format!(
                        "a batch of {} updates was answered with {} results; the updates may have been applied",
                        replies.len(),
                        done.len()
                    ),
                ));
                answer_all(replies, &err);
            }
            Err(err) => answer_all(replies, &err),
        }
    }
}

/// The running committer of a batcher. Dropped without the queue handed
/// back (a panic, or the task dropped at runtime shutdown), it hands it
/// back: see [`Batcher::committer_stopped`].
struct Committer<W: BatchWriter> {
    batcher: Arc<Batcher<W>>,
    /// The loop ended with the queue empty and handed back (a later
    /// committer may already own it).
    finished: bool,
}

impl<W: BatchWriter> Committer<W> {
    async fn run(mut self) {
        self.batcher.commit_loop().await;
        self.finished = true;
    }
}

impl<W: BatchWriter> Drop for Committer<W> {
    fn drop(&mut self) {
        if !self.finished {
            self.batcher.committer_stopped();
        }
    }
}

/// What a caught panic said, if it said it as text.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

impl<W: BatchWriter> Unqueue for Batcher<W> {
    fn unqueue(&self, id: u64) -> bool {
        let mut queue = self.lock();
        match queue.waiting.iter().position(|q| q.id == id) {
            Some(at) => {
                queue.waiting.remove(at);
                true
            }
            None => false,
        }
    }
}

/// Tells every caller of a failed batch the batch's error.
fn answer_all<D>(replies: Vec<oneshot::Sender<Result<D, LeaseError>>>, err: &LeaseError) {
    for reply in replies {
        let _ = reply.send(Err(copy_error(err)));
    }
}

/// The same error for another caller of the batch (errors own their
/// sources, so each caller gets a copy with everything but the source).
fn copy_error(err: &LeaseError) -> LeaseError {
    let store = |e: &CasError| {
        let mut copy = CasError::new(e.kind(), e.message());
        if let Some(key) = e.key() {
            copy = copy.with_key(key);
        }
        if let Some(status) = e.status() {
            copy = copy.with_status(status);
        }
        if let Some(code) = e.code() {
            copy = copy.with_code(code);
        }
        if let Some(after) = e.retry_after() {
            copy = copy.with_retry_after(after);
        }
        copy
    };
    match err {
        LeaseError::Store(e) => LeaseError::Store(store(e)),
        LeaseError::UnsafeStore(e) => LeaseError::UnsafeStore(store(e)),
        LeaseError::ForeignObject { key, found } => LeaseError::ForeignObject {
            key: key.clone(),
            found: found.clone(),
        },
        LeaseError::UnsupportedSchema { key, version } => LeaseError::UnsupportedSchema {
            key: key.clone(),
            version: *version,
        },
        LeaseError::Lost(reason) => LeaseError::Lost(reason.clone()),
        LeaseError::InsufficientValidity {
            remaining,
            required,
        } => LeaseError::InsufficientValidity {
            remaining: *remaining,
            required: *required,
        },
        LeaseError::FencedOut {
            presented,
            recorded,
        } => LeaseError::FencedOut {
            presented: *presented,
            recorded: *recorded,
        },
        LeaseError::InvalidConfig(message) => LeaseError::InvalidConfig(message.clone()),
        LeaseError::HeartbeatOutOfReach { key, heartbeat } => LeaseError::HeartbeatOutOfReach {
            key: key.clone(),
            heartbeat: heartbeat.clone(),
        },
        LeaseError::Cancelled => LeaseError::Cancelled,
        LeaseError::DeadlineExceeded(after) => LeaseError::DeadlineExceeded(*after),
        LeaseError::Codec { key, message } => LeaseError::Codec {
            key: key.clone(),
            message: message.clone(),
        },
        LeaseError::Exhausted { key, counter } => LeaseError::Exhausted {
            key: key.clone(),
            counter,
        },
        LeaseError::Contended { key, attempts } => LeaseError::Contended {
            key: key.clone(),
            attempts: *attempts,
        },
    }
}

/// One caller's update of a [`GroupResource`].
type Update<T> = Box<dyn FnMut(Option<&T>) -> T + Send>;

struct ResourceWriter<T> {
    resource: FencedResource<T>,
}

impl<T> BatchWriter for ResourceWriter<T>
where
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
{
    type Item = Update<T>;
    type Done = Applied<T>;

    async fn write(
        &self,
        token: u64,
        mut items: Vec<Update<T>>,
    ) -> Result<Vec<Applied<T>>, LeaseError> {
        let batch_len = items.len();
        let Some((first, rest)) = items.split_first_mut() else {
            return Ok(Vec::new());
        };
        // The values after each update, once per call of the batch's
        // function: the call that landed answers the callers.
        let mut calls: Vec<Vec<T>> = Vec::new();
        let (fenced, call) = self
            .resource
            .update_counted(token, |old| {
                let mut steps = Vec::with_capacity(batch_len);
                let mut value = first(old);
                for update in rest.iter_mut() {
                    let next = update(Some(&value));
                    steps.push(std::mem::replace(&mut value, next));
                }
                steps.push(value.clone());
                calls.push(steps);
                value
            })
            .await?;
        let steps = calls.into_iter().nth(call).ok_or_else(|| {
            LeaseError::Store(CasError::new(
                ErrorKind::Ambiguous,
                "the batch landed from a call it did not record; its updates were applied but their values are unknown",
            ))
        })?;
        Ok(steps
            .into_iter()
            .enumerate()
            .map(|(offset, value)| Applied {
                value,
                token,
                version: fenced.version.clone(),
                offset,
                batch_len,
            })
            .collect())
    }
}

/// A [`FencedResource`] with group commit: concurrent updates in this
/// process are applied in queue order and written together, one
/// conditional write per batch.
///
/// The committer is a task of the tokio runtime the first caller of a
/// batch runs on: call [`submit`](Self::submit) and
/// [`update`](Self::update) from within a tokio runtime (outside one they
/// fail with [`LeaseError::InvalidConfig`]). If that runtime shuts down,
/// updates still queued are refused with [`ErrorKind::NotSent`] and one in
/// flight with [`ErrorKind::Ambiguous`]; the next caller starts a new
/// committer. An update function that panics fails its batch with
/// [`ErrorKind::Ambiguous`] and leaves the handle working.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas_core::lease::LeaseError> {
/// use std::sync::Arc;
/// use casaas_core::MemoryStore;
/// use casaas_core::lease::{FencedResource, GroupCommitConfig, GroupResource};
///
/// let counter = FencedResource::<u64>::new(Arc::new(MemoryStore::new()), "counter")?;
/// let group = GroupResource::new(counter, GroupCommitConfig::default());
/// let (a, b) = tokio::join!(
///     group.update(1, |v| v.copied().unwrap_or(0) + 1),
///     group.update(1, |v| v.copied().unwrap_or(0) + 1),
/// );
/// let mut seen = [a?.value, b?.value];
/// seen.sort();
/// assert_eq!(seen, [1, 2]);
/// assert_eq!(group.resource().read().await?.unwrap().value, 2);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct GroupResource<T>
where
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
{
    resource: FencedResource<T>,
    batcher: Arc<Batcher<ResourceWriter<T>>>,
}

impl<T> Clone for GroupResource<T>
where
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
{
    fn clone(&self) -> Self {
        GroupResource {
            resource: self.resource.clone(),
            batcher: self.batcher.clone(),
        }
    }
}

impl<T> GroupResource<T>
where
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
{
    /// Group commit for `resource` (its knobs apply to every batch's
    /// write). Clones share one queue.
    pub fn new(resource: FencedResource<T>, config: GroupCommitConfig) -> Self {
        let writer = ResourceWriter {
            resource: resource.clone(),
        };
        GroupResource {
            resource,
            batcher: Batcher::new(writer, config),
        }
    }

    /// The resource, for reads.
    pub fn resource(&self) -> &FencedResource<T> {
        &self.resource
    }

    /// Queues `f` (waiting while the queue is full) and returns its ticket.
    /// `f` may be called once per attempt of its batch's write; only one
    /// result is ever stored, exactly as with [`FencedResource::update`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future while it waits for room queues nothing. Once it
    /// returns, the update is queued: see [`Ticket`].
    pub async fn submit<F>(&self, token: u64, f: F) -> Result<Ticket<Applied<T>>, LeaseError>
    where
        F: FnMut(Option<&T>) -> T + Send + 'static,
    {
        self.batcher.submit(token, 0, Box::new(f)).await
    }

    /// Applies `f` in the next batch fenced by `token` and returns once
    /// that batch's write landed. Errors are the batch's: every update of
    /// a deposed holder's batch is refused with [`LeaseError::FencedOut`];
    /// [`ErrorKind::Ambiguous`] means the whole batch may have been applied.
    ///
    /// # Cancel safety
    ///
    /// As [`submit`](GroupResource::submit)'s, then [`Ticket::wait`]'s:
    /// dropped before its batch is sealed, the update is never written;
    /// after, it may still be applied, unseen.
    pub async fn update<F>(&self, token: u64, f: F) -> Result<Applied<T>, LeaseError>
    where
        F: FnMut(Option<&T>) -> T + Send + 'static,
    {
        self.submit(token, f).await?.wait().await
    }
}

struct LogWriter<T> {
    log: FencedLog<T>,
}

impl<T> BatchWriter for LogWriter<T>
where
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    type Item = (T, serde_json::Value);
    type Done = LogEntry<T>;

    async fn write(
        &self,
        token: u64,
        items: Vec<Self::Item>,
    ) -> Result<Vec<LogEntry<T>>, LeaseError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let (values, records): (Vec<T>, Vec<serde_json::Value>) = items.into_iter().unzip();
        let (seq, version) = self.log.append_batch(token, &records).await?;
        Ok(values
            .into_iter()
            .enumerate()
            .map(|(offset, value)| LogEntry {
                seq,
                offset,
                token,
                value,
                version: version.clone(),
            })
            .collect())
    }
}

/// A [`FencedLog`] with group commit: concurrent appends in this process
/// are written together as the records of one entry, in queue order.
/// Every reader reads them, plain [`FencedLog`] handles in other processes
/// included: readers see records ([`FencedLog::entries`] gives one item per
/// record, [`FencedLog::read`] every record of an entry).
///
/// As for [`GroupResource`], [`submit`](Self::submit) and
/// [`append`](Self::append) must be called from within a tokio runtime,
/// whose task the committer is.
#[derive(Debug)]
pub struct GroupLog<T>
where
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    log: FencedLog<T>,
    batcher: Arc<Batcher<LogWriter<T>>>,
}

impl<T> Clone for GroupLog<T>
where
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    fn clone(&self) -> Self {
        GroupLog {
            log: self.log.clone(),
            batcher: self.batcher.clone(),
        }
    }
}

impl<T> GroupLog<T>
where
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    /// Group commit for `log` (its knobs apply to every batch's write).
    /// Clones share one queue.
    pub fn new(log: FencedLog<T>, config: GroupCommitConfig) -> Self {
        let writer = LogWriter { log: log.clone() };
        GroupLog {
            log,
            batcher: Batcher::new(writer, config),
        }
    }

    /// The log, for reads.
    pub fn log(&self) -> &FencedLog<T> {
        &self.log
    }

    /// Queues `value` (waiting while the queue is full) and returns its
    /// ticket.
    ///
    /// # Cancel safety
    ///
    /// As [`GroupResource::submit`]'s.
    pub async fn submit(&self, token: u64, value: T) -> Result<Ticket<LogEntry<T>>, LeaseError> {
        let record = serde_json::to_value(&value).map_err(|e| LeaseError::Codec {
            key: self.log.entry_key(0),
            message: e.to_string(),
        })?;
        let bytes = serde_json::to_vec(&record).map_or(0, |b| b.len());
        self.batcher.submit(token, bytes, (value, record)).await
    }

    /// Appends `value` in the next batch fenced by `token` and returns once
    /// that batch's entry landed: its entry number and offset. Errors are
    /// the batch's, as for [`GroupResource::update`].
    ///
    /// # Cancel safety
    ///
    /// As [`GroupResource::update`]'s: dropped before its batch is sealed,
    /// the value is never appended; after, it may still be, unseen.
    pub async fn append(&self, token: u64, value: T) -> Result<LogEntry<T>, LeaseError> {
        self.submit(token, value).await?.wait().await
    }
}
