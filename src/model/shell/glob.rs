//! Rule globs against command lines that may hold *holes*.
//!
//! A rule pattern is literal characters and `*` (any text). A command line is literal characters
//! and holes ([`HOLE`], [`GLOB_HOLE`]): text only known when the command runs, such as `$x`,
//! `$(…)` or an unquoted `*`. Whether the pattern matches depends on what the holes become, so
//! there are two questions, one for each reading of a rule:
//!
//! * [`Holes::Any`], for deny and ask rules: *may* the line match, for some values of its holes?
//!   A hole can stand for any text, so `$CMD -rf /` may match `rm *`. This is fail-closed.
//! * [`Holes::InStar`], for allow rules: does the line match *whatever* its holes become? It does
//!   when every hole falls inside one of the pattern's `*`.
//!
//! Both are decided by one pass over the line that keeps the set of pattern positions reachable
//! so far (the product of the two automata), in `O(line × pattern)` time and `O(pattern)` space.

/// Stands for text only known when the command runs; it may contain `/`.
pub(super) const HOLE: char = '\u{E000}';

/// Stands for the expansion of an unquoted glob (`*`, `?`, `[…]`, extglob), which cannot
/// contain `/`.
pub(super) const GLOB_HOLE: char = '\u{E001}';

/// Whether `c` marks a hole in a command line.
pub(super) fn is_hole(c: char) -> bool {
    c == HOLE || c == GLOB_HOLE
}

/// One element of a rule glob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tok {
    /// This character, literally.
    Char(char),
    /// `*`: any text, including none.
    Star,
}

/// How the holes of a line are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Holes {
    /// A hole may become any text (deny and ask rules).
    Any,
    /// A hole may become any text, and the match must hold for every value (allow rules).
    InStar,
    /// There are no holes: hole characters are ordinary text (plain-text arguments).
    Literal,
}

/// Whether `glob` matches `line`, holes read as `holes` says.
pub(super) fn matches(glob: &[Tok], line: &str, holes: Holes) -> bool {
    run(glob, line, holes, None)
}

/// Deny reading over the words of a command that did not parse: whether `glob` may match the
/// text that starts at the beginning of `text` or after any space or `/` and runs to its end.
pub(super) fn matches_some_suffix(glob: &[Tok], text: &str) -> bool {
    run(
        glob,
        text,
        Holes::Any,
        Some(|prev| prev == ' ' || prev == '/'),
    )
}

/// The product automaton. `reached[i]` says pattern position `i` is reachable having read the
/// line so far; `restart(prev)`, when given, lets a match begin again after the character `prev`.
fn run(glob: &[Tok], line: &str, holes: Holes, restart: Option<fn(char) -> bool>) -> bool {
    let n = glob.len();
    let mut reached = vec![false; n + 1];
    let mut next = vec![false; n + 1];
    reached[0] = true;
    close(glob, &mut reached);
    for c in line.chars() {
        next.fill(false);
        let hole = holes != Holes::Literal && is_hole(c);
        match (hole, holes) {
            (true, Holes::Any) => {
                // A hole can produce whatever the pattern produces from any reached position
                // onwards, so every later position becomes reachable.
                if let Some(first) = reached.iter().position(|&r| r) {
                    next[first..].fill(true);
                }
            }
            (true, _) => {
                // Only a `*` can absorb a hole, and it stays where it is.
                for i in 0..n {
                    if reached[i] && glob[i] == Tok::Star {
                        next[i] = true;
                    }
                }
            }
            (false, _) => {
                for i in 0..n {
                    if !reached[i] {
                        continue;
                    }
                    match glob[i] {
                        Tok::Star => next[i] = true,
                        Tok::Char(p) if p == c => next[i + 1] = true,
                        Tok::Char(_) => {}
                    }
                }
            }
        }
        if restart.is_some_and(|restart| restart(c)) {
            next[0] = true;
        }
        close(glob, &mut next);
        std::mem::swap(&mut reached, &mut next);
        if restart.is_none() && !reached.iter().any(|&r| r) {
            return false;
        }
    }
    reached[n]
}

/// Adds the positions reachable by letting `*` match nothing.
fn close(glob: &[Tok], reached: &mut [bool]) {
    for i in 0..glob.len() {
        if reached[i] && glob[i] == Tok::Star {
            reached[i + 1] = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(s: &str) -> Vec<Tok> {
        s.chars()
            .map(|c| if c == '*' { Tok::Star } else { Tok::Char(c) })
            .collect()
    }

    fn line(s: &str) -> String {
        s.replace('$', &HOLE.to_string())
            .replace('?', &GLOB_HOLE.to_string())
    }

    #[test]
    fn literal_lines() {
        for holes in [Holes::Any, Holes::InStar, Holes::Literal] {
            assert!(matches(&glob("git push *"), "git push origin", holes));
            assert!(matches(&glob("git push *"), "git push ", holes));
            assert!(!matches(&glob("git push *"), "git push", holes));
            assert!(!matches(&glob("git push *"), "git pushx", holes));
            assert!(matches(&glob("*"), "", holes));
            assert!(matches(&glob("a*b*c"), "axxbyyc", holes));
            assert!(!matches(&glob("a*b*c"), "axxbyy", holes));
        }
    }

    #[test]
    fn holes_may_become_anything_for_deny() {
        let g = glob("git push *");
        assert!(matches(&g, &line("$ push"), Holes::Any));
        assert!(matches(&g, &line("git $"), Holes::Any));
        assert!(matches(&g, &line("g?t push"), Holes::Any));
        assert!(matches(&g, &line("$"), Holes::Any));
        assert!(matches(&glob("rm -rf /"), &line("$ -rf /"), Holes::Any));
        assert!(!matches(&g, &line("echo $"), Holes::Any));
        assert!(!matches(&glob("git push"), &line("git $ x"), Holes::Any));
    }

    #[test]
    fn holes_must_fall_in_a_star_for_allow() {
        let g = glob("ls *");
        assert!(matches(&g, &line("ls $"), Holes::InStar));
        assert!(matches(&g, &line("ls ?.txt"), Holes::InStar));
        assert!(matches(&g, &line("ls -l $ x"), Holes::InStar));
        assert!(!matches(&g, &line("l? x"), Holes::InStar));
        assert!(!matches(&g, &line("ls$"), Holes::InStar));
        assert!(!matches(
            &glob("cat notes.txt"),
            &line("cat ?"),
            Holes::InStar
        ));
        assert!(!matches(
            &glob("git status"),
            &line("git status $"),
            Holes::InStar
        ));
        // A pattern that spells a hole character literally does not cover a hole.
        assert!(!matches(&[Tok::Char(HOLE)], &line("$"), Holes::InStar));
    }

    #[test]
    fn holes_are_text_for_plain_arguments() {
        assert!(!matches(&glob("a"), &line("$"), Holes::Literal));
        assert!(matches(&[Tok::Char(HOLE)], &line("$"), Holes::Literal));
    }

    #[test]
    fn suffixes_start_after_spaces_and_slashes() {
        let g = glob("git push *");
        assert!(matches_some_suffix(&g, "ls x git push origin"));
        assert!(matches_some_suffix(&g, "x /usr/bin/git push origin"));
        assert!(!matches_some_suffix(&g, "ls xgit push"));
        assert!(!matches_some_suffix(&glob("git push"), "git push x"));
    }
}
