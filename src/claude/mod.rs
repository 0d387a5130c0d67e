//! Claude Code hooks compatibility (SPEC section 9): the `hooks` section of Claude Code settings
//! files becomes a set of hooks in the same registry, folded by the same rules as Rust hooks.
//!
//! * [`ClaudeSettings::load`] merges settings files in order (user, project, local), honours
//!   `disableAllHooks`, and reports what it skipped as [`SettingsWarning`]s that name the file
//!   and JSON path (CC-1). Matchers and `if` follow CC-2.
//!   [`ClaudeSettings::load_with_plugins`] adds plugin directories' `hooks/hooks.json` after
//!   them, each handler with its plugin's `CLAUDE_PLUGIN_ROOT`. A command reading a `CLAUDE_*`
//!   variable that nothing sets for it is a warning.
//! * Each handler becomes a [`ClaudeHook`]: a `command` runs through `sh -c` (or exec form with
//!   `args`) with the event's input on stdin, in the session's cwd, with `CLAUDE_PROJECT_DIR`
//!   and `CLAUDECODE=1` and the settings' merged `env` ([`ClaudeSettings::env`]); its deadline
//!   is enforced here and kills the whole process group (CC-3). An `http` handler POSTs the same
//!   JSON; a `prompt` handler asks a model [`Provider`](crate::Provider) (the one given with
//!   [`ClaudeSettings::with_provider`], else the agent session's own) and reads its
//!   `{"ok", "reason"}` answer.
//! * The input is exactly Claude Code's fields for the event ([`CompatOptions::hookbus_extensions`]
//!   adds hookbus's under [`EXTENSIONS_KEY`]).
//! * A command goes to the background with `async` / `asyncRewake` in settings, or when its
//!   first stdout line is `{"async": true}`: the event does not wait, and what it leaves for
//!   the model is delivered on the session's next event ([`ASYNC_HOOK_NAME`]); it is killed at
//!   its deadline or its session's end.
//! * The output is read as Claude Code reads it (CC-4, CC-5) into a [`HandlerReport`], which
//!   becomes the hook's typed answer; the runtime folds the answers deterministically in settings
//!   order (CC-6). Every run also leaves its report in the outcome's metadata under
//!   [`REPORT_KEY`], which `hookbus replay` prints.
//!
//! ```no_run
//! use hookbus::claude::{ClaudeSettings, CompatOptions};
//!
//! # async fn demo() -> Result<(), hookbus::Error> {
//! let settings = ClaudeSettings::load_with_plugins(
//!     &[".claude/settings.json"],
//!     &["plugins/safety-guard"],
//!     CompatOptions::default(),
//! )?;
//! for warning in &settings.warnings {
//!     eprintln!("warning: {warning}");
//! }
//! let bus = hookbus::Bus::new();
//! settings.register(&bus).await?;
//! # Ok(()) }
//! ```

mod background;
mod cuts;
mod hook;
mod input;
mod output;
mod plugin;
mod prompt;
pub mod replay;
mod run;
mod settings;
mod vars;

pub use background::ASYNC_HOOK_NAME;
pub use hook::{ClaudeHook, HandlerRun, REPORT_KEY};
pub use input::EXTENSIONS_KEY;
pub use output::{cap, CcDecision, HandlerOutcome, HandlerReport, CONTEXT_CAP};
pub use prompt::{with_arguments, PROMPT_SYSTEM};
pub use settings::{
    AsyncMode, ClaudeSettings, CompatOptions, Handler, HandlerKind, Occurrence, SettingsWarning,
    PROMPT_HANDLER_TIMEOUT,
};

impl crate::AgentBuilder {
    /// Registers the handlers of Claude Code settings as global hooks (after the hooks added so
    /// far, in settings order).
    pub fn claude_settings(mut self, settings: &ClaudeSettings) -> Self {
        for hook in settings.hooks() {
            self = self.hook_arc(hook);
        }
        self
    }
}
