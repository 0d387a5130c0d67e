use std::collections::HashSet;

/// Drops repeated context strings within one injection (seed 002): when several hooks or calls
/// of one step add the same context, the model reads it once. The agent loop runs every
/// `<system-reminder>` through one.
///
/// ```
/// use hookbus::builtins::ContextDeduplicator;
///
/// let mut dedup = ContextDeduplicator::new();
/// assert!(!dedup.is_duplicate("be brief"));
/// assert!(dedup.is_duplicate("be brief"));
/// assert_eq!(ContextDeduplicator::unique(["a", "b", "a"]), ["a", "b"]);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ContextDeduplicator {
    seen: HashSet<String>,
}

impl ContextDeduplicator {
    /// An empty deduplicator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `context` was seen before (and remembers it).
    pub fn is_duplicate(&mut self, context: &str) -> bool {
        !self.seen.insert(context.to_owned())
    }

    /// The strings in order, each once.
    pub fn unique<S: AsRef<str>>(contexts: impl IntoIterator<Item = S>) -> Vec<String> {
        let mut dedup = Self::new();
        contexts
            .into_iter()
            .filter(|c| !dedup.is_duplicate(c.as_ref()))
            .map(|c| c.as_ref().to_owned())
            .collect()
    }
}
