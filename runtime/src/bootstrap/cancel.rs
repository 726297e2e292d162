//! Cancelling a bootstrap from outside, its init included.
//!
//! An [`AbortHandle`](super::AbortHandle) exists once `Bootstrap::init` has returned; a
//! program that gives up on a communicator whose init still waits for its peers (libnccl's
//! `ncclCommAbort` of a non-blocking communicator initialising in the background, as NCCL's
//! abort ends its init's waits) needs a handle before that. A [`Cancel`] is made first and
//! given to init through [`BootstrapOptions::cancel`](super::BootstrapOptions); cancelling
//! it aborts every bootstrap it was given to, now or as soon as one starts, and every wait
//! in them ends with [`BootstrapError::Aborted`](super::BootstrapError).

use std::net::Shutdown;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use weft_core::wire::bootstrap::AbortReason;

use super::inbox::{AbortNote, Shared};

/// Cancels the bootstraps it is given to (clones share one state).
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<Mutex<CancelState>>);

#[derive(Debug, Default)]
struct CancelState {
    /// Why, once cancelled.
    cancelled: Option<String>,
    /// The bootstraps started with this token (dropped ones leave dead entries).
    targets: Vec<Weak<Shared>>,
}

impl Cancel {
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Aborts every bootstrap started with this token (and not released), and any started
    /// later, with `why`: their waits end with [`BootstrapError::Aborted`] carrying it; their
    /// connections close, so peers fail naming this rank.
    ///
    /// [`BootstrapError::Aborted`]: super::BootstrapError::Aborted
    pub fn cancel(&self, why: &str) {
        let targets: Vec<Arc<Shared>> = {
            let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            state.cancelled.get_or_insert_with(|| why.to_string());
            state.targets.iter().filter_map(Weak::upgrade).collect()
        };
        for shared in targets {
            abort(&shared, why);
        }
    }

    /// Lets go of the bootstraps started so far: a later cancel leaves them alone. For a
    /// token that guards an init only: the bootstrap an init made lives on in its
    /// communicator, whose teardown still needs it.
    pub fn release(&self) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .targets
            .clear();
    }

    /// Registers a starting bootstrap: aborted now if the token already was cancelled.
    pub(super) fn watch(&self, shared: &Arc<Shared>) {
        let why = {
            let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            state.targets.retain(|t| t.strong_count() > 0);
            state.targets.push(Arc::downgrade(shared));
            state.cancelled.clone()
        };
        if let Some(why) = why {
            abort(shared, &why);
        }
    }
}

/// Two options are equal when they cancel the same bootstraps.
impl PartialEq for Cancel {
    fn eq(&self, other: &Cancel) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Cancel {}

fn abort(shared: &Shared, why: &str) {
    shared.abort(
        AbortNote {
            by: None,
            culprit: None,
            reason: AbortReason::User,
            text: why.to_string(),
        },
        Shutdown::Both,
    );
}
