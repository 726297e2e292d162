//! `ncclGroupStart` / `ncclGroupEnd` as a state machine, per thread as in NCCL: groups
//! nest, calls made inside are queued, and the outermost end hands them over to be issued.
//! The first failure inside a group is remembered and returned by the outermost end,
//! which then issues nothing (NCCL's group error).

use crate::result::ApiError;

#[derive(Debug)]
pub struct GroupState<T> {
    depth: usize,
    queued: Vec<T>,
    error: Option<ApiError>,
}

impl<T> Default for GroupState<T> {
    fn default() -> Self {
        GroupState {
            depth: 0,
            queued: Vec::new(),
            error: None,
        }
    }
}

impl<T> GroupState<T> {
    pub fn start(&mut self) {
        self.depth += 1;
    }

    pub fn in_group(&self) -> bool {
        self.depth > 0
    }

    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Queues `op` for the outermost end.
    pub fn push(&mut self, op: T) {
        self.queued.push(op);
    }

    /// Remembers a failure inside the group (the first one wins).
    pub fn fail(&mut self, err: ApiError) {
        if self.in_group() && self.error.is_none() {
            self.error = Some(err);
        }
    }

    /// Closes one level: `Ok(None)` while still nested, `Ok(Some(ops))` at the outermost
    /// end (the ops in call order), the group's first failure instead if there was one.
    pub fn end(&mut self) -> Result<Option<Vec<T>>, ApiError> {
        if self.depth == 0 {
            return Err(ApiError::invalid_usage(
                "ncclGroupEnd without a matching ncclGroupStart on this thread",
            ));
        }
        self.depth -= 1;
        if self.depth > 0 {
            return Ok(None);
        }
        let ops = std::mem::take(&mut self.queued);
        match self.error.take() {
            Some(e) => Err(ApiError::new(
                e.code,
                format!(
                    "the group's {} queued call(s) were not issued: an earlier call in it failed: {}",
                    ops.len(),
                    e.message
                ),
            )),
            None => Ok(Some(ops)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::{NCCL_INVALID_ARGUMENT, NCCL_INVALID_USAGE};

    #[test]
    fn end_without_start_is_invalid_usage() {
        let mut g = GroupState::<u32>::default();
        let e = g.end().unwrap_err();
        assert_eq!(e.code, NCCL_INVALID_USAGE);
        assert!(e.message.contains("ncclGroupStart"));
        // The failed end changed nothing.
        assert_eq!(g.depth(), 0);
    }

    #[test]
    fn nested_groups_issue_at_the_outermost_end_in_order() {
        let mut g = GroupState::default();
        g.start();
        g.push(1);
        g.start();
        g.push(2);
        g.start();
        assert_eq!(g.end().unwrap(), None);
        g.push(3);
        assert_eq!(g.end().unwrap(), None);
        assert!(g.in_group());
        assert_eq!(g.end().unwrap(), Some(vec![1, 2, 3]));
        assert!(!g.in_group());
        // The next group starts empty.
        g.start();
        assert_eq!(g.end().unwrap(), Some(vec![]));
    }

    #[test]
    fn a_failure_inside_cancels_the_group_and_is_reported_once() {
        let mut g = GroupState::default();
        g.start();
        g.push(1);
        g.start();
        g.fail(ApiError::invalid_argument("first"));
        g.fail(ApiError::invalid_usage("second"));
        assert_eq!(g.end().unwrap(), None);
        let e = g.end().unwrap_err();
        assert_eq!(e.code, NCCL_INVALID_ARGUMENT);
        assert!(
            e.message.contains("first") && e.message.contains("1 queued"),
            "{}",
            e.message
        );
        g.start();
        g.push(4);
        assert_eq!(g.end().unwrap(), Some(vec![4]));
        // Outside a group there is nothing to remember.
        g.fail(ApiError::invalid_usage("outside"));
        g.start();
        assert_eq!(g.end().unwrap(), Some(vec![]));
    }
}
