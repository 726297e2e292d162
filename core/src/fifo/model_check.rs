//! Model check of the protocol: a sender and a receiver running a sequence of kernels over
//! one connection, with ghost state per slot recording what the slot holds.
//!
//! Every interleaving of the two sides' atomic actions (acquire, post, load at a kernel
//! boundary) is explored breadth-first for small geometries; proptest drives long random
//! schedules on NCCL's geometries with counters that start near `u64::MAX`. In every state
//! reached: no slot is written while it holds data not yet read, no slot is read before the
//! step it should hold was posted, the sizes FIFO agrees, counters never go back, and unless
//! both sides have finished, some action is possible (no deadlock; since every action moves a
//! counter forward and the run is finite, every schedule then ends).

use std::collections::{HashSet, VecDeque};
use std::format;
use std::string::String;
use std::vec::Vec;

use proptest::prelude::*;

use super::*;

/// What a slot holds, from the data's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Ghost {
    Free,
    Writing(u64),
    Full(u64),
    Reading(u64),
}

/// One side's progress through the kernel plan.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Side<T> {
    /// Loaded kernel's end state; `None` between kernels.
    end: Option<T>,
    /// Kernels loaded so far.
    kernel: usize,
    /// Slices acquired in the loaded kernel.
    acquired: usize,
    /// Acquired, not posted, oldest first.
    held: VecDeque<Slice>,
    /// The connection's saved step (written at kernel end).
    saved: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct World {
    sender: Side<StepSender>,
    receiver: Side<StepReceiver>,
    head: u64,
    tail: u64,
    slots: [Ghost; NCCL_STEPS],
    sizes: SizesFifo,
}

#[derive(Debug, Clone, Copy)]
enum Action {
    SendLoad,
    SendAcquire,
    SendPost,
    SendFinish,
    RecvLoad,
    RecvAcquire,
    RecvPost,
    RecvFinish,
}

const ACTIONS: [Action; 8] = [
    Action::SendLoad,
    Action::SendAcquire,
    Action::SendPost,
    Action::SendFinish,
    Action::RecvLoad,
    Action::RecvAcquire,
    Action::RecvPost,
    Action::RecvFinish,
];

/// Bytes the sender writes for a step: any function of the step, so a mix-up shows.
fn bytes_for(step: u64) -> u32 {
    (step.wrapping_mul(2654435761) >> 7) as u32
}

struct Model {
    geometry: FifoGeometry,
    plan: Vec<usize>,
}

impl Model {
    fn start(&self, saved: u64) -> World {
        fn side<T>(saved: u64) -> Side<T> {
            Side {
                end: None,
                kernel: 0,
                acquired: 0,
                held: VecDeque::new(),
                saved,
            }
        }
        World {
            sender: side(saved),
            receiver: side(saved),
            head: saved,
            tail: saved,
            slots: [Ghost::Free; NCCL_STEPS],
            sizes: SizesFifo::new(),
        }
    }

    fn done(&self, w: &World) -> bool {
        w.sender.kernel == self.plan.len()
            && w.sender.end.is_none()
            && w.receiver.kernel == self.plan.len()
            && w.receiver.end.is_none()
    }

    fn slices(&self, kernel: usize) -> usize {
        self.plan[kernel - 1]
    }

