//! Path confinement: every path a built-in tool touches must lie inside the session's workspace.

use std::io;
use std::path::{Component, Path, PathBuf};

use crate::tool::ToolError;

/// A session's workspace directory, canonical, against which tool paths are resolved.
///
/// [`resolve`](Workspace::resolve) refuses a path that leaves it: `..` that climbs out, an
/// absolute path elsewhere, or a symlink (anywhere along the path) that points outside. It
/// checks the path as it is on disk at the time of the call; it is a guard for an agent's
/// mistakes, not a sandbox against a hostile process racing it.
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
    pub fn of(cx: &crate::tool::ToolCx) -> Result<Self, ToolError> {
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
        let joined = self.root.join(path);
        let lexical = normalize(&joined);
        let real = real_path(&lexical)
            .map_err(|e| ToolError::new(format!("cannot resolve `{path}`: {e}")))?;
        if real.starts_with(&self.root) {
            Ok(lexical)
        } else {
            Err(ToolError::new(format!(
                "path `{path}` is outside the workspace {} and was refused",
                self.root.display()
            )))
        }
    }
}

/// Removes `.` and resolves `..` lexically.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The path with its longest existing prefix canonicalized (symlinks followed).
fn real_path(path: &Path) -> io::Result<PathBuf> {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        match existing.canonicalize() {
            Ok(real) => {
                return Ok(rest.iter().rev().fold(real, |p, name| p.join(name)));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // A dangling symlink is not "not found yet": it points somewhere.
                if existing.symlink_metadata().is_ok() {
                    let target = std::fs::read_link(&existing)?;
                    let parent = existing.parent().unwrap_or(Path::new("/"));
                    let followed = normalize(&parent.join(target));
                    return real_path(&followed)
                        .map(|real| rest.iter().rev().fold(real, |p, name| p.join(name)));
                }
                match (existing.file_name(), existing.parent()) {
                    (Some(name), Some(parent)) => {
                        rest.push(name.to_owned());
                        existing = parent.to_path_buf();
                    }
                    _ => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_climbs_lexically() {
        assert_eq!(
            normalize(Path::new("/a/b/../c/./d")),
            PathBuf::from("/a/c/d")
        );
        assert_eq!(normalize(Path::new("/a/../../x")), PathBuf::from("/x"));
    }
}
