#!/bin/bash
# Installs the CloudWatch agent only if its package carries Amazon's signature, then starts it
# with the log configuration given as $1. The signature is checked by gpgv against a keyring
# holding just the key whose fingerprint AWS publishes: a key file carrying other keys, or a
# package signed by any other key, stops the boot here.
# CWAGENT_BASE and CWAGENT_FINGERPRINT exist for the project's tests; CWAGENT_VERIFY_ONLY=1
# stops after the check.
set -euo pipefail
BASE=${CWAGENT_BASE:-https://amazoncloudwatch-agent.s3.amazonaws.com}
FINGERPRINT=${CWAGENT_FINGERPRINT:-937616F3450B7D806CBD9725D58167303B789C72}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

curl -sSfo "$WORK/agent.deb" "$BASE/ubuntu/amd64/latest/amazon-cloudwatch-agent.deb"
curl -sSfo "$WORK/agent.deb.sig" "$BASE/ubuntu/amd64/latest/amazon-cloudwatch-agent.deb.sig"
curl -sSfo "$WORK/keys.gpg" "$BASE/assets/amazon-cloudwatch-agent.gpg"

export GNUPGHOME="$WORK/gnupg"
install -d -m 0700 "$GNUPGHOME"
gpg --batch --quiet --import "$WORK/keys.gpg" 2>/dev/null
gpg --batch --export "$FINGERPRINT" > "$WORK/trusted.gpg"
if [ ! -s "$WORK/trusted.gpg" ]; then
  echo "install-cloudwatch-agent: no key with fingerprint $FINGERPRINT in $BASE/assets" >&2
  exit 1
fi
if ! gpgv --keyring "$WORK/trusted.gpg" "$WORK/agent.deb.sig" "$WORK/agent.deb" 2>"$WORK/gpgv.log"; then
  echo "install-cloudwatch-agent: the package's signature is not Amazon's; not installed" >&2
  cat "$WORK/gpgv.log" >&2
  exit 1
fi
[ "${CWAGENT_VERIFY_ONLY:-0}" = 1 ] && exit 0

dpkg -i -E "$WORK/agent.deb"
/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl -a fetch-config -m ec2 -s \
  -c "file:$1"
