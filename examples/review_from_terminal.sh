#!/usr/bin/env bash
# Review from the terminal: start a task that stops before it sends mail, then follow it and answer in place.
#
# The key must belong to the assigned reviewer and hold eval:manage to answer; with any other key the view
# still follows the run, and says why it cannot decide. At the prompt type:
#   a [comment]      approve (the comment is optional)
#   r <comment>      reject; the agent revises from your comment and asks again
#   s                skip: decide elsewhere (e-mail, web, chat) while the view keeps following
set -euo pipefail
: "${VOUCH_URL:?set VOUCH_URL}" "${VOUCH_API_KEY:?set VOUCH_API_KEY}" "${REVIEWER:?set REVIEWER to your e-mail}"

cat > reviewed.json <<TASK
{
  "taskName": "Release note",
  "taskDescription": "Write a note called \"notes.md\" saying \"v2 is out\". Then send an email to team@example.com with subject \"v2\" and body \"v2 is out\". Then summarise.",
  "testMode": "with-verification",
  "assignedReviewer": "$REVIEWER",
  "checkpoints": [{"stage": "Send", "description": "Mail to the team", "verificationQuestion": "Send it?"}]
}
TASK

vouch tasks create --file reviewed.json --watch

# Or, from another terminal or a script, answer one checkpoint directly:
#   vouch tasks status exe_…                      (lists checkpoint ids and their status)
#   vouch checkpoints decide exe_… chk_… approve --comment "looks right"
