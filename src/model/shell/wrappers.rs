//! Commands that run other commands: wrappers (`sudo`, `timeout 5`, `xargs`, …), shells given a
//! string (`sh -c`), `eval` and `find -exec`.
//!
//! Deny and ask rules look through every wrapper this module knows, options parsed the way the
//! wrapper parses them, so `sudo -u root timeout -s KILL 5 git push` is seen as `git push` too.
//! Allow rules look only through the wrappers that change nothing about what runs (`time`,
//! `nice`, `nohup`, `timeout`, `stdbuf`, and `xargs` without options), so `Bash(ls *)` never
//! allows `sudo ls`.

use super::glob::{is_hole, HOLE};

/// Directories of system programs: for allow rules a program given by a path in one of them is
/// compared by its name, and a program given by any other path keeps its path.
const SYSTEM_DIRS: &[&str] = &[
    "/bin",
    "/usr/bin",
    "/usr/local/bin",
    "/sbin",
    "/usr/sbin",
    "/usr/local/sbin",
];

/// How many wrappers deep a command is looked through; deeper, deny rules fail closed.
const MAX_WRAPPERS: usize = 8;

/// Shells whose `-c` string is parsed as shell.
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "rbash"];

/// What deny and ask rules see of one simple command.
#[derive(Debug, Default)]
pub(super) struct Seen {
    /// Command lines: the command, and each command it wraps.
    pub lines: Vec<String>,
    /// Shell text the command runs (`sh -c`, `eval`, `env -S`, `su -c`).
    pub scripts: Vec<String>,
    /// Whether it runs shell text known only at run time (`eval "$x"`) or wraps deeper than
    /// [`MAX_WRAPPERS`]: deny rules then fail closed.
    pub unknown: bool,
    /// Whether it runs `eval`, directly or through a wrapper.
    pub evaluates: bool,
}

/// What deny and ask rules see of the simple command `words` (decoded, program first).
pub(super) fn deny(words: &[String]) -> Seen {
    let mut seen = Seen::default();
    deny_into(words, 0, &mut seen);
    seen
}

/// Adds what deny rules see of `words`, `depth` wrappers in.
fn deny_into(words: &[String], depth: usize, seen: &mut Seen) {
    let Some((program, args)) = words.split_first() else {
        return;
    };
    let name = program_name(program);
    seen.lines.push(line(program, args));
    if name != program {
        seen.lines.push(line(name, args));
    }
    if name.chars().any(is_hole) {
        return;
    }
    match runs(name, args) {
        Runs::Nothing => {}
        _ if depth >= MAX_WRAPPERS => seen.unknown = true,
        Runs::Commands(commands) => {
            for command in commands {
                deny_into(&command, depth + 1, seen);
            }
        }
        Runs::Script(script) => {
            seen.evaluates |= name == "eval";
            seen.scripts.push(script);
        }
        Runs::Unknown => {
            seen.evaluates |= name == "eval";
            seen.unknown = true;
        }
    }
}

/// What an allow rule must cover of the simple command `words`: for the command, and for each
/// command it runs that is not itself (`find -exec`), the lines one of which a rule must cover.
pub(super) fn allow(words: &[String]) -> Vec<Vec<String>> {
    let mut commands = vec![Vec::new()];
    let views = views(words, 0, &mut commands);
    commands[0] = views;
    commands
}

/// The lines an allow rule may cover for `words`: as run, with the program by name when it is
/// in a system directory, and through transparent wrappers. Commands that `find -exec` runs
/// are added to `others`.
fn views(words: &[String], depth: usize, others: &mut Vec<Vec<String>>) -> Vec<String> {
    let Some((program, args)) = words.split_first() else {
        return Vec::new();
    };
    let name = allow_program(program);
    let mut lines = vec![line(name, args)];
    if name != program {
        lines.push(line(program, args));
    }
    if depth >= MAX_WRAPPERS || name.chars().any(is_hole) {
        return lines;
    }
    if let Some(inner) = transparent(name, args) {
        lines.extend(views(&inner, depth + 1, others));
    }
    if name == "find" {
        for inner in find_commands(args) {
            let inner_lines = views(&inner, depth + 1, others);
            others.push(inner_lines);
        }
    }
    lines
}

