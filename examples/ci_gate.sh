#!/usr/bin/env bash
# Run an evaluation task in CI and fail the job unless it completes.
#
# Needs VOUCH_URL and VOUCH_API_KEY (a key with eval:create and eval:read) in the job's secrets, and the CLI:
# a server's install has `vouch`; with only the client (`pip install ./vouch-client`) the same commands are
# `vouch-client tasks …`.
# `vouch tasks create --watch` prints the run as it happens and exits with how it ended:
#   0 completed, 1 failed, 2 rejected, 3 cancelled, 4 timed out, 5 refused by the API, 6 unreachable, 64 usage.
set -euo pipefail

cat > task.yaml <<'TASK'
taskName: Nightly release-note check
taskDescription: >-
  Write a note called "notes.md" saying "nightly build is green". Then summarise.
testMode: without-verification
TASK

# 20 minutes at most; a run that needs longer fails the job with exit code 4.
vouch tasks create --file task.yaml --watch --timeout 1200
