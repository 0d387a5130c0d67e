//! `read_file`, `write_file` and `list_dir`.

use async_trait::async_trait;
use serde_json::{json, Value};

use super::{str_arg, Workspace};
use crate::permission::ToolKind;
use crate::tool::{Tool, ToolCx, ToolError};

/// Largest file `read_file` returns whole; longer files are cut with a note.
const READ_CAP: usize = 256 * 1024;

fn io_error(what: &str, path: &str, e: std::io::Error) -> ToolError {
    ToolError::new(format!("cannot {what} `{path}`: {e}"))
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
    async fn execute(&self, input: Value, cx: ToolCx) -> Result<Value, ToolError> {
        let path = str_arg(&input, "path")?;
        let file = Workspace::of(&cx)?.resolve(path)?;
        let bytes = tokio::fs::read(&file)
            .await
            .map_err(|e| io_error("read", path, e))?;
        let mut text = String::from_utf8_lossy(&bytes[..bytes.len().min(READ_CAP)]).into_owned();
        if bytes.len() > READ_CAP {
            text.push_str(&format!("\n[cut: the file has {} bytes]", bytes.len()));
        }
        Ok(Value::String(text))
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
    async fn execute(&self, input: Value, cx: ToolCx) -> Result<Value, ToolError> {
        let path = str_arg(&input, "path")?;
        let content = str_arg(&input, "content")?;
        let file = Workspace::of(&cx)?.resolve(path)?;
        if let Some(parent) = file.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| io_error("create the directory of", path, e))?;
        }
        tokio::fs::write(&file, content)
            .await
            .map_err(|e| io_error("write", path, e))?;
        Ok(Value::String(format!(
            "wrote {} bytes to {path}",
            content.len()
        )))
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
    async fn execute(&self, input: Value, cx: ToolCx) -> Result<Value, ToolError> {
        let path = input.get("path").and_then(Value::as_str).unwrap_or(".");
        let dir = Workspace::of(&cx)?.resolve(path)?;
        let mut entries = tokio::fs::read_dir(&dir)
            .await
            .map_err(|e| io_error("list", path, e))?;
        let mut names = Vec::new();
        while let Some(entry) = entries
            .next_entry()
            .await
            .map_err(|e| io_error("list", path, e))?
        {
            let mut name = entry.file_name().to_string_lossy().into_owned();
            match entry.file_type().await {
                Ok(t) if t.is_dir() => name.push('/'),
                Ok(t) if t.is_symlink() => name.push('@'),
                _ => {}
            }
            names.push(name);
        }
        names.sort();
        Ok(Value::String(names.join("\n")))
    }
}
