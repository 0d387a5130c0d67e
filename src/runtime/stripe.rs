//! Values every session writes at every event, split into stripes so sessions on different
//! workers write different cache lines.
//!
//! A counter or an `Arc` that every session touches at every event moves its cache line from
//! core to core at each write: on a busy runtime that costs more than the rest of the write. A
//! [`Striped`] value holds one copy per stripe, each on cache lines of its own; a session always
//! uses the stripe of its id's hash, and readers combine the stripes.

/// One `T` per stripe, each aligned to its own cache lines.
pub(crate) struct Striped<T> {
    stripes: Box<[Padded<T>]>,
}

/// 128 bytes: two cache lines, as adjacent-line prefetch pairs them.
#[repr(align(128))]
struct Padded<T>(T);

impl<T> Striped<T> {
    /// One stripe per four hardware threads' worth of sessions: a power of two from 8 to 256.
    pub fn new(mut make: impl FnMut() -> T) -> Self {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let count = (threads * 4).next_power_of_two().clamp(8, 256);
        Self {
            stripes: (0..count).map(|_| Padded(make())).collect(),
        }
    }

    /// The stripe of `key` (a session's hash).
    #[inline]
    pub fn get(&self, key: u64) -> &T {
        // The count is a power of two.
        &self.stripes[(key as usize) & (self.stripes.len() - 1)].0
    }

    /// Every stripe.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.stripes.iter().map(|p| &p.0)
    }
}

impl<T: Default> Default for Striped<T> {
    fn default() -> Self {
        Self::new(T::default)
    }
}

impl<T> std::fmt::Debug for Striped<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Striped")
            .field("stripes", &self.stripes.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn keys_map_to_stripes_and_readers_see_every_stripe() {
        let counts: Striped<AtomicU64> = Striped::default();
        let n = counts.iter().count();
        assert!(n.is_power_of_two() && (8..=256).contains(&n));
        for key in 0..(3 * n as u64) {
            counts.get(key).fetch_add(1, Ordering::Relaxed);
        }
        // Every stripe got three keys, and the sum is every add.
        assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 3));
        assert_eq!(
            counts
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .sum::<u64>(),
            3 * n as u64
        );
        // Stripes are cache lines apart.
        let a = counts.get(0) as *const AtomicU64 as usize;
        let b = counts.get(1) as *const AtomicU64 as usize;
        assert!(b.abs_diff(a) >= 128);
    }
}
