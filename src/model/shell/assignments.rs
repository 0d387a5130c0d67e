//! Variables whose value changes what a command runs.
//!
//! `FOO=1 ls` runs `ls`, so leading assignments are set aside when a command is matched. Some
//! variables decide which program runs or make a program run other code: `PATH=/tmp ls` may run
//! `/tmp/ls`, `LD_PRELOAD=x.so ls` loads `x.so` into `ls`, `GIT_CONFIG_*` can make `git status`
//! run a command. Assigning one of them (before a command, alone, or as a `for` variable) is
//! something no allow rule covers.

/// Names that change what runs, exactly.
const NAMES: &[&str] = &[
    // The shell itself.
    "PATH",
    "IFS",
    "ENV",
    "BASH_ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "PROMPT_COMMAND",
    "CDPATH",
    "GLOBIGNORE",
    // Where programs read their configuration (which can name commands to run).
    "HOME",
    "ZDOTDIR",
    "XDG_CONFIG_HOME",
    "INPUTRC",
    // The C library.
    "GCONV_PATH",
    "HOSTALIASES",
    // Interpreters.
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "PYTHONINSPECT",
    "PERL5LIB",
    "PERL5OPT",
    "PERLLIB",
    "PERL5DB",
    "RUBYOPT",
    "RUBYLIB",
    "NODE_OPTIONS",
    "NODE_PATH",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "CLASSPATH",
    "LUA_INIT",
    "LUA_PATH",
    "LUA_CPATH",
    "PHPRC",
    "PHP_INI_SCAN_DIR",
    // Programs that run a configurable helper.
    "EDITOR",
    "VISUAL",
    "PAGER",
    "MANPAGER",
    "LESSOPEN",
    "LESSCLOSE",
    "BROWSER",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
];

/// Name prefixes that change what runs.
const PREFIXES: &[&str] = &["LD_", "DYLD_", "BASH_FUNC_", "GIT_", "NPM_CONFIG_"];

/// `GIT_` variables that only label what git writes.
const HARMLESS_GIT: &[&str] = &["GIT_AUTHOR_", "GIT_COMMITTER_"];

/// Whether assigning `name` can change what a command runs. Names are compared in upper case,
/// which errs towards yes (`npm_config_*` is read in lower case).
pub(super) fn affects_execution(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    if HARMLESS_GIT.iter().any(|p| upper.starts_with(p)) {
        return false;
    }
    NAMES.contains(&upper.as_str()) || PREFIXES.iter().any(|p| upper.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn execution_affecting_names() {
        for name in [
            "PATH",
            "LD_PRELOAD",
            "DYLD_INSERT_LIBRARIES",
            "BASH_FUNC_ls%%",
            "GIT_SSH_COMMAND",
            "GIT_CONFIG_COUNT",
            "PAGER",
            "npm_config_script_shell",
        ] {
            assert!(affects_execution(name), "{name}");
        }
        for name in ["FOO", "LANG", "GIT_AUTHOR_NAME", "RUST_LOG", "CI"] {
            assert!(!affects_execution(name), "{name}");
        }
    }
}