/// A command line: words joined by single spaces.
fn line(program: &str, args: &[String]) -> String {
    let mut line =
        String::with_capacity(program.len() + args.iter().map(|a| a.len() + 1).sum::<usize>());
    line.push_str(program);
    for arg in args {
        line.push(' ');
        line.push_str(arg);
    }
    line
}

/// The name a program is run by, for deny rules: what follows the last `/`. When a hole that
/// may hold a `/` comes after it, the name starts at that hole.
fn program_name(program: &str) -> &str {
    match program
        .char_indices()
        .rev()
        .find(|&(_, c)| c == '/' || c == HOLE)
    {
        Some((i, '/')) => &program[i + 1..],
        Some((i, _)) => &program[i..],
        None => program,
    }
}

/// The program as allow rules see it: by name when it is given by a path in a system directory,
/// as written otherwise (`./ls`, `/tmp/ls` and `sub/ls` are not `ls`).
fn allow_program(program: &str) -> &str {
    if program.chars().any(is_hole) {
        return program;
    }
    match program.rsplit_once('/') {
        Some((dir, name)) if !name.is_empty() && SYSTEM_DIRS.contains(&dir) => name,
        _ => program,
    }
}

/// What a program runs besides itself.
enum Runs {
    /// Nothing this module knows of.
    Nothing,
    /// These commands (decoded words).
    Commands(Vec<Vec<String>>),
    /// This shell text.
    Script(String),
    /// Shell text known only at run time.
    Unknown,
}

/// How a wrapper reads its options.
struct Spec {
    /// Short options that take a value, attached (`-uroot`) or as the next word (`-u root`).
    values: &'static str,
    /// Short options whose value, if any, is attached (`-i{}`).
    optional: &'static str,
    /// Long options that take a value (`--user root`, `--user=root`).
    long_values: &'static [&'static str],
    /// Whether `-` alone is an option (`env -`, `su -`).
    dash: bool,
}

/// One option as read, its name without dashes.
struct Opt<'a> {
    name: &'a str,
    value: Option<&'a str>,
}

/// A wrapper: a program that runs the command that follows its options.
struct Wrapper {
    name: &'static str,
    spec: Spec,
    /// Operands between the options and the command (the duration of `timeout`).
    operands: usize,
    /// Whether `NAME=value` words before the command set its environment.
    assignments: bool,
    /// How allow rules look through it.
    allow: Through,
}

/// How allow rules look through a wrapper.
#[derive(PartialEq, Eq)]
enum Through {
    /// They do not: the wrapper changes what runs or how.
    Never,
    /// They do, whatever the options.
    Always,
    /// They do when the options are among these.
    With(&'static [&'static str]),
    /// They do when there are no options (`xargs CMD`).
    Bare,
}

