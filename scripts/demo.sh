#!/bin/sh
# demo.sh - build nixl (scripts/setup.sh) and run the KV-cache example: one
# request's KV (27 layers x 8,192 tokens, page size 1) moved from a prefill
# process to a decode process it starts, verified, read back and verified.
# Arguments go to the example (e.g. --tokens 2048, --one-shot).
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/examples/kv_transfer "$@"
