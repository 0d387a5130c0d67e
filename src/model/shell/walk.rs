//! The walk over brush-parser's syntax tree: every simple command anywhere, and everything that
//! keeps an allow rule from covering the script.

use brush_parser::ast::{
    self, AndOr, Assignment, AssignmentName, AssignmentValue, Command, CommandPrefixOrSuffixItem,
    CompoundCommand, CompoundList, ExtendedTestExpr, IoFileRedirectKind, IoFileRedirectTarget,
    IoRedirect, Pipeline, RedirectList, SimpleCommand, SubshellCommand,
};

use super::assignments::affects_execution;
use super::glob::{is_hole, HOLE};
use super::words::{self, Context, Found};
use super::{fallback, parse, wrappers};

/// How many shell texts deep (`$(…)`, `sh -c`, `eval`) a command is followed; deeper, deny
/// rules fail closed and allow rules do not match.
const MAX_DEPTH: usize = 8;

/// Bytes of command lines kept for deny rules; past them, deny rules fail closed.
const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

/// What a script may run, as the rules see it.
#[derive(Debug, Default)]
pub(super) struct Analysis {
    /// Command lines deny and ask rules are tested against.
    pub deny: Vec<String>,
    /// The words of shell text that did not parse: deny rules are tried on every suffix.
    pub unparsed: Vec<String>,
    /// Whether something may run that deny rules cannot see (shell text known only at run time,
    /// nesting past the limits): every deny rule matches.
    pub unknown: bool,
    /// For each simple command, the lines one of which an allow rule must cover.
    pub allow: Vec<Vec<String>>,
    /// Why no allow rule can match, when none can.
    pub blocked: Option<&'static str>,
    /// Bytes in `deny` so far.
    bytes: usize,
}

impl Analysis {
    /// The analysis of `text` with `levels` levels of stack to spend.
    pub fn of(text: &str, levels: usize) -> Self {
        let mut walker = Walker {
            out: Analysis::default(),
            depth: 0,
            nesting: 0,
            levels,
        };
        walker.script(text);
        walker.out
    }

    /// The analysis of text that is not parsed: deny rules try its words, allow rules never
    /// match.
    pub fn unparsed(text: &str, why: &'static str) -> Self {
        let mut out = Analysis::default();
        out.not_parsed(text, why);
        out
    }

    /// Records the first reason no allow rule can match.
    fn block(&mut self, reason: &'static str) {
        self.blocked.get_or_insert(reason);
    }

    /// Text that is not parsed: deny rules try its words; no allow rule matches.
    fn not_parsed(&mut self, text: &str, why: &'static str) {
        match fallback::words(text) {
            Some(words) => self.unparsed.push(words),
            None => self.unknown = true,
        }
        self.block(why);
    }

    /// Something may run that deny rules cannot see: every deny rule matches, no allow rule.
    fn fail_closed(&mut self, why: &'static str) {
        self.unknown = true;
        self.block(why);
    }

    /// Adds a line for deny rules, failing closed past [`MAX_LINE_BYTES`].
    fn deny_line(&mut self, line: String) {
        self.bytes += line.len();
        if self.bytes > MAX_LINE_BYTES {
            self.fail_closed("a command too large to follow");
        } else {
            self.deny.push(line);
        }
    }
}

/// Walks syntax trees into an [`Analysis`].
struct Walker {
    out: Analysis,
    /// Shell texts entered so far.
    depth: usize,
    /// Nesting levels in use on the stack.
    nesting: usize,
    /// Nesting levels the stack has room for.
    levels: usize,
}

impl Walker {
    /// Parses and walks shell text.
    fn script(&mut self, text: &str) {
        if self.depth > MAX_DEPTH {
            self.out.fail_closed("shell text nested too deep");
            return;
        }
        let levels = parse::levels(text);
        if self.nesting + levels > self.levels {
            self.out.not_parsed(text, "shell text nested too deep");
            return;
        }
        let Some(program) = parse::program(text) else {
            self.out.not_parsed(text, "a command that does not parse");
            return;
        };
        self.depth += 1;
        for list in &program.complete_commands {
            self.list(list);
        }
        self.depth -= 1;
    }