/// Options with no attached-only values, `-` alone an operand.
const fn spec(values: &'static str, long_values: &'static [&'static str]) -> Spec {
    Spec {
        values,
        optional: "",
        long_values,
        dash: false,
    }
}

/// A wrapper without options of its own (`--` still ends them).
const NO_OPTIONS: Spec = spec("", &[]);

/// The wrappers, with their options as their manuals give them.
const WRAPPERS: &[Wrapper] = &[
    Wrapper {
        name: "sudo",
        spec: Spec {
            values: "aCcDgpRrTtUu",
            optional: "h",
            long_values: &[
                "auth-type",
                "close-from",
                "login-class",
                "chdir",
                "group",
                "host",
                "prompt",
                "chroot",
                "role",
                "type",
                "command-timeout",
                "other-user",
                "user",
            ],
            dash: false,
        },
        operands: 0,
        assignments: true,
        allow: Through::Never,
    },
    Wrapper {
        name: "doas",
        spec: spec("Cu", &[]),
        operands: 0,
        assignments: false,
        allow: Through::Never,
    },
    Wrapper {
        name: "env",
        spec: Spec {
            values: "uCSa",
            optional: "",
            long_values: &["unset", "chdir", "split-string", "argv0"],
            dash: true,
        },
        operands: 0,
        assignments: true,
        allow: Through::Never,
    },
    Wrapper {
        name: "timeout",
        spec: spec("sk", &["signal", "kill-after"]),
        operands: 1,
        assignments: false,
        allow: Through::Always,
    },
    Wrapper {
        name: "nice",
        spec: spec("n", &["adjustment"]),
        operands: 0,
        assignments: false,
        allow: Through::Always,
    },
    Wrapper {
        name: "nohup",
        spec: NO_OPTIONS,
        operands: 0,
        assignments: false,
        allow: Through::Always,
    },
    Wrapper {
        name: "stdbuf",
        spec: spec("ioe", &["input", "output", "error"]),
        operands: 0,
        assignments: false,
        allow: Through::Always,
    },
    Wrapper {
        name: "time",
        spec: spec("of", &["output", "format"]),
        operands: 0,
        assignments: false,
        allow: Through::With(&["p", "portability"]),
    },
    Wrapper {
        name: "xargs",
        spec: Spec {
            values: "aEIdLnPs",
            optional: "eil",
            long_values: &[
                "arg-file",
                "delimiter",
                "max-args",
                "max-procs",
                "max-chars",
                "process-slot-var",
            ],
            dash: false,
        },
        operands: 0,
        assignments: false,
        allow: Through::Bare,
    },
    Wrapper {
        name: "command",
        spec: NO_OPTIONS,
        operands: 0,
        assignments: false,
        allow: Through::Never,
    },
    Wrapper {
        name: "builtin",
        spec: NO_OPTIONS,
        operands: 0,
        assignments: false,
        allow: Through::Never,
    },
    Wrapper {
        name: "exec",
        spec: spec("a", &[]),
        operands: 0,
        assignments: false,
        allow: Through::Never,
    },
    Wrapper {
        name: "setsid",
        spec: NO_OPTIONS,
        operands: 0,
        assignments: false,
        allow: Through::Never,
    },
    Wrapper {
        name: "busybox",
        spec: NO_OPTIONS,
        operands: 0,
        assignments: false,
        allow: Through::Never,
    },
];

/// Options of `su`, whose `-c` string runs in the user's shell.
const SU: Spec = Spec {
    values: "cgGsw",
    optional: "",
    long_values: &[
        "command",
        "session-command",
        "group",
        "supp-group",
        "shell",
        "whitelist-environment",
    ],
    dash: true,
};

/// Options of the shells that take a value (`-o pipefail`, `-O extglob`, `--rcfile FILE`).
const SHELL: Spec = spec("oO", &["rcfile", "init-file"]);

/// What `name args…` runs besides itself, for deny rules.
fn runs(name: &str, args: &[String]) -> Runs {
    if let Some(wrapper) = WRAPPERS.iter().find(|w| w.name == name) {
        return wrapped(wrapper, args);
    }
    match name {
        _ if SHELLS.contains(&name) => shell(args),
        "su" => su(args),
        "eval" if args.is_empty() => Runs::Nothing,
        "eval" => script(&args.join(" ")),
        "find" => Runs::Commands(find_commands(args)),
        _ => Runs::Nothing,
    }
}

/// `su … -c STRING`: the string runs in the user's shell. Options may follow the user name.
fn su(args: &[String]) -> Runs {
    let mut i = 0;
    while i < args.len() {
        let (opts, start) = options(&args[i..], &SU);
        if let Some(opt) = opts
            .iter()
            .find(|o| matches!(o.name, "c" | "command" | "session-command"))
        {
            return opt.value.map_or(Runs::Nothing, script);
        }
        // Skip the operand (the user name) and read on.
        i += start + 1;
    }
    Runs::Nothing
}

/// Shell text from a word: known when the word has no hole.
fn script(word: &str) -> Runs {
    if word.chars().any(is_hole) {
        Runs::Unknown
    } else {
        Runs::Script(word.to_owned())
    }
}

/// What a wrapper runs: the command after its options, operands and assignments. Where a hole
/// stands before that command, the command may also start at the hole.
fn wrapped(wrapper: &Wrapper, args: &[String]) -> Runs {
    let (opts, start) = command_start(wrapper, args);
    let rest = &args[start..];
    let mut commands = Vec::new();
    if let Some(hole) = args[..start].iter().position(|a| a.chars().any(is_hole)) {
        commands.push(args[hole..].to_vec());
    }
    let command = match wrapper.name {
        "env" => match opts.iter().find(|o| matches!(o.name, "S" | "split-string")) {
            Some(split) => {
                let quoted: Option<Vec<String>> = rest.iter().map(|w| quote(w)).collect();
                return match (split.value, quoted) {
                    (Some(split), Some(quoted)) => script(&line(split, &quoted)),
                    _ => Runs::Unknown,
                };
            }
            None => rest.to_vec(),
        },
        "command" if opts.iter().any(|o| matches!(o.name, "v" | "V")) => Vec::new(),
        "xargs" if !rest.is_empty() => {
            let replace = opts.iter().find_map(|o| match (o.name, o.value) {
                ("I", value) => value,
                ("i" | "replace", value) => Some(value.unwrap_or("{}")),
                _ => None,
            });
            let mut command: Vec<String> = match replace {
                Some(r) if !r.is_empty() => rest
                    .iter()
                    .map(|w| w.replace(r, &HOLE.to_string()))
                    .collect(),
                _ => rest.to_vec(),
            };
            command.push(HOLE.to_string());
            command
        }
        _ => rest.to_vec(),
    };
    if !command.is_empty() {
        commands.push(command);
    }
    if commands.is_empty() {
        Runs::Nothing
    } else {
        Runs::Commands(commands)
    }
}

/// The options of a wrapper and the index in `args` of the command it runs.
fn command_start<'a>(wrapper: &Wrapper, args: &'a [String]) -> (Vec<Opt<'a>>, usize) {
    let (opts, mut start) = options(args, &wrapper.spec);
    start = (start + wrapper.operands).min(args.len());
    if wrapper.assignments {
        while args.get(start).is_some_and(|w| is_assignment(w)) {
            start += 1;
        }
    }
    (opts, start)
}

