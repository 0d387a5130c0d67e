#!/bin/sh
# A Claude Code PreToolUse hook: exit 2 with a reason on stderr blocks `rm`.
input=$(cat)
case "$input" in
  *'"command":"rm '*) echo "no rm in this project" >&2; exit 2 ;;
esac
exit 0