    /// Runs `walk` one nesting level deeper.
    fn nested(&mut self, walk: impl FnOnce(&mut Self)) {
        self.nesting += 1;
        walk(self);
        self.nesting -= 1;
    }

    /// A list: `a; b`, `a && b || c`, `a &`, newlines.
    fn list(&mut self, list: &CompoundList) {
        for item in &list.0 {
            let and_or = &item.0;
            self.pipeline(&and_or.first);
            for next in &and_or.additional {
                match next {
                    AndOr::And(p) | AndOr::Or(p) => self.pipeline(p),
                }
            }
        }
    }

    /// A pipeline, `!` and `time` included.
    fn pipeline(&mut self, pipeline: &Pipeline) {
        for command in &pipeline.seq {
            self.command(command);
        }
    }

    /// A command of a pipeline: simple, compound, a function definition (whose body may run)
    /// or `[[ ]]`.
    fn command(&mut self, command: &Command) {
        match command {
            Command::Simple(simple) => self.simple(simple),
            Command::Compound(compound, redirects) => {
                self.nested(|w| w.compound(compound));
                self.redirects(redirects.as_ref());
            }
            Command::Function(function) => {
                self.nested(|w| w.compound(&function.body.0));
                self.redirects(function.body.1.as_ref());
            }
            Command::ExtendedTest(test, redirects) => {
                self.nested(|w| w.test(&test.expr));
                self.redirects(redirects.as_ref());
            }
        }
    }

    /// A compound command: every command in it, and the words it expands.
    fn compound(&mut self, compound: &CompoundCommand) {
        match compound {
            CompoundCommand::Arithmetic(arithmetic) => self.arithmetic(&arithmetic.expr.value),
            CompoundCommand::ArithmeticForClause(clause) => {
                for expr in [&clause.initializer, &clause.condition, &clause.updater]
                    .into_iter()
                    .flatten()
                {
                    self.arithmetic(&expr.value);
                }
                self.list(&clause.body.list);
            }
            CompoundCommand::BraceGroup(group) => self.list(&group.list),
            CompoundCommand::Subshell(subshell) => self.list(&subshell.list),
            CompoundCommand::ForClause(clause) => {
                if affects_execution(&clause.variable_name) {
                    self.out
                        .block("a loop over a variable that changes what runs");
                }
                for value in clause.values.iter().flatten() {
                    self.word(value, Context::Command);
                }
                self.list(&clause.body.list);
            }
            CompoundCommand::CaseClause(clause) => {
                self.word(&clause.value, Context::Plain);
                for case in &clause.cases {
                    for pattern in &case.patterns {
                        self.word(pattern, Context::Plain);
                    }
                    if let Some(body) = &case.cmd {
                        self.list(body);
                    }
                }
            }
            CompoundCommand::IfClause(clause) => {
                self.list(&clause.condition);
                self.list(&clause.then);
                for other in clause.elses.iter().flatten() {
                    if let Some(condition) = &other.condition {
                        self.list(condition);
                    }
                    self.list(&other.body);
                }
            }
            CompoundCommand::WhileClause(clause) | CompoundCommand::UntilClause(clause) => {
                self.list(&clause.0);
                self.list(&clause.1.list);
            }
            CompoundCommand::Coprocess(coprocess) => self.command(&coprocess.body),
        }
    }

