//! The per-session scratchpad (HK-7): a typed key/value store the hooks of one session share, to
//! correlate `PreToolUse` with `PostToolUse`, count denials and the like. It is dropped at
//! `SessionEnd`. Its methods are synchronous, so no lock is ever held across an `.await`.

use std::any::Any;
use std::collections::HashMap;

use parking_lot::Mutex;

/// A typed key/value store shared by the hooks of one session.
#[derive(Default)]
pub struct Scratchpad {
    map: Mutex<HashMap<String, Box<dyn Any + Send + Sync>>>,
}

impl Scratchpad {
    /// An empty scratchpad.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores `value` under `key`, replacing what was there.
    pub fn insert<T: Any + Send + Sync>(&self, key: impl Into<String>, value: T) {
        self.map.lock().insert(key.into(), Box::new(value));
    }

    /// A clone of the value under `key`, if there is one of type `T`.
    pub fn get<T: Any + Clone>(&self, key: &str) -> Option<T> {
        self.map
            .lock()
            .get(key)
            .and_then(|v| v.downcast_ref::<T>())
            .cloned()
    }

    /// Removes and returns the value under `key`, if it is of type `T`.
    pub fn remove<T: Any>(&self, key: &str) -> Option<T> {
        let mut map = self.map.lock();
        if map.get(key).is_some_and(|v| v.is::<T>()) {
            map.remove(key)
                .and_then(|v| v.downcast::<T>().ok())
                .map(|b| *b)
        } else {
            None
        }
    }

    /// Updates the value under `key` in place (starting from `T::default()`), returning what
    /// `f` returns. A value of another type under the same key is replaced.
    pub fn update<T, R>(&self, key: &str, f: impl FnOnce(&mut T) -> R) -> R
    where
        T: Any + Send + Sync + Default,
    {
        let mut map = self.map.lock();
        let slot = map
            .entry(key.to_owned())
            .or_insert_with(|| Box::new(T::default()));
        if !slot.is::<T>() {
            *slot = Box::new(T::default());
        }
        let value = slot
            .downcast_mut::<T>()
            .expect("slot holds a T: checked just above");
        f(value)
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn clear(&self) {
        self.map.lock().clear();
    }
}

impl std::fmt::Debug for Scratchpad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scratchpad")
            .field("keys", &self.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_values() {
        let s = Scratchpad::new();
        s.insert("n", 3u32);
        assert_eq!(s.get::<u32>("n"), Some(3));
        assert_eq!(s.get::<String>("n"), None);
        assert_eq!(
            s.update("n", |n: &mut u32| {
                *n += 1;
                *n
            }),
            4
        );
        assert_eq!(
            s.update("fresh", |v: &mut Vec<u8>| {
                v.push(1);
                v.len()
            }),
            1
        );
        assert_eq!(s.remove::<u32>("n"), Some(4));
        assert_eq!(s.len(), 1);
    }
}
