//! SEC-5: Bash rules match commands as parsed shell. Each table row is a name, a rule, a command
//! and whether the rule matches; every row is checked and every failing row is reported.
//!
//! Deny and ask rules are read with [`Rule::matches`] (any simple command anywhere may match);
//! allow rules with [`Rule::matches_all`] (every simple command is covered and nothing else runs).

use hookbus::Rule;
use serde_json::json;

/// One case: what it shows, the rule, the command, whether the rule matches it.
type Row = (&'static str, &'static str, &'static str, bool);

/// Deny and ask rules: `Bash(git push *)` must see `git push` however it is spelled or wrapped,
/// and only where it runs.
#[rustfmt::skip]
const DENY: &[Row] = &[
    // The command itself.
    ("bare prefix", "Bash(git push *)", "git push", true),
    ("with arguments", "Bash(git push *)", "git push origin main", true),
    ("flag argument", "Bash(git push *)", "git push --force-with-lease", true),
    ("trailing comment", "Bash(git push *)", "git push # later", true),
    ("redirected to /dev/null", "Bash(git push *)", "git push > /dev/null 2>&1", true),
    // Blanks.
    ("two spaces", "Bash(git push *)", "git  push", true),
    ("tab", "Bash(git push *)", "git\tpush", true),
    ("line continuation", "Bash(git push *)", "git \\\npush", true),
    // Lists and pipelines.
    ("after a newline", "Bash(git push *)", "echo hi\ngit push", true),
    ("background then wait", "Bash(git push *)", "git push&wait", true),
    ("backgrounded", "Bash(git push *)", "nohup git push &", true),
    ("after ;", "Bash(git push *)", "ls; git push", true),
    ("after &&", "Bash(git push *)", "true && git push", true),
    ("after ||", "Bash(git push *)", "false || git push", true),
    ("pipeline head", "Bash(git push *)", "git push | cat", true),
    ("pipeline with 2>&1", "Bash(git push *)", "git push 2>&1 | tee log", true),
    ("negated", "Bash(git push *)", "! git push", true),
    // Compound commands.
    ("subshell", "Bash(git push *)", "(git push)", true),
    ("brace group", "Bash(git push *)", "{ git push; }", true),
    ("if body", "Bash(git push *)", "if true; then git push; fi", true),
    ("if condition", "Bash(git push *)", "if git push; then :; fi", true),
    ("else body", "Bash(git push *)", "if false; then :; else git push; fi", true),
    ("for body", "Bash(git push *)", "for i in 1; do git push; done", true),
    ("while condition", "Bash(git push *)", "while git push; do :; done", true),
    ("until condition", "Bash(git push *)", "until git push; do :; done", true),
    ("case branch", "Bash(git push *)", "case x in x) git push;; esac", true),
    ("function body", "Bash(git push *)", "f() { git push; }; f", true),
    ("function keyword", "Bash(git push *)", "function f { git push; }", true),
    ("coprocess", "Bash(git push *)", "coproc git push", true),
    // Substitutions and expansions.
    ("command substitution", "Bash(git push *)", "echo $(git push)", true),
    ("backquotes", "Bash(git push *)", "echo `git push`", true),
    ("substitution in quotes", "Bash(git push *)", "echo \"$(git push)\"", true),
    ("nested substitution", "Bash(git push *)", "echo \"$(echo \"$(git push)\")\"", true),
    ("assignment value", "Bash(git push *)", "x=$(git push)", true),
    ("array element", "Bash(git push *)", "a=($(git push))", true),
    ("export argument", "Bash(git push *)", "export X=$(git push)", true),
    ("process substitution", "Bash(git push *)", "cat <(git push)", true),
    ("output process substitution", "Bash(git push *)", "echo x > >(git push)", true),
    ("here-document", "Bash(git push *)", "cat <<EOF\n$(git push)\nEOF", true),
    ("here-string", "Bash(git push *)", "cat <<< $(git push)", true),
    ("redirection target", "Bash(git push *)", "cat < $(git push)", true),
    ("parameter default", "Bash(git push *)", "echo ${x:-$(git push)}", true),
    ("parameter assignment default", "Bash(git push *)", ": ${x:=$(git push)}", true),
    ("arithmetic expansion", "Bash(git push *)", "echo $(( $(git push) ))", true),
    ("arithmetic command", "Bash(git push *)", "(( $(git push) ))", true),
    ("[[ ]] operand", "Bash(git push *)", "[[ $(git push) ]]", true),
    ("for values", "Bash(git push *)", "for i in $(git push); do :; done", true),
    ("case word", "Bash(git push *)", "case $(git push) in *) ;; esac", true),
    // Quoting.
    ("escaped program", "Bash(git push *)", "\\git push", true),
    ("empty quotes inside", "Bash(git push *)", "g''it push", true),
    ("double-quoted program", "Bash(git push *)", "\"git\" push", true),
    ("single-quoted argument", "Bash(git push *)", "git 'push'", true),
    ("double-quoted argument", "Bash(git push *)", "git \"push\"", true),
    ("half-quoted argument", "Bash(git push *)", "git pu\"sh\"", true),
    ("backslash in argument", "Bash(git push *)", "git pu\\sh", true),
    ("ANSI-C program", "Bash(git push *)", "$'git' push", true),
    ("ANSI-C argument", "Bash(git push *)", "git $'push'", true),
    ("ANSI-C escapes", "Bash(git push *)", "$'\\x67it' $'\\160ush'", true),
    // Programs by path, assignments.
    ("absolute path", "Bash(git push *)", "/usr/bin/git push", true),
    ("relative path", "Bash(git push *)", "./git push", true),
    ("leading assignment", "Bash(git push *)", "FOO=1 git push", true),
    ("two assignments", "Bash(git push *)", "A=1 B=2 git push", true),
    // Wrappers.
    ("sudo", "Bash(git push *)", "sudo git push", true),
    ("sudo by path", "Bash(git push *)", "/usr/bin/sudo git push", true),
    ("sudo -u", "Bash(git push *)", "sudo -u root git push", true),
    ("sudo combined flags", "Bash(git push *)", "sudo -Eu root git push", true),
    ("sudo --", "Bash(git push *)", "sudo -- git push", true),
    ("env assignment", "Bash(git push *)", "env A=1 git push", true),
    ("env -i", "Bash(git push *)", "env -i git push", true),
    ("env -S", "Bash(git push *)", "env -S 'git push'", true),
    ("timeout", "Bash(git push *)", "timeout 5 git push", true),
    ("timeout -s", "Bash(git push *)", "timeout -s KILL 5 git push", true),
    ("timeout --signal=", "Bash(git push *)", "timeout --signal=KILL 5 git push", true),
    ("nice", "Bash(git push *)", "nice git push", true),
    ("nice -n", "Bash(git push *)", "nice -n 5 git push", true),
    ("nohup", "Bash(git push *)", "nohup git push", true),
    ("time", "Bash(git push *)", "time git push", true),
    ("time -p", "Bash(git push *)", "time -p nice git push", true),
    ("stdbuf", "Bash(git push *)", "stdbuf -oL git push", true),
    ("xargs", "Bash(git push *)", "xargs git push", true),
    ("xargs -n1", "Bash(git push *)", "echo x | xargs -n1 git push", true),
    ("xargs adds push", "Bash(git push *)", "echo push | xargs git", true),
    ("command", "Bash(git push *)", "command git push", true),
    ("command -p", "Bash(git push *)", "command -p git push", true),
    ("builtin", "Bash(git push *)", "builtin git push", true),
    ("exec", "Bash(git push *)", "exec git push", true),
    ("exec -a", "Bash(git push *)", "exec -a name git push", true),
    ("wrappers in a row", "Bash(git push *)", "sudo timeout 5 env A=1 nice git push", true),
    ("find -exec", "Bash(git push *)", "find . -exec git push \\;", true),
    // Shell text.
    ("sh -c", "Bash(git push *)", "sh -c 'git push'", true),
    ("bash -c", "Bash(git push *)", "bash -c \"git push\"", true),
    ("bash -lc", "Bash(git push *)", "bash -lc 'git push'", true),
    ("zsh -c", "Bash(git push *)", "zsh -c 'git push'", true),
    ("sh -c in sh -c", "Bash(git push *)", "sh -c 'sh -c \"git push\"'", true),
    ("env bash -c", "Bash(git push *)", "env bash -c 'git push'", true),
    ("xargs sh -c", "Bash(git push *)", "xargs sh -c 'git push'", true),
    ("find -exec sh -c", "Bash(git push *)", "find . -exec sh -c 'git push' \\;", true),
    ("busybox sh -c", "Bash(git push *)", "busybox sh -c 'git push'", true),
    ("su -c", "Bash(git push *)", "su -c 'git push' root", true),
    ("eval quoted", "Bash(git push *)", "eval 'git push'", true),
    ("eval words", "Bash(git push *)", "eval git push", true),
    ("eval ANSI-C", "Bash(git push *)", "eval $'git\\x20push'", true),
    // Text only known at run time: fail closed.
    ("brace expansion", "Bash(git push *)", "{git,push}", true),
    ("glob ?", "Bash(git push *)", "/usr/bin/gi? push", true),
    ("glob *", "Bash(git push *)", "g*t push", true),
    ("glob []", "Bash(git push *)", "g[i]t push", true),
    ("variable program", "Bash(git push *)", "$GIT push", true),
    ("variable subcommand", "Bash(git push *)", "git $cmd", true),
    ("variable shell string", "Bash(git push *)", "bash -c \"$x\"", true),
    ("variable eval", "Bash(git push *)", "eval \"$x\"", true),
    ("variable rm", "Bash(rm *)", "$CMD -rf /", true),
    // Commands that do not parse: their words are still seen.
    ("unterminated quote after", "Bash(git push *)", "git push 'unterminated", true),
    ("unterminated quote before", "Bash(git push *)", "ls 'x; git push", true),
    ("unterminated substitution", "Bash(git push *)", "echo $(git push", true),
    ("stray ;;", "Bash(git push *)", "git push;;", true),
    // Not a match: `git push` is not what runs.
    ("other subcommand", "Bash(git push *)", "git status", false),
    ("argument of echo", "Bash(git push *)", "echo git push", false),
    ("quoted argument of echo", "Bash(git push *)", "echo 'git push'", false),
    ("longer subcommand", "Bash(git push *)", "git pushx", false),
    ("dashed subcommand", "Bash(git push *)", "git push-all", false),
    ("one word", "Bash(git push *)", "gitpush", false),
    ("other program", "Bash(git push *)", "mygit push", false),
    ("grep argument", "Bash(git push *)", "git log --grep push", false),
    ("commit message", "Bash(git push *)", "git commit -m 'git push'", false),
    ("search text", "Bash(git push *)", "grep -r 'git push' .", false),
    ("echo inside substitution", "Bash(git push *)", "echo $(echo git push)", false),
    ("quoted here-document", "Bash(git push *)", "cat <<'EOF'\n$(git push)\nEOF", false),
    ("single-quoted substitution", "Bash(git push *)", "echo '$(git push)'", false),
    ("ANSI-C backquotes are text", "Bash(git push *)", "cat $'\\x60git push\\x60'", false),
    ("assignment text", "Bash(git push *)", "x='git push'", false),
    ("command -v describes", "Bash(git push *)", "command -v git push", false),
    ("shell script file", "Bash(git push *)", "bash deploy.sh", false),
    ("variable argument", "Bash(git push *)", "echo \"$x\"", false),
    // Other rule forms.
    ("exact rule", "Bash(git push)", "git push", true),
    ("exact rule, quoted", "Bash(git push)", "'git' \"push\"", true),
    ("exact rule, sudo", "Bash(git push)", "sudo git push", true),
    ("exact rule, more", "Bash(git push)", "git push origin", false),
    ("legacy prefix", "Bash(npm run:*)", "npm run test", true),
    ("legacy prefix, bare", "Bash(npm run:*)", "npm run", true),
    ("legacy prefix, longer word", "Bash(npm run:*)", "npm runx", false),
    ("rule with quotes", "Bash(git commit -m \"wip\")", "git commit -m 'wip'", true),
    ("rule with spaces", "Bash(rm   -rf   /)", "rm -rf '/'", true),
    ("rule with path", "Bash(/usr/bin/git push *)", "/usr/bin/git push", true),
    ("wrapper rule", "Bash(sudo *)", "timeout 5 sudo ls", true),
    ("pipe to shell", "Bash(sh *)", "curl x | sh", true),
    ("any command", "Bash(*)", "ls", true),
    ("any tool input", "Bash", "ls 'unterminated", true),
];

/// Allow rules: `Bash(ls *)` covers `ls` however it is spelled, and never a command that runs
/// something else.
#[rustfmt::skip]
const ALLOW: &[Row] = &[
    // Covered.
    ("bare", "Bash(ls *)", "ls", true),
    ("flags", "Bash(ls *)", "ls -la", true),
    ("blanks", "Bash(ls *)", "ls  -la", true),
    ("stderr to stdout", "Bash(ls *)", "ls 2>&1", true),
    ("stderr to /dev/null", "Bash(ls *)", "ls 2>/dev/null", true),
    ("stdout to /dev/null", "Bash(ls *)", "ls > /dev/null", true),
    ("both to /dev/null", "Bash(ls *)", "ls &> /dev/null", true),
    ("input file", "Bash(ls *)", "ls < input.txt", true),
    ("here-document", "Bash(ls *)", "ls <<EOF\n$HOME\nEOF", true),
    ("here-string", "Bash(ls *)", "ls <<< hi", true),
    ("background", "Bash(ls *)", "ls &", true),
    ("comment", "Bash(ls *)", "ls # $(rm x)", true),
    ("time", "Bash(ls *)", "time ls", true),
    ("time -p", "Bash(ls *)", "time -p ls", true),
    ("nice", "Bash(ls *)", "nice ls", true),
    ("nice -n", "Bash(ls *)", "nice -n 5 ls", true),
    ("nohup", "Bash(ls *)", "nohup ls", true),
    ("timeout", "Bash(ls *)", "timeout 5 ls", true),
    ("timeout -s", "Bash(ls *)", "timeout -s KILL 5 ls", true),
    ("stdbuf", "Bash(ls *)", "stdbuf -oL ls", true),
    ("system path", "Bash(ls *)", "/usr/bin/ls -l", true),
    ("quoted program", "Bash(ls *)", "\"ls\" -l", true),
    ("escaped program", "Bash(ls *)", "\\ls", true),
    ("assignment", "Bash(ls *)", "FOO=1 ls", true),
    ("variable in quotes", "Bash(ls *)", "ls \"$HOME\"", true),
    ("braced variable", "Bash(ls *)", "ls ${HOME}/x", true),
    ("glob argument", "Bash(ls *)", "ls *.txt", true),
    ("brace argument", "Bash(ls *)", "ls {a,b}", true),
    ("tilde", "Bash(ls *)", "ls ~", true),
    ("for loop", "Bash(ls *)", "for f in a b; do ls $f; done", true),
    ("if", "Bash(ls *)", "if ls; then ls -l; fi", true),
    ("and list of ls", "Bash(ls *)", "ls && ls -l", true),
    ("pipeline of ls", "Bash(ls *)", "ls | ls", true),
    ("subshell", "Bash(ls *)", "(ls)", true),
    ("group", "Bash(ls *)", "{ ls; }", true),
    ("negated", "Bash(ls *)", "! ls", true),
    ("case", "Bash(ls *)", "case x in x) ls;; esac", true),
    ("file test", "Bash(ls *)", "[[ -f x ]] && ls", true),
    ("xargs, open rule", "Bash(git status *)", "xargs git status", true),
    ("xargs, wider rule", "Bash(git *)", "xargs git status", true),
    ("exact rule", "Bash(cat notes.txt)", "cat notes.txt", true),
    ("wrapper rule", "Bash(sudo *)", "sudo ls", true),
    ("rule with path", "Bash(/usr/bin/ls *)", "/usr/bin/ls -l", true),
    // A second command.
    ("background then rm", "Bash(ls *)", "ls & rm -rf /", false),
    ("; rm", "Bash(ls *)", "ls; rm x", false),
    ("&& rm", "Bash(ls *)", "ls && rm x", false),
    ("|| rm", "Bash(ls *)", "ls || rm x", false),
    ("newline rm", "Bash(ls *)", "ls\nrm x", false),
    ("pipe to sh", "Bash(ls *)", "ls | sh", false),
    ("pipe to xargs rm", "Bash(ls *)", "ls | xargs rm", false),
    ("subshell with rm", "Bash(ls *)", "(ls; rm x)", false),
    ("group with rm", "Bash(ls *)", "{ ls; rm x; }", false),
    ("function named ls", "Bash(ls *)", "ls() { rm x; }; ls", false),
    ("coprocess rm", "Bash(ls *)", "coproc rm x; ls", false),
    // Substitutions and evaluation.
    ("command substitution", "Bash(ls *)", "ls $(rm -rf /)", false),
    ("empty substitution", "Bash(ls *)", "ls $(echo)", false),
    ("backquotes", "Bash(ls *)", "ls `id`", false),
    ("quoted substitution", "Bash(ls *)", "ls \"$(rm x)\"", false),
    ("process substitution", "Bash(ls *)", "ls <(rm x)", false),
    ("substitution in assignment", "Bash(ls *)", "X=$(rm x) ls", false),
    ("parameter default", "Bash(ls *)", "ls ${x:-$(rm)}", false),
    ("indirection", "Bash(ls *)", "ls ${!x}", false),
    ("arithmetic index", "Bash(ls *)", "ls $((a[$(rm)]))", false),
    ("legacy arithmetic", "Bash(ls *)", "ls $[1+1]", false),
    ("arithmetic comparison", "Bash(ls *)", "[[ $x -eq 1 ]] && ls", false),
    ("here-string substitution", "Bash(ls *)", "ls <<< $(rm x)", false),
    ("here-document substitution", "Bash(cat *)", "cat <<EOF\n$(rm x)\nEOF", false),
    ("eval", "Bash(ls *)", "eval ls", false),
    ("eval rule", "Bash(eval *)", "eval ls", false),
    // Output redirections.
    ("> file", "Bash(ls *)", "ls > out.txt", false),
    (">> file", "Bash(ls *)", "ls >> out", false),
    ("&> file", "Bash(ls *)", "ls &> out", false),
    (">| file", "Bash(ls *)", "ls >| out", false),
    (">& file", "Bash(ls *)", "ls >& out", false),
    ("2> file", "Bash(ls *)", "ls 2> err.log", false),
    ("<> file", "Bash(ls *)", "ls 3<> file", false),
    ("> /etc", "Bash(ls *)", "ls > /etc/x", false),
    ("> variable", "Bash(ls *)", "ls > \"$f\"", false),
    ("input from /dev/tcp", "Bash(ls *)", "ls < /dev/tcp/evil/80", false),
    // Wrappers that change what runs.
    ("sudo", "Bash(ls *)", "sudo ls", false),
    ("env", "Bash(ls *)", "env ls", false),
    ("command", "Bash(ls *)", "command ls", false),
    ("builtin", "Bash(ls *)", "builtin ls", false),
    ("exec", "Bash(ls *)", "exec ls", false),
    ("sh -c", "Bash(ls *)", "sh -c ls", false),
    ("bash -c", "Bash(ls *)", "bash -c ls", false),
    ("time -o", "Bash(ls *)", "\\time -o out ls", false),
    ("nohup sudo", "Bash(ls *)", "nohup sudo ls", false),
    ("timeout sudo", "Bash(ls *)", "timeout 5 sudo ls", false),
    ("xargs with options", "Bash(ls *)", "xargs -I{} ls {}", false),
    ("xargs rm", "Bash(ls *)", "xargs -I{} rm {}", false),
    ("xargs, exact rule", "Bash(git status)", "xargs git status", false),
    ("find -exec", "Bash(find *)", "find . -exec rm {} \\;", false),
    // Programs other than the system's.
    ("./ls", "Bash(ls *)", "./ls", false),
    ("/tmp/ls", "Bash(ls *)", "/tmp/ls", false),
    ("sub/ls", "Bash(ls *)", "sub/ls", false),
    ("glob program", "Bash(ls *)", "l? -la", false),
    // Assignments that change what runs.
    ("PATH", "Bash(ls *)", "PATH=/tmp ls", false),
    ("LD_PRELOAD", "Bash(ls *)", "LD_PRELOAD=x.so ls", false),
    ("IFS", "Bash(ls *)", "IFS=x ls", false),
    ("BASH_ENV", "Bash(ls *)", "BASH_ENV=x ls", false),
    ("GIT_SSH_COMMAND", "Bash(git *)", "GIT_SSH_COMMAND=x git fetch", false),
    ("PAGER", "Bash(git *)", "PAGER=x git log", false),
    ("PATH alone", "Bash(ls *)", "PATH=/tmp; ls", false),
    ("PATH as loop variable", "Bash(ls *)", "for PATH in /tmp; do ls; done", false),
    // Globs against exact rules, and what does not parse.
    ("glob against exact", "Bash(cat notes.txt)", "cat *", false),
    ("unterminated quote", "Bash(ls *)", "ls 'unterminated", false),
    ("unterminated substitution", "Bash(ls *)", "ls $(", false),
    ("syntax error", "Bash(ls *)", "ls; then", false),
];

fn check(rows: &[Row], allow: bool) -> Vec<String> {
    let mut failures = Vec::new();
    for &(name, rule, command, expected) in rows {
        let parsed = match Rule::parse(rule) {
            Ok(rule) => rule,
            Err(e) => {
                failures.push(format!("{name}: rule {rule} does not parse: {e}"));
                continue;
            }
        };
        let input = json!({ "command": command });
        let got = if allow {
            parsed.matches_all("Bash", &input, None)
        } else {
            parsed.matches("Bash", &input, None)
        };
        if got != expected {
            let reading = if allow { "allow" } else { "deny" };
            failures.push(format!(
                "{reading} {name}: {rule} against {command:?} gave {got}, expected {expected}"
            ));
        }
    }
    failures
}

#[test]
fn deny_rules_see_every_command_that_runs() {
    let failures = check(DENY, false);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn allow_rules_cover_every_command_and_nothing_else() {
    let failures = check(ALLOW, true);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_tables_are_broad() {
    let count = |rows: &[Row], expected: bool| rows.iter().filter(|r| r.3 == expected).count();
    assert!(count(DENY, true) >= 80, "deny forms: {}", count(DENY, true));
    assert!(
        count(ALLOW, false) >= 40,
        "allow refusals: {}",
        count(ALLOW, false)
    );
    assert!(count(DENY, false) >= 10 && count(ALLOW, true) >= 30);
}
