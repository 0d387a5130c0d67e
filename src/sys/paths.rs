//! Path handling shared by permission rules and the built-in tools: lexical normalisation,
//! resolution through symlinks (and `/proc/self/root`-style magic links), and opening a path
//! exactly as it was checked.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

/// Removes `.` and resolves `..` without touching the file system (`/..` stays `/`).
pub(crate) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The path with its longest existing prefix canonicalized (symlinks, including dangling ones
/// and magic links such as `/proc/self/root`, followed); the rest is appended as it is.
pub(crate) fn resolve(path: &Path) -> io::Result<PathBuf> {
    resolve_depth(path, 0)
}

fn resolve_depth(path: &Path, depth: u32) -> io::Result<PathBuf> {
    if depth > 40 {
        return Err(io::Error::other("too many levels of symbolic links"));
    }
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        match existing.canonicalize() {
            Ok(real) => return Ok(rest.iter().rev().fold(real, |p, name| p.join(name))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // A dangling symlink is not "not found yet": it points somewhere.
                if existing.symlink_metadata().is_ok() {
                    let target = std::fs::read_link(&existing)?;
                    let parent = existing.parent().unwrap_or(Path::new("/"));
                    let followed = normalize(&parent.join(target));
                    return resolve_depth(&followed, depth + 1)
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

/// How [`open_exact`] opens a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Read an existing file or directory.
    Read,
    /// Create or truncate a file and write it.
    Write,
}

/// Opens the absolute `path` exactly as named: no component may be a symlink, so what opens is
/// the path that was checked, even if a symlink was swapped in since (no check-then-use race).
/// Uses `openat2(RESOLVE_NO_SYMLINKS)`; where the kernel lacks it, `O_NOFOLLOW` after checking
/// that the path is its own canonical form.
pub(crate) fn open_exact(path: &Path, access: Access) -> io::Result<File> {
    match open_no_symlinks(path, access) {
        Err(e) if e.raw_os_error() == Some(nix::libc::ENOSYS) => {
            let parent_real = path.parent().map(Path::canonicalize).transpose()?;
            if parent_real.as_deref() != path.parent() {
                return Err(io::Error::other("the path goes through a symbolic link"));
            }
            let mut options = OpenOptions::new();
            match access {
                Access::Read => options.read(true),
                Access::Write => options.write(true).create(true).truncate(true),
            };
            options.custom_flags(nix::libc::O_NOFOLLOW).open(path)
        }
        other => other,
    }
}

fn open_no_symlinks(path: &Path, access: Access) -> io::Result<File> {
    use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag, AT_FDCWD};
    use nix::sys::stat::Mode;
    let flags = match access {
        Access::Read => OFlag::O_RDONLY,
        Access::Write => OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC,
    } | OFlag::O_CLOEXEC;
    let mut how = OpenHow::new()
        .flags(flags)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS);
    if access == Access::Write {
        // The kernel refuses a mode without O_CREAT.
        how = how.mode(Mode::from_bits_truncate(0o644));
    }
    let fd = openat2(AT_FDCWD, path, how).map_err(|errno| match errno {
        nix::errno::Errno::ELOOP => io::Error::other(
            "the path goes through a symbolic link (it changed since it was checked?)",
        ),
        other => io::Error::from(other),
    })?;
    Ok(File::from(fd))
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

    #[test]
    fn resolve_follows_magic_links_and_keeps_missing_tails() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("f"), "x").unwrap();
        let via_proc = PathBuf::from(format!("/proc/self/root{}", root.join("f").display()));
        assert_eq!(resolve(&via_proc).unwrap(), root.join("f"));
        std::os::unix::fs::symlink(root.join("f"), root.join("l")).unwrap();
        assert_eq!(resolve(&root.join("l")).unwrap(), root.join("f"));
        assert_eq!(resolve(&root.join("new/x")).unwrap(), root.join("new/x"));
    }

    #[test]
    fn open_exact_refuses_symlinks_anywhere() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("d")).unwrap();
        std::fs::write(root.join("d/f"), "x").unwrap();
        std::os::unix::fs::symlink(root.join("d"), root.join("link")).unwrap();
        assert!(open_exact(&root.join("d/f"), Access::Read).is_ok());
        assert!(open_exact(&root.join("link/f"), Access::Read).is_err());
    }
}