/// For allow rules: the command a transparent wrapper runs, as it runs it.
fn transparent(name: &str, args: &[String]) -> Option<Vec<String>> {
    let wrapper = WRAPPERS.iter().find(|w| w.name == name)?;
    let (opts, start) = command_start(wrapper, args);
    let rest = &args[start..];
    let clean = args[..start].iter().all(|a| !a.chars().any(is_hole));
    let through = match &wrapper.allow {
        Through::Never => false,
        Through::Always => true,
        Through::With(allowed) => opts.iter().all(|o| allowed.contains(&o.name)),
        Through::Bare => start == 0,
    };
    if !through || !clean || rest.is_empty() {
        return None;
    }
    let mut command = rest.to_vec();
    if wrapper.allow == Through::Bare {
        // `xargs CMD` adds arguments read from its input.
        command.push(HOLE.to_string());
    }
    Some(command)
}

/// Reads the options at the start of `args`: returns them and the index of the first operand.
/// `--` ends the options, and so does a word with a hole (it may be the program).
fn options<'a>(args: &'a [String], spec: &Spec) -> (Vec<Opt<'a>>, usize) {
    let mut opts = Vec::new();
    let mut i = 0;
    while let Some(word) = args.get(i) {
        if word.chars().any(is_hole) {
            break;
        }
        if word == "--" {
            i += 1;
            break;
        }
        if word == "-" && spec.dash {
            opts.push(Opt {
                name: "-",
                value: None,
            });
            i += 1;
            continue;
        }
        if let Some(long) = word.strip_prefix("--") {
            let (name, mut value) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (long, None),
            };
            if value.is_none() && spec.long_values.contains(&name) {
                i += 1;
                value = args.get(i).map(String::as_str);
            }
            opts.push(Opt { name, value });
            i += 1;
            continue;
        }
        let Some(cluster) = word.strip_prefix('-').filter(|c| !c.is_empty()) else {
            break;
        };
        for (k, c) in cluster.char_indices() {
            let name = &cluster[k..k + c.len_utf8()];
            let rest = &cluster[k + c.len_utf8()..];
            if spec.values.contains(c) {
                let value = if rest.is_empty() {
                    i += 1;
                    args.get(i).map(String::as_str)
                } else {
                    Some(rest)
                };
                opts.push(Opt { name, value });
                break;
            }
            if spec.optional.contains(c) {
                let value = Some(rest).filter(|r| !r.is_empty());
                opts.push(Opt { name, value });
                break;
            }
            opts.push(Opt { name, value: None });
        }
        i += 1;
    }
    (opts, i.min(args.len()))
}