    /// `[[ … ]]` runs no program; arithmetic comparisons and `-v`/`-R` evaluate their operands,
    /// which can run commands.
    fn test(&mut self, expr: &ExtendedTestExpr) {
        use ast::{BinaryPredicate as B, UnaryPredicate as U};
        match expr {
            ExtendedTestExpr::And(a, b) | ExtendedTestExpr::Or(a, b) => {
                self.nested(|w| {
                    w.test(a);
                    w.test(b);
                });
            }
            ExtendedTestExpr::Not(e) | ExtendedTestExpr::Parenthesized(e) => {
                self.nested(|w| w.test(e));
            }
            ExtendedTestExpr::UnaryTest(predicate, word) => {
                if matches!(
                    predicate,
                    U::ShellVariableIsSetAndAssigned | U::ShellVariableIsSetAndNameRef
                ) {
                    self.out
                        .block("a `[[ -v ]]` test, which evaluates an index");
                }
                self.word(word, Context::Plain);
            }
            ExtendedTestExpr::BinaryTest(predicate, left, right) => {
                if matches!(
                    predicate,
                    B::ArithmeticEqualTo
                        | B::ArithmeticNotEqualTo
                        | B::ArithmeticLessThan
                        | B::ArithmeticLessThanOrEqualTo
                        | B::ArithmeticGreaterThan
                        | B::ArithmeticGreaterThanOrEqualTo
                ) {
                    self.out.block("an arithmetic comparison");
                }
                self.word(left, Context::Plain);
                self.word(right, Context::Plain);
            }
        }
    }

    /// An arithmetic expression: it may hold command substitutions, and evaluating variables
    /// as arithmetic can run commands.
    fn arithmetic(&mut self, text: &str) {
        let mut found = Found::default();
        words::embedded(text, &mut found);
        self.found(found);
        self.out.block("arithmetic evaluation");
    }

    /// A simple command: its assignments and redirections, then its words as a command.
    fn simple(&mut self, simple: &SimpleCommand) {
        let mut words = Vec::new();
        let prefix = simple.prefix.iter().flat_map(|p| p.0.iter());
        let suffix = simple.suffix.iter().flat_map(|s| s.0.iter());
        for item in prefix {
            match item {
                CommandPrefixOrSuffixItem::AssignmentWord(assignment, _) => {
                    self.assignment(assignment);
                }
                other => self.item(other, &mut words),
            }
        }
        if let Some(name) = &simple.word_or_name {
            words.push(self.word(name, Context::Command));
        }
        for item in suffix {
            self.item(item, &mut words);
        }
        self.command_words(&words);
    }

    /// A word or redirection of a simple command; words are added to `words`.
    fn item(&mut self, item: &CommandPrefixOrSuffixItem, words: &mut Vec<String>) {
        match item {
            CommandPrefixOrSuffixItem::IoRedirect(redirect) => self.redirect(redirect),
            // An argument such as `export A=1` is a word like any other.
            CommandPrefixOrSuffixItem::Word(word)
            | CommandPrefixOrSuffixItem::AssignmentWord(_, word) => {
                words.push(self.word(word, Context::Command));
            }
            CommandPrefixOrSuffixItem::ProcessSubstitution(_, subshell) => {
                self.process_substitution(subshell);
                words.push(HOLE.to_string());
            }
        }
    }

    /// The commands a simple command runs, through wrappers.
    fn command_words(&mut self, words: &[String]) {
        if words.is_empty() {
            return;
        }
        let seen = wrappers::deny(words);
        for line in seen.lines {
            self.out.deny_line(line);
        }
        if seen.evaluates {
            self.out.block("eval");
        }
        if seen.unknown {
            self.out.fail_closed("shell text known only when it runs");
        }
        for script in &seen.scripts {
            self.script(script);
        }
        self.out.allow.extend(wrappers::allow(words));
    }

