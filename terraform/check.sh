#!/usr/bin/env bash
# Offline check of terraform/, cloudbuild.yaml and docs/openapi.yaml: no
# registry, no credentials. Exits non-zero on any failure.
#
#   1. terraform fmt -check -recursive terraform/
#   2. go build of the stand-in provider (tools/tfprovider: the real google
#      6.50.0, google-beta 6.50.0, random 3.7.2 and time 0.13.1 schemas for the resource
#      types used, served on terraform-plugin-go; it plans but never applies)
#   3. go test ./terraform/check/ ./tools/...: for dev and prod, on a copy of
#      the tree, terraform init (filesystem mirror, local backend), validate,
#      plan -refresh=false, and a cross-check of the plan with topology.json,
#      the DDL files, shared/config and the functions registered in
#      functions/; copies broken on purpose (unknown argument, misspelt block,
#      dangling reference, wrong type, missing argument, unregistered entry
#      point, hand-written name) must fail; the fresh-project rules on the
#      plan's resource graph (every resource waits 5 minutes after its API's
#      enablement, alerts only on metrics that exist or are created in the
#      same apply, IAM grants before the first request that needs them and
#      7 minutes before a function's build, Bigtable's autoscaling maximum at
#      most 10x its minimum, outlier detection on every backend service, the
#      budget above the idle cost), the region rule (prod: every function,
#      push subscription and scheduler job in both regions, buckets
#      multi-region) and the pipeline region rule (its triggers in both
#      regions), each with broken copies that must fail; the committed
#      provider lock files;
#      cloudbuild.yaml, cloudbuild-apply.yaml and docs/openapi.yaml are parsed
#      and checked.
#
# The plans are SCHEMA CHECKS, NOT REAL PLANS: computed values stay unknown and
# nothing is read from Google Cloud.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
start=$(date +%s)

# Do not let a personal CLI configuration (credentials, mirrors) leak in.
unset TF_CLI_CONFIG_FILE TF_PLUGIN_CACHE_DIR
export CHECKPOINT_DISABLE=1

step() { printf '\n==> %s\n' "$*"; }

step "terraform fmt -check -recursive terraform/"
terraform fmt -check -recursive -diff terraform/

step "go build ./tools/tfprovider ./tools/tfschema (stand-in provider, schema generator)"
go build -o /dev/null ./tools/tfprovider
go build -o /dev/null ./tools/tfschema

# The buildpack test (tools/gcfbuild) builds each function offline, as the
# runtime's builder does from a full module cache: fill it first.
step "go mod download (the module cache the offline function builds read)"
go mod download

step "SCHEMA CHECK of terraform/envs/{dev,prod} against the stand-in provider (NOT a real plan), cross-checks, broken copies"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
set +e
go test -count=1 -timeout 45m -v ./terraform/check/ ./tools/... 2>&1 | tee "$log" | grep -E '^(\s*--- |PASS|FAIL|ok |SCHEMA CHECK|panic: )|\.go:[0-9]+: '
status=${PIPESTATUS[0]}
set -e

passed=$(grep -c -- '--- PASS' "$log" || true)
failed=$(grep -c -- '--- FAIL' "$log" || true)
printf '\nterraform/check.sh: %d passed, %d failed (tests and subtests) in %ds; plans are schema checks, not real plans\n' \
  "$passed" "$failed" "$(( $(date +%s) - start ))"
exit "$status"
