//! The Landlock ruleset, built in the parent before the command is spawned.
//!
//! Landlock only grants, beneath the inode a rule names; so reads are denied by exclusion: from
//! `/` down, each directory that leads to a denied path gets only `read_dir`, and each of its
//! other entries gets full read rights beneath it. Write rights go to the workspace, the private
//! temp dir and a few devices.

// Unsafe code here: the Landlock ABI probe and O_PATH opens: system calls with no safe wrapper in
// our dependencies. Each block says why it is sound.
#![allow(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use landlock::{
    make_bitflags, Access, AccessFs, AccessNet, BitFlags, PathBeneath, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, Scope, ABI,
};

use super::expand::{Budget, Denied};
use super::SandboxError;

/// The ABI whose rights the sandbox asks for. The crate's best-effort compatibility keeps of
/// them what the running kernel knows, so an older kernel enforces fewer rights, never none.
const TARGET: ABI = ABI::V10;

/// Devices any command may write to (read them it may anyway).
const WRITABLE_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

/// `landlock_create_ruleset` flag asking for the ABI version.
const CREATE_RULESET_VERSION: libc::c_uint = 1;

/// The Landlock ABI version of the running kernel, or `None` where Landlock is not built in or
/// not enabled. Probed once per process.
pub fn landlock_abi() -> Option<u32> {
    static ABI_VERSION: OnceLock<Option<u32>> = OnceLock::new();
    *ABI_VERSION.get_or_init(|| {
        // SAFETY: with a null attribute, size 0 and the VERSION flag, the call only returns the
        // ABI version (or fails); it reads and writes no memory.
        let version = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<libc::c_void>(),
                0usize,
                CREATE_RULESET_VERSION,
            )
        };
        u32::try_from(version).ok().filter(|v| *v >= 1)
    })
}

/// What the ruleset is to allow.
pub(crate) struct Spec<'a> {
    /// The kernel's ABI (at least 1).
    pub abi: u32,
    /// Directories where commands may write (workspace, private temp dir).
    pub writable: &'a [&'a Path],
    /// What commands may not read.
    pub denied: &'a Denied,
    /// Whether TCP is left alone (else bind and connect are handled with no rule: denied).
    pub network: bool,
}

/// Builds the ruleset and returns its file descriptor (close-on-exec), ready for
/// `landlock_restrict_self` in the child.
pub(crate) fn build(spec: &Spec<'_>, budget: &mut Budget) -> Result<OwnedFd, SandboxError> {
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(TARGET))
        .map_err(landlock_error)?;
    if !spec.network && spec.abi >= 4 {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(TARGET))
            .map_err(landlock_error)?;
    }
    if spec.abi >= 6 {
        ruleset = ruleset
            .scope(Scope::from_all(TARGET))
            .map_err(landlock_error)?;
    }
    let mut created = ruleset.create().map_err(landlock_error)?;
    for dir in spec.writable {
        let (fd, _) = open_path(dir, true).map_err(|source| SandboxError::Io {
            what: format!("opening {}", dir.display()),
            source,
        })?;
        (&mut created)
            .add_rule(PathBeneath::new(fd, AccessFs::from_write(TARGET)))
            .map_err(landlock_error)?;
    }
    for device in WRITABLE_DEVICES {
        if let Ok((fd, _)) = open_path(Path::new(device), true) {
            let rights = make_bitflags!(AccessFs::{WriteFile | Truncate});
            add_or_skip(&mut created, fd, rights, Path::new(device));
        }
    }
    grant_reads(&mut created, spec.denied, budget)?;
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or(SandboxError::LandlockUnavailable { simulated: false })
}

fn landlock_error(e: landlock::RulesetError) -> SandboxError {
    SandboxError::Landlock(e.to_string())
}

/// Read rights for a directory (beneath it) and for a file.
fn read_rights(is_dir: bool) -> BitFlags<AccessFs> {
    if is_dir {
        AccessFs::from_read(TARGET)
    } else {
        AccessFs::from_read(TARGET) & AccessFs::from_file(TARGET)
    }
}

/// Adds a rule; one the kernel refuses leaves that path without the rights (fail closed).
fn add_or_skip(created: &mut RulesetCreated, fd: OwnedFd, rights: BitFlags<AccessFs>, at: &Path) {
    if let Err(e) = created.add_rule(PathBeneath::new(fd, rights)) {
        tracing::debug!(path = %at.display(), error = %e, "sandbox: rule not added");
    }
}

