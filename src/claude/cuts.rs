//! The transcript as it stood at each event of a replay. Claude Code hands a hook the session's
//! transcript file, which at that moment ends at the line that produced the event; a replay has
//! read the whole transcript first. So the replay's hooks get a copy of it that is grown (or cut
//! back) to each event's line before the event's hooks run: one file, at one path for the whole
//! session as in Claude Code, each line copied once however many events come from it, and never
//! larger than the transcript (itself at most
//! [`MAX_TRANSCRIPT_BYTES`](crate::model::bounds::MAX_TRANSCRIPT_BYTES)).

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::replay::LineEnd;
use crate::model::error::Error;

/// The transcript cut at the current event: a file with the transcript's name (mode 0600) in a
/// private directory (0700) that is removed when this is dropped.
pub(crate) struct TranscriptCut {
    source: Arc<File>,
    cut: Arc<File>,
    path: PathBuf,
    /// Bytes of the transcript the cut holds.
    len: u64,
    /// Removed on drop; declared last so the files close first.
    _dir: tempfile::TempDir,
}

impl TranscriptCut {
    /// An empty cut of the transcript at `source`.
    pub fn new(source: &Path) -> Result<Self, Error> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let io = |path: &Path, what: &str, e: std::io::Error| Error::Io {
            path: path.display().to_string(),
            message: format!("{what}: {e}"),
        };
        let dir = tempfile::Builder::new()
            .prefix("hookbus-replay-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .map_err(|e| {
                io(
                    &std::env::temp_dir(),
                    "no directory for the transcript cut",
                    e,
                )
            })?;
        let name = source.file_name().unwrap_or("transcript.jsonl".as_ref());
        let path = dir.path().join(name);
        let cut = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| io(&path, "creating the transcript cut", e))?;
        let source = File::open(source).map_err(|e| io(source, "reading the transcript", e))?;
        Ok(Self {
            source: Arc::new(source),
            cut: Arc::new(cut),
            path,
            len: 0,
            _dir: dir,
        })
    }

    /// The cut's path: the same for every event.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes the cut hold the transcript up to and including the line `at` (nothing for line
    /// 0): copies the lines it lacks, and drops what lies past the line (an earlier cut, or
    /// what a hook wrote to it).
    pub async fn cut_at(&mut self, at: LineEnd) -> Result<(), Error> {
        let (source, cut, from) = (self.source.clone(), self.cut.clone(), self.len);
        let done = tokio::task::spawn_blocking(move || extend(&source, &cut, from, at.end))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
        done.map_err(|e| Error::Io {
            path: self.path.display().to_string(),
            message: format!("cutting the transcript at line {}: {e}", at.line),
        })?;
        self.len = at.end;
        Ok(())
    }
}

/// Copies bytes `from..to` of `source` to the same place in `cut` (none when `to <= from`), then
/// makes `cut` exactly `to` bytes long.
fn extend(source: &File, cut: &File, from: u64, to: u64) -> std::io::Result<()> {
    use std::io::Read;
    if to > from {
        let (mut source, mut cut) = (source, cut);
        source.seek(SeekFrom::Start(from))?;
        cut.seek(SeekFrom::Start(from))?;
        let copied = std::io::copy(&mut source.take(to - from), &mut cut)?;
        if copied < to - from {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "the transcript is shorter than when it was read ({} of {to} bytes)",
                    from + copied
                ),
            ));
        }
    }
    cut.set_len(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(line: usize, end: u64) -> LineEnd {
        LineEnd { line, end }
    }

    #[tokio::test]
    async fn the_cut_follows_the_events_line_in_one_private_file() {
        use std::os::unix::fs::PermissionsExt;
        let src = tempfile::tempdir().unwrap();
        let transcript = src.path().join("abc.jsonl");
        std::fs::write(&transcript, "a\nbb\nccc\n").unwrap();
        let mut cut = TranscriptCut::new(&transcript).unwrap();
        let path = cut.path().to_owned();
        let dir = path.parent().unwrap().to_owned();
        assert_eq!(path.file_name().unwrap(), "abc.jsonl");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&path), 0o600);
        let text = || std::fs::read_to_string(&path).unwrap();

        cut.cut_at(line(0, 0)).await.unwrap();
        assert_eq!(text(), "");
        cut.cut_at(line(2, 5)).await.unwrap();
        assert_eq!(text(), "a\nbb\n");
        // What a hook appends is gone at the next event.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"junk\n"))
            .unwrap();
        cut.cut_at(line(3, 9)).await.unwrap();
        assert_eq!(text(), "a\nbb\nccc\n");
        // Back to an earlier line (a message whose lines are interleaved with others).
        cut.cut_at(line(1, 2)).await.unwrap();
        assert_eq!(text(), "a\n");
        cut.cut_at(line(3, 9)).await.unwrap();
        assert_eq!(text(), "a\nbb\nccc\n");

        // Past the end of the file: an error naming the line.
        let err = cut.cut_at(line(4, 20)).await.unwrap_err().to_string();
        assert!(err.contains("line 4"), "{err}");

        drop(cut);
        assert!(!dir.exists());
    }
}
