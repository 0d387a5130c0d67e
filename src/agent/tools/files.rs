//! `read_file`, `write_file` and `list_dir`.

use std::io::Read;

use async_trait::async_trait;
use serde_json::{json, Value};

use super::workspace::WorkspaceAccess;
use super::{str_arg, Workspace};
use crate::agent::tool::{Tool, ToolCx, ToolError};
use crate::permission::service::ToolKind;

/// Largest file `read_file` returns whole; longer files are cut with a note.
const READ_CAP: usize = 256 * 1024;

fn io_error(what: &str, path: &str, e: std::io::Error) -> ToolError {
    ToolError::new(format!("cannot {what} `{path}`: {e}"))
}

/// Runs blocking file work off the runtime's workers.
async fn blocking(
    work: impl FnOnce() -> Result<Value, ToolError> + Send + 'static,
) -> Result<Value, ToolError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(ToolError::new(format!("the file operation failed: {e}"))))
}

/// `read_file {path}`: a text file of the workspace.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadFile;

#[async_trait]
impl Tool for ReadFile {
    fn name(&self) -> &str {
        "read_file"
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": { "path": { "type": "string", "description": "path relative to the workspace" } },
            "required": ["path"]
        })
    }
    fn kind(&self) -> ToolKind {
        ToolKind::ReadOnly
    }
    fn path_arguments(&self) -> &[&str] {
        &["path"]
    }
    async fn execute(&self, input: Value, cx: ToolCx) -> Result<Value, ToolError> {
        let path = str_arg(&input, "path")?.to_owned();
        let ws = Workspace::of(&cx)?;
        blocking(move || {
            let (_, file) = ws.open(&path, WorkspaceAccess::Read)?;
            let size = file.metadata().map(|m| m.len()).unwrap_or(0);
            let mut bytes = Vec::new();
            file.take(READ_CAP as u64 + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| io_error("read", &path, e))?;
            let cut = bytes.len() > READ_CAP;
            bytes.truncate(READ_CAP);
            let mut text = String::from_utf8_lossy(&bytes).into_owned();
            if cut {
                text.push_str(&format!("\n[cut: the file has {size} bytes]"));
            }
            Ok(Value::String(text))
        })
        .await
    }
}

/// `write_file {path, content}`: creates or replaces a file of the workspace (and its parent
/// directories).
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteFile;

#[async_trait]
impl Tool for WriteFile {
    fn name(&self) -> &str {
        "write_file"
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": { "type": "string", "description": "path relative to the workspace" },
                "content": { "type": "string" }
            },
            "required": ["path", "content"]
        })
    }
    fn kind(&self) -> ToolKind {
        ToolKind::Edit
    }
    fn path_arguments(&self) -> &[&str] {
        &["path"]
    }
    async fn execute(&self, input: Value, cx: ToolCx) -> Result<Value, ToolError> {
        let path = str_arg(&input, "path")?.to_owned();
        let content = str_arg(&input, "content")?.to_owned();
        let ws = Workspace::of(&cx)?;
        blocking(move || {
            let target = ws.resolve(&path)?;
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| io_error("create the directory of", &path, e))?;
            }
            let (_, mut file) = ws.open(&path, WorkspaceAccess::Write)?;
            std::io::Write::write_all(&mut file, content.as_bytes())
                .map_err(|e| io_error("write", &path, e))?;
            Ok(Value::String(format!(
                "wrote {} bytes to {path}",
                content.len()
            )))
        })
        .await
    }
}

/// `list_dir {path?}`: the entries of a workspace directory, sorted; directories end in `/`,
/// symlinks in `@`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListDir;

#[async_trait]
impl Tool for ListDir {
    fn name(&self) -> &str {
        "list_dir"
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": { "path": { "type": "string", "description": "directory relative to the workspace (default: the workspace)" } }
        })
    }
    fn kind(&self) -> ToolKind {
        ToolKind::ReadOnly
    }
    fn path_arguments(&self) -> &[&str] {
        &["path"]
    }
    async fn execute(&self, input: Value, cx: ToolCx) -> Result<Value, ToolError> {
        let path = input
            .get("path")
            .and_then(Value::as_str)
            .unwrap_or(".")
            .to_owned();
        let ws = Workspace::of(&cx)?;
        blocking(move || {
            let (_, file) = ws.open(&path, WorkspaceAccess::Read)?;
            let mut dir = nix::dir::Dir::from_fd(file.into())
                .map_err(|e| io_error("list", &path, e.into()))?;
            let mut names = Vec::new();
            for entry in dir.iter() {
                let entry = entry.map_err(|e| io_error("list", &path, e.into()))?;
                let mut name = entry.file_name().to_string_lossy().into_owned();
                if name == "." || name == ".." {
                    continue;
                }
                match entry.file_type() {
                    Some(nix::dir::Type::Directory) => name.push('/'),
                    Some(nix::dir::Type::Symlink) => name.push('@'),
                    _ => {}
                }
                names.push(name);
            }
            names.sort();
            Ok(Value::String(names.join("\n")))
        })
        .await
    }
}