    /// Applies `action` if it is enabled: `Ok(None)` if not, `Err` on a violated property.
    fn step(&self, w: &World, action: Action) -> Result<Option<World>, String> {
        let mut n = w.clone();
        match action {
            Action::SendLoad => {
                if n.sender.end.is_some() || n.sender.kernel == self.plan.len() {
                    return Ok(None);
                }
                n.sender.end = Some(StepSender::load(self.geometry, n.sender.saved));
                n.sender.kernel += 1;
                n.sender.acquired = 0;
            }
            Action::SendAcquire => {
                let Some(s) = n.sender.end.as_mut() else {
                    return Ok(None);
                };
                if n.sender.acquired == self.slices(n.sender.kernel) {
                    return Ok(None);
                }
                let Some(slice) = s.acquire(n.head).map_err(|e| format!("sender: {e}"))? else {
                    return Ok(None);
                };
                for (i, slot) in slice.slots().enumerate() {
                    let g = &mut n.slots[slot];
                    if *g != Ghost::Free {
                        return Err(format!("sender overwrites slot {slot} holding {g:?}"));
                    }
                    *g = Ghost::Writing(slice.step().wrapping_add(i as u64));
                }
                n.sizes
                    .record(&slice, bytes_for(slice.step()))
                    .map_err(|e| format!("record: {e}"))?;
                n.sender.acquired += 1;
                n.sender.held.push_back(slice);
            }
            Action::SendPost => {
                let Some(slice) = n.sender.held.pop_front() else {
                    return Ok(None);
                };
                let s = n.sender.end.as_mut().ok_or("held slice without kernel")?;
                for slot in slice.slots() {
                    let Ghost::Writing(step) = n.slots[slot] else {
                        return Err(format!("slot {slot} not being written at post"));
                    };
                    n.slots[slot] = Ghost::Full(step);
                }
                let tail = s.post(slice).map_err(|e| format!("sender post: {e}"))?;
                if steps_ahead(tail, n.tail) <= 0 || tail != slice.end_step() {
                    return Err(format!("tail {tail} after {} for {slice:?}", n.tail));
                }
                n.tail = tail;
            }
            Action::SendFinish => {
                let Some(s) = n.sender.end else {
                    return Ok(None);
                };
                if n.sender.acquired != self.slices(n.sender.kernel) || !n.sender.held.is_empty() {
                    return Ok(None);
                }
                n.sender.saved = s.posted_step();
                n.sender.end = None;
            }
            Action::RecvLoad => {
                if n.receiver.end.is_some() || n.receiver.kernel == self.plan.len() {
                    return Ok(None);
                }
                let r = StepReceiver::load(self.geometry, n.receiver.saved);
                // Return the credits that the rounding skipped.
                if steps_ahead(r.posted_step(), n.head) < 0 {
                    return Err(format!(
                        "head goes back to {} from {}",
                        r.posted_step(),
                        n.head
                    ));
                }
                n.head = r.posted_step();
                n.receiver.end = Some(r);
                n.receiver.kernel += 1;
                n.receiver.acquired = 0;
            }
            Action::RecvAcquire => {
                let Some(r) = n.receiver.end.as_mut() else {
                    return Ok(None);
                };
                if n.receiver.acquired == self.slices(n.receiver.kernel) {
                    return Ok(None);
                }
                let Some(slice) = r.acquire(n.tail).map_err(|e| format!("receiver: {e}"))? else {
                    return Ok(None);
                };
                for (i, slot) in slice.slots().enumerate() {
                    let want = slice.step().wrapping_add(i as u64);
                    let g = &mut n.slots[slot];
                    if *g != Ghost::Full(want) {
                        return Err(format!("receiver reads slot {slot} for step {want}: {g:?}"));
                    }
                    *g = Ghost::Reading(want);
                }
                let size = n.sizes.peek(&slice);
                if size != Some(bytes_for(slice.step())) {
                    return Err(format!("size of step {} reads {size:?}", slice.step()));
                }
                n.receiver.acquired += 1;
                n.receiver.held.push_back(slice);
            }
            Action::RecvPost => {
                let Some(slice) = n.receiver.held.pop_front() else {
                    return Ok(None);
                };
                let r = n.receiver.end.as_mut().ok_or("held slice without kernel")?;
                for slot in slice.slots() {
                    let Ghost::Reading(_) = n.slots[slot] else {
                        return Err(format!("slot {slot} not being read at post"));
                    };
                    n.slots[slot] = Ghost::Free;
                }
                n.sizes.take(&slice).map_err(|e| format!("take: {e}"))?;
                let head = r.post(slice).map_err(|e| format!("receiver post: {e}"))?;
                if steps_ahead(head, n.head) <= 0 {
                    return Err(format!("head {head} after {}", n.head));
                }
                n.head = head;
            }
            Action::RecvFinish => {
                let Some(r) = n.receiver.end else {
                    return Ok(None);
                };
                if n.receiver.acquired != self.slices(n.receiver.kernel)
                    || !n.receiver.held.is_empty()
                {
                    return Ok(None);
                }
                n.receiver.saved = r.posted_step();
                n.receiver.end = None;
            }
        }
        Ok(Some(n))
    }

    /// What must hold once both sides are done: everything sent was received and freed.
    fn check_done(&self, w: &World, start: u64) -> Result<(), String> {
        let total: u64 = self.plan.iter().map(|&n| n as u64).sum();
        let sps = self.geometry.step_per_slice();
        if w.sender.saved != w.receiver.saved || w.head != w.receiver.saved {
            return Err(format!("end counters disagree: {w:?}"));
        }
        // Skipped steps (rounding) are under a chunk per kernel.
        let advanced = w.sender.saved.wrapping_sub(start);
        let slack = self.geometry.chunk_steps() * self.plan.len() as u64;
        if advanced < total * sps || advanced >= total * sps + slack {
            return Err(format!("advanced {advanced} steps for {total} slices"));
        }
        if w.slots.iter().any(|g| *g != Ghost::Free) || w.sizes != SizesFifo::new() {
            return Err(format!("slots not empty at the end: {w:?}"));
        }
        Ok(())
    }

