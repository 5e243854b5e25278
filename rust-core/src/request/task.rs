//! A task: a request no HTTP client sent. Another PHP thread sends a payload
//! (php_worker_task()) to a task worker, whose script runs it through
//! php_worker_handle_task() in the cycle of a worker request; what the handler returns,
//! or why it failed, goes back to the sender instead of to the host.

use crossbeam_channel::Sender;

/// What came of one task.
pub type TaskResult = Result<Vec<u8>, TaskError>;

/// Why a task has no result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskError {
    /// Its handler threw, returned something other than a string, or its script ended
    /// while it ran (a fatal error, exit()).
    Failed(String),
    /// It did not end within the sender's timeout.
    Timeout,
    /// It never ran: no such task worker, a full queue, the engine stopping...
    Refused(String),
}

impl TaskError {
    /// The reason in words, for the sender's exception.
    pub fn message(&self) -> &str {
        match self {
            TaskError::Failed(m) | TaskError::Refused(m) => m,
            TaskError::Timeout => "it did not finish within its timeout",
        }
    }
}

/// Where a task's result goes: the `index`-th answer of the sender's call. The sender
/// may have stopped waiting (a timeout): the result is then dropped.
pub struct TaskReply {
    index: usize,
    tx: Sender<(usize, TaskResult)>,
}

impl TaskReply {
    pub fn new(index: usize, tx: Sender<(usize, TaskResult)>) -> TaskReply {
        TaskReply { index, tx }
    }

    pub fn send(&self, result: TaskResult) {
        let _ = self.tx.send((self.index, result));
    }
}
