//! What hookbus needs from the operating system, knowing nothing of hooks or events: child
//! processes run and reaped as a group, the kernel sandbox of the `bash` tool (Landlock and
//! seccomp), path resolution without symlink races, and panic containment.

pub(crate) mod panics;
pub(crate) mod paths;
pub(crate) mod process;
pub mod sandbox;

pub use panics::panic_is_contained;
