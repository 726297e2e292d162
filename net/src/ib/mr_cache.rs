//! The registration cache: `ibv_reg_mr` pins pages and costs tens of microseconds to
//! milliseconds, and NCCL registers the same buffers again and again (every comm of a
//! channel, every `ncclCommRegister`), so registrations are shared per protection domain:
//! a request covered by a cached region (page-aligned) takes a reference to it, and the
//! region is deregistered when its last reference goes. Entries are keyed by the kind of
//! memory as well (`Memory`): a host range and a CUDA range never share a region (their
//! addresses live in different spaces). A dma-buf region is reused for any later dma-buf
//! range it covers, whatever fd that one came with: NCCL closes the fd right after
//! `regMrDmaBuf` (the MR keeps the dma-buf), so fd numbers are reused, while an address inside
//! a live registration always names the same GPU memory. Generic over the registering call so that the
//! bookkeeping is tested without a device.

use std::sync::{Arc, Mutex};

use crate::NetError;

/// The kind of memory a registration covers (NCCL's `regMr` type and `regMrDmaBuf`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Memory {
    /// Host memory: `ibv_reg_mr`.
    Host,
    /// CUDA memory through peer memory (`nvidia-peermem`): `ibv_reg_mr` on the device pointer.
    Cuda,
    /// A dma-buf: `base` is the address that offset 0 of the fd maps to, so that a range at
    /// address `a` is at offset `a - base` of the fd. Only the registration uses them.
    DmaBuf { fd: i32, base: usize },
}

impl Memory {
    /// Whether a region registered as `self` serves a request for `other` (covering
    /// assumed): same kind of memory; for dma-bufs the address alone decides.
    fn serves(self, other: Memory) -> bool {
        match (self, other) {
            (Memory::DmaBuf { .. }, Memory::DmaBuf { .. }) => true,
            (a, b) => a == b,
        }
    }
}

/// Registers page-aligned ranges; `Region` deregisters itself when dropped.
pub(crate) trait Registrar {
    type Region: Send + Sync;
    fn register(&self, memory: Memory, start: usize, len: usize) -> Result<Self::Region, NetError>;
}

struct Entry<T> {
    memory: Memory,
    start: usize,
    end: usize,
    refs: usize,
    region: Arc<T>,
}

/// Cached registrations of one protection domain.
pub(crate) struct MrCache<T> {
    page: usize,
    entries: Mutex<Vec<Entry<T>>>,
}

impl<T: Send + Sync> MrCache<T> {
    pub fn new(page: usize) -> Self {
        MrCache {
            page: page.max(1),
            entries: Mutex::new(Vec::new()),
        }
    }

    /// A region of `memory` covering `addr..addr+len`, registered through `registrar`
    /// unless cached.
    pub fn get<R: Registrar<Region = T>>(
        &self,
        registrar: &R,
        memory: Memory,
        addr: usize,
        len: usize,
    ) -> Result<Arc<T>, NetError> {
        // A dma-buf range is registered as given: widening it to pages could reach before
        // offset 0 of the fd.
        let page = match memory {
            Memory::DmaBuf { .. } => 1,
            Memory::Host | Memory::Cuda => self.page,
        };
        let start = addr / page * page;
        let end = addr.saturating_add(len.max(1)).div_ceil(page) * page;
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = entries
            .iter_mut()
            .find(|e| e.memory.serves(memory) && e.start <= start && end <= e.end)
        {
            e.refs += 1;
            return Ok(e.region.clone());
        }
        let region = Arc::new(registrar.register(memory, start, end - start)?);
        entries.push(Entry {
            memory,
            start,
            end,
            refs: 1,
            region: region.clone(),
        });
        Ok(region)
    }

    /// Gives back a reference from [`MrCache::get`]; the last one deregisters the region.
    pub fn put(&self, region: &Arc<T>) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = entries.iter().position(|e| Arc::ptr_eq(&e.region, region)) {
            entries[i].refs -= 1;
            if entries[i].refs == 0 {
                entries.swap_remove(i);
            }
        }
    }

    /// How many regions are registered now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counting(AtomicUsize);
    impl Registrar for Counting {
        type Region = (usize, usize);
        fn register(
            &self,
            _memory: Memory,
            start: usize,
            len: usize,
        ) -> Result<(usize, usize), NetError> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Ok((start, len))
        }
    }

    #[test]
    fn covered_ranges_share_a_region_until_the_last_reference_goes() {
        let reg = Counting(AtomicUsize::new(0));
        let cache = MrCache::new(4096);
        let a = cache
            .get(&reg, Memory::Host, 4096 * 10 + 100, 9000)
            .unwrap();
        assert_eq!(*a, (4096 * 10, 4096 * 3), "page-aligned outward");
        let b = cache.get(&reg, Memory::Host, 4096 * 11, 4096).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(reg.0.load(Ordering::Relaxed), 1);
        // Overlapping but not covered: a region of its own.
        let c = cache.get(&reg, Memory::Host, 4096 * 12, 8192).unwrap();
        assert_eq!(*c, (4096 * 12, 8192));
        assert_eq!((reg.0.load(Ordering::Relaxed), cache.len()), (2, 2));
        cache.put(&a);
        assert_eq!(cache.len(), 2);
        cache.put(&b);
        assert_eq!(cache.len(), 1, "the last reference deregisters");
        let d = cache.get(&reg, Memory::Host, 4096 * 10, 1).unwrap();
        assert_eq!(reg.0.load(Ordering::Relaxed), 3);
        cache.put(&d);
        cache.put(&c);
        assert_eq!(cache.len(), 0);
        let z = cache.get(&reg, Memory::Host, 4096 * 5, 0).unwrap();
        assert_eq!(*z, (4096 * 5, 4096), "an empty range still gets a page");
        cache.put(&z);
    }

    #[test]
    fn kinds_of_memory_never_share_a_region() {
        let reg = Counting(AtomicUsize::new(0));
        let cache = MrCache::new(4096);
        let host = cache.get(&reg, Memory::Host, 4096 * 10, 8192).unwrap();
        let cuda = cache.get(&reg, Memory::Cuda, 4096 * 10, 4096).unwrap();
        assert!(!Arc::ptr_eq(&host, &cuda), "same addresses, other memory");
        let buf = Memory::DmaBuf {
            fd: 7,
            base: 4096 * 8,
        };
        let a = cache.get(&reg, buf, 4096 * 10 + 100, 1000).unwrap();
        assert_eq!(
            *a,
            (4096 * 10 + 100, 1000),
            "a dma-buf range is not widened"
        );
        // NCCL closed fd 7 after registering; the same memory comes back under fd 8.
        let again = Memory::DmaBuf {
            fd: 8,
            base: 4096 * 9,
        };
        let b = cache.get(&reg, again, 4096 * 10 + 200, 900).unwrap();
        assert!(
            Arc::ptr_eq(&a, &b),
            "inside a live dma-buf region, whatever the fd"
        );
        let c = cache.get(&reg, again, 4096 * 10 + 200, 1000).unwrap();
        assert!(!Arc::ptr_eq(&a, &c), "past the region's end");
        assert_eq!((reg.0.load(Ordering::Relaxed), cache.len()), (4, 4));
        for r in [&host, &cuda, &a, &b, &c] {
            cache.put(r);
        }
        assert_eq!(cache.len(), 0);
    }
}
