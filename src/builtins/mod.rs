//! Built-in hooks.
//!
//! * [`LoggingHook`]: stateless, logs every event (seed 000).
//! * [`TimingHook`]: pairs `PreToolUse` and `PostToolUse` by tool-use id, under concurrent calls
//!   (seed 000).

mod logging;
mod timing;

pub use logging::{LogSink, LoggingHook};
pub use timing::{TimingHook, ToolTiming};
