#!/usr/bin/env bash
# Post-deploy smoke check of a deployed svc-dsr stack: one access request for a test user of your
# own site, followed end to end through intake, the state machine, the platform, the archive and
# the audit trail. Run it from the project folder after `npx cdk deploy --outputs-file outputs.json`
# and after setting the three secrets (docs/deploy.md sections 3 and 4).
#
#   SMOKE_PRIMARY_KEY=<a test user's primary_key on your site> bash docs/smoke.sh outputs.json [stack]
#
# SMOKE_VERIFICATION_METHOD (default email_link) must be a method of the stack config's
# `verification` list accepted for access requests: intake rejects any other.
#
# Needs the AWS CLI (credentials for the account, with the stack's OperatorPolicy or more), jq and
# Node.js. Exits 0 when every check holds, 1 on the first that does not, saying which.
set -euo pipefail

outputs=${1:?usage: SMOKE_PRIMARY_KEY=... bash docs/smoke.sh outputs.json [stack]}
stack=${2:-$(jq -r 'keys | if length == 1 then .[0] else error("the outputs file has several stacks: name one") end' "$outputs")}
key=${SMOKE_PRIMARY_KEY:?set SMOKE_PRIMARY_KEY to the primary_key of a test user of your site}
timeout_s=${SMOKE_TIMEOUT_SECONDS:-3600}
method=${SMOKE_VERIFICATION_METHOD:-email_link}
out() { jq -r --arg s "$stack" --arg k "$1" '.[$s][$k] // empty' "$outputs"; }
region=$(out Region)
export AWS_REGION=${AWS_REGION:-$region}
cli=(npx svc-dsr)
target=(--target aws --stack-outputs "$outputs" --stack "$stack")
fail() { echo "smoke: FAILED: $*" >&2; exit 1; }
pass() { echo "smoke: ok: $*"; }

now=$(date -u +%FT%TZ)
request_id=$("${cli[@]}" submit "${target[@]}" --json --type access --regulation gdpr --primary-key "$key" \
  --received-at "$now" --verification-method "$method" --verified-by "${USER:-operator}" --verified-at "$now" \
  --reference smoke-check | jq -r '.sent[0].request_id // empty')
[ -n "$request_id" ] || fail "submit sent nothing"
pass "submitted $request_id"

deadline=$(( $(date +%s) + timeout_s ))
status=""
while [ "$(date +%s)" -lt "$deadline" ]; do
  item=$("${cli[@]}" status "$request_id" "${target[@]}" --json)
  status=$(jq -r '.status' <<<"$item")
  case "$status" in completed|failed|cancelled|rejected|denied) break ;; esac
  sleep 30
done
[ "$status" = completed ] || fail "the request ended '$status' (see: npx svc-dsr status $request_id ${target[*]})"
outcome=$(jq -r '.outcome' <<<"$item")
[ "$outcome" = exported ] || fail "the outcome is '$outcome', not exported: is $key a user of the platform?"
pass "completed / exported"

machine=$(out StateMachineArn)
execution="${machine/:stateMachine:/:execution:}:$request_id"
execution_status=$(aws stepfunctions describe-execution --execution-arn "$execution" --query status --output text)
[ "$execution_status" = SUCCEEDED ] || fail "execution $execution is $execution_status"
pass "execution succeeded"

"${cli[@]}" verify "$request_id" "${target[@]}" --json | jq -e '.ok == true' >/dev/null \
  || fail "verify found the archive or the audit chain not as the ledger records them"
pass "archive and audit chain verified against the ledger"

audit=$(out AuditBucketName)
records=$(aws s3api list-objects-v2 --bucket "$audit" --prefix "audit/$request_id/" --query 'KeyCount' --output text)
[ "$records" -gt 0 ] || fail "no audit records under s3://$audit/audit/$request_id/"
first=$(aws s3api list-objects-v2 --bucket "$audit" --prefix "audit/$request_id/" --query 'Contents[0].Key' --output text)
mode=$(aws s3api get-object-retention --bucket "$audit" --key "$first" --query 'Retention.Mode' --output text)
[ -n "$mode" ] && [ "$mode" != None ] || fail "the audit record $first has no Object Lock retention"
pass "$records audit records, locked in $mode mode"

for queue in IntakeDeadLetterQueueUrl QuarantineQueueUrl; do
  depth=$(aws sqs get-queue-attributes --queue-url "$(out "$queue")" --attribute-names ApproximateNumberOfMessages \
    --query 'Attributes.ApproximateNumberOfMessages' --output text)
  [ "$depth" = 0 ] || echo "smoke: note: $queue holds $depth message(s) from before this check; read them (docs/deploy.md section 6)"
done
alarms=$(aws cloudwatch describe-alarms --state-value ALARM --alarm-name-prefix "$stack" --query 'length(MetricAlarms)' --output text)
[ "$alarms" = 0 ] || fail "$alarms alarm(s) of $stack are in ALARM"
pass "no alarm of $stack in ALARM"
echo "smoke: all checks passed for $request_id"
