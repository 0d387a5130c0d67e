//! Expansion of `Read(...)` deny globs into the concrete paths the sandbox keeps unreadable.
//!
//! A glob is absolute; `*` matches within one name (dot files included), `**` as a whole
//! segment matches any number of directories, and a trailing `/**` denies the directory itself
//! (which keeps all of it unreadable without visiting it). The walk starts at the longest literal
//! prefix, never follows a symlink it finds while enumerating a directory, and is bounded by a
//! [`Budget`]: past the budget it fails, so that a match is never silently left readable.

use std::collections::{BTreeSet, HashSet};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use super::SandboxError;

/// Directory entries one call may visit, over glob expansion and ruleset building together.
pub(crate) const MAX_ENTRIES: usize = 100_000;

/// How many directories deep a `**` may descend below the point where it starts.
pub(crate) const MAX_DEPTH: usize = 64;

/// What a call may still visit; shared by every glob of the call and the ruleset walk.
#[derive(Debug)]
pub(crate) struct Budget {
    left: usize,
}

impl Budget {
    /// A budget of `entries` directory entries.
    pub fn new(entries: usize) -> Self {
        Self { left: entries }
    }

    /// Spends one entry, or fails naming `what` (the glob or walk that ran out).
    pub fn spend(&mut self, what: &str) -> Result<(), SandboxError> {
        match self.left.checked_sub(1) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => Err(SandboxError::TooManyEntries {
                what: what.to_owned(),
                cap: MAX_ENTRIES,
            }),
        }
    }
}

/// The paths no command may read: canonical where they could be resolved, and the
/// (device, inode) pairs of what they name (to skip other hard links to them).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Denied {
    /// Absolute paths free of symlinks (`/` included, when a glob denies everything).
    pub paths: BTreeSet<PathBuf>,
    /// Device and inode of each denied path.
    pub inodes: HashSet<(u64, u64)>,
}

impl Denied {
    /// Adds a path the walk matched: the entry itself (its parent resolved) and, when it is a
    /// symlink, what it points to.
    fn add(&mut self, matched: &Path) {
        let entry = match (matched.parent(), matched.file_name()) {
            (Some(parent), Some(name)) => parent
                .canonicalize()
                .unwrap_or_else(|_| parent.to_path_buf())
                .join(name),
            _ => matched.to_path_buf(),
        };
        if let Ok(meta) = entry.symlink_metadata() {
            self.inodes.insert((meta.dev(), meta.ino()));
        }
        self.paths.insert(entry);
        if let Ok(target) = matched.canonicalize() {
            if let Ok(meta) = target.metadata() {
                self.inodes.insert((meta.dev(), meta.ino()));
            }
            self.paths.insert(target);
        }
    }
}

/// One segment of a glob.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// A name matched as it is.
    Literal(OsString),
    /// A name with `*` in it.
    Pattern(Vec<u8>),
    /// `**`: any number of directories.
    AnyDirs,
}

/// Expands every glob into `denied`, spending `budget`.
pub(crate) fn expand(globs: &[String], budget: &mut Budget) -> Result<Denied, SandboxError> {
    let mut denied = Denied::default();
    for glob in globs {
        let (prefix, segments) = parse(glob)?;
        let mut walk = Walk {
            glob,
            segments: &segments,
            budget,
            seen: HashSet::new(),
            denied: &mut denied,
        };
        walk.visit(&prefix, 0, 0)?;
    }
    Ok(denied)
}

/// Splits a glob into its literal prefix and the segments after it.
fn parse(glob: &str) -> Result<(PathBuf, Vec<Segment>), SandboxError> {
    let bad = |why: &str| SandboxError::BadGlob {
        glob: glob.to_owned(),
        why: why.to_owned(),
    };
    if !glob.starts_with('/') {
        return Err(bad("it is not absolute"));
    }
    let mut segments: Vec<Segment> = Vec::new();
    for component in Path::new(glob).components() {
        let name = match component {
            Component::RootDir | Component::CurDir => continue,
            Component::ParentDir => match segments.last() {
                Some(Segment::Literal(_)) => {
                    segments.pop();
                    continue;
                }
                None => continue,
                Some(_) => return Err(bad("`..` follows a wildcard")),
            },
            Component::Normal(name) => name,
            Component::Prefix(_) => return Err(bad("it has a prefix")),
        };
        let bytes = name.as_bytes();
        let segment = if bytes == b"**" {
            if segments.last() == Some(&Segment::AnyDirs) {
                continue;
            }
            Segment::AnyDirs
        } else if bytes.contains(&b'*') {
            Segment::Pattern(bytes.to_vec())
        } else {
            Segment::Literal(name.to_owned())
        };
        segments.push(segment);
    }
    // `dir/**` denies `dir` itself: everything beneath is then unreadable.
    if segments.last() == Some(&Segment::AnyDirs) {
        segments.pop();
    }
    let literal = segments
        .iter()
        .take_while(|s| matches!(s, Segment::Literal(_)))
        .count();
    let mut prefix = PathBuf::from("/");
    for segment in segments.drain(..literal) {
        if let Segment::Literal(name) = segment {
            prefix.push(name);
        }
    }
    Ok((prefix, segments))
}

