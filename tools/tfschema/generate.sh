#!/usr/bin/env bash
# Regenerates tools/tfprovider/schema.json, the provider schema the stand-in
# provider serves, for exactly the resource and data source types declared
# under terraform/. Run it after adding a resource type to terraform/.
#
# Source: the npm packages @cdktf/provider-google 16.12.1 (generated from the
# hashicorp/google provider 6.50.0), @cdktf/provider-google-beta 16.12.1
# (hashicorp/google-beta 6.50.0, for the few beta-only resources) and
# @cdktf/provider-random 12.0.1
# (hashicorp/random 3.7.2) and @cdktf/provider-time 11.0.1 (hashicorp/time
# 0.13.1), all MPL-2.0. They are fetched with `npm pack`
# into a temporary directory; nothing is installed into the repository.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

for pkg in @cdktf/provider-google@16.12.1 @cdktf/provider-google-beta@16.12.1 @cdktf/provider-random@12.0.1 @cdktf/provider-time@11.0.1; do
  dir="$tmp/$(echo "$pkg" | sed 's#@cdktf/##; s#@.*##')"
  mkdir -p "$dir"
  (cd "$dir" && npm pack --silent "$pkg" >/dev/null && tar xzf ./*.tgz)
done

cd "$root"
go run ./tools/tfschema \
  -terraform terraform \
  -google "$tmp/provider-google/package" \
  -google-beta "$tmp/provider-google-beta/package" \
  -random "$tmp/provider-random/package" \
  -time "$tmp/provider-time/package" \
  -out tools/tfprovider/schema.json
echo "wrote tools/tfprovider/schema.json"
