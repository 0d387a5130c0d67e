//! Path confinement: every path a built-in file tool touches must lie inside the session's
//! workspace, and is opened exactly as it was checked.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use crate::agent::tool::ToolError;
use crate::sys::paths::{normalize, open_exact, resolve, Access};

/// A session's workspace directory, canonical, against which tool paths are resolved.
///
/// [`resolve`](Workspace::resolve) refuses a path that leaves it: `..` that climbs out, an
/// absolute path elsewhere, or a symlink that points outside. A relative path is resolved
/// through symlinks inside the workspace; an absolute path (the pipeline hands the file tools
/// the absolute path its rules checked) is taken as it is, and [`open`](Workspace::open) then
/// refuses it if any component is a symlink — so a symlink swapped in after the check never
/// redirects the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// The workspace at `root`, which must exist.
    pub fn new(root: impl AsRef<Path>) -> io::Result<Self> {
        Ok(Self {
            root: root.as_ref().canonicalize()?,
        })
    }

    /// The workspace of a tool call (`cx.cwd`), or a clear error when it cannot be used.
    pub fn of(cx: &crate::agent::tool::ToolCx) -> Result<Self, ToolError> {
        Self::new(&cx.cwd).map_err(|e| {
            ToolError::new(format!(
                "the workspace {} is not usable: {e}",
                cx.cwd.display()
            ))
        })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The absolute path `path` (relative to the root, or absolute) names, if it stays inside.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, ToolError> {
        let lexical = normalize(&self.root.join(path));
        let target = if Path::new(path).is_absolute() {
            lexical
        } else {
            resolve(&lexical)
                .map_err(|e| ToolError::new(format!("cannot resolve `{path}`: {e}")))?
        };
        if target.starts_with(&self.root) {
            Ok(target)
        } else {
            Err(ToolError::new(format!(
                "path `{path}` is outside the workspace {} and was refused",
                self.root.display()
            )))
        }
    }

    /// Resolves `path` and opens it without following any symlink (see the type's docs).
    pub fn open(&self, path: &str, access: WorkspaceAccess) -> Result<(PathBuf, File), ToolError> {
        let target = self.resolve(path)?;
        let access = match access {
            WorkspaceAccess::Read => Access::Read,
            WorkspaceAccess::Write => Access::Write,
        };
        let verb = if access == Access::Read {
            "open"
        } else {
            "write"
        };
        let file = open_exact(&target, access)
            .map_err(|e| ToolError::new(format!("cannot {verb} `{path}`: {e}")))?;
        Ok((target, file))
    }
}

/// What [`Workspace::open`] opens a path for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkspaceAccess {
    /// Read an existing file or list a directory.
    Read,
    /// Create or replace a file.
    Write,
}
