#!/usr/bin/env bash
# Commit subjects stay readable in `git log --oneline`: at most 72 characters, details in
# the body. Checked for every commit after SINCE (the last commit written before the rule);
# outside a git checkout (an exported tree) there is nothing to check.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SINCE=1bd6de3
git rev-parse --git-dir >/dev/null 2>&1 || exit 0
git cat-file -e "$SINCE^{commit}" 2>/dev/null || { echo "check_commits: $SINCE not in this history; skipped"; exit 0; }
long=$(git log --format='%h%x09%s' "$SINCE..HEAD" | awk -F'\t' 'length($2) > 72')
if [[ -n $long ]]; then
  echo "check_commits: subjects over 72 characters (put the details in the body):" >&2
  echo "$long" >&2
  exit 1
fi
echo "check_commits: $(git rev-list --count "$SINCE..HEAD") commit subjects within 72 characters"
