#!/usr/bin/env bash
# Fuzzes every fuzz target of the module for FUZZTIME each (a duration, or a
# count such as 3000x). The targets are found in the test sources, so a new or
# renamed target is fuzzed without editing a list; finding none, or a run that
# fuzzed nothing, fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
go=${GO:-go}
fuzztime=${FUZZTIME:-60s}

targets=()
while read -r dir pkg; do
  while read -r name; do
    targets+=("$pkg $name")
  done < <(cd "$dir" && $go list -f '{{range .TestGoFiles}}{{println .}}{{end}}{{range .XTestGoFiles}}{{println .}}{{end}}' . |
             xargs -r sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*\*testing\.F).*/\1/p')
done < <($go list -f '{{.Dir}} {{.ImportPath}}' ./...)

if ((${#targets[@]} == 0)); then
  echo "fuzz: no fuzz targets found" >&2
  exit 1
fi
for t in "${targets[@]}"; do
  read -r pkg name <<<"$t"
  out=$($go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg" 2>&1) || { echo "$out"; exit 1; }
  if grep -q 'no fuzz tests' <<<"$out"; then
    echo "fuzz: $pkg $name fuzzed nothing" >&2
    exit 1
  fi
  echo "fuzz: $name ($pkg): ok"
done
echo "fuzz: ${#targets[@]} targets, $fuzztime each"