    /// A leading `NAME=value`: set aside, unless the name changes what runs.
    fn assignment(&mut self, assignment: &Assignment) {
        let name = match &assignment.name {
            AssignmentName::VariableName(name) => name,
            AssignmentName::ArrayElementName(name, index) => {
                let mut found = Found::default();
                words::embedded(index, &mut found);
                if !index.chars().all(|c| c.is_ascii_digit()) {
                    found.block("an array index, which is evaluated");
                }
                self.found(found);
                name
            }
        };
        if affects_execution(name) {
            self.out
                .block("an assignment to a variable that changes what runs");
        }
        match &assignment.value {
            AssignmentValue::Scalar(value) => {
                self.word(value, Context::Plain);
            }
            AssignmentValue::Array(elements) => {
                for (index, value) in elements {
                    if let Some(index) = index {
                        self.word(index, Context::Plain);
                    }
                    self.word(value, Context::Command);
                }
            }
        }
    }

    /// The redirections of a compound command or function.
    fn redirects(&mut self, redirects: Option<&RedirectList>) {
        for redirect in redirects.iter().flat_map(|r| r.0.iter()) {
            self.redirect(redirect);
        }
    }

    /// A redirection: output to a file (other than `/dev/null`) is beyond an allow rule; so is
    /// input from what bash opens as a network connection.
    fn redirect(&mut self, redirect: &IoRedirect) {
        match redirect {
            IoRedirect::File(_, kind, target) => {
                let target = match target {
                    IoFileRedirectTarget::Filename(word)
                    | IoFileRedirectTarget::Duplicate(word) => self.word(word, Context::Command),
                    IoFileRedirectTarget::Fd(_) => return,
                    IoFileRedirectTarget::ProcessSubstitution(_, subshell) => {
                        self.process_substitution(subshell);
                        return;
                    }
                };
                let writes = match kind {
                    IoFileRedirectKind::Read | IoFileRedirectKind::DuplicateInput => false,
                    IoFileRedirectKind::DuplicateOutput => !is_fd(&target),
                    IoFileRedirectKind::Write
                    | IoFileRedirectKind::Append
                    | IoFileRedirectKind::Clobber
                    | IoFileRedirectKind::ReadAndWrite => true,
                };
                if writes && target != "/dev/null" {
                    self.out.block("an output redirection to a file");
                }
                if !writes
                    && (target.chars().any(is_hole)
                        || target.starts_with("/dev/tcp/")
                        || target.starts_with("/dev/udp/"))
                {
                    self.out.block("an input redirection from an unknown file");
                }
            }
            IoRedirect::HereDocument(_, here) => {
                if here.requires_expansion {
                    let mut found = Found::default();
                    words::here_document(&here.doc.value, &mut found);
                    self.found(found);
                }
            }
            IoRedirect::HereString(_, word) => {
                self.word(word, Context::Plain);
            }
            IoRedirect::OutputAndError(word, _) => {
                if self.word(word, Context::Command) != "/dev/null" {
                    self.out.block("an output redirection to a file");
                }
            }
        }
    }

    /// `<(…)` or `>(…)`: its commands run, and no allow rule covers them.
    fn process_substitution(&mut self, subshell: &SubshellCommand) {
        self.out.block("a process substitution");
        self.nested(|w| w.list(&subshell.list));
    }

    /// Decodes a word, following what its expansions run.
    fn word(&mut self, word: &ast::Word, context: Context) -> String {
        let mut found = Found::default();
        let text = words::decode(&word.value, context, &mut found);
        self.found(found);
        text
    }

    /// Follows what decoding found: substitutions are walked as scripts.
    fn found(&mut self, found: Found) {
        if let Some(reason) = found.blocked {
            self.out.block(reason);
        }
        for text in &found.unparsed {
            self.out.not_parsed(text, "a word that does not parse");
        }
        for script in &found.scripts {
            self.script(script);
        }
    }
}

/// Whether a `>&` target names a file descriptor (`2`, `-`, `3-`) rather than a file.
fn is_fd(target: &str) -> bool {
    let digits = target.strip_suffix('-').unwrap_or(target);
    digits.chars().all(|c| c.is_ascii_digit())
}
