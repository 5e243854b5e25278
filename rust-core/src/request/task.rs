//! A task: a request no HTTP client sent. Another PHP thread sends a payload
//! (php_worker_task()) to a task worker, whose script runs it through
//! php_worker_handle_task() in the cycle of a worker request; what the handler returns,
//! or why it failed, goes back to the sender instead of to the host.

use std::sync::Arc;

use crossbeam_channel::Sender;

use crate::abi::types::PoolId;

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

/// The task workers a task was sent through, the first sender's first: the chain of the
/// task its sender was running, then the sender's own task worker. A task may not go to
/// a worker already in its chain (src/runtime/task.rs says why).
#[derive(Clone, Default, Debug)]
pub struct TaskChain(Arc<[(PoolId, Arc<str>)]>);

impl TaskChain {
    /// This chain, then the task worker `pool`, named `name`.
    pub fn then(&self, pool: PoolId, name: &Arc<str>) -> TaskChain {
        TaskChain(self.0.iter().cloned().chain([(pool, name.clone())]).collect())
    }

    /// Why a task sent along this chain cannot go to the task worker `pool`, named
    /// `name`: the worker is in the chain, and the task would close a cycle. None when
    /// it can go.
    pub fn refusal(&self, pool: PoolId, name: &str) -> Option<String> {
        let first = self.0.iter().position(|(p, _)| *p == pool)?;
        if first + 1 == self.0.len() {
            return Some(format!(
                "a thread of task worker {name} cannot wait for a task of its own worker (its threads could all wait for each other)"
            ));
        }
        let cycle: Vec<&str> = self.0[first..].iter().map(|(_, n)| &**n).chain([name]).collect();
        Some(format!(
            "tasks cannot go round a cycle of task workers ({}): their threads could all end up waiting for each other",
            cycle.join(" → ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(workers: &[(PoolId, &str)]) -> TaskChain {
        workers.iter().fold(TaskChain::default(), |c, (p, n)| c.then(*p, &Arc::from(*n)))
    }

    #[test]
    fn a_task_may_go_anywhere_but_back_along_its_chain() {
        assert_eq!(TaskChain::default().refusal(1, "a"), None, "a request's task goes anywhere");
        let ab = chain(&[(1, "a"), (2, "b")]);
        assert_eq!(ab.refusal(3, "c"), None);
        assert_eq!(
            ab.refusal(1, "a").as_deref(),
            Some("tasks cannot go round a cycle of task workers (a → b → a): their threads could all end up waiting for each other")
        );
        assert_eq!(
            chain(&[(3, "c"), (1, "a"), (2, "b")]).refusal(1, "a").as_deref(),
            Some("tasks cannot go round a cycle of task workers (a → b → a): their threads could all end up waiting for each other"),
            "the cycle is named from the worker it returns to"
        );
        assert!(ab.refusal(2, "b").unwrap().contains("cannot wait for a task of its own worker"), "the shortest cycle");
        assert_eq!(chain(&[(1, "a")]).refusal(1, "renamed").map(|m| m.contains("own worker")), Some(true), "workers are told apart by pool");
        assert_eq!(chain(&[(1, "a")]).refusal(2, "a"), None);
    }
}