/// The directories leading to denied paths, as a tree from `/`.
#[derive(Debug, Default)]
struct Node {
    /// Entries of this directory that are denied.
    denied: HashSet<OsString>,
    /// Entries that lead to denied paths.
    children: BTreeMap<OsString, Node>,
}

impl Node {
    /// The tree of `paths`, or `None` when `/` itself is denied.
    fn of(paths: &BTreeSet<PathBuf>) -> Option<Self> {
        let mut root = Node::default();
        for path in paths {
            let names: Vec<&std::ffi::OsStr> = path
                .components()
                .filter_map(|c| match c {
                    Component::Normal(name) => Some(name),
                    _ => None,
                })
                .collect();
            let (last, ancestors) = names.split_last()?;
            let mut node = &mut root;
            for name in ancestors {
                node = node.children.entry(name.to_os_string()).or_default();
            }
            node.denied.insert(last.to_os_string());
        }
        Some(root)
    }
}

/// Grants reads everywhere but the denied paths.
fn grant_reads(
    created: &mut RulesetCreated,
    denied: &Denied,
    budget: &mut Budget,
) -> Result<(), SandboxError> {
    let Some(tree) = Node::of(&denied.paths) else {
        return Ok(());
    };
    let root = Path::new("/");
    let (fd, _) = open_path(root, false).map_err(|source| SandboxError::Io {
        what: "opening /".to_owned(),
        source,
    })?;
    if denied.paths.is_empty() {
        add_or_skip(created, fd, read_rights(true), root);
        return Ok(());
    }
    grant_below(created, root, fd, &tree, denied, budget)
}

/// `dir` leads to a denied path: it gets `read_dir`, and each entry what it may have.
fn grant_below(
    created: &mut RulesetCreated,
    dir: &Path,
    fd: OwnedFd,
    node: &Node,
    denied: &Denied,
    budget: &mut Budget,
) -> Result<(), SandboxError> {
    add_or_skip(created, fd, AccessFs::ReadDir.into(), dir);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        budget.spend("the read rules")?;
        let name = entry.file_name();
        if node.denied.contains(&name) {
            continue;
        }
        let path = dir.join(&name);
        let Ok((fd, stat)) = open_path(&path, false) else {
            continue;
        };
        let kind = stat.st_mode & libc::S_IFMT;
        // A symlink needs no rights of its own: what it points to has its own place in the
        // tree. Another hard link to a denied file gets nothing either.
        if kind == libc::S_IFLNK || denied.inodes.contains(&(stat.st_dev, stat.st_ino)) {
            continue;
        }
        let is_dir = kind == libc::S_IFDIR;
        match node.children.get(&name) {
            Some(child) if is_dir => grant_below(created, &path, fd, child, denied, budget)?,
            _ => add_or_skip(created, fd, read_rights(is_dir), &path),
        }
    }
    Ok(())
}

/// Opens `path` with `O_PATH` (not following a final symlink unless `follow`) and stats it.
fn open_path(path: &Path, follow: bool) -> io::Result<(OwnedFd, libc::stat)> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut flags = libc::O_PATH | libc::O_CLOEXEC;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    // SAFETY: `c_path` is NUL-terminated and outlives the call; the flags need no mode.
    let raw = unsafe { libc::open(c_path.as_ptr(), flags) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `stat` is a valid, writable `struct stat`.
    if unsafe { libc::fstat(std::os::fd::AsRawFd::as_raw_fd(&fd), &mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((fd, stat))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_holds_the_ancestors_of_denied_paths() {
        let paths: BTreeSet<PathBuf> = ["/a/b/secret", "/a/c", "/x"]
            .into_iter()
            .map(PathBuf::from)
            .collect();
        let tree = Node::of(&paths).unwrap();
        assert!(tree.denied.contains(&OsString::from("x")));
        let a = &tree.children[&OsString::from("a")];
        assert!(a.denied.contains(&OsString::from("c")));
        assert!(a.children[&OsString::from("b")]
            .denied
            .contains(&OsString::from("secret")));
        let everything: BTreeSet<PathBuf> = [PathBuf::from("/")].into_iter().collect();
        assert!(Node::of(&everything).is_none());
    }
}
