//! Tests of [`Script`] against [`CommandPattern`]s: several patterns at once, exact patterns,
//! the limits.

use super::*;

fn patterns(raw: &[&str]) -> Vec<CommandPattern> {
    raw.iter().map(|r| CommandPattern::new(r)).collect()
}

fn covered(command: &str, raw: &[&str]) -> Option<Vec<usize>> {
    let patterns = patterns(raw);
    let refs: Vec<&CommandPattern> = patterns.iter().collect();
    Script::parse(command).covered_by(&refs)
}

#[test]
fn every_command_needs_some_pattern() {
    assert_eq!(
        covered("ls | grep x", &["ls *", "grep *"]),
        Some(vec![0, 1])
    );
    assert_eq!(
        covered("grep x | ls", &["ls *", "grep *"]),
        Some(vec![1, 0])
    );
    assert_eq!(covered("ls && ls -l", &["ls *", "grep *"]), Some(vec![0]));
    assert_eq!(covered("ls | sh", &["ls *", "grep *"]), None);
    assert_eq!(
        covered("find . -name '*.rs' | xargs ls", &["find *", "ls *"]),
        Some(vec![0, 1])
    );
    assert_eq!(covered("find . -exec rm {} \\;", &["find *"]), None);
    assert_eq!(
        covered("find . -exec rm {} \\;", &["find *", "rm *"]),
        Some(vec![0, 1])
    );
    assert_eq!(covered("", &["*"]), None);
    assert_eq!(covered("x=1", &["*"]), None);
}

#[test]
fn why_allow_rules_do_not_match() {
    for (command, reason) in [
        ("ls $(rm x)", "a command substitution"),
        ("ls <(rm x)", "a process substitution"),
        ("ls > out", "an output redirection to a file"),
        ("eval ls", "eval"),
        (
            "PATH=/tmp ls",
            "an assignment to a variable that changes what runs",
        ),
        ("ls 'x", "a command that does not parse"),
        ("ls ${x:-y}", "a parameter expansion beyond `$NAME`"),
        ("(( x ))", "arithmetic evaluation"),
        ("[[ $x -eq 1 ]]", "an arithmetic comparison"),
        ("bash -c \"$x\"", "shell text known only when it runs"),
    ] {
        assert_eq!(Script::parse(command).blocked(), Some(reason), "{command}");
    }
    for command in [
        "ls",
        "ls 2>&1 >/dev/null",
        "FOO=1 ls \"$HOME\"",
        "[[ -f x ]] && ls",
    ] {
        assert_eq!(Script::parse(command).blocked(), None, "{command}");
    }
}

#[test]
fn exact_patterns_match_the_approved_command_only() {
    let exact = CommandPattern::exact("git status");
    let script = |c: &str| Script::parse(c);
    assert_eq!(script("git status").covered_by(&[&exact]), Some(vec![0]));
    assert_eq!(script("git  'status'").covered_by(&[&exact]), Some(vec![0]));
    assert_eq!(script("git status -s").covered_by(&[&exact]), None);
    assert_eq!(script("timeout 5 git status").covered_by(&[&exact]), None);
    assert_eq!(script("xargs git status").covered_by(&[&exact]), None);
    // What did not parse, or ran more than a rule covers, is still the command approved.
    let odd = "ls $(date) 'x";
    let exact = CommandPattern::exact(odd);
    assert_eq!(script(odd).covered_by(&[&exact]), Some(vec![0]));
    assert!(script(odd).matches_any(&exact));
    assert_eq!(script("ls $(date)").covered_by(&[&exact]), None);
}

#[test]
fn deny_fails_closed_past_the_limits() {
    let deny = CommandPattern::new("rm *");
    let long = format!("echo {}; rm -rf /", "x".repeat(MAX_COMMAND));
    assert!(Script::parse(&long).matches_any(&deny));
    assert!(Script::parse(&long)
        .covered_by(&[&CommandPattern::new("*")])
        .is_none());
    let huge = "x ".repeat(fallback::MAX_TEXT);
    assert!(Script::parse(&huge).matches_any(&deny));
    let deep = format!("{}rm x{}", "$(".repeat(3000), ")".repeat(3000));
    assert!(Script::parse(&deep).matches_any(&deny));
    let nested = format!("{}'rm x'", "eval ".repeat(3));
    assert!(Script::parse(&nested).matches_any(&deny));
    let unrelated = CommandPattern::new("nothing like it");
    let too_nested = format!("echo {}rm x{}", "$(echo ".repeat(12), ")".repeat(12));
    assert!(Script::parse(&too_nested).matches_any(&unrelated));
    let nested_enough = format!("echo {}$(rm x){}", "$(echo ".repeat(6), ")".repeat(6));
    let script = Script::parse(&nested_enough);
    assert!(script.matches_any(&deny));
    assert!(!script.matches_any(&unrelated));
    let script = Script::parse("sh -c \"bash -c 'eval \\\"rm x\\\"'\"");
    assert!(script.matches_any(&deny));
    assert!(!script.matches_any(&unrelated));
}

#[test]
fn moderately_nested_commands_parse_off_the_caller_stack() {
    let nested = format!("{}git push", "echo \"$(echo x)\" ${y} [x] && ".repeat(20));
    let script = Script::parse(&nested);
    assert!(script.matches_any(&CommandPattern::new("git push *")));
    assert!(!script.matches_any(&CommandPattern::new("rm *")));
}

#[test]
fn text_patterns_are_unchanged() {
    let p = CommandPattern::new("npm run:*");
    assert!(p.matches_text("npm run"));
    assert!(p.matches_text("npm run test"));
    assert!(!p.matches_text("npm runx"));
    assert!(CommandPattern::exact("a b").matches_text("a b"));
    assert!(!CommandPattern::exact("a b").matches_text("a  b"));
}