/// `sh -c STRING`, flags combined or not (`-lc`, `-ec`, `-o pipefail -c`). A shell given a file
/// or reading its input runs text this module cannot see.
fn shell(args: &[String]) -> Runs {
    let (opts, start) = options(args, &SHELL);
    let command_mode = opts.iter().any(|o| o.name == "c");
    match args.get(start) {
        Some(word) if command_mode => script(word),
        // A hole where options stand may be `-c`, which makes the next word the script.
        Some(word) if word.chars().any(is_hole) => match args.get(start + 1) {
            Some(next) => script(next),
            None => Runs::Nothing,
        },
        _ => Runs::Nothing,
    }
}

/// The commands `find … -exec CMD … ;` runs (also `-execdir`, `-ok`, `-okdir`, and `+`), with
/// `{}` standing for the file names.
fn find_commands(args: &[String]) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let action = matches!(args[i].as_str(), "-exec" | "-execdir" | "-ok" | "-okdir");
        i += 1;
        if !action {
            continue;
        }
        let end = args[i..]
            .iter()
            .position(|w| w == ";" || w == "+")
            .map_or(args.len(), |p| i + p);
        let command: Vec<String> = args[i..end]
            .iter()
            .map(|w| w.replace("{}", &HOLE.to_string()))
            .collect();
        if !command.is_empty() {
            commands.push(command);
        }
        i = end + 1;
    }
    commands
}

