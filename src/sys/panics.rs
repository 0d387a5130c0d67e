//! Telling a panic hookbus catches from one that ends a task.
//!
//! hookbus catches panics where a caller's code runs inside it (FL-3): hooks, observers, tools,
//! the approver, the model provider, and its own permission evaluation and shell parser; each
//! becomes a failure that its policy handles. A panic anywhere else ends the task it happens in,
//! which tokio does not report. A process-wide panic hook can tell the two apart with
//! [`panic_is_contained`]; the `hookbus` binary uses it to exit non-zero after any panic that
//! was not caught.

use std::any::Any;
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Whether the panic being reported now (call it from a panic hook, see
/// [`std::panic::set_hook`]) happens inside a call that hookbus catches and turns into a failure.
///
/// ```
/// std::panic::set_hook(Box::new(|info| {
///     if !hookbus::panic_is_contained() {
///         eprintln!("a task died: {info}");
///     }
/// }));
/// # let _ = std::panic::take_hook();
/// ```
pub fn panic_is_contained() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// The message of a caught panic's payload.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_owned()
    }
}

/// Marks the current thread as inside a caught call until dropped (also while unwinding).
struct Enter;

impl Enter {
    fn new() -> Self {
        DEPTH.with(|d| d.set(d.get().saturating_add(1)));
        Self
    }
}

impl Drop for Enter {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// Runs `f`, whose panics the caller catches.
pub(crate) fn contained<T>(f: impl FnOnce() -> T) -> T {
    let _enter = Enter::new();
    f()
}

pin_project_lite::pin_project! {
    /// A future whose panics the caller catches: each poll runs marked as contained.
    pub(crate) struct Contained<F> {
        #[pin]
        inner: F,
    }
}

impl<F> Contained<F> {
    pub(crate) fn new(inner: F) -> Self {
        Self { inner }
    }
}

impl<F: Future> Future for Contained<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _enter = Enter::new();
        self.project().inner.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use std::panic::AssertUnwindSafe;

    #[test]
    fn only_calls_marked_contained_report_so_even_after_unwinding() {
        assert!(!panic_is_contained());
        let seen = contained(panic_is_contained);
        assert!(seen);
        let caught = std::panic::catch_unwind(|| contained(|| panic!("boom")));
        assert!(caught.is_err());
        assert!(!panic_is_contained(), "the mark is gone after the unwind");
        let fut = Contained::new(async { panic_is_contained() });
        assert_eq!(fut.now_or_never(), Some(true));
        let panicking = Contained::new(async { panic!("boom") });
        let caught = AssertUnwindSafe(panicking).catch_unwind().now_or_never();
        assert!(matches!(caught, Some(Err(_))));
        assert!(!panic_is_contained());
    }
}
