//! The registration cache: `ibv_reg_mr` pins pages and costs tens of microseconds to
//! milliseconds, and NCCL registers the same buffers again and again (every comm of a
//! channel, every `ncclCommRegister`), so registrations are shared per protection domain:
//! a request covered by a cached region (page-aligned) takes a reference to it, and the
//! region is deregistered when its last reference goes. Generic over the registering call
//! so that the bookkeeping is tested without a device.

use std::sync::{Arc, Mutex};

use crate::NetError;

/// Registers page-aligned ranges; `Region` deregisters itself when dropped.
pub(crate) trait Registrar {
    type Region: Send + Sync;
    fn register(&self, start: usize, len: usize) -> Result<Self::Region, NetError>;
}

struct Entry<T> {
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

    /// A region covering `addr..addr+len`, registered through `registrar` unless cached.
    pub fn get<R: Registrar<Region = T>>(
        &self,
        registrar: &R,
        addr: usize,
        len: usize,
    ) -> Result<Arc<T>, NetError> {
        let start = addr / self.page * self.page;
        let end = addr.saturating_add(len.max(1)).div_ceil(self.page) * self.page;
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = entries
            .iter_mut()
            .find(|e| e.start <= start && end <= e.end)
        {
            e.refs += 1;
            return Ok(e.region.clone());
        }
        let region = Arc::new(registrar.register(start, end - start)?);
        entries.push(Entry {
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
        fn register(&self, start: usize, len: usize) -> Result<(usize, usize), NetError> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Ok((start, len))
        }
    }

    #[test]
    fn covered_ranges_share_a_region_until_the_last_reference_goes() {
        let reg = Counting(AtomicUsize::new(0));
        let cache = MrCache::new(4096);
        let a = cache.get(&reg, 4096 * 10 + 100, 9000).unwrap();
        assert_eq!(*a, (4096 * 10, 4096 * 3), "page-aligned outward");
        let b = cache.get(&reg, 4096 * 11, 4096).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(reg.0.load(Ordering::Relaxed), 1);
        // Overlapping but not covered: a region of its own.
        let c = cache.get(&reg, 4096 * 12, 8192).unwrap();
        assert_eq!(*c, (4096 * 12, 8192));
        assert_eq!((reg.0.load(Ordering::Relaxed), cache.len()), (2, 2));
        cache.put(&a);
        assert_eq!(cache.len(), 2);
        cache.put(&b);
        assert_eq!(cache.len(), 1, "the last reference deregisters");
        let d = cache.get(&reg, 4096 * 10, 1).unwrap();
        assert_eq!(reg.0.load(Ordering::Relaxed), 3);
        cache.put(&d);
        cache.put(&c);
        assert_eq!(cache.len(), 0);
        let z = cache.get(&reg, 4096 * 5, 0).unwrap();
        assert_eq!(*z, (4096 * 5, 4096), "an empty range still gets a page");
    }
}