/// Whether a decoded word is `NAME=value`.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// A decoded word quoted back into shell text; `None` when it has a hole.
fn quote(word: &str) -> Option<String> {
    if word.chars().any(is_hole) {
        return None;
    }
    Some(format!("'{}'", word.replace('\'', r"'\''")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ')
            .map(|w| w.replace('$', &HOLE.to_string()))
            .collect()
    }

    fn seen(s: &str) -> Seen {
        deny(&words(s))
    }

    fn shown(lines: &[String]) -> Vec<String> {
        lines.iter().map(|l| l.replace(HOLE, "$")).collect()
    }

    #[test]
    fn deny_looks_through_wrappers_and_their_options() {
        for cmd in [
            "sudo git push",
            "sudo -u root git push",
            "sudo -Eu root -- git push",
            "sudo --user=root git push",
            "sudo --user root FOO=1 git push",
            "env A=1 git push",
            "env -i git push",
            "env -u HOME -C /tmp git push",
            "env - git push",
            "timeout 5 git push",
            "timeout -s KILL 5 git push",
            "timeout --signal KILL -k 1 5 git push",
            "nice git push",
            "nice -n 5 git push",
            "nice -5 git push",
            "nohup git push",
            "time -p git push",
            "stdbuf -oL -e0 git push",
            "stdbuf -o L git push",
            "command git push",
            "command -p git push",
            "builtin git push",
            "exec git push",
            "exec -a name -c git push",
            "doas -u root git push",
            "setsid git push",
            "busybox git push",
            "sudo timeout 5 env A=1 nice -n 1 git push",
            "/usr/bin/sudo /usr/bin/git push",
        ] {
            let lines = seen(cmd).lines;
            assert!(lines.iter().any(|l| l == "git push"), "{cmd}: {lines:?}");
        }
    }

    #[test]
    fn xargs_and_find_add_arguments() {
        assert!(shown(&seen("xargs git").lines).contains(&"git $".to_owned()));
        assert!(shown(&seen("xargs -n1 git push").lines).contains(&"git push $".to_owned()));
        assert!(shown(&seen("xargs -I{} git {} x").lines).contains(&"git $ x $".to_owned()));
        assert!(shown(&seen("xargs -0 -P 4 git push").lines).contains(&"git push $".to_owned()));
        let lines = shown(&seen("find . -name x -exec rm -f {} ; -print").lines);
        assert!(lines.contains(&"rm -f $".to_owned()), "{lines:?}");
        let lines = shown(&seen("find . -execdir git push + -ok ls ;").lines);
        assert!(lines.contains(&"git push".to_owned()) && lines.contains(&"ls".to_owned()));
    }

    #[test]
    fn shell_strings_and_eval_are_scripts() {
        for (cmd, script) in [
            ("sh -c git", "git"),
            ("bash -lc git", "git"),
            ("bash -o pipefail -ec git", "git"),
            ("zsh --norc -c git x y", "git"),
            ("eval git push", "git push"),
            ("env -S git push", "git 'push'"),
            ("su -c git root", "git"),
            ("su - root --command=git", "git"),
            ("busybox sh -c git", "git"),
            ("sudo bash -c git", "git"),
        ] {
            assert_eq!(seen(cmd).scripts, vec![script], "{cmd}");
        }
        assert!(seen("eval git").evaluates);
        assert!(seen("command eval git").evaluates);
        assert!(seen("bash script.sh").scripts.is_empty());
        assert!(!seen("bash script.sh").unknown);
        assert!(seen("bash -c $").unknown);
        assert!(seen("eval $").unknown);
        assert!(seen("command -v git push").lines == vec!["command -v git push"]);
    }

    #[test]
    fn holes_before_the_command_fail_closed() {
        let lines = shown(&seen("timeout $ push").lines);
        assert!(lines.contains(&"$ push".to_owned()), "{lines:?}");
        let lines = shown(&seen("sudo -u $ git push").lines);
        assert!(lines.contains(&"git push".to_owned()), "{lines:?}");
        assert!(lines.contains(&"$ git push".to_owned()), "{lines:?}");
        assert_eq!(seen("bash $ git").scripts, vec!["git"]);
    }

    #[test]
    fn program_names() {
        assert_eq!(program_name("/usr/bin/git"), "git");
        assert_eq!(program_name("./git"), "git");
        assert_eq!(program_name("git"), "git");
        let hole = format!("/x{HOLE}y");
        assert_eq!(program_name(&hole), &hole[2..]);
        assert_eq!(allow_program("/usr/bin/ls"), "ls");
        assert_eq!(allow_program("/usr/local/sbin/ls"), "ls");
        assert_eq!(allow_program("./ls"), "./ls");
        assert_eq!(allow_program("/tmp/ls"), "/tmp/ls");
        assert_eq!(allow_program("sub/ls"), "sub/ls");
    }

    #[test]
    fn deep_wrapping_fails_closed() {
        let deep = format!("{}git push", "nohup ".repeat(20));
        assert!(seen(&deep).unknown);
    }

    fn views(s: &str) -> Vec<Vec<String>> {
        allow(&words(s)).iter().map(|v| shown(v)).collect()
    }

    #[test]
    fn allow_looks_through_transparent_wrappers_only() {
        for cmd in [
            "time ls",
            "time -p ls",
            "nice ls",
            "nice -n 5 ls",
            "nohup ls",
            "timeout 5 ls",
            "timeout -s KILL 5 ls",
            "stdbuf -oL ls",
            "/usr/bin/timeout 5 /bin/ls",
            "nice nohup timeout 5 ls",
        ] {
            assert!(
                views(cmd)[0].contains(&"ls".to_owned()),
                "{cmd}: {:?}",
                views(cmd)
            );
        }
        for cmd in [
            "sudo ls",
            "env ls",
            "command ls",
            "exec ls",
            "builtin ls",
            "time -o out ls",
            "timeout $ ls",
            "./timeout 5 ls",
            "xargs -I{} ls",
        ] {
            assert!(!views(cmd)[0].contains(&"ls".to_owned()), "{cmd}");
        }
        assert!(views("xargs ls")[0].contains(&"ls $".to_owned()));
        assert_eq!(views("find . -exec rm {} ;")[1], vec!["rm $"]);
    }
}