    /// Breadth-first over every interleaving; returns the number of states.
    fn explore(&self, start: u64) -> Result<usize, String> {
        let first = self.start(start);
        let mut seen = HashSet::new();
        let mut queue = VecDeque::new();
        seen.insert(first.clone());
        queue.push_back(first);
        while let Some(w) = queue.pop_front() {
            let mut enabled = false;
            for action in ACTIONS {
                if let Some(n) = self
                    .step(&w, action)
                    .map_err(|e| format!("{e}\n  after {action:?} from {w:?}"))?
                {
                    enabled = true;
                    if seen.insert(n.clone()) {
                        queue.push_back(n);
                    }
                }
            }
            if !enabled {
                if !self.done(&w) {
                    return Err(format!("deadlock in {w:?}"));
                }
                self.check_done(&w, start)?;
            }
        }
        Ok(seen.len())
    }

    /// One schedule: `choices` pick among the enabled actions; the run goes to the end.
    fn run(&self, start: u64, choices: &[u16]) -> Result<(), String> {
        let mut w = self.start(start);
        let mut i = 0usize;
        loop {
            let mut next = Vec::new();
            for action in ACTIONS {
                if let Some(n) = self.step(&w, action)? {
                    next.push(n);
                }
            }
            if next.is_empty() {
                if !self.done(&w) {
                    return Err(format!("deadlock in {w:?}"));
                }
                return self.check_done(&w, start);
            }
            let pick = choices.get(i % choices.len().max(1)).copied().unwrap_or(0) as usize;
            i += 1;
            w = next.swap_remove(pick % next.len());
        }
    }
}

/// Every geometry with up to 8 slots and 2 slices per chunk, several kernel plans (with
/// empty kernels, and enough slices to go round the ring more than twice), started at 0,
/// off a chunk boundary, and just before the counters wrap.
#[test]
fn every_interleaving_is_safe_and_live() {
    let mut states = 0usize;
    let mut runs = 0usize;
    for slots in [1usize, 2, 4, 8] {
        for sps in [1usize, 2, 4] {
            for spc in [1usize, 2] {
                let Ok(geometry) = FifoGeometry::new(slots, sps, spc) else {
                    continue;
                };
                let around = 2 * slots / sps + 1;
                let plans: [Vec<usize>; 3] = [vec![around], vec![1, 0, 3, 1], vec![3, 2]];
                for plan in plans {
                    let model = Model { geometry, plan };
                    for start in [0, 1, 3, u64::MAX - 4, u64::MAX - 2, u64::MAX] {
                        states += model.explore(start).unwrap_or_else(|e| {
                            panic!(
                                "slots {slots} sps {sps} spc {spc} plan {:?} start {start}: {e}",
                                model.plan
                            )
                        });
                        runs += 1;
                    }
                }
            }
        }
    }
    // 18 geometries x 3 plans x 6 starts, and the searches were not trivial.
    assert_eq!(runs, 324);
    std::println!("{runs} configurations, {states} states");
    assert!(states > 50_000, "only {states} states explored");
}

use std::vec;

fn geometry_strategy() -> impl Strategy<Value = FifoGeometry> {
    // NCCL's SIMPLE geometries (p2p 1x1, all-reduce 2x2, broadcast-like 4x1...) and small rings.
    (0u32..4, 0u32..4, 0u32..3).prop_filter_map("valid geometry", |(s, p, c)| {
        FifoGeometry::new(1 << s, 1 << p, 1 << c).ok()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn random_schedules_near_wrap(
        geometry in geometry_strategy(),
        plan in prop::collection::vec(0usize..12, 1..5),
        back in 0u64..40,
        choices in prop::collection::vec(any::<u16>(), 1..64),
    ) {
        let model = Model { geometry, plan };
        prop_assert_eq!(model.run(u64::MAX - back, &choices), Ok(()));
    }

    #[test]
    fn random_schedules_anywhere(
        geometry in geometry_strategy(),
        plan in prop::collection::vec(0usize..20, 1..4),
        start in any::<u64>(),
        choices in prop::collection::vec(any::<u16>(), 1..64),
    ) {
        let model = Model { geometry, plan };
        prop_assert_eq!(model.run(start, &choices), Ok(()));
    }
}
