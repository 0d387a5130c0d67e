//! The built-in tools: `read_file`, `write_file`, `list_dir` and `bash`, each confined to the
//! session's workspace (see [`Workspace`]).
//!
//! The tools take the workspace from [`ToolCx::cwd`](crate::ToolCx), so one set of tools serves
//! every session of an [`Agent`](crate::Agent).

mod bash;
mod files;
mod workspace;

use std::sync::Arc;

pub use bash::{Bash, DEFAULT_BASH_TIMEOUT, OUTPUT_CAP};
pub use files::{ListDir, ReadFile, WriteFile};
pub use workspace::{Workspace, WorkspaceAccess};

use crate::agent::tool::Tool;

/// `read_file`, `write_file`, `list_dir` and `bash`.
pub fn builtin_tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ReadFile),
        Arc::new(WriteFile),
        Arc::new(ListDir),
        Arc::new(Bash::default()),
    ]
}

/// A string argument of a tool input, or a clear error naming it.
pub(crate) fn str_arg<'a>(
    input: &'a serde_json::Value,
    key: &str,
) -> Result<&'a str, crate::ToolError> {
    input
        .get(key)
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| crate::ToolError::new(format!("missing string argument `{key}`")))
}
