//! Claude Code plugins: a plugin directory's `hooks/hooks.json`, loaded after the settings files.

use std::path::{Path, PathBuf};

use super::settings::{ClaudeSettings, CompatOptions};
use crate::model::bounds::{read_to_string_capped, MAX_SETTINGS_BYTES};
use crate::model::error::Error;

/// A plugin directory and the text of its `hooks/hooks.json`, read but not parsed.
pub(crate) struct PluginDoc {
    /// The plugin's directory, absolute: `CLAUDE_PLUGIN_ROOT`.
    pub root: PathBuf,
    /// `<root>/hooks/hooks.json`, as shown in warnings, errors and reports.
    pub file: String,
    /// The file's text; `None` when the plugin has no `hooks/hooks.json`.
    pub text: Option<String>,
}

impl PluginDoc {
    /// Reads `dir/hooks/hooks.json`. A `dir` that is not a directory is an error, and so is a
    /// `hooks.json` that cannot be read or is larger than [`MAX_SETTINGS_BYTES`]; a missing
    /// `hooks.json` is not (the plugin has no hooks, which is a warning).
    pub fn read(dir: &Path) -> Result<Self, Error> {
        let io = |message: String| Error::Io {
            path: dir.display().to_string(),
            message,
        };
        let root = std::path::absolute(dir).map_err(|e| io(e.to_string()))?;
        match std::fs::metadata(&root) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(io("a plugin directory must be a directory".into())),
            Err(e) => return Err(io(format!("not a plugin directory: {e}"))),
        }
        let path = root.join("hooks").join("hooks.json");
        let file = path.display().to_string();
        let text = match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            _ => Some(read_to_string_capped(
                &path,
                MAX_SETTINGS_BYTES,
                "a hooks.json",
            )?),
        };
        Ok(Self { root, file, text })
    }
}

impl ClaudeSettings {
    /// Loads settings files as [`ClaudeSettings::load`] does, then the hooks of each plugin
    /// directory in `plugin_dirs`, in order: `DIR/hooks/hooks.json`, in the settings' `hooks`
    /// shape (an optional top-level `description` beside it).
    ///
    /// A plugin's handlers come after the settings' handlers (and after earlier plugins'), run
    /// with `CLAUDE_PLUGIN_ROOT` set to the plugin's directory (made absolute), and have
    /// `${CLAUDE_PLUGIN_ROOT}` substituted in `command` and exec-form `args`. They are never
    /// merged with a settings handler or another plugin's ([`Handler::plugin_root`]), and their
    /// timeouts do not raise the SessionEnd budget.
    ///
    /// A plugin directory that does not exist is an error, and so is a `hooks.json` that is not
    /// valid JSON; a plugin without `hooks/hooks.json` is a warning. Nothing is loaded on error.
    ///
    /// [`Handler::plugin_root`]: super::Handler::plugin_root
    pub fn load_with_plugins<F: AsRef<Path>, P: AsRef<Path>>(
        files: &[F],
        plugin_dirs: &[P],
        options: CompatOptions,
    ) -> Result<Self, Error> {
        let mut texts = Vec::with_capacity(files.len());
        for file in files {
            let path = file.as_ref();
            let text = read_to_string_capped(path, MAX_SETTINGS_BYTES, "a settings file")?;
            texts.push((path.display().to_string(), text));
        }
        let plugins = plugin_dirs
            .iter()
            .map(|dir| PluginDoc::read(dir.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        Self::parse_with(&texts, &plugins, options)
    }
}
