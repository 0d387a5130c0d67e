//! Child processes that must never outlive their call: the runner shared by the `bash` tool and
//! Claude Code command hooks ([`run`]), and the `/proc` search for what escaped a process group
//! ([`reap`]).

pub(crate) mod reap;
pub(crate) mod run;

/// What was read from a stream: the first `cap` bytes, and how many there were in all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Captured {
    pub bytes: Vec<u8>,
    pub total: usize,
}

impl Captured {
    /// The kept bytes as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    /// The kept bytes as text, with a note when some were cut.
    pub fn text_with_note(&self) -> String {
        let mut text = self.text();
        if self.total > self.bytes.len() {
            text.push_str(&format!("\n[cut: {} bytes in all]", self.total));
        }
        text
    }
}