/// One glob's walk.
struct Walk<'a> {
    glob: &'a str,
    segments: &'a [Segment],
    budget: &'a mut Budget,
    /// (directory, segment index) pairs already walked: several `**` never walk one twice.
    seen: HashSet<(PathBuf, usize)>,
    denied: &'a mut Denied,
}

impl Walk<'_> {
    /// Matches `segments[index..]` against what lies below `path`.
    fn visit(&mut self, path: &Path, index: usize, depth: usize) -> Result<(), SandboxError> {
        if depth > MAX_DEPTH {
            return Err(SandboxError::TooDeep {
                glob: self.glob.to_owned(),
                depth: MAX_DEPTH,
            });
        }
        if !self.seen.insert((path.to_path_buf(), index)) {
            return Ok(());
        }
        let Some(segment) = self.segments.get(index) else {
            if path.symlink_metadata().is_ok() {
                self.denied.add(path);
            }
            return Ok(());
        };
        let last = index + 1 == self.segments.len();
        match segment {
            Segment::Literal(name) => {
                self.budget.spend(self.glob)?;
                let next = path.join(name);
                if last || next.is_dir() {
                    self.visit(&next, index + 1, depth)?;
                }
            }
            Segment::Pattern(pattern) => {
                for (name, is_dir) in self.entries(path)? {
                    if wildcard(pattern, name.as_bytes()) && (last || is_dir) {
                        self.visit(&path.join(&name), index + 1, depth)?;
                    }
                }
            }
            Segment::AnyDirs => {
                self.visit(path, index + 1, depth)?;
                for (name, is_dir) in self.entries(path)? {
                    if is_dir {
                        self.visit(&path.join(&name), index, depth + 1)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The entries of a directory with whether each is a directory (a symlink is not), each
    /// spending one from the budget. An unreadable directory has none.
    fn entries(&mut self, dir: &Path) -> Result<Vec<(OsString, bool)>, SandboxError> {
        let Ok(read) = std::fs::read_dir(dir) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for entry in read.flatten() {
            self.budget.spend(self.glob)?;
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            out.push((entry.file_name(), is_dir));
        }
        Ok(out)
    }
}

/// Whether `name` matches `pattern`, where `*` stands for any run of bytes.
fn wildcard(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    // Where the last `*` was, and the name position it currently covers up to.
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_within_a_name() {
        assert!(wildcard(b"*.env", b".env"));
        assert!(wildcard(b"*.env", b"prod.env"));
        assert!(wildcard(b"a*b*c", b"aXXbYc"));
        assert!(!wildcard(b"a*b*c", b"aXXbY"));
        assert!(wildcard(b"*", b""));
        assert!(!wildcard(b"secret", b"secrets"));
    }

    #[test]
    fn globs_split_into_prefix_and_segments() {
        let (prefix, segments) = parse("/a/b/../c/**/x*.key").unwrap();
        assert_eq!(prefix, PathBuf::from("/a/c"));
        assert_eq!(
            segments,
            [Segment::AnyDirs, Segment::Pattern(b"x*.key".to_vec())]
        );
        let (prefix, segments) = parse("/home/u/.ssh/**").unwrap();
        assert_eq!(prefix, PathBuf::from("/home/u/.ssh"));
        assert!(segments.is_empty());
        assert!(parse("relative/*.txt").is_err());
        assert!(parse("/a/*/../b").is_err());
    }

    #[test]
    fn expansion_finds_matches_and_their_targets() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("a/b/c")).unwrap();
        std::fs::write(root.join(".env"), "x").unwrap();
        std::fs::write(root.join("a/b/c/.env"), "x").unwrap();
        std::fs::write(root.join("a/keep.txt"), "x").unwrap();
        std::fs::write(root.join("elsewhere.txt"), "x").unwrap();
        std::os::unix::fs::symlink(root.join("elsewhere.txt"), root.join("a/.env")).unwrap();
        let glob = format!("{}/**/.env", root.display());
        let denied = expand(&[glob], &mut Budget::new(MAX_ENTRIES)).unwrap();
        let expected: BTreeSet<PathBuf> = [
            root.join(".env"),
            root.join("a/.env"),
            root.join("a/b/c/.env"),
            root.join("elsewhere.txt"),
        ]
        .into_iter()
        .collect();
        assert_eq!(denied.paths, expected);
    }

    #[test]
    fn a_walk_past_the_budget_fails() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..20 {
            std::fs::write(dir.path().join(format!("f{i}")), "x").unwrap();
        }
        let glob = format!("{}/*.key", dir.path().display());
        let err = expand(&[glob], &mut Budget::new(10)).unwrap_err();
        assert!(matches!(err, SandboxError::TooManyEntries { .. }), "{err}");
    }
}
