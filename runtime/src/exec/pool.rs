//! Persistent worker threads that run a call's channels in parallel.
//!
//! Spawning a thread costs tens of microseconds, more than a whole small all-reduce, so a
//! communicator keeps its workers for its lifetime. The calling thread runs the first job
//! itself: a call on one channel (every small call) never wakes a worker at all.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use super::error::ExecError;

/// One unit of work: a channel's program, or a group's transfers to one peer. It owns what
/// it uses (connections behind `Arc<Mutex>`, buffer addresses), so it can move to a worker.
pub type Job = Box<dyn FnOnce() -> Result<(), ExecError> + Send + 'static>;

type Done = (usize, Result<(), ExecError>);

#[derive(Debug)]
struct Worker {
    jobs: Sender<(usize, Job)>,
    handle: JoinHandle<()>,
}

/// Worker threads, created on demand and reused by every call.
#[derive(Debug)]
pub struct WorkerPool {
    name: String,
    workers: Vec<Worker>,
    done_tx: Sender<Done>,
    done_rx: Receiver<Done>,
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

/// Makes this thread's sleeps end on time: Linux lets a sleep overrun by the thread's timer
/// slack, 50 us by default, which a FIFO wait that has reached its sleep phase would add to
/// every hop of a ring (a small all-reduce crosses `2(n-1)` of them). 1 us keeps waking a
/// rank that waits on an oversubscribed host prompt, at the cost of more precise timers.
pub fn tighten_timer_slack() {
    const SLACK_NS: libc::c_ulong = 1000;
    // SAFETY: PR_SET_TIMERSLACK takes a value and changes only this thread's timer slack.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, SLACK_NS, 0, 0, 0) };
    if rc != 0 {
        log::debug!(
            "PR_SET_TIMERSLACK: {} (waits may wake up to 50 us late)",
            std::io::Error::last_os_error()
        );
    }
}

/// Runs `job`, turning a panic into [`ExecError::Panic`].
pub fn run_caught(job: Job) -> Result<(), ExecError> {
    catch(job)
}

/// Runs `work` on this thread, turning a panic into [`ExecError::Panic`] (without boxing it).
pub fn catch(work: impl FnOnce() -> Result<(), ExecError>) -> Result<(), ExecError> {
    catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|p| Err(ExecError::Panic(panic_text(&*p))))
}

impl WorkerPool {
    /// No threads yet; `name` prefixes their names (`weft-r3-w1`: rank 3, worker 1).
    pub fn new(name: impl Into<String>) -> Self {
        let (done_tx, done_rx) = channel();
        WorkerPool {
            name: name.into(),
            workers: Vec::new(),
            done_tx,
            done_rx,
        }
    }

    /// Worker threads started so far.
    pub fn len(&self) -> usize {
        self.workers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    fn grow(&mut self, n: usize) -> Result<(), ExecError> {
        while self.workers.len() < n {
            let (tx, rx) = channel::<(usize, Job)>();
            let done = self.done_tx.clone();
            let name = format!("{}-w{}", self.name, self.workers.len().saturating_add(1));
            let handle = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || {
                    tighten_timer_slack();
                    while let Ok((index, job)) = rx.recv() {
                        if done.send((index, run_caught(job))).is_err() {
                            break;
                        }
                    }
                })
                .map_err(|e| {
                    ExecError::InvalidArgument(format!("cannot start worker thread {name}: {e}"))
                })?;
            self.workers.push(Worker { jobs: tx, handle });
        }
        Ok(())
    }

    /// Runs every job, the first on this thread and the others on workers, and returns
    /// their results in order once all have finished (also when one fails or panics: the
    /// jobs use the caller's buffers, so none may outlive the call).
    pub fn run(&mut self, mut jobs: Vec<Job>) -> Vec<Result<(), ExecError>> {
        let n = jobs.len();
        let mut results: Vec<Option<Result<(), ExecError>>> = (0..n).map(|_| None).collect();
        if n == 0 {
            return Vec::new();
        }
        let rest: Vec<Job> = jobs.drain(1..).collect();
        let first = jobs.pop();
        let mut pending = 0usize;
        if let Err(e) = self.grow(rest.len()) {
            // Run everything here, one after the other: slower, but it completes.
            let mut all: Vec<Job> = first.into_iter().chain(rest).collect();
            if !all.is_empty() {
                log::warn!("{e}; running the channels one after the other");
            }
            return all.drain(..).map(run_caught).collect();
        }
        for (k, job) in rest.into_iter().enumerate() {
            let index = k.saturating_add(1);
            match self.workers.get(k) {
                Some(worker) => match worker.jobs.send((index, job)) {
                    Ok(()) => pending = pending.saturating_add(1),
                    Err(std::sync::mpsc::SendError((_, job))) => {
                        if let Some(slot) = results.get_mut(index) {
                            *slot = Some(run_caught(job));
                        }
                    }
                },
                None => {
                    if let Some(slot) = results.get_mut(index) {
                        *slot = Some(run_caught(job));
                    }
                }
            }
        }
        if let (Some(job), Some(slot)) = (first, results.get_mut(0)) {
            *slot = Some(run_caught(job));
        }
        while pending > 0 {
            match self.done_rx.recv() {
                Ok((index, result)) => {
                    if let Some(slot) = results.get_mut(index) {
                        *slot = Some(result);
                    }
                    pending = pending.saturating_sub(1);
                }
                // Unreachable while `self.done_tx` lives; stop rather than spin.
                Err(_) => break,
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(ExecError::Panic("a worker thread vanished".into()))))
            .collect()
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        for worker in self.workers.drain(..) {
            // Closing the job channel ends the worker's loop; it holds no job now (`run`
            // waits for all of them), so the join is immediate.
            drop(worker.jobs);
            if worker.handle.join().is_err() {
                log::warn!("{}: a worker thread panicked while exiting", self.name);
            }
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn runs_every_job_and_reuses_workers() {
        let mut pool = WorkerPool::new("t");
        let hits = Arc::new(AtomicUsize::new(0));
        for round in 1..4 {
            let jobs: Vec<Job> = (0..round + 1)
                .map(|k| {
                    let hits = Arc::clone(&hits);
                    Box::new(move || {
                        hits.fetch_add(1, Ordering::Relaxed);
                        if k == 2 {
                            Err(ExecError::InvalidArgument(format!("job {k}")))
                        } else {
                            Ok(())
                        }
                    }) as Job
                })
                .collect();
            let results = pool.run(jobs);
            assert_eq!(results.len(), round + 1);
            for (k, r) in results.iter().enumerate() {
                assert_eq!(r.is_err(), k == 2, "round {round} job {k}: {r:?}");
            }
            assert_eq!(pool.len(), round);
        }
        assert_eq!(hits.load(Ordering::Relaxed), 2 + 3 + 4);
    }

    #[test]
    fn a_panicking_job_is_an_error_not_a_crash() {
        let mut pool = WorkerPool::new("t");
        let jobs: Vec<Job> = vec![Box::new(|| Ok(())), Box::new(|| panic!("boom in worker"))];
        let results = pool.run(jobs);
        assert!(results[0].is_ok());
        assert!(matches!(&results[1], Err(ExecError::Panic(m)) if m.contains("boom")));
        // The worker survives and runs the next call.
        let results = pool.run(vec![Box::new(|| Ok(())), Box::new(|| Ok(()))]);
        assert!(results.iter().all(Result::is_ok));
    }
}
